/**
 * Every ```ts block of the repository's README.md and docs/ compiles: tsc --strict against
 * this package (imported by its published name) and the installed `ai`.
 * tests/project/test_docs.py counts these blocks as checked here.
 */

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { test } from "node:test";

const HERE = dirname(fileURLToPath(import.meta.url));
const PACKAGE = resolve(HERE, "../..");
const REPO = resolve(PACKAGE, "../..");
// Inside the package, so the blocks import it by its name (a package's self-reference).
const WORK = join(PACKAGE, "dist", "docs-check");
const FENCE = /^(`{3,})([\w-]*)\s*$/;
const LANGUAGES = new Set(["ts", "typescript"]);

function pages(): string[] {
  const found = [join(REPO, "README.md")];
  const walk = (dir: string): void => {
    for (const name of readdirSync(dir).sort()) {
      const path = join(dir, name);
      if (statSync(path).isDirectory()) walk(path);
      else if (name.endsWith(".md")) found.push(path);
    }
  };
  walk(join(REPO, "docs"));
  return found;
}

/** Top-level fenced blocks, read as tests/project/test_docs.py reads them. */
function blocks(page: string): { line: number; lang: string; text: string }[] {
  const lines = readFileSync(page, "utf-8").split("\n");
  const out: { line: number; lang: string; text: string }[] = [];
  for (let i = 0; i < lines.length; i++) {
    const opened = FENCE.exec(lines[i] ?? "");
    if (opened === null) continue;
    const [, ticks, lang] = opened;
    let end = i + 1;
    while (end < lines.length && (lines[end] ?? "").trim() !== ticks) end++;
    out.push({ line: i + 1, lang: lang ?? "", text: lines.slice(i + 1, end).join("\n") + "\n" });
    i = end;
  }
  return out;
}

test("the TypeScript blocks of the docs compile", () => {
  const found = pages().flatMap((page) =>
    blocks(page)
      .filter((block) => LANGUAGES.has(block.lang))
      .map((block) => ({ ...block, id: `${relative(REPO, page)}:${block.line}` })),
  );
  assert.ok(found.length > 0, "no ts block found in README.md or docs/");
  rmSync(WORK, { recursive: true, force: true });
  mkdirSync(WORK, { recursive: true });
  const files = found.map((block, i) => {
    const file = join(WORK, `block${i}.ts`);
    writeFileSync(file, `// ${block.id}\n${block.text}`);
    return file;
  });
  const config = {
    compilerOptions: {
      target: "ES2022",
      module: "NodeNext",
      moduleResolution: "NodeNext",
      lib: ["ES2022", "DOM"],
      types: ["node"],
      strict: true,
      noEmit: true,
      skipLibCheck: true,
    },
    files,
  };
  writeFileSync(join(WORK, "tsconfig.json"), JSON.stringify(config));
  const tsc = join(PACKAGE, "node_modules", "typescript", "bin", "tsc");
  const run = spawnSync(process.execPath, [tsc, "-p", join(WORK, "tsconfig.json")], { encoding: "utf-8" });
  const named = run.stdout.replace(/block(\d+)\.ts/g, (_, n: string) => found[Number(n)]?.id ?? n);
  assert.equal(run.status, 0, named);
});
