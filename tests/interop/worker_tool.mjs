// A released client drives a worker tool (tests/workers/test_mixed.py):
// @modelcontextprotocol/sdk 1.32.2 over Streamable HTTP (2025-11-25 wire)
// calls `py_parent`, served by a Python worker, synchronously and as a task
// (callToolStream), and checks both results. Prints `ok <check>` lines;
// exits 1 on the first failure.
//
//   node tests/interop/worker_tool.mjs http://127.0.0.1:PORT/mcp
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { CallToolResultSchema } from "@modelcontextprotocol/sdk/types.js";

const url = process.argv[2];
const expected = "TYPESCRIPT|python!|rust:0";
const text = (r) => r?.content?.find((c) => c.type === "text")?.text;

const client = new Client({ name: "subtask-worker-interop", version: "1.32.2" }, { capabilities: {} });
await client.connect(new StreamableHTTPClientTransport(new URL(url)));
try {
  const tools = await client.listTools();
  if (!tools.tools.some((t) => t.name === "py_parent")) throw new Error(`py_parent not listed: ${JSON.stringify(tools)}`);
  console.log("ok list");
  const sync = await client.callTool({ name: "py_parent", arguments: {} }, undefined, { timeout: 60000 });
  if (text(sync) !== expected) throw new Error(`sync call: ${JSON.stringify(sync)}`);
  console.log("ok sync-call");
  const messages = [];
  for await (const m of client.experimental.tasks.callToolStream({ name: "py_parent", arguments: {} }, CallToolResultSchema, {
    task: { ttl: 60000 },
    timeout: 60000,
  })) {
    messages.push(m);
  }
  const last = messages.at(-1);
  if (!messages.some((m) => m.type === "taskCreated")) throw new Error(`no task created: ${JSON.stringify(messages)}`);
  if (last?.type !== "result" || text(last.result) !== expected) throw new Error(`task stream: ${JSON.stringify(messages)}`);
  console.log("ok task-stream");
} catch (e) {
  console.log(`FAIL ${e.message}`);
  process.exitCode = 1;
} finally {
  await client.close();
}
