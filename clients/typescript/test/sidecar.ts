/**
 * A real `loop-judge serve` for the tests: started on 127.0.0.1 on a free port with a
 * token, heuristics only (no judge model, no LOOP_JUDGE_* of the caller), stopped after.
 */

import { type ChildProcess, spawn } from "node:child_process";
import { once } from "node:events";
import { createServer } from "node:net";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const HERE = dirname(fileURLToPath(import.meta.url));
// dist/test/ -> the package -> the repository.
const REPO = resolve(HERE, "../../../..");
// The sidecar to run: CI's venv by default, or LOOP_JUDGE_SERVE_BIN.
export const SERVE_BIN = process.env.LOOP_JUDGE_SERVE_BIN ?? resolve(REPO, ".venv/bin/loop-judge");
// Startup imports litellm and the detectors: seconds on a loaded 2-core machine.
const STARTUP_TIMEOUT_MS = 60_000;

export const TOKEN = "ts-client-test-token-0123456789";

export async function freePort(): Promise<number> {
  const server = createServer();
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const address = server.address();
  if (address === null || typeof address === "string") throw new Error("no port");
  server.close();
  await once(server, "close");
  return address.port;
}

export interface Sidecar {
  baseUrl: string;
  stop(): Promise<void>;
}

function hermeticEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [key, value] of Object.entries(process.env)) {
    if (!key.toUpperCase().startsWith("LOOP_JUDGE_")) env[key] = value;
  }
  return {
    ...env,
    LOOP_JUDGE_SERVER_TOKEN: TOKEN,
    // The embedding detector changes no verdict these tests read; skipping its model keeps
    // startup fast and needs no download.
    LOOP_JUDGE_SEMANTIC: "off",
    LOOP_JUDGE_ACCESS_LOG: "false",
    // litellm would fetch its price list at import: it uses its bundled copy instead.
    LITELLM_LOCAL_MODEL_COST_MAP: "True",
    // Nothing but 127.0.0.1 is reachable: any other request fails at a dead proxy.
    HTTP_PROXY: "http://127.0.0.1:9",
    HTTPS_PROXY: "http://127.0.0.1:9",
    NO_PROXY: "127.0.0.1",
  };
}

export async function startSidecar(): Promise<Sidecar> {
  const port = await freePort();
  const child: ChildProcess = spawn(SERVE_BIN, ["serve", "--host", "127.0.0.1", "--port", String(port)], {
    env: hermeticEnv(),
    stdio: ["ignore", "ignore", "pipe"],
  });
  let stderr = "";
  child.stderr?.setEncoding("utf-8");
  child.stderr?.on("data", (chunk: string) => {
    stderr = (stderr + chunk).slice(-4000);
  });
  const baseUrl = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + STARTUP_TIMEOUT_MS;
  for (;;) {
    if (child.exitCode !== null) {
      throw new Error(`loop-judge serve exited with ${child.exitCode}: ${stderr}`);
    }
    try {
      const response = await fetch(`${baseUrl}/healthz`);
      if (response.ok) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      child.kill("SIGKILL");
      throw new Error(`loop-judge serve did not answer within ${STARTUP_TIMEOUT_MS} ms: ${stderr}`);
    }
    await new Promise((done) => setTimeout(done, 200));
  }
  return {
    baseUrl,
    async stop() {
      if (child.exitCode !== null) return;
      const exited = once(child, "exit");
      child.kill("SIGTERM");
      const timer = setTimeout(() => child.kill("SIGKILL"), 10_000);
      await exited;
      clearTimeout(timer);
    },
  };
}
