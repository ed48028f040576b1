// Interop: the MCP Inspector's CLI (@modelcontextprotocol/inspector 2.12.0,
// built on @modelcontextprotocol/client 2.3.1) against `subtask serve`, run as
// a user or a CI job runs it: one process per command, `--cli --format json`.
//
//   inspector.mjs [--era legacy|modern]
//
// Over stdio (SUBTASK_TRANSPORT=stdio) the Inspector spawns the server itself:
//   inspector --cli --format json [--protocol-era ERA] --method M ... -- $SUBTASK_BIN serve --stdio --memory
// over HTTP it is given the URL (`/mcp` makes it pick Streamable HTTP). Without
// --protocol-era an ad-hoc target is `legacy` (initialize, 2025-11-25); with
// `modern` it speaks 2026-07-28. Its stderr (where it passes the stdio
// server's own stderr through) is appended to SUBTASK_SERVER_LOG.
//
// Exit codes and output, from its --help and the runs: 0 with {"result": ...}
// on stdout; a tool result with isError: true exits 5 with
// {"error": {"code": "tool_is_error", ...}} on stderr and the result on stdout.

import { spawn } from "node:child_process";
import { appendFileSync, mkdtempSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { SERVER_COMMAND, SERVER_LOG, SERVER_URL, TRANSPORT, assert, check, describe, failAll, finish, trace } from "./lib.mjs";

const CHECKS = ["list-tools", "sync-call", "bad-arguments"];
const era = process.argv.includes("--era") ? process.argv[process.argv.indexOf("--era") + 1] : undefined;
if (era !== undefined && era !== "legacy" && era !== "modern") {
  failAll(CHECKS, `--era ${describe(era)}: expected legacy or modern`);
  finish();
}

const require = createRequire(import.meta.url);
const INSPECTOR = join(dirname(require.resolve("@modelcontextprotocol/inspector/package.json")), "clients/launcher/build/index.js");
// The Inspector keeps a catalog, client config and secrets under $HOME/.mcp-inspector:
// a throwaway home keeps a run from reading or writing the user's.
const HOME = mkdtempSync(join(tmpdir(), "subtask-interop-inspector-"));
process.on("exit", () => rmSync(HOME, { recursive: true, force: true }));

/** Runs the Inspector CLI once; resolves {code, stdout, stderr}. */
function inspector(args) {
  const target = TRANSPORT === "stdio" ? ["--", SERVER_COMMAND.command, ...SERVER_COMMAND.args] : [SERVER_URL];
  const argv = [INSPECTOR, "--cli", "--format", "json", ...(era ? ["--protocol-era", era] : []), ...args, ...target];
  trace(`run inspector ${argv.slice(1).join(" ")}`);
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, argv, {
      env: { ...process.env, HOME, MCP_CATALOG_PATH: join(HOME, "mcp.json"), MCP_CLIENT_CONFIG_PATH: join(HOME, "client.json") },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d) => (stdout += d));
    child.stderr.on("data", (d) => (stderr += d));
    child.on("error", reject);
    child.on("close", (code) => {
      if (SERVER_LOG) appendFileSync(SERVER_LOG, `==== inspector ${args.join(" ")} (exit ${code})\n${stderr}`);
      trace(`inspector exit ${code} stdout ${stdout.trim()} stderr ends ${lastLine(stderr)}`);
      resolve({ code, stdout, stderr });
    });
  });
}

/** The last line of the Inspector's stderr: its error envelope, after the server's own log lines. */
function lastLine(text) {
  return text.trimEnd().split("\n").at(-1) ?? "";
}

/** The one JSON object --format json prints on stdout. */
function parsed(run, what) {
  try {
    return JSON.parse(run.stdout);
  } catch {
    throw new Error(`${what}: exit ${run.code}, stdout is not JSON: ${describe(run.stdout)} (stderr ends: ${describe(lastLine(run.stderr))})`);
  }
}

async function main() {
  await check("list-tools", async () => {
    const run = await inspector(["--method", "tools/list"]);
    const out = parsed(run, "tools/list");
    assert(run.code === 0, `exit ${run.code}: ${describe(out)}`);
    const names = (out.result?.tools ?? []).map((t) => t.name).sort();
    for (const name of ["deep_research", "fanout"]) assert(names.includes(name), `tools/list has ${describe(names)}, expected ${name}`);
  });

  await check("sync-call", async () => {
    const args = { width: 1, depth: 1, steps: 1, stepMs: 1 };
    const run = await inspector(["--method", "tools/call", "--tool-name", "fanout", "--tool-args-json", JSON.stringify(args)]);
    const out = parsed(run, "tools/call");
    assert(run.code === 0, `exit ${run.code}: ${describe(out)} (stderr ends: ${describe(lastLine(run.stderr))})`);
    assert(out.result?.isError !== true, `tool result isError: ${describe(out.result)}`);
    assert(out.result?.structuredContent?.nodes === 2, `structuredContent.nodes = ${out.result?.structuredContent?.nodes}, expected 2: ${describe(out.result)}`);
    // The era is visible in the result: `resultType` is a 2026-07-28 field.
    if (era === "modern") assert(out.result.resultType === "complete", `resultType ${describe(out.result.resultType)} with --protocol-era modern, expected "complete"`);
    else assert(out.result.resultType === undefined, `resultType ${describe(out.result.resultType)} on the legacy era (a 2026-07-28 field)`);
  });

  await check("bad-arguments", async () => {
    const run = await inspector(["--method", "tools/call", "--tool-name", "fanout", "--tool-args-json", JSON.stringify({ width: 999 })]);
    const out = parsed(run, "tools/call");
    assert(out.result?.isError === true, `result ${describe(out)}, expected a tool result with isError: true`);
    assert(run.code === 5 && run.stderr.includes("tool_is_error"), `exit ${run.code} (expected 5, the CLI's code for an isError result); stderr ends: ${describe(lastLine(run.stderr))}`);
  });
}

main()
  .catch((e) => failAll(["client-crashed"], String(e?.stack ?? e)))
  .finally(finish);
