// The web view in a real browser: headless Chromium driven by Playwright
// against `subtask serve --tokens` (scripts/ui.sh starts both and passes
// SUBTASK_BASE, TOKEN_A (alice), TOKEN_B (bob), SHOTS, CHROMIUM).
//
// Prints `ok <check>` or `FAIL <check>: <reason>` per check and exits 1 on
// the first failure. Screenshots go to $SHOTS.
import { chromium } from 'playwright-core';

const BASE = process.env.SUBTASK_BASE;
const ALICE = process.env.TOKEN_A;
const BOB = process.env.TOKEN_B;
const SHOTS = process.env.SHOTS;
const META = {
  'io.modelcontextprotocol/protocolVersion': '2026-07-28',
  'io.modelcontextprotocol/clientCapabilities': { extensions: { 'io.modelcontextprotocol/tasks': { steer: true, pause: true } } },
};

let passed = 0;
function ok(check) {
  passed += 1;
  console.log('ok ' + check);
}
function fail(check, reason) {
  console.log('FAIL ' + check + ': ' + reason);
  throw Object.assign(new Error(check), { reported: true });
}
function expect(cond, check, reason) {
  if (!cond) fail(check, reason);
  ok(check);
}

let nextId = 1;
async function mcp(token, method, params, name) {
  const res = await fetch(BASE + '/mcp', {
    method: 'POST',
    headers: {
      'Content-Type': 'application/json',
      Accept: 'application/json, text/event-stream',
      Authorization: 'Bearer ' + token,
      'MCP-Protocol-Version': '2026-07-28',
      'Mcp-Method': method,
      ...(name ? { 'Mcp-Name': name } : {}),
    },
    body: JSON.stringify({ jsonrpc: '2.0', id: nextId++, method, params: { ...params, _meta: META } }),
  });
  const body = await res.json();
  if (body.error) throw new Error(method + ': ' + JSON.stringify(body.error));
  return body.result;
}

async function startFanout(token, args) {
  const r = await mcp(token, 'tools/call', { name: 'fanout', arguments: args }, 'fanout');
  if (r.resultType !== 'task' || !r.taskId) throw new Error('fanout did not start a task: ' + JSON.stringify(r));
  return r.taskId;
}

/** The page's counts of the open tree by status (from its header). */
async function counts(page) {
  const raw = await page.getAttribute('#tree', 'data-counts');
  return raw ? JSON.parse(raw) : {};
}

async function waitCounts(page, want, check, timeout = 30000) {
  const deadline = Date.now() + timeout;
  let seen = {};
  while (Date.now() < deadline) {
    seen = await counts(page);
    if (Object.entries(want).every(([s, n]) => (seen[s] || 0) === n)) {
      ok(check);
      return seen;
    }
    await page.waitForTimeout(100);
  }
  fail(check, 'the page shows ' + JSON.stringify(seen) + ', expected ' + JSON.stringify(want));
}

async function shot(page, name) {
  await page.screenshot({ path: `${SHOTS}/${name}.png` });
}

async function signIn(page, token, who) {
  await page.goto(BASE + '/ui');
  await page.waitForSelector('#login:not([hidden])', { timeout: 10000 });
  await page.fill('#token', token);
  await page.click('#login-form button[type=submit]');
  await page.waitForFunction((w) => document.getElementById('who').textContent.includes(w), who, { timeout: 10000 });
}

async function main() {
  // Without a token the API refuses; a foreign Origin is refused before that.
  const anon = await fetch(BASE + '/ui/api/trees');
  expect(anon.status === 401, 'api without a token is 401', 'status ' + anon.status);
  const evil = await fetch(BASE + '/ui', { headers: { Origin: 'http://evil.example' } });
  expect(evil.status === 403, 'a foreign Origin is refused', 'status ' + evil.status);

  // A fanout tree of 13 tasks whose nodes run long enough to be driven.
  const root = await startFanout(ALICE, { width: 3, depth: 2, steps: 1000, stepMs: 100 });

  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  const errors = [];
  try {
    const context = await browser.newContext({ viewport: { width: 1440, height: 900 } });
    const page = await context.newPage();
    page.on('pageerror', (e) => errors.push(String(e)));
    // Script errors only: a refused request (401 before signing in, 404 for
    // another principal's tree) is logged by the browser and expected here.
    page.on('console', (m) => {
      if (m.type() === 'error' && !m.text().startsWith('Failed to load resource')) errors.push(m.text());
    });

    await signIn(page, ALICE, 'alice');
    ok('alice signs in with her token');
    await page.waitForSelector(`#trees li[data-root="${root}"]`, { timeout: 10000 });
    ok('the list shows the fanout tree');
    const item = await page.textContent(`#trees li[data-root="${root}"]`);
    expect(item.includes('fanout') && item.includes('13 tasks'), 'the list item names the tool and counts the tasks', JSON.stringify(item));
    await shot(page, '1-list');

    await page.click(`#trees li[data-root="${root}"]`);
    await page.waitForSelector(`#tree[data-root="${root}"]`, { timeout: 10000 });
    await page.waitForSelector('#t-total[data-count="13"]', { timeout: 10000 });
    ok('the tree view shows all 13 tasks');
    const rows = await page.$$eval('#window .row', (els) => els.map((e) => e.dataset.status));
    expect(rows.length === 13 && rows.every((s) => s === 'working'), 'every row is drawn, working', JSON.stringify(rows));
    // Live: the root's message moves on (a step every 50 ms) without a reload.
    const rootRow = `#window .row[data-id="${root}"] .c-msg`;
    const before = await page.textContent(rootRow);
    await page.waitForFunction(([sel, b]) => document.querySelector(sel).textContent !== b, [rootRow, before], { timeout: 10000 });
    ok('the tree updates live');
    await shot(page, '2-tree-live');

    // Pause from the page: every task turns paused, and the server agrees.
    await page.click('#act-pause');
    await waitCounts(page, { paused: 13, working: 0 }, 'pause from the page: every task turns paused');
    const paused = await page.$$eval('#window .row', (els) => els.map((e) => e.dataset.status));
    expect(paused.every((s) => s === 'paused'), 'every row is drawn paused', JSON.stringify(paused));
    const got = await mcp(ALICE, 'tasks/get', { taskId: root }, root);
    expect(got.status === 'paused', 'the server says the root is paused', got.status);
    await shot(page, '3-paused');

    // Resume: every task works again.
    await page.click('#act-resume');
    await waitCounts(page, { working: 13, paused: 0 }, 'resume from the page: every task works again');

    // Steer the root from the page.
    await page.fill('#steer-text', 'focus on the second branch');
    await page.click('#act-steer');
    await page.waitForFunction(() => document.getElementById('act-result').textContent === 'steer: done', null, { timeout: 10000 });
    ok('steer from the page is accepted');

    // A task's details on demand.
    const child = (await mcp(ALICE, 'tasks/get', { taskId: root }, root)).childTaskIds[1];
    await page.click(`#window .row[data-id="${child}"]`);
    await page.waitForFunction((c) => document.getElementById('d-id').textContent === c && document.getElementById('d-body').textContent.includes(c), child, { timeout: 10000 });
    ok('a task\'s details open on click');
    await shot(page, '4-detail');

    // Cancel the selected child, then the root.
    await page.click('#act-cancel');
    await page.waitForFunction((c) => document.querySelector(`#window .row[data-id="${c}"]`)?.dataset.status === 'cancelled', child, { timeout: 10000 });
    ok('cancel of a selected subtask from the page');
    await page.click(`#window .row[data-id="${root}"]`);
    await page.click('#act-cancel');
    await page.waitForSelector('#tree[data-ended="true"]', { timeout: 15000 });
    await waitCounts(page, { cancelled: 13 }, 'cancel from the page: every task ends cancelled');
    await shot(page, '5-cancelled');

    // Bob sees none of it.
    await page.click('#signout');
    await signIn(page, BOB, 'bob');
    await page.waitForFunction(() => document.getElementById('list-head').textContent.includes('trees shown'), null, { timeout: 10000 });
    const bobs = await page.$$eval('#trees li', (els) => els.map((e) => e.dataset.root));
    expect(!bobs.includes(root), 'a second principal does not see the tree in the list', JSON.stringify(bobs));
    await page.goto(`${BASE}/ui#/tree/${root}`);
    await page.waitForSelector('#missing:not([hidden])', { timeout: 10000 });
    ok('a second principal cannot open the tree');
    const direct = await fetch(`${BASE}/ui/api/trees/${root}`, { headers: { Authorization: 'Bearer ' + BOB } });
    expect(direct.status === 404, 'nor read it from the API', 'status ' + direct.status);
    await shot(page, '6-bob');

    // A tree of 9,724 tasks: every task is known to the page, only the rows
    // in view are in the DOM, and the end of the tree is reachable.
    const big = await startFanout(ALICE, { width: 21, depth: 3, steps: 600, stepMs: 1000 });
    await page.click('#signout');
    await signIn(page, ALICE, 'alice');
    const t0 = Date.now();
    await page.goto(`${BASE}/ui#/tree/${big}`);
    await page.waitForSelector('#t-total[data-count="9724"]', { timeout: 60000 });
    console.log(`# 9724-task tree drawn ${Date.now() - t0} ms after navigation`);
    ok('a 9,724-task tree loads');
    const drawn = await page.$$eval('#window .row', (els) => els.length);
    expect(drawn > 0 && drawn < 120, 'only the visible rows are in the DOM', drawn + ' rows');
    // Responsiveness while it updates live: the longest main-thread task
    // over 3 s of scrolling (printed; the DOM bound above is the check).
    const longest = await page.evaluate(async () => {
      let worst = 0;
      const obs = new PerformanceObserver((l) => { for (const e of l.getEntries()) worst = Math.max(worst, e.duration); });
      obs.observe({ type: 'longtask', buffered: false });
      const box = document.getElementById('rows');
      for (let i = 0; i < 30; i++) {
        box.scrollTop = (box.scrollHeight * i) / 30;
        await new Promise((r) => setTimeout(r, 100));
      }
      obs.disconnect();
      return worst;
    });
    console.log(`# longest main-thread task while scrolling the 9724-task tree: ${Math.round(longest)} ms`);
    // Scrolled to the end, the last row drawn is the last task in result
    // order: the 21st child of the 21st child of the root's 21st child.
    const lastId = await (async () => {
      let id = big;
      for (let level = 0; level < 3; level++) id = (await mcp(ALICE, 'tasks/get', { taskId: id }, id)).childTaskIds[20];
      return id;
    })();
    await page.$eval('#rows', (b) => { b.scrollTop = b.scrollHeight; });
    const lastDrawn = () => page.evaluate(() => {
      const rows = [...document.querySelectorAll('#window .row')];
      rows.sort((a, b) => parseFloat(a.style.top) - parseFloat(b.style.top));
      return rows.length ? rows[rows.length - 1].dataset.id : null;
    });
    const until = Date.now() + 5000;
    let last = await lastDrawn();
    while (last !== lastId && Date.now() < until) {
      await page.waitForTimeout(50);
      last = await lastDrawn();
    }
    expect(last === lastId, 'scrolled to the end, the last task in result order is drawn', `${last} != ${lastId}`);
    await shot(page, '7-big-tree');
    await mcp(ALICE, 'tasks/cancel', { taskId: big }, big);
    await page.waitForSelector('#tree[data-ended="true"]', { timeout: 60000 });
    ok('the big tree ends cancelled on the page');

    expect(errors.length === 0, 'no script errors on the page', JSON.stringify(errors));
  } finally {
    await browser.close();
  }
  console.log(`ui: ${passed} checks passed`);
}

main().catch((e) => {
  if (!e.reported) console.log('FAIL ' + (e.stack || e));
  process.exit(1);
});
