/**
 * The HTTP client of `loop-judge serve`: sessions, the append API, the preflight check.
 *
 * It needs nothing but the platform's `fetch` (Node 20+, Deno, Bun, browsers, edge
 * runtimes). By default it fails open: when the sidecar is down, slow or answers an error,
 * a call returns an all-clear verdict with the error attached, so loop detection can never
 * break the agent it watches; `failOpen: false` makes the same calls throw the typed error.
 */

import {
  LoopJudgeAuthError,
  LoopJudgeConflictError,
  LoopJudgeConnectionError,
  LoopJudgeError,
  LoopJudgeHttpError,
  LoopJudgeProtocolError,
  LoopJudgeTimeoutError,
  LoopJudgeUsageError,
} from "./errors.js";
import {
  allClear,
  type CallRequest,
  type ChatMessage,
  type HealthResponse,
  type TurnRequest,
  type Verdict,
} from "./types.js";

// A turn with a judge model waits for it: one judge stage answers within the tracker's
// default 30 s model timeout (judge/config.py DEFAULT_TIMEOUT_S); 10 s more for the
// request itself. A slower turn fails open rather than stall the agent.
export const DEFAULT_TIMEOUT_MS = 40_000;
// One resend after a dropped connection: the Idempotency-Key makes it safe (the server
// answers a resend again without counting a second turn), and a sidecar that drops two
// in a row is down, which fail-open handles.
export const DEFAULT_RETRIES = 1;
// The server's rule for session ids (judge/service/app.py SESSION_ID_PATTERN).
const SESSION_ID = /^[A-Za-z0-9._:@-]{1,128}$/;

export interface LoopJudgeClientOptions {
  /** Where `loop-judge serve` listens, e.g. `http://127.0.0.1:8787`. */
  baseUrl: string;
  /** The bearer token (`LOOP_JUDGE_SERVER_TOKEN` of the server). */
  token?: string;
  /** Per-request deadline in milliseconds (default 40 000). */
  timeoutMs?: number;
  /** Return an all-clear with the error attached instead of throwing (default true). */
  failOpen?: boolean;
  /** Resends of a turn after a dropped connection, with the same Idempotency-Key (default 1). */
  retries?: number;
  /** Called with each error a call failed open on (default: `console.warn`). */
  onError?: (error: LoopJudgeError) => void;
  /** A fetch implementation (default: the global one). */
  fetch?: typeof fetch;
}

export interface RequestOptions {
  /** Cancels the request; a caller's abort is thrown, never failed open. */
  signal?: AbortSignal;
}

export interface TurnOptions extends RequestOptions {
  /** The index of `messages[0]` in the agent's history (append mode). */
  start?: number;
  /** Names the request; a resend with the same key is answered again, not counted again. */
  idempotencyKey?: string;
}

/** A verdict and how it was obtained. */
export interface Judged {
  verdict: Verdict;
  /** Set when the call failed open: the verdict is then an all-clear. */
  error?: LoopJudgeError;
  /** The server answered a resend with the verdict it gave first (`Idempotent-Replayed`). */
  replayed: boolean;
  /** The server had lost the session and counted it from turn 1 again. */
  sessionRestarted: boolean;
}

interface Answer {
  status: number;
  headers: Headers;
  body: unknown;
}

function newKey(): string {
  return globalThis.crypto.randomUUID();
}

function checkSessionId(id: string): void {
  if (!SESSION_ID.test(id)) {
    throw new LoopJudgeUsageError(
      `session id ${JSON.stringify(id)} must be 1-128 characters of A-Za-z0-9._:@-`,
    );
  }
  // The server's rule admits them, but a URL parser (fetch's included, even with %2E)
  // resolves "." and ".." as path steps, so the request would reach another endpoint.
  if (id === "." || id === "..") {
    throw new LoopJudgeUsageError(`session id ${JSON.stringify(id)} cannot be sent in a URL path`);
  }
}

/** The server's `detail`: a string, or FastAPI's list of validation errors made one line. */
function detailOf(body: unknown): string {
  if (body !== null && typeof body === "object" && "detail" in body) {
    const detail = (body as { detail: unknown }).detail;
    if (typeof detail === "string") return detail;
    if (Array.isArray(detail)) {
      return detail
        .map((item: unknown) => {
          if (item === null || typeof item !== "object") return String(item);
          const { loc, msg } = item as { loc?: unknown; msg?: unknown };
          const where = Array.isArray(loc) ? loc.join(".") : "";
          return where ? `${where}: ${String(msg)}` : String(msg);
        })
        .join("; ");
    }
    return JSON.stringify(detail);
  }
  return typeof body === "string" ? body : JSON.stringify(body);
}

function isVerdict(body: unknown): body is Verdict {
  if (body === null || typeof body !== "object") return false;
  const v = body as Record<string, unknown>;
  return typeof v.looping === "boolean" && typeof v.action === "string" && typeof v.turn === "number";
}

export class LoopJudgeClient {
  readonly baseUrl: string;
  readonly failOpen: boolean;
  readonly timeoutMs: number;
  readonly retries: number;
  readonly #token: string | undefined;
  readonly #fetch: typeof fetch;
  readonly #onError: (error: LoopJudgeError) => void;

  constructor(options: LoopJudgeClientOptions) {
    let url: URL;
    try {
      url = new URL(options.baseUrl);
    } catch (cause) {
      throw new LoopJudgeUsageError(`baseUrl ${JSON.stringify(options.baseUrl)} is not a URL`, {
        cause,
      });
    }
    this.baseUrl = url.href.replace(/\/+$/, "");
    this.#token = options.token;
    this.timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    if (!(this.timeoutMs > 0)) throw new LoopJudgeUsageError("timeoutMs must be positive");
    this.retries = options.retries ?? DEFAULT_RETRIES;
    if (!Number.isInteger(this.retries) || this.retries < 0) {
      throw new LoopJudgeUsageError("retries must be a whole number >= 0");
    }
    this.failOpen = options.failOpen ?? true;
    this.#fetch = options.fetch ?? globalThis.fetch.bind(globalThis);
    this.#onError =
      options.onError ??
      ((error) => console.warn(`loop-judge: failing open (${error.name}): ${error.message}`));
  }

  /** A session: the append API over one agent history. */
  session(id: string): LoopJudgeSession {
    checkSessionId(id);
    return new LoopJudgeSession(this, id);
  }

  /**
   * One turn: `messages` is the whole history, or with `start` only the messages added
   * since. A 409 is thrown as `LoopJudgeConflictError` (carrying `expectedStart`) even when
   * failing open, since only the caller holds the history to answer it with;
   * `LoopJudgeSession.append` answers it itself.
   */
  async turn(sessionId: string, messages: ChatMessage[], options: TurnOptions = {}): Promise<Judged> {
    checkSessionId(sessionId);
    const body: TurnRequest = { messages };
    if (options.start !== undefined) {
      if (!Number.isInteger(options.start) || options.start < 0) {
        throw new LoopJudgeUsageError(`start must be a whole number >= 0, not ${options.start}`);
      }
      body.start = options.start;
    }
    const key = options.idempotencyKey ?? newKey();
    return this.#judged(
      () =>
        this.#request("POST", `/v1/sessions/${sessionId}/turns`, {
          body,
          signal: options.signal,
          headers: { "idempotency-key": key },
          retries: this.retries,
        }),
      { rethrowConflict: true },
    );
  }

  /**
   * Preflight: would this tool call repeat past its limit? Counts no turn. A looping
   * answer is a refusal the server keeps: the agent must not run the call.
   */
  async checkCall(
    sessionId: string,
    name: string,
    args: unknown,
    options: RequestOptions = {},
  ): Promise<Judged> {
    checkSessionId(sessionId);
    const body: CallRequest = { name, arguments: args ?? {} };
    // Not resent: each preflight answered is a refusal counted, so a resend could count one
    // twice; a dropped preflight fails open instead.
    return this.#judged(
      () =>
        this.#request("POST", `/v1/sessions/${sessionId}/calls`, {
          body,
          signal: options.signal,
          retries: 0,
        }),
      { rethrowConflict: false },
    );
  }

  /** Forgets a session; false when the server had none under this token. Never fails open. */
  async deleteSession(sessionId: string, options: RequestOptions = {}): Promise<boolean> {
    checkSessionId(sessionId);
    try {
      await this.#request("DELETE", `/v1/sessions/${sessionId}`, {
        signal: options.signal,
        retries: 0,
      });
      return true;
    } catch (error) {
      if (error instanceof LoopJudgeHttpError && error.status === 404) return false;
      throw error;
    }
  }

  /** `GET /healthz`: throws when the sidecar is down or its store unreachable. */
  async health(options: RequestOptions = {}): Promise<HealthResponse> {
    const answer = await this.#request("GET", "/healthz", { signal: options.signal, retries: 0 });
    return answer.body as HealthResponse;
  }

  async #judged(
    send: () => Promise<Answer>,
    how: { rethrowConflict: boolean },
  ): Promise<Judged> {
    try {
      const answer = await send();
      if (!isVerdict(answer.body)) {
        throw new LoopJudgeProtocolError(
          `the server answered ${answer.status} without a verdict: ${JSON.stringify(answer.body).slice(0, 200)}`,
          { status: answer.status },
        );
      }
      return {
        verdict: answer.body,
        replayed: answer.headers.get("idempotent-replayed") === "true",
        sessionRestarted: answer.headers.get("loop-judge-session") === "restarted",
      };
    } catch (error) {
      if (!(error instanceof LoopJudgeError)) throw error; // the caller's abort, or a bug
      if (!this.failOpen) throw error;
      if (how.rethrowConflict && error instanceof LoopJudgeConflictError) throw error;
      this.#onError(error);
      return { verdict: allClear(), error, replayed: false, sessionRestarted: false };
    }
  }

  async #request(
    method: string,
    path: string,
    options: {
      body?: unknown;
      signal?: AbortSignal | undefined;
      headers?: Record<string, string>;
      retries: number;
    },
  ): Promise<Answer> {
    const headers: Record<string, string> = { accept: "application/json", ...options.headers };
    if (this.#token !== undefined) headers.authorization = `Bearer ${this.#token}`;
    let payload: string | undefined;
    if (options.body !== undefined) {
      headers["content-type"] = "application/json";
      payload = JSON.stringify(options.body);
    }
    const url = this.baseUrl + path;
    for (let attempt = 0; ; attempt++) {
      const deadline = AbortSignal.timeout(this.timeoutMs);
      const signal = options.signal ? AbortSignal.any([options.signal, deadline]) : deadline;
      let response: Response;
      let text: string;
      try {
        response = await this.#fetch(url, { method, headers, body: payload ?? null, signal });
        text = await response.text();
      } catch (cause) {
        if (options.signal?.aborted) throw options.signal.reason;
        if (deadline.aborted) {
          throw new LoopJudgeTimeoutError(
            `${method} ${path}: no answer from ${this.baseUrl} within ${this.timeoutMs} ms`,
            { timeoutMs: this.timeoutMs, cause },
          );
        }
        if (attempt < options.retries) continue; // same body, same Idempotency-Key
        const reason = cause instanceof Error && cause.cause instanceof Error ? cause.cause.message : String(cause);
        throw new LoopJudgeConnectionError(
          `${method} ${path}: cannot reach the loop-judge sidecar at ${this.baseUrl} (${reason})`,
          { cause },
        );
      }
      let body: unknown = text;
      try {
        body = text === "" ? null : JSON.parse(text);
      } catch {
        // Not JSON: kept as text for the error below.
      }
      if (response.ok) return { status: response.status, headers: response.headers, body };
      throw this.#httpError(method, path, response, body);
    }
  }

  #httpError(method: string, path: string, response: Response, body: unknown): LoopJudgeHttpError {
    const status = response.status;
    const detail = detailOf(body);
    const message = `${method} ${path}: ${status} ${detail}`;
    if (status === 401) return new LoopJudgeAuthError(message, { status, detail, body });
    if (status === 409) {
      const expected = (body as { expected_start?: unknown } | null)?.expected_start;
      if (typeof expected === "number") {
        return new LoopJudgeConflictError(message, { status, detail, body, expectedStart: expected });
      }
    }
    const retry = Number(response.headers.get("retry-after"));
    return new LoopJudgeHttpError(message, {
      status,
      detail,
      body,
      ...(Number.isFinite(retry) && retry > 0 ? { retryAfterS: retry } : {}),
    });
  }
}

/** A 32-bit FNV-1a digest, enough to notice a rewritten message cheaply. */
function digest(message: ChatMessage): string {
  const text = JSON.stringify(message);
  let hash = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    hash ^= text.charCodeAt(i);
    hash = Math.imul(hash, 0x01000193) >>> 0;
  }
  return `${text.length}:${hash.toString(16)}`;
}

/**
 * One agent history on the server. `append(history)` takes the agent's whole history each
 * time and sends only what the server has not seen: the messages after the offset it
 * sent last, with `start`. A history rewritten before that offset (compaction, an edited
 * message) is sent whole. On a 409 it re-syncs once from the server's `expected_start`.
 * One turn at a time per session: the offset is this object's state.
 */
export class LoopJudgeSession {
  readonly client: LoopJudgeClient;
  readonly id: string;
  // Digests of the messages the server holds, in order: `length` is the offset sent.
  #sent: string[] = [];

  constructor(client: LoopJudgeClient, id: string) {
    this.client = client;
    this.id = id;
  }

  /** How many messages of the history the server holds, as far as this session knows. */
  get offset(): number {
    return this.#sent.length;
  }

  /** Counts one turn on `history` (the whole history; only its new part is sent). */
  async append(history: ChatMessage[], options: RequestOptions = {}): Promise<Judged> {
    const digests = history.map(digest);
    const start = this.#prefixKept(digests) ? this.#sent.length : 0;
    try {
      const judged = await this.#send(history, start, options);
      if (judged.error === undefined) this.#sent = digests;
      return judged;
    } catch (error) {
      if (!(error instanceof LoopJudgeConflictError)) throw error;
      // The server's copy ends elsewhere (a restarted store, another client, a lost
      // response): send from where it ends, or the whole history when that is past ours.
      const from = error.expectedStart <= history.length ? error.expectedStart : 0;
      try {
        const judged = await this.#send(history, from, options);
        if (judged.error === undefined) this.#sent = digests;
        return judged;
      } catch (again) {
        if (!(again instanceof LoopJudgeError) || !this.client.failOpen) throw again;
        this.#sent = [];
        return { verdict: allClear(), error: again, replayed: false, sessionRestarted: false };
      }
    }
  }

  /** Preflight one tool call (see `LoopJudgeClient.checkCall`). */
  checkCall(name: string, args: unknown, options: RequestOptions = {}): Promise<Judged> {
    return this.client.checkCall(this.id, name, args, options);
  }

  /** Forgets the session on the server and here. */
  async delete(options: RequestOptions = {}): Promise<boolean> {
    this.#sent = [];
    return this.client.deleteSession(this.id, options);
  }

  #prefixKept(digests: string[]): boolean {
    if (this.#sent.length === 0 || digests.length < this.#sent.length) return false;
    return this.#sent.every((d, i) => d === digests[i]);
  }

  #send(history: ChatMessage[], start: number, options: RequestOptions): Promise<Judged> {
    // start 0 is sent as a whole history (no start): the server then reads it as the
    // session's history whatever it held, so a rewrite or a first turn never conflicts.
    return start === 0
      ? this.client.turn(this.id, history, options)
      : this.client.turn(this.id, history.slice(start), { ...options, start });
  }
}
