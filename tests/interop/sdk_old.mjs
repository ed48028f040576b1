// Interop: older @modelcontextprotocol/sdk releases against `subtask serve`,
// clients whose newest protocol predates tasks, as many installed hosts still
// ship. Each is installed as an npm alias next to 1.32.2:
//
//   sdk_old.mjs --release 1.12   sdk-1.12 = @modelcontextprotocol/sdk 1.12.0, protocol 2025-03-26
//   sdk_old.mjs --release 1.9    sdk-1.9  = @modelcontextprotocol/sdk 1.9.0,  protocol 2024-11-05
//
// over the transport SUBTASK_TRANSPORT names (lib.mjs): stdio, the SDK's
// StdioClientTransport spawning `subtask serve --stdio --memory`; or (1.12
// only) Streamable HTTP, where after initialize this SDK sends neither an
// MCP-Protocol-Version header nor `_meta`, so the server must take its
// requests as 2025-03-26. (1.9's only HTTP client is 2024-11-05's HTTP+SSE
// transport, which this server does not serve.)
//
// Public API used:
//   new Client(info, {capabilities}), client.connect(transport),
//   client.getServerVersion(), client.listTools(), client.callTool(), client.close();
//   StdioClientTransport({command, args, stderr}) / StreamableHTTPClientTransport(url).
// The negotiated version is read on the wire: this SDK has no accessor for it,
// and its HTTP transport has no `fetch` option, so the messages are observed
// through the Transport interface (send/onmessage, lib.mjs observeTransport).
// Neither version has tasks or structuredContent (2025-06-18): the checks
// expect neither.

import { TRANSPORT, assert, check, describe, errorText, failAll, finish, sdkTransport, wire, wireResponses } from "./lib.mjs";

const RELEASES = {
  "1.12": { pkg: "sdk-1.12", sdkVersion: "1.12.0", protocol: "2025-03-26", http: true },
  "1.9": { pkg: "sdk-1.9", sdkVersion: "1.9.0", protocol: "2024-11-05", http: false },
};
const CHECKS = ["negotiated-version", "list-tools", "sync-call", "bad-arguments"];
const argRelease = process.argv.includes("--release") ? process.argv[process.argv.indexOf("--release") + 1] : undefined;
const RELEASE = RELEASES[argRelease];
if (!RELEASE) {
  failAll(CHECKS, `--release ${describe(argRelease)}: expected one of ${Object.keys(RELEASES).join(", ")}`);
  finish();
}
const VERSION = RELEASE.protocol;
const LABEL = `sdk-${RELEASE.sdkVersion}`;
const CLIENT_INFO = { name: "subtask-interop-sdk-old", version: RELEASE.sdkVersion };

async function main() {
  let client;
  try {
    const { Client } = await import(`${RELEASE.pkg}/client/index.js`);
    const { StdioClientTransport } = await import(`${RELEASE.pkg}/client/stdio.js`);
    let StreamableHTTPClientTransport;
    if (TRANSPORT === "http") {
      if (!RELEASE.http) throw new Error(`sdk ${RELEASE.sdkVersion} has no Streamable HTTP client (its HTTP is 2024-11-05's HTTP+SSE)`);
      ({ StreamableHTTPClientTransport } = await import(`${RELEASE.pkg}/client/streamableHttp.js`));
    }
    client = new Client(CLIENT_INFO, { capabilities: {} });
    await client.connect(sdkTransport({ StdioClientTransport, StreamableHTTPClientTransport }, LABEL, { httpFetchOption: false }));
  } catch (e) {
    failAll(CHECKS, `setup (initialize) failed: ${errorText(e)}`);
    return;
  }

  // ---------------------------------------------------------------- negotiated-version
  await check("negotiated-version", async () => {
    const sent = wire.find((w) => w.dir === "sent" && w.msg?.method === "initialize")?.msg;
    assert(sent?.params?.protocolVersion === VERSION, `the SDK sent initialize ${describe(sent?.params)}, expected protocolVersion ${VERSION}`);
    const answer = wireResponses("initialize", LABEL).at(-1);
    assert(answer?.result, `initialize response ${describe(answer)}`);
    assert(
      answer.result.protocolVersion === VERSION,
      `initialize answered protocolVersion ${describe(answer.result.protocolVersion)}, expected ${VERSION}`,
    );
    assert(answer.result.capabilities?.tools, `capabilities ${describe(answer.result.capabilities)}, expected tools`);
    assert(
      answer.result.capabilities?.tasks === undefined,
      `capabilities.tasks ${describe(answer.result.capabilities.tasks)} at ${VERSION}, which has no tasks`,
    );
    const server = client.getServerVersion();
    assert(server?.name === "subtask", `getServerVersion() ${describe(server)}, expected name subtask`);
  });

  // ---------------------------------------------------------------- list-tools
  await check("list-tools", async () => {
    const { tools } = await client.listTools();
    const names = tools.map((t) => t.name).sort();
    for (const name of ["deep_research", "fanout"]) assert(names.includes(name), `tools/list has ${describe(names)}, expected ${name}`);
    const fanout = tools.find((t) => t.name === "fanout");
    assert(fanout.inputSchema?.type === "object", `fanout inputSchema ${describe(fanout.inputSchema)}`);
  });

  // ---------------------------------------------------------------- sync-call
  await check("sync-call", async () => {
    const result = await client.callTool({ name: "fanout", arguments: { width: 1, depth: 1, steps: 1, stepMs: 1 } });
    assert(!result.isError, `tool result isError: ${describe(result)}`);
    const text = result.content?.find((c) => c.type === "text")?.text;
    assert(/\b2 of 2 nodes completed\b/.test(text ?? ""), `text content ${describe(text)}, expected "2 of 2 nodes completed"`);
    assert(result.structuredContent === undefined, `structuredContent ${describe(result.structuredContent)} at ${VERSION} (a 2025-06-18 field)`);
  });

  // ---------------------------------------------------------------- bad-arguments
  await check("bad-arguments", async () => {
    let result;
    try {
      result = await client.callTool({ name: "fanout", arguments: { width: 999 } });
    } catch (e) {
      throw new Error(`tools/call fanout {"width":999} threw instead of answering a tool result with isError: ${errorText(e)}`);
    }
    assert(result.isError === true, `result ${describe(result)}, expected isError: true`);
  });

  await client.close().catch(() => {});
}

main()
  .catch((e) => failAll(["client-crashed"], errorText(e)))
  .finally(finish);
