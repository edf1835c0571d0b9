/**
 * The AI SDK middleware and tool guard: agents driven by the SDK's own mock model,
 * judged by a real `loop-judge serve` on 127.0.0.1.
 */

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { generateText, isStepCount, jsonSchema, streamText, tool, wrapLanguageModel } from "ai";
import { MockLanguageModelV4 } from "ai/test";

import {
  createLoopJudge,
  METADATA_KEY,
  type ModelPrompt,
  STOPPED_ANSWER,
  toChatMessages,
} from "../src/ai-sdk.js";
import { type Judged, LoopJudgeClient, type LoopJudgeError } from "../src/index.js";
import { freePort, type Sidecar, startSidecar, TOKEN } from "./sidecar.js";

let sidecar: Sidecar;
before(async () => {
  sidecar = await startSidecar();
});
after(async () => {
  await sidecar.stop();
});

// More steps than the ladder needs to reach stop (warn at the third identical failing
// call, stop three turns later): a run that is not stopped would use them all.
const MAX_STEPS = 25;
const RECOVERY = /^```loop-judge/;

let sessions = 0;
function sessionId(): string {
  sessions += 1;
  return `ai-${process.pid}-${sessions}`;
}

type GenerateResult = Awaited<ReturnType<MockLanguageModelV4["doGenerate"]>>;
type CallOptions = Parameters<MockLanguageModelV4["doGenerate"]>[0];

const USAGE = {
  inputTokens: { total: 10, noCache: 10, cacheRead: 0, cacheWrite: 0 },
  outputTokens: { total: 5, text: 5, reasoning: 0 },
};

function callsTool(step: number, toolName: string, input: object): GenerateResult {
  return {
    content: [{ type: "tool-call", toolCallId: `call_${step}`, toolName, input: JSON.stringify(input) }],
    finishReason: { unified: "tool-calls", raw: "tool_calls" },
    usage: USAGE,
    warnings: [],
  };
}

function answers(text: string): GenerateResult {
  return {
    content: [{ type: "text", text }],
    finishReason: { unified: "stop", raw: "stop" },
    usage: USAGE,
    warnings: [],
  };
}

/** Whether the prompt of a model call ends with loop-judge's recovery message. */
function toldToRecover(options: CallOptions): boolean {
  const last = options.prompt.at(-1);
  if (last?.role !== "user") return false;
  return last.content.some((part) => part.type === "text" && RECOVERY.test(part.text));
}

/** Whether the last message of the prompt is a call refused with the recovery message. */
function refusedLastCall(options: CallOptions): boolean {
  const last = toChatMessages(options.prompt).at(-1)?.content;
  return Array.isArray(last) && last.some((block) => RECOVERY.test(block.content));
}

function tools() {
  const ran: string[] = [];
  const set = {
    run_tests: tool({
      description: "Run the test file",
      inputSchema: jsonSchema<{ path: string }>({
        type: "object",
        properties: { path: { type: "string" } },
        required: ["path"],
      }),
      execute: async ({ path }) => {
        ran.push(`run_tests ${path}`);
        return `FAILED ${path}::test_add - AssertionError: assert 3 == 4`;
      },
    }),
    read_file: tool({
      description: "Read a file",
      inputSchema: jsonSchema<{ path: string }>({
        type: "object",
        properties: { path: { type: "string" } },
        required: ["path"],
      }),
      execute: async ({ path }) => {
        ran.push(`read_file ${path}`);
        return `contents of ${path}`;
      },
    }),
  };
  return { set, ran };
}

function setup(options: { baseUrl?: string; onError?: (error: LoopJudgeError) => void } = {}) {
  const client = new LoopJudgeClient({
    baseUrl: options.baseUrl ?? sidecar.baseUrl,
    token: TOKEN,
    ...(options.onError ? { onError: options.onError } : {}),
  });
  const verdicts: { judged: Judged; where: string }[] = [];
  const judge = createLoopJudge({
    client,
    sessionId: sessionId(),
    onVerdict: (judged, where) => verdicts.push({ judged, where }),
  });
  return { judge, verdicts };
}

describe("a looping agent", () => {
  test("is told to recover in the prompt, then stopped by a final answer", async () => {
    const { judge, verdicts } = setup();
    const { set, ran } = tools();
    let step = 0;
    // The model calls the same failing tool forever, whatever it is told.
    const mock = new MockLanguageModelV4({
      doGenerate: async () => callsTool(step++, "run_tests", { path: "test_app.py" }),
    });
    const result = await generateText({
      model: wrapLanguageModel({ model: mock, middleware: judge.middleware }),
      tools: set, // turns only: no preflight
      instructions: "You fix failing tests.",
      prompt: "Make the tests pass.",
      stopWhen: isStepCount(MAX_STEPS),
    });
    assert.equal(judge.stopped, true);
    assert.equal(result.text, STOPPED_ANSWER);
    assert.equal(result.finishReason, "stop");
    assert.equal(result.providerMetadata?.[METADATA_KEY]?.action, "stop");
    assert.equal(result.providerMetadata?.[METADATA_KEY]?.kind, "exact_repeat");
    assert.ok(result.steps.length < MAX_STEPS, `${result.steps.length} steps`);
    // The model was asked at every step but the last, which loop-judge answered.
    assert.equal(mock.doGenerateCalls.length, result.steps.length - 1);
    assert.equal(ran.length, result.steps.length - 1);
    const actions = verdicts.map((v) => v.judged.verdict.action);
    assert.ok(actions.indexOf("warn") >= 0 && actions.indexOf("warn") < actions.indexOf("stop"), actions.join());
    // Each warning reached the model, at the end of that call's prompt, and only there.
    const told = mock.doGenerateCalls.map(toldToRecover);
    const warned = verdicts.map((v) => ["warn", "ask_user"].includes(v.judged.verdict.action));
    assert.deepEqual(told, warned.slice(0, told.length));
  });

  test("with the tool guard, repeats are refused before they run and the preflight's stop ends the run", async () => {
    const { judge, verdicts } = setup();
    const { set, ran } = tools();
    let step = 0;
    const mock = new MockLanguageModelV4({
      doGenerate: async () => callsTool(step++, "run_tests", { path: "test_app.py" }),
    });
    const result = await generateText({
      model: wrapLanguageModel({ model: mock, middleware: judge.middleware }),
      tools: judge.guardTools(set),
      prompt: "Make the tests pass.",
      stopWhen: isStepCount(MAX_STEPS),
    });
    assert.equal(judge.stopped, true);
    assert.equal(result.text, STOPPED_ANSWER);
    assert.ok(result.steps.length < MAX_STEPS, `${result.steps.length} steps`);
    const refused = verdicts.filter((v) => v.where === "preflight" && v.judged.verdict.looping);
    assert.ok(refused.length >= 1);
    assert.equal(refused.at(-1)?.judged.verdict.action, "stop");
    // Refused calls never ran; each came back to the model as an error result holding the
    // recovery message alone.
    assert.equal(ran.length, result.steps.length - 1 - refused.length);
    const errors = result.steps.flatMap((s) => s.content).filter((part) => part.type === "tool-error");
    assert.equal(errors.length, refused.length);
    const lastPrompt = toChatMessages(mock.doGenerateCalls.at(-1)?.prompt ?? []);
    const lastResult = lastPrompt.at(-1)?.content;
    assert.ok(Array.isArray(lastResult));
    assert.match(lastResult[0]?.content ?? "", RECOVERY);
    assert.equal(lastResult[0]?.is_error, true);
  });

  test("is stopped the same way under streamText", async () => {
    const { judge } = setup();
    const { set } = tools();
    let step = 0;
    const mock = new MockLanguageModelV4({
      doStream: async () => {
        const id = `call_${step++}`;
        return {
          stream: new ReadableStream({
            start(controller) {
              controller.enqueue({ type: "stream-start", warnings: [] });
              controller.enqueue({
                type: "tool-call",
                toolCallId: id,
                toolName: "run_tests",
                input: '{"path":"test_app.py"}',
              });
              controller.enqueue({
                type: "finish",
                usage: USAGE,
                finishReason: { unified: "tool-calls", raw: "tool_calls" },
              });
              controller.close();
            },
          }),
        };
      },
    });
    const result = streamText({
      model: wrapLanguageModel({ model: mock, middleware: judge.middleware }),
      tools: set,
      prompt: "Make the tests pass.",
      stopWhen: isStepCount(MAX_STEPS),
    });
    assert.equal(await result.text, STOPPED_ANSWER);
    assert.equal(judge.stopped, true);
    assert.ok((await result.steps).length < MAX_STEPS);
    assert.ok(mock.doStreamCalls.some(toldToRecover));
  });
});

describe("an agent that obeys the recovery message", () => {
  test("is not stopped", async () => {
    const { judge, verdicts } = setup();
    const { set, ran } = tools();
    let step = 0;
    let told = false;
    // It repeats the failing call until told to recover, then reads the code and answers.
    const mock = new MockLanguageModelV4({
      doGenerate: async (options) => {
        step += 1;
        if (!told && (toldToRecover(options) || refusedLastCall(options))) {
          told = true;
          return callsTool(step, "read_file", { path: "app.py" });
        }
        if (told) return answers("The bug is in add(): it subtracts. Here is the fix.");
        return callsTool(step, "run_tests", { path: "test_app.py" });
      },
    });
    const result = await generateText({
      model: wrapLanguageModel({ model: mock, middleware: judge.middleware }),
      tools: judge.guardTools(set),
      prompt: "Make the tests pass.",
      stopWhen: isStepCount(MAX_STEPS),
    });
    assert.equal(told, true);
    assert.equal(judge.stopped, false);
    assert.equal(result.text, "The bug is in add(): it subtracts. Here is the fix.");
    assert.equal(ran.at(-1), "read_file app.py");
    const actions = verdicts.map((v) => v.judged.verdict.action);
    assert.ok(actions.includes("warn"));
    assert.ok(!actions.includes("stop"), actions.join(","));
  });
});

describe("a productive agent", () => {
  test("is never touched", async () => {
    const { judge, verdicts } = setup();
    const { set, ran } = tools();
    const plan = [
      callsTool(0, "read_file", { path: "app.py" }),
      callsTool(1, "read_file", { path: "test_app.py" }),
      callsTool(2, "run_tests", { path: "test_app.py" }),
      callsTool(3, "read_file", { path: "utils.py" }),
      callsTool(4, "run_tests", { path: "test_utils.py" }),
      answers("All tests pass."),
    ];
    const mock = new MockLanguageModelV4({ doGenerate: plan });
    const result = await generateText({
      model: wrapLanguageModel({ model: mock, middleware: judge.middleware }),
      tools: judge.guardTools(set),
      prompt: "Make the tests pass.",
      stopWhen: isStepCount(MAX_STEPS),
    });
    assert.equal(result.text, "All tests pass.");
    assert.equal(result.steps.length, plan.length);
    assert.equal(ran.length, 5);
    assert.equal(judge.stopped, false);
    assert.ok(!mock.doGenerateCalls.some(toldToRecover));
    assert.equal(verdicts.length, plan.length + 5); // a turn per step, a preflight per call
    assert.ok(verdicts.every((v) => v.judged.verdict.action === "continue" && !v.judged.error));
    // Each turn after the first sent only the new messages.
    assert.equal(judge.session.offset, toChatMessages(mock.doGenerateCalls.at(-1)?.prompt ?? []).length);
  });
});

describe("a sidecar that is down", () => {
  test("fails open: the agent runs as if loop-judge were not there", async () => {
    const port = await freePort();
    const errors: LoopJudgeError[] = [];
    const { judge } = setup({ baseUrl: `http://127.0.0.1:${port}`, onError: (e) => errors.push(e) });
    const { set } = tools();
    const mock = new MockLanguageModelV4({
      doGenerate: [callsTool(0, "run_tests", { path: "test_app.py" }), answers("Done.")],
    });
    const result = await generateText({
      model: wrapLanguageModel({ model: mock, middleware: judge.middleware }),
      tools: judge.guardTools(set),
      prompt: "Make the tests pass.",
      stopWhen: isStepCount(MAX_STEPS),
    });
    assert.equal(result.text, "Done.");
    assert.equal(errors.length, 3); // two turns and one preflight, each reported
  });
});

describe("toChatMessages", () => {
  test("converts text, tool calls with JSON-text arguments, results and failed results", () => {
    const prompt: ModelPrompt = [
      { role: "system", content: "Be brief." },
      { role: "user", content: [{ type: "text", text: "Fix it." }] },
      {
        role: "assistant",
        content: [
          { type: "reasoning", text: "private" },
          { type: "text", text: "Running." },
          { type: "tool-call", toolCallId: "c1", toolName: "run_tests", input: { path: "a.py" } },
          { type: "tool-call", toolCallId: "c2", toolName: "read_file", input: { path: "b.py" } },
        ],
      },
      {
        role: "tool",
        content: [
          { type: "tool-result", toolCallId: "c1", toolName: "run_tests", output: { type: "json", value: { ok: 1 } } },
          { type: "tool-result", toolCallId: "c2", toolName: "read_file", output: { type: "error-text", value: "ENOENT" } },
        ],
      },
    ];
    assert.deepEqual(toChatMessages(prompt), [
      { role: "system", content: "Be brief." },
      { role: "user", content: "Fix it." },
      {
        role: "assistant",
        content: "Running.",
        tool_calls: [
          { id: "c1", type: "function", function: { name: "run_tests", arguments: '{"path":"a.py"}' } },
          { id: "c2", type: "function", function: { name: "read_file", arguments: '{"path":"b.py"}' } },
        ],
      },
      { role: "tool", tool_call_id: "c1", content: '{"ok":1}' },
      { role: "user", content: [{ type: "tool_result", tool_use_id: "c2", content: "ENOENT", is_error: true }] },
    ]);
  });
});
