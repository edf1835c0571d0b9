/**
 * The sidecar's wire types, mirroring the schemas of `judge/service/openapi.json`
 * (`loop-judge serve --dump-openapi -` prints the current document). Field names stay in
 * the server's snake_case so a verdict can be logged or forwarded as received.
 */

/** What the agent should do about a verdict, from the escalation ladder (`Action`). */
export type Action = "continue" | "warn" | "ask_user" | "stop";

/** The loop taxonomy (`LoopKind`). */
export type LoopKind =
  | "exact_repeat"
  | "alternation"
  | "similar_retry"
  | "error_cycle"
  | "text_repetition"
  | "cognitive";

/** Which way a judge-model call failed (`JudgeFailureKind`). */
export type JudgeFailureKind =
  | "timeout"
  | "connection"
  | "rate_limited"
  | "context"
  | "http"
  | "output"
  | "other";

/** Why one judge-model call gave no answer (`JudgeFailure`). */
export interface JudgeFailure {
  kind: JudgeFailureKind;
  status?: number | null;
  retry_after?: number | null;
}

/** One judge model consulted during one check (`JudgeCall`). */
export interface JudgeCall {
  model: string;
  stage: "fast" | "confirm";
  confidence?: number | null;
  analysis?: string | null;
  attempts?: number;
  latency_s?: number;
  prompt_tokens?: number | null;
  completion_tokens?: number | null;
  cost_usd?: number | null;
  error?: string | null;
  failure?: JudgeFailure | null;
}

/** The outcome of one turn or one preflight check (`Verdict`). */
export interface Verdict {
  looping: boolean;
  /** `"llm"`, `"heuristic:<detector>"`, or null when nobody spoke. */
  source: string | null;
  kind: LoopKind | null;
  confidence: number | null;
  analysis: string | null;
  /** Indices into the history. */
  evidence: number[];
  action: Action;
  /** One line for a status bar. */
  summary: string | null;
  /** Two or three sentences for a person: what, where, what next. */
  explanation: string | null;
  /** A fenced block to show the agent's model when `action` is warn or ask_user. */
  recovery_message: string | null;
  /** Identifies the loop (a detector's pattern, or "llm"). */
  pattern: string | null;
  judge_calls: JudgeCall[];
  errors: string[];
  turn: number;
  /** Highest heuristic score this turn. */
  suspicion: number;
}

/** `TurnRequest`: a whole history, or (with `start`) only the messages added since. */
export interface TurnRequest {
  messages: ChatMessage[];
  start?: number;
}

/** `CallRequest`: a tool call the agent is about to make. */
export interface CallRequest {
  name: string;
  /** A JSON object, or its JSON text as in OpenAI tool calls. */
  arguments?: unknown;
}

/** `HealthResponse`. */
export interface HealthResponse {
  status: string;
  /** "memory" or "redis". */
  store: string;
}

/** One tool call of an assistant message, in OpenAI's chat shape. */
export interface ChatToolCall {
  id: string;
  type: "function";
  function: { name: string; arguments: string };
}

/**
 * A failed tool's result as an Anthropic `tool_result` block (in a user message): the
 * one shape that carries the tool's own error flag, which the detectors trust over
 * reading the result's text. The server reads it beside OpenAI's shape in one history.
 */
export interface ToolResultBlock {
  type: "tool_result";
  tool_use_id: string;
  content: string;
  is_error: boolean;
}

/**
 * An OpenAI chat message, the history shape the sidecar reads: role, content,
 * tool_calls (arguments as JSON text), tool_call_id, name.
 */
export interface ChatMessage {
  role: "system" | "developer" | "user" | "assistant" | "tool";
  content: string | null | ToolResultBlock[];
  tool_calls?: ChatToolCall[];
  tool_call_id?: string;
  name?: string;
}

/** The verdict the client reports when it has none from the server (fail-open). */
export function allClear(): Verdict {
  return {
    looping: false,
    source: null,
    kind: null,
    confidence: null,
    analysis: null,
    evidence: [],
    action: "continue",
    summary: null,
    explanation: null,
    recovery_message: null,
    pattern: null,
    judge_calls: [],
    errors: [],
    turn: 0,
    suspicion: 0,
  };
}
