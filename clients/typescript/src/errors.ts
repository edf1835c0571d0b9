/** Errors of the loop-judge client: each names what went wrong and, from the server, its status and detail. */

/** Base class: anything the client could not get a verdict for. */
export class LoopJudgeError extends Error {
  /** The HTTP status the server answered, when it answered. */
  readonly status: number | undefined;
  /** The server's own words (its `detail` field), when it answered. */
  readonly detail: string | undefined;

  constructor(message: string, options: { status?: number; detail?: string; cause?: unknown } = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.status = options.status;
    this.detail = options.detail;
  }
}

/** The server answered with an error status (4xx/5xx other than the cases below). */
export class LoopJudgeHttpError extends LoopJudgeError {
  /** The parsed JSON body, or its text when it was not JSON. */
  readonly body: unknown;
  /** Seconds the server asked to wait (`Retry-After` on a 503), when it said. */
  readonly retryAfterS: number | undefined;

  constructor(
    message: string,
    options: { status: number; detail: string; body: unknown; retryAfterS?: number },
  ) {
    super(message, options);
    this.body = options.body;
    this.retryAfterS = options.retryAfterS;
  }
}

/** 401: the bearer token is missing or not one the server knows. */
export class LoopJudgeAuthError extends LoopJudgeHttpError {}

/** 409: the server's copy of the session does not end where the request started. */
export class LoopJudgeConflictError extends LoopJudgeHttpError {
  /** Where the stored history ends: append from there (0 when nothing is stored). */
  readonly expectedStart: number;

  constructor(
    message: string,
    options: { status: number; detail: string; body: unknown; expectedStart: number },
  ) {
    super(message, options);
    this.expectedStart = options.expectedStart;
  }
}

/** No answer: the connection was refused or dropped (the sidecar is down or unreachable). */
export class LoopJudgeConnectionError extends LoopJudgeError {}

/** No answer within the client's `timeoutMs`. */
export class LoopJudgeTimeoutError extends LoopJudgeError {
  readonly timeoutMs: number;

  constructor(message: string, options: { timeoutMs: number; cause?: unknown }) {
    super(message, { cause: options.cause });
    this.timeoutMs = options.timeoutMs;
  }
}

/** The server answered 2xx with a body that is not the documented JSON. */
export class LoopJudgeProtocolError extends LoopJudgeError {}

/** A bad argument given to the client itself (checked before anything is sent). */
export class LoopJudgeUsageError extends LoopJudgeError {}
