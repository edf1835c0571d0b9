export {
  DEFAULT_RETRIES,
  DEFAULT_TIMEOUT_MS,
  type Judged,
  LoopJudgeClient,
  type LoopJudgeClientOptions,
  LoopJudgeSession,
  type RequestOptions,
  type TurnOptions,
} from "./client.js";
export {
  LoopJudgeAuthError,
  LoopJudgeConflictError,
  LoopJudgeConnectionError,
  LoopJudgeError,
  LoopJudgeHttpError,
  LoopJudgeProtocolError,
  LoopJudgeTimeoutError,
  LoopJudgeUsageError,
} from "./errors.js";
export * from "./types.js";
