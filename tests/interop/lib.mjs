// Shared helpers for the interop clients (ext_tasks.mjs, sdk1.mjs).
//
// Output contract (read by scripts/interop.sh): one line per check on stdout,
// `ok <check>`, `FAIL <check>: <reason>`, or `xfail <check>: <reason>` for a
// known limitation of the client whose server side was verified (see
// checkKnownLimitation); the process exits non-zero when a check failed. Trace lines (INTEROP_TRACE=1) start with `trace ` and are
// ignored by the runner's counting.
//
// Nothing here talks to the server by itself: `observingFetch` wraps the global
// fetch that a client's transport is given through its public `fetch` option.
// It only reads copies of what passes through (request body, response body as
// it streams) and hands the transport the same bytes, status and headers.

export const SERVER_URL = process.env.SUBTASK_URL;
export const TRACE = process.env.INTEROP_TRACE === "1";
const CHECK_TIMEOUT_MS = Number(process.env.INTEROP_CHECK_TIMEOUT_MS ?? 30000);

if (!SERVER_URL) {
  console.log("FAIL setup: SUBTASK_URL is not set (run through scripts/interop.sh)");
  process.exit(2);
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
