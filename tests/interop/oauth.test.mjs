// `subtask serve` as an OAuth 2.1 resource server (docs/auth.md) against a
// real authorization server: oidc-provider 9.13.3 (npm), run in this
// process, issuing JWT access tokens (RFC 9068) for the server's resource
// indicator (RFC 8707) with the client credentials grant. Run by
// scripts/oauth.sh (node --test, Node 22, the packages scripts/interop.sh
// installs): SUBTASK_BIN names the server binary.
//
// - A released client (@modelcontextprotocol/sdk 1.32.2 with its
//   ClientCredentialsProvider) follows the MCP authorization flow from the
//   server's 401: reads the resource metadata, the authorization server's
//   metadata, obtains a token, lists the tools, calls a task tool and
//   follows the task to completion.
// - Another subject sees that task as unknown, in tasks/get, tasks/list
//   and the web view's API.
// - An expired token, a token for another audience, one signed by an
//   unknown key, one from another issuer and one without the needed scope
//   are refused with the right status and WWW-Authenticate header.
// - The authorization server rotates its signing key while a task runs: a
//   token signed with the new key is taken without a restart.
// - A static token (--tokens) keeps working beside OAuth.
// - Two instances on one PostgreSQL database (SUBTASK_TEST_PG, which
//   scripts/test.sh's PostgreSQL server sets; the test fails without it):
//   a task created through one with alice's token is read and cancelled
//   through the other with hers, unknown there to bob, and refused to a
//   token without the control scope.
// - The web view signs in through the authorization server in headless
//   Chromium (playwright-core; Debian's chromium, which scripts/ui.sh
//   installs): authorization code with PKCE, oidc-provider's login and
//   consent pages, back to /ui signed in as that subject.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import http from "node:http";
import net from "node:net";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import Provider from "oidc-provider";
import { SignJWT, exportJWK, generateKeyPair } from "jose";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ClientCredentialsProvider } from "@modelcontextprotocol/sdk/client/auth-extensions.js";
import { CallToolResultSchema } from "@modelcontextprotocol/sdk/types.js";
import { chromium } from "playwright-core";

const BIN = process.env.SUBTASK_BIN;
if (!BIN) throw new Error("SUBTASK_BIN is not set (scripts/oauth.sh sets it)");
const ALL = "mcp:tasks mcp:control mcp:observe";
const VERSION = "2026-07-28";

const freePort = () =>
  new Promise((resolve, reject) => {
    const s = net.createServer();
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
    s.on("error", reject);
  });

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function waitFor(what, fn, timeoutMs = 20000) {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}

/// A signing key: the private one (for oidc-provider, or to forge
/// tokens) and its kid.
async function signingKey(kid) {
  const { privateKey } = await generateKeyPair("RS256", { extractable: true });
  return { kid, privateKey, jwk: { ...(await exportJWK(privateKey)), kid, alg: "RS256", use: "sig" } };
}

/// An oidc-provider authorization server on `port` publishing `keys` (the
/// first signs), with clients alice and bob (every scope), reader
/// (mcp:tasks only) and nobody (no scope).
function authorizationServer(port, keys, uiRedirect) {
  const issuer = `http://127.0.0.1:${port}`;
  const client = (id, scope) => ({
    client_id: id,
    client_secret: `${id}-secret`,
    grant_types: ["client_credentials"],
    redirect_uris: [],
    response_types: [],
    token_endpoint_auth_method: "client_secret_basic",
    ...(scope ? { scope } : {}),
  });
  const provider = new Provider(issuer, {
    clients: [
      client("alice", ALL),
      client("bob", ALL),
      client("reader", "mcp:tasks"),
      client("nobody", ""),
      // The web view: a public client, authorization code with PKCE.
      {
        client_id: "webview",
        token_endpoint_auth_method: "none",
        grant_types: ["authorization_code"],
        response_types: ["code"],
        redirect_uris: [uiRedirect ?? "http://127.0.0.1:1/ui/callback"],
        scope: ALL,
      },
    ],
    jwks: { keys: keys.map((k) => k.jwk) },
    scopes: ALL.split(" "),
    features: {
      devInteractions: { enabled: true },
      clientCredentials: { enabled: true },
      resourceIndicators: {
        enabled: true,
        defaultResource: () => undefined,
        useGrantedResource: () => true,
        getResourceServerInfo: (_ctx, indicator) => ({
          scope: ALL,
          audience: indicator,
          accessTokenTTL: 300,
          accessTokenFormat: "jwt",
          jwt: { sign: { alg: "RS256" } },
        }),
      },
    },
  });
  const server = http.createServer(provider.callback());
  return new Promise((resolve) =>
    server.listen(port, "127.0.0.1", () =>
      resolve({ issuer, close: () => new Promise((r) => { server.closeAllConnections(); server.close(r); }) }),
    ),
  );
}

let as; // the authorization server
let asPort;
let k1;
let other; // another, untrusted authorization server
let proc;
let mcp; // the server's /mcp URL
let base;
let dir;
const log = [];

/// A token from the authorization server at `issuer` for `client`, for
/// `resource`, asking for `scope`.
async function token(client, { issuer = as.issuer, resource = mcp, scope = ALL } = {}) {
  const body = new URLSearchParams({ grant_type: "client_credentials", resource });
  if (scope) body.set("scope", scope);
  const r = await fetch(`${issuer}/token`, {
    method: "POST",
    headers: {
      authorization: `Basic ${Buffer.from(`${client}:${client}-secret`).toString("base64")}`,
      "content-type": "application/x-www-form-urlencoded",
    },
    body,
  });
  const j = await r.json();
  assert.ok(j.access_token, `a token for ${client}: ${JSON.stringify(j)}`);
  return j.access_token;
}

/// A POST of one 2026-07-28 request with `bearer`: status, headers, body.
async function rpc(bearer, method, params = {}, extraHeaders = {}, url = mcp) {
  const headers = {
    "content-type": "application/json",
    accept: "application/json, text/event-stream",
    "mcp-protocol-version": VERSION,
    "mcp-method": method,
    ...extraHeaders,
  };
  if (bearer) headers.authorization = `Bearer ${bearer}`;
  if (params.taskId) headers["mcp-name"] = params.taskId;
  if (method === "tools/call") headers["mcp-name"] = params.name;
  const r = await fetch(url, {
    method: "POST",
    headers,
    body: JSON.stringify({
      jsonrpc: "2.0",
      id: 1,
      method,
      params: {
        ...params,
        _meta: {
          "io.modelcontextprotocol/protocolVersion": VERSION,
          "io.modelcontextprotocol/clientCapabilities": { extensions: { "io.modelcontextprotocol/tasks": { pause: true } } },
        },
      },
    }),
  });
  const text = await r.text();
  let body;
  try {
    body = JSON.parse(text);
  } catch {
    body = text;
  }
  return { status: r.status, www: r.headers.get("www-authenticate"), body };
}

/// `tasks/list` (a method of the 2025-11-25 tasks wire) with `bearer`: the body.
async function legacyList(bearer) {
  const r = await fetch(mcp, {
    method: "POST",
    headers: {
      "content-type": "application/json",
      accept: "application/json, text/event-stream",
      "mcp-protocol-version": "2025-11-25",
      authorization: `Bearer ${bearer}`,
    },
    body: JSON.stringify({ jsonrpc: "2.0", id: 2, method: "tasks/list", params: {} }),
  });
  const text = await r.text();
  assert.equal(r.status, 200, text);
  assert.match(text, /"tasks"/, text);
  return text;
}

before(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), "subtask-oauth-"));
  const port = await freePort();
  mcp = `http://127.0.0.1:${port}/mcp`;
  base = `http://127.0.0.1:${port}`;
  asPort = await freePort();
  k1 = await signingKey("k1");
  as = await authorizationServer(asPort, [k1], `${base}/ui/callback`);
  other = await authorizationServer(await freePort(), [await signingKey("o1")]);
  const tokens = path.join(dir, "tokens");
  fs.writeFileSync(tokens, "static-secret carol\n");
  proc = spawn(
    BIN,
    ["serve", "--memory", "--listen", `127.0.0.1:${port}`, "--tokens", tokens,
     "--oauth-issuer", as.issuer, "--oauth-resource", mcp, "--oauth-ui-client", "webview"],
    { stdio: ["ignore", "pipe", "pipe"] },
  );
  proc.stdout.on("data", (d) => log.push(String(d)));
  proc.stderr.on("data", (d) => log.push(String(d)));
  await waitFor("the server to listen", async () => {
    if (proc.exitCode !== null) throw new Error(`subtask serve exited: ${log.join("")}`);
    try {
      return (await fetch(`${base}/.well-known/oauth-protected-resource/mcp`)).ok;
    } catch {
      return false;
    }
  });
});

after(async () => {
  if (proc && proc.exitCode === null) proc.kill("SIGKILL");
  await as?.close();
  await other?.close();
  if (process.exitCode) console.log(`--- subtask serve's log ---\n${log.join("").slice(-6000)}`);
});

test("the resource metadata names the authorization server, the scopes and the resource", async () => {
  for (const p of ["/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"]) {
    const r = await fetch(`${base}${p}`);
    assert.equal(r.status, 200);
    const m = await r.json();
    assert.equal(m.resource, mcp);
    assert.deepEqual(m.authorization_servers, [as.issuer]);
    assert.deepEqual(m.scopes_supported, ALL.split(" "));
  }
  const r = await rpc(undefined, "tools/list");
  assert.equal(r.status, 401);
  assert.equal(r.www, `Bearer resource_metadata="${base}/.well-known/oauth-protected-resource/mcp", scope="mcp:tasks"`);
});

test("a released client follows the flow from the 401, calls a task tool and follows the task to completion", async () => {
  const provider = new ClientCredentialsProvider({
    clientId: "alice",
    clientSecret: "alice-secret",
    expectedIssuer: as.issuer,
    scope: ALL,
  });
  const client = new Client({ name: "subtask-oauth", version: "1.32.2" }, { capabilities: {} });
  await client.connect(new StreamableHTTPClientTransport(new URL(mcp), { authProvider: provider }));
  try {
    assert.ok(provider.tokens()?.access_token, "the provider obtained a token");
    const tools = await client.listTools();
    assert.ok(tools.tools.some((t) => t.name === "fanout"), "fanout is listed");
    const messages = [];
    for await (const m of client.experimental.tasks.callToolStream(
      { name: "fanout", arguments: { width: 2, depth: 1, stepMs: 10 } },
      CallToolResultSchema,
      { task: { ttl: 60000 }, timeout: 60000 },
    )) {
      messages.push(m);
    }
    const created = messages.find((m) => m.type === "taskCreated");
    assert.ok(created, `a task was created: ${JSON.stringify(messages)}`);
    assert.equal(messages.at(-1)?.type, "result", JSON.stringify(messages.at(-1)));
    // The task is alice's: her token reads it; bob's and a static token's do not.
    const id = created.task.taskId;
    const mine = await rpc(await token("alice"), "tasks/get", { taskId: id });
    assert.equal(mine.body.result?.status, "completed", JSON.stringify(mine.body));
    const own = await legacyList(await token("alice"));
    assert.ok(own.includes(id), `alice lists her task: ${own}`);
    for (const bearer of [await token("bob"), "static-secret"]) {
      const theirs = await rpc(bearer, "tasks/get", { taskId: id });
      assert.equal(theirs.status, 200);
      assert.ok(theirs.body.error, `another subject must not see the task: ${JSON.stringify(theirs.body)}`);
      assert.match(theirs.body.error.message, /unknown task|not found/i);
      const listed = await legacyList(bearer);
      assert.ok(!listed.includes(id), `nor list it: ${listed}`);
      const ui = await fetch(`${base}/ui/api/tasks/${id}`, { headers: { authorization: `Bearer ${bearer}` } });
      const seen = await ui.json();
      assert.ok(seen.error && !seen.result, `nor open it in the web view: ${JSON.stringify(seen)}`);
      assert.match(seen.error.message, /unknown task|not found/i);
    }
  } finally {
    await client.close();
  }
});

test("bad tokens are refused with the right status and header", async () => {
  const challenge = (error) =>
    new RegExp(`^Bearer resource_metadata="${base}/\\.well-known/oauth-protected-resource/mcp", scope="mcp:tasks", error="${error}", error_description="[^"]+"$`);
  const now = Math.floor(Date.now() / 1000);
  const forge = (key, claims) =>
    new SignJWT({ scope: ALL, ...claims })
      .setProtectedHeader({ alg: "RS256", kid: key.kid, typ: "at+jwt" })
      .sign(key.privateKey);
  const claims = { iss: as.issuer, sub: "alice", aud: mcp, iat: now - 10, exp: now + 300 };
  // The server's own key forges a good one: the checks below differ in one thing each.
  const good = await rpc(await forge(k1, claims), "tools/list");
  assert.equal(good.status, 200, JSON.stringify(good));
  const cases = {
    expired: await forge(k1, { ...claims, iat: now - 900, exp: now - 600 }),
    "another audience": await token("alice", { resource: "http://127.0.0.1:1/mcp" }),
    "an unknown key": await forge(await signingKey("rogue"), claims),
    "another issuer": await token("alice", { issuer: other.issuer }),
    "not yet valid": await forge(k1, { ...claims, nbf: now + 600 }),
    "no subject": await forge(k1, { ...claims, sub: undefined }),
    garbage: "not.a.jwt",
  };
  for (const [what, bearer] of Object.entries(cases)) {
    const r = await rpc(bearer, "tools/list");
    assert.equal(r.status, 401, `${what}: ${JSON.stringify(r)}`);
    assert.match(r.www ?? "", challenge("invalid_token"), `${what}: ${r.www}`);
  }
  // Scopes: reader may call and read, not cancel; nobody may not even call.
  const reader = await token("reader", { scope: "mcp:tasks" });
  const call = await rpc(reader, "tools/call", { name: "fanout", arguments: { width: 1, depth: 1, stepMs: 5000 }, task: { ttl: 60000 } });
  assert.equal(call.status, 200, JSON.stringify(call));
  const id = call.body.result?.taskId ?? call.body.result?.task?.taskId;
  assert.ok(id, JSON.stringify(call.body));
  for (const method of ["tasks/cancel", "tasks/pause"]) {
    const r = await rpc(reader, method, { taskId: id });
    assert.equal(r.status, 403, `${method}: ${JSON.stringify(r)}`);
    assert.match(r.www, /^Bearer error="insufficient_scope", scope="mcp:control", resource_metadata="[^"]+"/);
  }
  const ui = await fetch(`${base}/ui/api/me`, { headers: { authorization: `Bearer ${reader}` } });
  assert.equal(ui.status, 403, "the web view needs mcp:observe");
  assert.match(ui.headers.get("www-authenticate"), /insufficient_scope", scope="mcp:observe"/);
  const nobody = await token("nobody", { scope: "" });
  const nobodyScope = JSON.parse(Buffer.from(nobody.split(".")[1], "base64url")).scope;
  assert.ok(!nobodyScope, `nobody's token carries no scope: ${nobodyScope}`);
  const none = await rpc(nobody, "tools/list");
  assert.equal(none.status, 403, JSON.stringify(none));
  assert.match(none.www, /insufficient_scope", scope="mcp:tasks"/);
  // The static token has every grant.
  const carol = await rpc("static-secret", "tasks/cancel", { taskId: id });
  assert.equal(carol.status, 200, JSON.stringify(carol));
  assert.ok(carol.body.error, "carol cannot cancel reader's task: it is unknown to her");
  const cancel = await rpc(await token("alice"), "tasks/cancel", { taskId: id });
  assert.ok(cancel.body.error, "nor can alice");
});

test("a key rotation at the authorization server needs no restart", async () => {
  const alice = await token("alice");
  const call = await rpc(alice, "tools/call", { name: "fanout", arguments: { width: 2, depth: 1, stepMs: 4000 }, task: { ttl: 60000 } });
  const id = call.body.result?.taskId ?? call.body.result?.task?.taskId;
  assert.ok(id, JSON.stringify(call.body));
  // The server fetches keys again for an unknown key id at most every 10 s.
  await sleep(10_500);
  await as.close();
  const k2 = await signingKey("k2");
  as = await authorizationServer(asPort, [k2, k1], `${base}/ui/callback`);
  const fresh = await token("alice");
  assert.equal(JSON.parse(Buffer.from(fresh.split(".")[0], "base64url")).kid, "k2", "signed with the new key");
  const r = await rpc(fresh, "tasks/get", { taskId: id });
  assert.equal(r.status, 200, JSON.stringify(r));
  assert.ok(["working", "completed"].includes(r.body.result?.status), JSON.stringify(r.body));
  const old = await rpc(alice, "tasks/get", { taskId: id });
  assert.equal(old.status, 200, "a token of the old key, still published, still validates");
  const done = await waitFor("the task to complete", async () => {
    const g = await rpc(fresh, "tasks/get", { taskId: id });
    return g.body.result?.status === "completed" && g;
  });
  assert.equal(done.body.result.status, "completed");
});

test("the web view signs in through the authorization server (authorization code with PKCE)", async () => {
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
      "--disable-component-update", "--disable-sync"],
  });
  const shots = process.env.SHOTS;
  try {
    const page = await browser.newPage();
    await page.goto(`${base}/ui/`);
    await page.waitForSelector("#oauth-signin", { state: "visible", timeout: 15000 });
    if (shots) await page.screenshot({ path: path.join(shots, "oauth-1-signin.png") });
    await page.click("#oauth-signin");
    // oidc-provider's login page (its development interactions: any login).
    await page.waitForURL((u) => u.toString().startsWith(as.issuer), { timeout: 15000 });
    await page.fill('input[name="login"]', "dana");
    await page.fill('input[name="password"]', "any");
    if (shots) await page.screenshot({ path: path.join(shots, "oauth-2-login.png") });
    await page.click('button[type="submit"]');
    // Its consent page.
    await page.waitForSelector('button[type="submit"]', { timeout: 15000 });
    if (shots) await page.screenshot({ path: path.join(shots, "oauth-3-consent.png") });
    await page.click('button[type="submit"]');
    await page.waitForURL((u) => u.toString().startsWith(`${base}/ui/`), { timeout: 15000 });
    await page.waitForFunction(() => document.getElementById("who")?.textContent?.includes("signed in as"), null, {
      timeout: 15000,
    });
    const who = await page.textContent("#who");
    assert.equal(who, `signed in as ${as.issuer}#dana`);
    assert.ok(!page.url().includes("token="), `the token left the address bar: ${page.url()}`);
    // The page's token is dana's access token for this resource, with the scopes asked for.
    const tok = await page.evaluate(() => sessionStorage.getItem("subtask.token"));
    const claims = JSON.parse(Buffer.from(tok.split(".")[1], "base64url"));
    assert.equal(claims.sub, "dana");
    assert.equal(claims.aud, mcp);
    assert.deepEqual(claims.scope.split(" ").sort(), ALL.split(" ").sort());
    // A tree of dana's shows up in her list; it is hers alone.
    const call = await rpc(tok, "tools/call", { name: "fanout", arguments: { width: 2, depth: 1 }, task: { ttl: 60000 } });
    const id = call.body.result?.taskId;
    assert.ok(id, JSON.stringify(call.body));
    const listed = await waitFor("dana's tree in her list", async () => (await page.content()).includes(id.slice(0, 8)));
    assert.ok(listed);
    if (shots) await page.screenshot({ path: path.join(shots, "oauth-4-signed-in.png") });
    const alice = await rpc(await token("alice"), "tasks/get", { taskId: id });
    assert.ok(alice.body.error, "alice does not see dana's task");
  } finally {
    await browser.close();
  }
});

test("two instances on PostgreSQL: a task is its subject's on both", async () => {
  const pg = process.env.SUBTASK_TEST_PG;
  const bindir = process.env.SUBTASK_TEST_PG_BIN;
  assert.ok(pg && bindir, "SUBTASK_TEST_PG and SUBTASK_TEST_PG_BIN must be set (scripts/test.sh starts PostgreSQL; scripts/pg.sh)");
  const db = `oauth_${process.pid}_${Date.now()}`;
  const psql = (sql) => {
    const r = spawnSync(path.join(bindir, "psql"), [pg, "-v", "ON_ERROR_STOP=1", "-q", "-c", sql], { encoding: "utf8" });
    assert.equal(r.status, 0, r.stderr);
  };
  psql(`CREATE DATABASE ${db}`);
  const url = pg.replace(/\/[^/]*$/, `/${db}`);
  // One resource URI for the cluster (behind a load balancer, as users run it).
  const resource = "http://cluster.invalid/mcp";
  const instances = [];
  try {
    for (const name of ["one", "two"]) {
      const port = await freePort();
      const out = [];
      const p = spawn(BIN, ["serve", "--db", url, "--lease", "2", "--listen", `127.0.0.1:${port}`,
        "--oauth-issuer", as.issuer, "--oauth-resource", resource], { stdio: ["ignore", "pipe", "pipe"] });
      p.stdout.on("data", (d) => out.push(String(d)));
      p.stderr.on("data", (d) => out.push(String(d)));
      instances.push({ p, out, url: `http://127.0.0.1:${port}/mcp` });
      await waitFor(`instance ${name} to listen`, async () => {
        if (p.exitCode !== null) throw new Error(`instance ${name} exited: ${out.join("")}`);
        try {
          return (await fetch(`http://127.0.0.1:${port}/.well-known/oauth-protected-resource/mcp`)).ok;
        } catch {
          return false;
        }
      });
    }
    const [one, two] = instances;
    const alice = await token("alice", { resource });
    const call = await rpc(alice, "tools/call", { name: "fanout", arguments: { width: 1, depth: 1, stepMs: 60000 }, task: { ttl: 60000 } }, {}, one.url);
    const id = call.body.result?.taskId;
    assert.ok(id, JSON.stringify(call.body));
    const seen = await rpc(alice, "tasks/get", { taskId: id }, {}, two.url);
    assert.equal(seen.body.result?.status, "working", `alice reads her task through the other instance: ${JSON.stringify(seen.body)}`);
    const bob = await rpc(await token("bob", { resource }), "tasks/get", { taskId: id }, {}, two.url);
    assert.ok(bob.body.error, `bob does not: ${JSON.stringify(bob.body)}`);
    const reader = await rpc(await token("reader", { resource, scope: "mcp:tasks" }), "tasks/cancel", { taskId: id }, {}, two.url);
    assert.equal(reader.status, 403, JSON.stringify(reader));
    const cancel = await rpc(alice, "tasks/cancel", { taskId: id }, {}, two.url);
    assert.ok(!cancel.body.error, `alice cancels it through the other instance: ${JSON.stringify(cancel.body)}`);
    const done = await waitFor("the task to be cancelled", async () => {
      const g = await rpc(alice, "tasks/get", { taskId: id }, {}, one.url);
      return g.body.result?.status === "cancelled" && g;
    });
    assert.equal(done.body.result.status, "cancelled");
  } catch (e) {
    for (const i of instances) console.log(`--- instance log ---\n${i.out.join("").slice(-3000)}`);
    throw e;
  } finally {
    for (const i of instances) if (i.p.exitCode === null) i.p.kill("SIGKILL");
    await sleep(200);
    try {
      psql(`DROP DATABASE IF EXISTS ${db} WITH (FORCE)`);
    } catch {}
  }
});
