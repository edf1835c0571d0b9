/**
 * loop-judge for the Vercel AI SDK (`ai` 7): a language-model middleware and a tool guard.
 *
 * The middleware runs before every model call of `generateText`, `streamText`, a
 * `ToolLoopAgent` or anything else that calls a wrapped model: it
 * converts the call's prompt to OpenAI chat messages, sends what is new to the sidecar
 * as one turn, and
 *
 * - on `warn` / `ask_user`, adds the verdict's recovery message to this call's prompt;
 * - on `stop` (a turn's, or a refused call's preflight), answers the next call itself with
 *   a final text answer and no tool call, without asking the model. A step without tool
 *   calls is where every tool loop of the SDK ends.
 *
 * `guardTools` wraps each tool's `execute` with the sidecar's preflight: a call the
 * sidecar refuses is not run, and the tool throws `LoopJudgeRefusal`, which the SDK
 * turns into the call's error result for the model to read.
 */

import type { LanguageModelMiddleware, ToolSet } from "ai";

import { type Judged, type LoopJudgeClient, LoopJudgeSession } from "./client.js";
import type { ChatMessage, ChatToolCall, Verdict } from "./types.js";

type TransformOptions = Parameters<NonNullable<LanguageModelMiddleware["transformParams"]>>[0];
type CallOptions = TransformOptions["params"];
/** The prompt a model call receives (the provider-level `LanguageModelV4Prompt`). */
export type ModelPrompt = CallOptions["prompt"];
type PromptMessage = ModelPrompt[number];
type GenerateResult = Awaited<ReturnType<NonNullable<LanguageModelMiddleware["wrapGenerate"]>>>;
type StreamResult = Awaited<ReturnType<NonNullable<LanguageModelMiddleware["wrapStream"]>>>;
type StreamPart = StreamResult["stream"] extends ReadableStream<infer P> ? P : never;
type ToolResultOutput = Extract<
  Extract<PromptMessage, { role: "tool" }>["content"][number],
  { type: "tool-result" }
>["output"];

/** The fixed final answer of a stopped run: our words, never the judge's or the agent's. */
export const STOPPED_ANSWER =
  "loop-judge stopped this run: the agent kept repeating itself without progress.";
/** Key of the stopped answer's provider metadata, which carries the verdict's fields. */
export const METADATA_KEY = "loopJudge";

const TELL_ACTIONS = new Set(["warn", "ask_user"]);

/** Thrown by a guarded tool whose call the sidecar refused: the model reads its message. */
export class LoopJudgeRefusal extends Error {
  readonly verdict: Verdict;

  constructor(verdict: Verdict) {
    super(verdict.recovery_message ?? verdict.summary ?? "loop-judge refused this repeated call");
    this.name = "LoopJudgeRefusal";
    this.verdict = verdict;
  }

  /** The SDK sends a thrown error's `toString()` to the model: the message alone. */
  override toString(): string {
    return this.message;
  }
}

export interface LoopJudgeOptions {
  client: LoopJudgeClient;
  /** The conversation's id on the sidecar (1-128 of A-Za-z0-9._:@-). */
  sessionId: string;
  /** Sees each verdict: the turn's before each model call, and each preflight's. */
  onVerdict?: (judged: Judged, where: "turn" | "preflight") => void;
}

export interface LoopJudge {
  readonly session: LoopJudgeSession;
  /** For `wrapLanguageModel({ model, middleware })`. */
  readonly middleware: LanguageModelMiddleware;
  /** The same tools, each call checked by the sidecar before it runs. */
  guardTools<TOOLS extends ToolSet>(tools: TOOLS): TOOLS;
  /** The verdict of the last turn (an all-clear before the first). */
  readonly lastVerdict: Verdict | undefined;
  /** True once a `stop` verdict answered a model call. */
  readonly stopped: boolean;
}

function outputText(output: ToolResultOutput): { text: string; error: boolean } {
  switch (output.type) {
    case "text":
      return { text: output.value, error: false };
    case "json":
      return { text: JSON.stringify(output.value), error: false };
    case "error-text":
      return { text: output.value, error: true };
    case "error-json":
      return { text: JSON.stringify(output.value), error: true };
    case "execution-denied":
      return { text: `execution denied${output.reason ? `: ${output.reason}` : ""}`, error: true };
    case "content":
      return {
        text: output.value
          .map((part) => (part.type === "text" ? part.text : `[${part.type}]`))
          .join("\n"),
        error: false,
      };
    default:
      return { text: JSON.stringify(output), error: false };
  }
}

function toolResult(toolCallId: string, output: ToolResultOutput): ChatMessage {
  const { text, error } = outputText(output);
  if (error) {
    return {
      role: "user",
      content: [{ type: "tool_result", tool_use_id: toolCallId, content: text, is_error: true }],
    };
  }
  return { role: "tool", tool_call_id: toolCallId, content: text };
}

function userText(message: Extract<PromptMessage, { role: "user" }>): string {
  return message.content
    .map((part) => (part.type === "text" ? part.text : `[file ${part.mediaType}]`))
    .join("\n");
}

/**
 * A model call's prompt as the OpenAI chat messages the sidecar reads: system and user
 * text, each assistant message with its text and its tool calls (arguments as JSON
 * text), each tool result as a `tool` message keeping its call id. A failed result keeps
 * its error flag (see `ToolResultBlock`). Reasoning is the model's private scratchpad and
 * is left out, as the sidecar's own integrations do.
 */
export function toChatMessages(prompt: ModelPrompt): ChatMessage[] {
  const out: ChatMessage[] = [];
  for (const message of prompt) {
    switch (message.role) {
      case "system":
        out.push({ role: "system", content: message.content });
        break;
      case "user":
        out.push({ role: "user", content: userText(message) });
        break;
      case "assistant": {
        const text: string[] = [];
        const calls: ChatToolCall[] = [];
        const results: ChatMessage[] = [];
        for (const part of message.content) {
          if (part.type === "text") text.push(part.text);
          else if (part.type === "tool-call") {
            calls.push({
              id: part.toolCallId,
              type: "function",
              function: { name: part.toolName, arguments: JSON.stringify(part.input ?? {}) },
            });
          } else if (part.type === "tool-result") {
            // A provider-run tool's result arrives inside the assistant message itself.
            results.push(toolResult(part.toolCallId, part.output));
          }
        }
        const assistant: ChatMessage = { role: "assistant", content: text.join("") };
        if (calls.length > 0) assistant.tool_calls = calls;
        out.push(assistant, ...results);
        break;
      }
      case "tool":
        for (const part of message.content) {
          // Approval responses are the application's bookkeeping, not a result.
          if (part.type === "tool-result") out.push(toolResult(part.toolCallId, part.output));
        }
        break;
    }
  }
  return out;
}

function metadata(verdict: Verdict): Record<string, Record<string, string | number | null>> {
  return {
    [METADATA_KEY]: {
      action: verdict.action,
      kind: verdict.kind,
      pattern: verdict.pattern,
      turn: verdict.turn,
      summary: verdict.summary,
    },
  };
}

const NO_USAGE = {
  inputTokens: { total: 0, noCache: 0, cacheRead: 0, cacheWrite: 0 },
  outputTokens: { total: 0, text: 0, reasoning: 0 },
};
const STOP_REASON = { unified: "stop" as const, raw: "loop-judge" };

function stoppedResult(verdict: Verdict): GenerateResult {
  return {
    content: [{ type: "text", text: STOPPED_ANSWER }],
    finishReason: STOP_REASON,
    usage: NO_USAGE,
    providerMetadata: metadata(verdict),
    warnings: [],
  };
}

function stoppedStream(verdict: Verdict): StreamResult {
  const parts: StreamPart[] = [
    { type: "stream-start", warnings: [] },
    { type: "text-start", id: "loop-judge" },
    { type: "text-delta", id: "loop-judge", delta: STOPPED_ANSWER },
    { type: "text-end", id: "loop-judge" },
    { type: "finish", usage: NO_USAGE, finishReason: STOP_REASON, providerMetadata: metadata(verdict) },
  ];
  return {
    stream: new ReadableStream<StreamPart>({
      start(controller) {
        for (const part of parts) controller.enqueue(part);
        controller.close();
      },
    }),
  };
}

/**
 * loop-judge for one conversation: `createLoopJudge({ client, sessionId })`, then
 * `wrapLanguageModel({ model, middleware: judge.middleware })` and
 * `tools: judge.guardTools(tools)`. One run at a time per conversation.
 */
export function createLoopJudge(options: LoopJudgeOptions): LoopJudge {
  const session = options.client.session(options.sessionId);
  // The calls a stop verdict answers: the params object transformParams returned is the
  // one wrapGenerate / wrapStream receive (the SDK's wrapLanguageModel passes it through).
  const stopping = new WeakMap<CallOptions, Verdict>();
  let lastVerdict: Verdict | undefined;
  let stopped = false;
  // A preflight that answered stop: the refused call's error result is the model's last
  // input, and its next call is answered with the stop (as a stop turn would be).
  let preflightStop: Verdict | undefined;

  const middleware: LanguageModelMiddleware = {
    specificationVersion: "v4",
    async transformParams({ params }) {
      const judged = await session.append(toChatMessages(params.prompt), {
        ...(params.abortSignal ? { signal: params.abortSignal } : {}),
      });
      options.onVerdict?.(judged, "turn");
      // A preflight's stop answers this one call; a later run on the session is judged
      // afresh by its turns.
      const pending = preflightStop;
      preflightStop = undefined;
      const verdict = judged.verdict.action === "stop" ? judged.verdict : (pending ?? judged.verdict);
      lastVerdict = verdict;
      if (verdict.action === "stop") {
        const next = { ...params };
        stopping.set(next, verdict);
        return next;
      }
      if (TELL_ACTIONS.has(verdict.action) && verdict.recovery_message) {
        // A user message, not a system one: several providers (Anthropic's among them)
        // accept system text only at the start of the prompt. It goes into this call
        // only; the agent's own history, and so the next turn's, stays as it was.
        const recovery: PromptMessage = {
          role: "user",
          content: [{ type: "text", text: verdict.recovery_message }],
        };
        return { ...params, prompt: [...params.prompt, recovery] };
      }
      return params;
    },
    async wrapGenerate({ doGenerate, params }) {
      const verdict = stopping.get(params);
      if (verdict === undefined) return doGenerate();
      stopped = true;
      return stoppedResult(verdict);
    },
    async wrapStream({ doStream, params }) {
      const verdict = stopping.get(params);
      if (verdict === undefined) return doStream();
      stopped = true;
      return stoppedStream(verdict);
    },
  };

  function guardTools<TOOLS extends ToolSet>(tools: TOOLS): TOOLS {
    const guarded: Record<string, unknown> = {};
    for (const [name, tool] of Object.entries(tools)) {
      const execute = tool.execute;
      if (execute === undefined) {
        guarded[name] = tool; // run by the application or the provider, not here
        continue;
      }
      guarded[name] = {
        ...tool,
        async execute(input: unknown, execution: Parameters<typeof execute>[1]) {
          const judged = await session.checkCall(name, input, {
            ...(execution.abortSignal ? { signal: execution.abortSignal } : {}),
          });
          options.onVerdict?.(judged, "preflight");
          if (judged.verdict.looping) {
            if (judged.verdict.action === "stop") preflightStop ??= judged.verdict;
            throw new LoopJudgeRefusal(judged.verdict);
          }
          return execute(input, execution);
        },
      };
    }
    return guarded as TOOLS;
  }

  return {
    session,
    middleware,
    guardTools,
    get lastVerdict() {
      return lastVerdict;
    },
    get stopped() {
      return stopped;
    },
  };
}
