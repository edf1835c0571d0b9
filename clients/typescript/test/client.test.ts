/** The client against a real `loop-judge serve` on 127.0.0.1. */

import assert from "node:assert/strict";
import { createServer } from "node:http";
import { once } from "node:events";
import { after, before, describe, test } from "node:test";

import {
  type ChatMessage,
  LoopJudgeAuthError,
  LoopJudgeClient,
  LoopJudgeConnectionError,
  LoopJudgeError,
  LoopJudgeHttpError,
  LoopJudgeTimeoutError,
  LoopJudgeUsageError,
} from "../src/index.js";
import { freePort, type Sidecar, startSidecar, TOKEN } from "./sidecar.js";

let sidecar: Sidecar;
before(async () => {
  sidecar = await startSidecar();
});
after(async () => {
  await sidecar.stop();
});

let sessions = 0;
function sessionId(): string {
  sessions += 1;
  return `ts-${process.pid}-${sessions}`;
}

/** A fetch that records each request's method, path, headers and body, and the status. */
function recording(): {
  fetch: typeof fetch;
  calls: { path: string; headers: Headers; body: unknown; status?: number }[];
} {
  const calls: { path: string; headers: Headers; body: unknown; status?: number }[] = [];
  const wrapped: typeof fetch = async (input, init) => {
    const call: { path: string; headers: Headers; body: unknown; status?: number } = {
      path: new URL(String(input)).pathname,
      headers: new Headers(init?.headers),
      body: typeof init?.body === "string" ? JSON.parse(init.body) : undefined,
    };
    calls.push(call);
    const response = await fetch(input, init);
    call.status = response.status;
    return response;
  };
  return { fetch: wrapped, calls };
}

const SYSTEM: ChatMessage = { role: "system", content: "You fix failing tests." };
const USER: ChatMessage = { role: "user", content: "Make the tests pass." };

/** One failing `run_tests` call and its result, the same each time but for the id. */
function failingCall(i: number): ChatMessage[] {
  const id = `call_${i}`;
  return [
    {
      role: "assistant",
      content: null,
      tool_calls: [
        { id, type: "function", function: { name: "run_tests", arguments: '{"path":"test_app.py"}' } },
      ],
    },
    { role: "tool", tool_call_id: id, content: "FAILED test_app.py::test_add - AssertionError" },
  ];
}

describe("auth", () => {
  test("the bearer token is sent and accepted", async () => {
    const { fetch, calls } = recording();
    const client = new LoopJudgeClient({ baseUrl: sidecar.baseUrl, token: TOKEN, fetch, failOpen: false });
    const judged = await client.session(sessionId()).append([SYSTEM, USER]);
    assert.equal(judged.error, undefined);
    assert.equal(judged.verdict.turn, 1);
    assert.equal(calls[0]?.headers.get("authorization"), `Bearer ${TOKEN}`);
  });

  test("a wrong token is a LoopJudgeAuthError with the server's status and detail", async () => {
    const client = new LoopJudgeClient({
      baseUrl: sidecar.baseUrl,
      token: "not-the-token-0123456789",
      failOpen: false,
    });
    await assert.rejects(client.session(sessionId()).append([USER]), (error: unknown) => {
      assert.ok(error instanceof LoopJudgeAuthError);
      assert.equal(error.status, 401);
      assert.equal(error.detail, "missing or wrong bearer token");
      return true;
    });
  });

  test("failing open, a wrong token is an all-clear with the error attached and reported", async () => {
    const reported: LoopJudgeError[] = [];
    const client = new LoopJudgeClient({
      baseUrl: sidecar.baseUrl,
      token: "not-the-token-0123456789",
      onError: (error) => reported.push(error),
    });
    const judged = await client.session(sessionId()).append([USER]);
    assert.equal(judged.verdict.action, "continue");
    assert.equal(judged.verdict.looping, false);
    assert.ok(judged.error instanceof LoopJudgeAuthError);
    assert.deepEqual(reported, [judged.error]);
  });
});

describe("the append API", () => {
  test("each turn sends only the new messages, from the offset sent", async () => {
    const { fetch, calls } = recording();
    const client = new LoopJudgeClient({ baseUrl: sidecar.baseUrl, token: TOKEN, fetch, failOpen: false });
    const session = client.session(sessionId());
    const history: ChatMessage[] = [SYSTEM, USER];
    await session.append(history);
    assert.deepEqual(calls[0]?.body, { messages: [SYSTEM, USER] });
    const verdicts = [];
    for (let i = 0; i < 6; i++) {
      const before = history.length;
      history.push(...failingCall(i));
      verdicts.push((await session.append(history)).verdict);
      assert.deepEqual(calls.at(-1)?.body, { messages: history.slice(before), start: before });
      assert.equal(session.offset, history.length);
    }
    assert.deepEqual(
      verdicts.map((v) => v.turn),
      [2, 3, 4, 5, 6, 7],
    );
    // The third identical failing call is a loop: the ladder warns, then asks, then stops.
    const actions = verdicts.map((v) => v.action);
    assert.equal(actions[2], "warn");
    assert.equal(actions.at(-1), "stop");
    assert.equal(verdicts.at(-1)?.kind, "exact_repeat");
    assert.match(verdicts[2]?.recovery_message ?? "", /^```loop-judge/);
  });

  test("a rewritten history (compaction) is sent whole", async () => {
    const { fetch, calls } = recording();
    const client = new LoopJudgeClient({ baseUrl: sidecar.baseUrl, token: TOKEN, fetch, failOpen: false });
    const session = client.session(sessionId());
    await session.append([SYSTEM, USER, ...failingCall(0)]);
    const compacted: ChatMessage[] = [
      SYSTEM,
      USER,
      { role: "assistant", content: "Summary so far: one failed test run." },
    ];
    const judged = await session.append([...compacted, ...failingCall(1)]);
    assert.equal(judged.verdict.turn, 2);
    assert.deepEqual(calls.at(-1)?.body, { messages: [...compacted, ...failingCall(1)] });
  });

  test("a 409 re-syncs from expected_start and resends the missing suffix once", async () => {
    const { fetch, calls } = recording();
    const client = new LoopJudgeClient({ baseUrl: sidecar.baseUrl, token: TOKEN, fetch, failOpen: false });
    const id = sessionId();
    const session = client.session(id);
    const history: ChatMessage[] = [SYSTEM, USER];
    await session.append(history);
    // Another client (or a lost response) moves the server's copy past ours.
    const [call, result] = failingCall(0) as [ChatMessage, ChatMessage];
    await client.turn(id, [call], { start: 2 });
    history.push(call, result);
    const judged = await session.append(history);
    assert.equal(judged.error, undefined);
    assert.equal(judged.verdict.turn, 3);
    const last = calls.slice(-2);
    assert.deepEqual(
      last.map((c) => [c.status, c.body]),
      [
        [409, { messages: [call, result], start: 2 }],
        [200, { messages: [result], start: 3 }],
      ],
    );
    // The two requests are two turns' worth of body: each had its own key.
    assert.notEqual(last[0]?.headers.get("idempotency-key"), last[1]?.headers.get("idempotency-key"));
    assert.equal(session.offset, 4);
  });

  test("a session the server forgot is sent whole after the 409", async () => {
    const { fetch, calls } = recording();
    const client = new LoopJudgeClient({ baseUrl: sidecar.baseUrl, token: TOKEN, fetch, failOpen: false });
    const session = client.session(sessionId());
    const history: ChatMessage[] = [SYSTEM, USER, ...failingCall(0)];
    await session.append(history);
    assert.equal(await client.deleteSession(session.id), true);
    history.push(...failingCall(1));
    const judged = await session.append(history);
    assert.equal(judged.verdict.turn, 1);
    assert.equal(calls.at(-2)?.status, 409);
    assert.deepEqual(calls.at(-1)?.body, { messages: history });
    assert.equal(await client.deleteSession(session.id), true);
    assert.equal(await client.deleteSession(session.id), false);
  });
});

describe("idempotency", () => {
  test("a resend with the same Idempotency-Key is answered again, not counted twice", async () => {
    const client = new LoopJudgeClient({ baseUrl: sidecar.baseUrl, token: TOKEN, failOpen: false });
    const id = sessionId();
    await client.turn(id, [SYSTEM, USER]);
    const first = await client.turn(id, failingCall(0), { start: 2, idempotencyKey: "turn-2" });
    const resent = await client.turn(id, failingCall(0), { start: 2, idempotencyKey: "turn-2" });
    assert.equal(first.replayed, false);
    assert.equal(resent.replayed, true);
    assert.deepEqual(resent.verdict, first.verdict);
    const next = await client.turn(id, failingCall(1), { start: 4 });
    assert.equal(next.verdict.turn, first.verdict.turn + 1);
  });

  test("a response lost on the way back is asked for again with the same key, counted once", async () => {
    let dropped = 0;
    const keys: (string | null)[] = [];
    // The server answers, then the connection drops before the client reads the answer.
    const lossy: typeof fetch = async (input, init) => {
      keys.push(new Headers(init?.headers).get("idempotency-key"));
      const response = await fetch(input, init);
      if (dropped === 0 && String(input).endsWith("/turns")) {
        dropped += 1;
        await response.text();
        throw new TypeError("fetch failed", { cause: new Error("socket hang up") });
      }
      return response;
    };
    const client = new LoopJudgeClient({ baseUrl: sidecar.baseUrl, token: TOKEN, fetch: lossy, failOpen: false });
    const judged = await client.session(sessionId()).append([SYSTEM, USER]);
    assert.equal(dropped, 1);
    assert.equal(keys.length, 2);
    assert.equal(keys[0], keys[1]);
    assert.equal(judged.replayed, true);
    assert.equal(judged.verdict.turn, 1);
  });
});

describe("errors", () => {
  test("a malformed history is a LoopJudgeHttpError naming the message and field", async () => {
    const client = new LoopJudgeClient({ baseUrl: sidecar.baseUrl, token: TOKEN, failOpen: false });
    const bad = [USER, { role: "wizard", content: "hi" }] as unknown as ChatMessage[];
    await assert.rejects(client.turn(sessionId(), bad), (error: unknown) => {
      assert.ok(error instanceof LoopJudgeHttpError);
      assert.equal(error.status, 422);
      assert.match(error.detail ?? "", /1/);
      assert.match(error.detail ?? "", /role/);
      return true;
    });
  });

  test("a bad session id is refused before anything is sent", () => {
    const client = new LoopJudgeClient({ baseUrl: sidecar.baseUrl, token: TOKEN });
    assert.throws(() => client.session("has spaces"), LoopJudgeUsageError);
    assert.throws(() => client.session(""), LoopJudgeUsageError);
    assert.throws(() => client.session("x".repeat(129)), LoopJudgeUsageError);
    assert.throws(() => client.session(".."), /cannot be sent in a URL path/);
    assert.doesNotThrow(() => client.session("user@host:run-1.2"));
  });
});

describe("the preflight check", () => {
  test("a call repeated past its limit is refused", async () => {
    const client = new LoopJudgeClient({ baseUrl: sidecar.baseUrl, token: TOKEN, failOpen: false });
    const session = client.session(sessionId());
    const fresh = await session.checkCall("run_tests", { path: "test_app.py" });
    assert.equal(fresh.verdict.looping, false);
    const history: ChatMessage[] = [SYSTEM, USER];
    for (let i = 0; i < 3; i++) {
      history.push(...failingCall(i));
      await session.append(history);
    }
    const refused = await session.checkCall("run_tests", '{"path": "test_app.py"}');
    assert.equal(refused.verdict.looping, true);
    assert.equal(refused.verdict.kind, "exact_repeat");
    const other = await session.checkCall("read_file", { path: "app.py" });
    assert.equal(other.verdict.looping, false);
  });
});

describe("a sidecar that is down", () => {
  test("fails open: an all-clear with a LoopJudgeConnectionError attached", async () => {
    const port = await freePort(); // nothing listens there
    const reported: LoopJudgeError[] = [];
    const client = new LoopJudgeClient({
      baseUrl: `http://127.0.0.1:${port}`,
      token: TOKEN,
      onError: (error) => reported.push(error),
    });
    const session = client.session(sessionId());
    const judged = await session.append([SYSTEM, USER]);
    assert.equal(judged.verdict.action, "continue");
    assert.ok(judged.error instanceof LoopJudgeConnectionError);
    assert.match(judged.error.message, new RegExp(`127.0.0.1:${port}`));
    const call = await session.checkCall("run_tests", {});
    assert.ok(call.error instanceof LoopJudgeConnectionError);
    assert.equal(reported.length, 2);
    assert.equal(session.offset, 0); // nothing is known to be stored
  });

  test("throws the typed error with failOpen: false", async () => {
    const port = await freePort();
    const client = new LoopJudgeClient({ baseUrl: `http://127.0.0.1:${port}`, failOpen: false });
    await assert.rejects(client.session(sessionId()).append([USER]), LoopJudgeConnectionError);
  });

  test("one that never answers times out after timeoutMs", async () => {
    const silent = createServer(() => {
      // accepts the request and never answers
    });
    silent.listen(0, "127.0.0.1");
    await once(silent, "listening");
    const address = silent.address();
    assert.ok(address !== null && typeof address === "object");
    try {
      const client = new LoopJudgeClient({
        baseUrl: `http://127.0.0.1:${address.port}`,
        timeoutMs: 200,
        onError: () => {},
      });
      const started = Date.now();
      const judged = await client.session(sessionId()).append([USER]);
      assert.ok(judged.error instanceof LoopJudgeTimeoutError);
      assert.equal(judged.error.timeoutMs, 200);
      assert.ok(Date.now() - started < 5_000);
      // The caller's own abort is not swallowed.
      const aborted = new AbortController();
      aborted.abort(new Error("the run was cancelled"));
      await assert.rejects(
        client.session(sessionId()).append([USER], { signal: aborted.signal }),
        /the run was cancelled/,
      );
    } finally {
      silent.closeAllConnections();
      silent.close();
    }
  });
});
