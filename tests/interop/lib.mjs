// Shared helpers for the Node interop clients (ext_tasks.mjs, sdk1.mjs, sdk_old.mjs, inspector.mjs).
//
// Output contract (read by scripts/interop.sh): one line per check on stdout,
// `ok <check>`, `FAIL <check>: <reason>`, or `xfail <check>: <reason>` for a
// known limitation of the client whose server side was verified (see
// checkKnownLimitation); the process exits non-zero when a check failed. Trace lines (INTEROP_TRACE=1) start with `trace ` and are
// ignored by the runner's counting.
//
// Transports (chosen by scripts/interop.sh): SUBTASK_TRANSPORT=http (default)
// talks to the server at SUBTASK_URL; SUBTASK_TRANSPORT=stdio makes the client
// spawn `$SUBTASK_BIN serve --stdio --memory` itself, the way a desktop host
// does, with the server's stderr appended to SUBTASK_SERVER_LOG.
//
// Nothing here talks to the server by itself: `observingFetch` wraps the global
// fetch that a client's transport is given through its public `fetch` option;
// `observeTransport` wraps a transport object's public `send` and `onmessage`
// (the Transport interface every SDK client drives). Both only read copies of
// what passes through and hand on the same messages, unchanged.

import { openSync } from "node:fs";

export const TRANSPORT = process.env.SUBTASK_TRANSPORT ?? "http";
export const SERVER_URL = process.env.SUBTASK_URL;
export const SERVER_BIN = process.env.SUBTASK_BIN;
export const SERVER_LOG = process.env.SUBTASK_SERVER_LOG;
export const TRACE = process.env.INTEROP_TRACE === "1";
const CHECK_TIMEOUT_MS = Number(process.env.INTEROP_CHECK_TIMEOUT_MS ?? 30000);

if (TRANSPORT !== "http" && TRANSPORT !== "stdio") {
  console.log(`FAIL setup: SUBTASK_TRANSPORT is ${JSON.stringify(TRANSPORT)}, expected http or stdio`);
  process.exit(2);
}
if (TRANSPORT === "http" && !SERVER_URL) {
  console.log("FAIL setup: SUBTASK_URL is not set (run through scripts/interop.sh)");
  process.exit(2);
}
if (TRANSPORT === "stdio" && !SERVER_BIN) {
  console.log("FAIL setup: SUBTASK_BIN is not set (run through scripts/interop.sh)");
  process.exit(2);
}

/** The server command a stdio client spawns, as a host's config names it. */
export const SERVER_COMMAND = { command: SERVER_BIN, args: ["serve", "--stdio", "--memory"] };

/** Where a spawned server's stderr goes: appended to SUBTASK_SERVER_LOG, else the client's stderr. */
export function serverStderr() {
  return SERVER_LOG ? openSync(SERVER_LOG, "a") : "inherit";
}

/**
 * The transport a client connects with on this run: the SDK's own stdio
 * transport spawning the server (observed through observeTransport) or its
 * Streamable HTTP transport with observingFetch. `sdk` holds the two classes
 * of the SDK under test; `httpOptions` are extra options of the HTTP one.
 */
export function sdkTransport(sdk, label, { httpFetchOption = true } = {}) {
  if (TRANSPORT === "stdio") {
    return observeTransport(new sdk.StdioClientTransport({ ...SERVER_COMMAND, stderr: serverStderr() }), label);
  }
  if (!httpFetchOption) {
    // A transport without a `fetch` option (older SDKs): observed at the message level.
    return observeTransport(new sdk.StreamableHTTPClientTransport(new URL(SERVER_URL)), label);
  }
  return new sdk.StreamableHTTPClientTransport(new URL(SERVER_URL), { fetch: observingFetch(label) });
}

export function trace(...parts) {
  if (TRACE) console.log(`trace ${parts.join(" ")}`);
}

// ------------------------------------------------------------------ observing fetch

/** Every JSON-RPC message seen on the wire, in order: {dir: "sent"|"received", label, msg}. */
export const wire = [];

function recordWire(dir, label, text) {
  let parsed;
  try {
    parsed = JSON.parse(text);
  } catch {
    return;
  }
  for (const msg of Array.isArray(parsed) ? parsed : [parsed]) wire.push({ dir, label, msg });
}

/** The JSON-RPC responses seen for requests of `method` (matched by id within one label). */
export function wireResponses(method, label) {
  const ids = new Set(
    wire
      .filter((w) => w.dir === "sent" && w.msg?.method === method && (!label || w.label === label))
      .map((w) => `${w.label}:${JSON.stringify(w.msg.id)}`),
  );
  return wire
    .filter((w) => w.dir === "received" && w.msg && "id" in w.msg && !("method" in w.msg))
    .filter((w) => ids.has(`${w.label}:${JSON.stringify(w.msg.id)}`))
    .map((w) => w.msg);
}

/**
 * Observes a transport through its public Transport interface: every message
 * the client `send`s and every message the transport hands to `onmessage` is
 * recorded in `wire` (and traced), then passed on unchanged. Other members
 * (start, close, sessionId, setProtocolVersion, stderr, ...) are the
 * transport's own. Returns a proxy to connect the client with.
 */
export function observeTransport(transport, label) {
  let installed;
  return new Proxy(transport, {
    get(target, prop) {
      if (prop === "send") {
        return (message, options) => {
          const text = JSON.stringify(message);
          trace(`[${label}] >>> ${text}`);
          recordWire("sent", label, text);
          return target.send(message, options);
        };
      }
      if (prop === "onmessage") return installed;
      const value = Reflect.get(target, prop, target);
      return typeof value === "function" ? value.bind(target) : value;
    },
    set(target, prop, value) {
      if (prop === "onmessage") {
        installed = value;
        target.onmessage =
          typeof value === "function"
            ? (message, extra) => {
                const text = JSON.stringify(message);
                trace(`[${label}] <<< ${text}`);
                recordWire("received", label, text);
                return value(message, extra);
              }
            : value;
        return true;
      }
      return Reflect.set(target, prop, value, target);
    },
  });
}

const SHOWN_HEADERS = [
  "content-type",
  "accept",
  "mcp-protocol-version",
  "mcp-session-id",
  "mcp-method",
  "mcp-name",
  "last-event-id",
];

function headerSummary(headers) {
  const h = new Headers(headers ?? {});
  return SHOWN_HEADERS.filter((k) => h.has(k))
    .map((k) => `${k}: ${h.get(k)}`)
    .join("; ");
}

/**
 * A fetch for a transport's public `fetch` option. It records (and with
 * INTEROP_TRACE=1 prints) each request body and each response body; SSE
 * responses are printed event by event as they arrive, so long-lived streams
 * are observed without being buffered or altered.
 */
export function observingFetch(label) {
  let seq = 0;
  return async (input, init) => {
    const n = ++seq;
    const method = init?.method ?? (input instanceof Request ? input.method : "GET");
    const url = typeof input === "string" ? input : input instanceof URL ? input.href : input.url;
    const body = typeof init?.body === "string" ? init.body : undefined;
    trace(`[${label} #${n}] >>> ${method} ${url} {${headerSummary(init?.headers)}}`);
    if (body !== undefined) {
      trace(`[${label} #${n}] >>> ${body}`);
      recordWire("sent", label, body);
    }
    let res;
    try {
      res = await fetch(input, init);
    } catch (e) {
      trace(`[${label} #${n}] <<< fetch failed: ${e?.message ?? e}`);
      throw e;
    }
    const ct = res.headers.get("content-type") ?? "";
    trace(`[${label} #${n}] <<< HTTP ${res.status} {${headerSummary(res.headers)}}`);
    if (!res.body) return res;
    const decoder = new TextDecoder();
    let pending = "";
    const isSse = ct.includes("text/event-stream");
    const flushSse = (final) => {
      const events = pending.split(/\r?\n\r?\n/);
      pending = final ? "" : events.pop();
      for (const ev of events) {
        const data = ev
          .split(/\r?\n/)
          .filter((l) => l.startsWith("data:"))
          .map((l) => l.slice(5).replace(/^ /, ""))
          .join("\n");
        if (data) {
          trace(`[${label} #${n}] <<< (sse) ${data}`);
          recordWire("received", label, data);
        } else if (ev.trim()) {
          trace(`[${label} #${n}] <<< (sse) ${ev.trim().replace(/\r?\n/g, " | ")}`);
        }
      }
    };
    const observed = res.body.pipeThrough(
      new TransformStream({
        transform(chunk, controller) {
          pending += decoder.decode(chunk, { stream: true });
          if (isSse) flushSse(false);
          controller.enqueue(chunk);
        },
        flush() {
          pending += decoder.decode();
          if (isSse) flushSse(true);
          else if (pending) {
            trace(`[${label} #${n}] <<< ${pending}`);
            recordWire("received", label, pending);
          }
        },
      }),
    );
    return new Response(observed, { status: res.status, statusText: res.statusText, headers: res.headers });
  };
}

// ------------------------------------------------------------------ checks

let failures = 0;
let passes = 0;

export class CheckFailure extends Error {}

export function assert(cond, message) {
  if (!cond) throw new CheckFailure(message);
}

export function describe(value) {
  try {
    const s = JSON.stringify(value);
    return s === undefined ? String(value) : s.length > 600 ? `${s.slice(0, 600)}...` : s;
  } catch {
    return String(value);
  }
}

export function errorText(e) {
  if (e === undefined || e === null) return String(e);
  const parts = [];
  if (e.name && e.name !== "Error") parts.push(e.name);
  if (e.code !== undefined) parts.push(`code ${e.code}`);
  parts.push(e.message ?? String(e));
  if (e.data !== undefined) parts.push(`data ${describe(e.data)}`);
  if (e.cause) parts.push(`(cause: ${errorText(e.cause)})`);
  return parts.join(": ");
}

function withTimeout(promise, ms, what) {
  let timer;
  return Promise.race([
    promise,
    new Promise((_, reject) => {
      timer = setTimeout(() => reject(new CheckFailure(`${what} timed out after ${ms} ms`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

/** Runs one check and prints its line. `fn` throws (CheckFailure or any error) to fail. */
export async function check(name, fn, { timeoutMs = CHECK_TIMEOUT_MS } = {}) {
  trace(`---------------- check ${name}`);
  try {
    await withTimeout(Promise.resolve().then(fn), timeoutMs, `check ${name}`);
    passes++;
    console.log(`ok ${name}`);
  } catch (e) {
    failures++;
    const reason = e instanceof CheckFailure ? e.message : `threw ${errorText(e)}`;
    console.log(`FAIL ${name}: ${reason.replace(/\s*\n\s*/g, " ")}`);
  }
}

/**
 * Thrown by a check when the server did its part (the wire shows it) and the
 * client's public API cannot express the rest: a limitation of the client.
 */
export class ClientLimitation extends Error {}

let limitations = 0;

/**
 * A check the client cannot pass through its public API, run anyway so that
 * it keeps proving the server's side: prints `xfail <check>: <reason>` when
 * `fn` throws ClientLimitation (the server sent what the text says, the
 * client dropped it); a FAIL when it throws anything else (a server bug); and
 * a FAIL ("XPASS") when it passes, so that a client release that fixes the
 * limitation turns this back into a normal check.
 */
export async function checkKnownLimitation(name, fn, { timeoutMs = CHECK_TIMEOUT_MS } = {}) {
  trace(`---------------- check ${name} (known client limitation)`);
  try {
    await withTimeout(Promise.resolve().then(fn), timeoutMs, `check ${name}`);
    failures++;
    console.log(`FAIL ${name}: XPASS: the client now passes this check; make it a normal check`);
  } catch (e) {
    if (e instanceof ClientLimitation) {
      limitations++;
      console.log(`xfail ${name}: ${e.message.replace(/\s*\n\s*/g, " ")}`);
    } else {
      failures++;
      const reason = e instanceof CheckFailure ? e.message : `threw ${errorText(e)}`;
      console.log(`FAIL ${name}: ${reason.replace(/\s*\n\s*/g, " ")}`);
    }
  }
}

/** Marks checks failed without running them (setup they depend on failed). */
export function failAll(names, reason) {
  for (const name of names) {
    failures++;
    console.log(`FAIL ${name}: ${reason.replace(/\s*\n\s*/g, " ")}`);
  }
}

export function finish() {
  trace(`done: ${passes} passed, ${failures} failed, ${limitations} known client limitations`);
  // Open HTTP streams or timers must not keep the process alive.
  process.exit(failures === 0 ? 0 : 1);
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Polls `fn` until it returns a truthy value; returns it, or throws after `timeoutMs`. */
export async function waitFor(what, fn, { timeoutMs = 15000, intervalMs = 50 } = {}) {
  const deadline = Date.now() + timeoutMs;
  let last;
  for (;;) {
    last = await fn();
    if (last) return last;
    if (Date.now() > deadline) throw new CheckFailure(`${what}: not reached within ${timeoutMs} ms`);
    await sleep(intervalMs);
  }
}

process.on("unhandledRejection", (e) => {
  trace(`unhandled rejection: ${errorText(e)}`);
});
