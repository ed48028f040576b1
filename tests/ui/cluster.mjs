// The web view on a cluster in a real browser: headless Chromium driven by
// Playwright against two `subtask serve --db postgres://…` instances on one
// database (scripts/ui.sh starts them and passes BASE_A, BASE_B, TOKEN_A
// (alice), TOKEN_B (bob), SHOTS, CHROMIUM).
//
// A tree is created on instance A and opened in the page served by
// instance B: B lists it, shows its tasks live, and pauses, resumes, steers
// and cancels it from the page, each checked on A with `tasks/get`. Then
// the list pages to the oldest tree with "Older trees" (trees held by
// both instances, each seen once).
//
// Prints `ok <check>` or `FAIL <check>: <reason>` per check and exits 1 on
// the first failure. Screenshots go to $SHOTS (cluster-*.png).
import { chromium } from 'playwright-core';

const A = process.env.BASE_A;
const B = process.env.BASE_B;
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
async function mcp(base, token, method, params, name) {
  const res = await fetch(base + '/mcp', {
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

async function startFanout(base, token, args) {
  const r = await mcp(base, token, 'tools/call', { name: 'fanout', arguments: args }, 'fanout');
  if (r.resultType !== 'task' || !r.taskId) throw new Error('fanout did not start a task: ' + JSON.stringify(r));
  return r.taskId;
}

/** Every task of the tree under `root`, as instance `base` answers `tasks/get`. */
async function treeOn(base, root) {
  const out = [];
  const queue = [root];
  while (queue.length) {
    const id = queue.shift();
    const t = await mcp(base, ALICE, 'tasks/get', { taskId: id }, id);
    out.push(t);
    for (const c of t.childTaskIds || []) queue.push(c);
  }
  return out;
}

/** Waits until every task of `root` has `status` on instance `base`. */
async function untilOn(base, root, status, check, timeout = 30000) {
  const deadline = Date.now() + timeout;
  let seen = [];
  while (Date.now() < deadline) {
    seen = (await treeOn(base, root)).map((t) => t.status);
    if (seen.length === 13 && seen.every((s) => s === status)) {
      ok(check);
      return;
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  fail(check, 'instance A says ' + JSON.stringify(seen));
}

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

async function signIn(page, base, token, who) {
  await page.goto(base + '/ui');
  await page.waitForSelector('#login:not([hidden])', { timeout: 10000 });
  await page.fill('#token', token);
  await page.click('#login-form button[type=submit]');
  await page.waitForFunction((w) => document.getElementById('who').textContent.includes(w), who, { timeout: 10000 });
}

/** The roots listed on the page now. */
function listed(page) {
  return page.$$eval('#trees li', (els) => els.map((e) => e.dataset.root));
}

async function main() {
  expect(A && B && A !== B, 'two instances', `BASE_A=${A} BASE_B=${B}`);
  // 60 quick trees, created in turn on A and B, then the tree to drive, on A.
  const quick = [];
  for (let i = 0; i < 60; i++) {
    quick.push(await startFanout(i % 2 ? B : A, ALICE, { width: 1, depth: 0, steps: 0 }));
  }
  const root = await startFanout(A, ALICE, { width: 3, depth: 2, steps: 1000, stepMs: 100 });
  const onA = await mcp(A, ALICE, 'tasks/get', { taskId: root }, root);
  expect(onA.status === 'working', 'instance A runs the tree', onA.status);

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
    page.on('console', (m) => {
      if (m.type() === 'error' && !m.text().startsWith('Failed to load resource')) errors.push(m.text());
    });

    // The page served by B.
    await signIn(page, B, ALICE, 'alice');
    ok('alice signs in on instance B');
    await page.waitForSelector(`#trees li[data-root="${root}"]`, { timeout: 10000 });
    ok('B lists the tree held by A');
    const item = await page.textContent(`#trees li[data-root="${root}"]`);
    expect(item.includes('fanout') && item.includes('13 tasks'), 'the list item on B names the tool and counts the tasks', JSON.stringify(item));
    await shot(page, 'cluster-1-list-on-b');

    await page.click(`#trees li[data-root="${root}"]`);
    await page.waitForSelector(`#tree[data-root="${root}"]`, { timeout: 10000 });
    await page.waitForSelector('#t-total[data-count="13"]', { timeout: 10000 });
    ok('B shows all 13 tasks of the tree held by A');
    const rows = await page.$$eval('#window .row', (els) => els.map((e) => e.dataset.status));
    expect(rows.length === 13 && rows.every((s) => s === 'working'), 'every row is drawn, working', JSON.stringify(rows));
    const rootRow = `#window .row[data-id="${root}"] .c-msg`;
    const before = await page.textContent(rootRow);
    await page.waitForFunction(([sel, b]) => document.querySelector(sel).textContent !== b, [rootRow, before], { timeout: 15000 });
    ok('the tree held by A updates live on B');
    await shot(page, 'cluster-2-tree-on-b');

    // Pause from B's page: A, which holds the tree, pauses every task.
    await page.click('#act-pause');
    await page.waitForFunction(() => document.getElementById('act-result').textContent === 'pause: done', null, { timeout: 15000 });
    ok('pause from the page on B is accepted');
    await untilOn(A, root, 'paused', 'instance A says every task is paused');
    const got = await mcp(A, ALICE, 'tasks/get', { taskId: root }, root);
    expect(got.status === 'paused', 'tasks/get on A: the root is paused', got.status);
    await waitCounts(page, { paused: 13, working: 0 }, 'the page on B shows every task paused');
    await shot(page, 'cluster-3-paused-on-b');

    // Resume and steer from B's page.
    await page.click('#act-resume');
    await waitCounts(page, { working: 13, paused: 0 }, 'resume from the page on B: every task works again');
    await untilOn(A, root, 'working', 'instance A says every task works again');
    // The timeline of a tree held by A, drawn on B from the stored rows:
    // timelines are not stored, so each bar is one 'unrecorded' stretch
    // from the task's creation to now (docs/operations.md), in result order.
    await page.click('#v-timeline');
    await page.waitForSelector('#tree[data-view="timeline"]', { timeout: 5000 });
    const order = [];
    const walk = async (id) => {
      for (const c of (await mcp(A, ALICE, 'tasks/get', { taskId: id }, id)).childTaskIds || []) await walk(c);
      order.push(id);
    };
    await walk(root);
    const tlBars = () => page.evaluate(() => [...document.querySelectorAll('#window .row.tl-row')]
      .sort((a, b) => parseFloat(a.style.top) - parseFloat(b.style.top))
      .map((r) => ({ id: r.dataset.id, phases: r.querySelector('.tl-bar').dataset.phases, end: Number(r.querySelector('.tl-bar').dataset.end) })));
    const tl0 = await tlBars();
    expect(JSON.stringify(tl0.map((b) => b.id)) === JSON.stringify(order), 'B draws the timeline of A\'s tree in result order',
      JSON.stringify(tl0.map((b) => b.id)));
    expect(tl0.every((b) => b.phases === 'unrecorded'), 'each bar of a tree held elsewhere is one unrecorded stretch',
      JSON.stringify(tl0.map((b) => b.phases)));
    await page.waitForTimeout(1500);
    const tl1 = await tlBars();
    expect(tl1[12].end >= tl0[12].end + 1000, 'the root\'s bar grows on B while A runs the tree',
      `${tl0[12].end} -> ${tl1[12].end}`);
    await shot(page, 'cluster-3b-timeline-on-b');
    await page.click('#v-tree');
    await page.waitForSelector('#tree[data-view="tree"]', { timeout: 5000 });
    await page.fill('#steer-text', 'focus on the first branch');
    await page.click('#act-steer');
    await page.waitForFunction(() => document.getElementById('act-result').textContent === 'steer: done', null, { timeout: 15000 });
    ok('steer from the page on B is accepted by A');

    // A task's details, read through B.
    const child = (await mcp(A, ALICE, 'tasks/get', { taskId: root }, root)).childTaskIds[2];
    await page.click(`#window .row[data-id="${child}"]`);
    await page.waitForFunction((c) => document.getElementById('d-id').textContent === c && document.getElementById('d-body').textContent.includes(c), child, { timeout: 10000 });
    ok('a task\'s details open on B');

    // Cancel the root from B's page: the tree ends on A and on the page.
    await page.click(`#window .row[data-id="${root}"]`);
    await page.click('#act-cancel');
    await page.waitForSelector('#tree[data-ended="true"]', { timeout: 20000 });
    await waitCounts(page, { cancelled: 13 }, 'cancel from the page on B: every task ends cancelled');
    await untilOn(A, root, 'cancelled', 'instance A says every task is cancelled');
    await shot(page, 'cluster-4-cancelled-on-b');

    // The list pages to the oldest tree: 61 trees, 50 a page.
    const all = [root, ...quick.slice().reverse()];
    await page.goto(B + '/ui');
    await page.waitForFunction(() => document.getElementById('list-head').dataset.page === '1' && document.querySelectorAll('#trees li').length === 50, null, { timeout: 10000 });
    const first = await listed(page);
    expect(first.join() === all.slice(0, 50).join(), 'page 1 lists the 50 newest trees of both instances', JSON.stringify(first.length));
    expect(!(await page.isHidden('#more')), '"Older trees" is offered', 'hidden');
    await page.click('#more');
    await page.waitForFunction(() => document.getElementById('list-head').dataset.page === '2' && document.querySelectorAll('#trees li').length === 11, null, { timeout: 10000 });
    const second = await listed(page);
    expect(second.join() === all.slice(50).join(), 'page 2 lists the 11 oldest', JSON.stringify(second));
    const seen = first.concat(second);
    expect(new Set(seen).size === 61 && seen.length === 61, 'every tree is seen once', seen.length + ' rows');
    expect(await page.isHidden('#more'), 'the last page offers no older trees', 'shown');
    const head = await page.textContent('#list-head');
    expect(head.includes('the oldest'), 'the last page says it reaches the oldest tree', head);
    await shot(page, 'cluster-5-oldest-page-on-b');
    await page.click('#newer');
    await page.waitForFunction(() => document.getElementById('list-head').dataset.page === '1', null, { timeout: 10000 });
    expect((await listed(page)).join() === first.join(), '"Newer trees" goes back to page 1', 'different');
    // A filter across pages: the one cancelled tree.
    await page.selectOption('#f-status', 'cancelled');
    await page.waitForFunction((r) => {
      const li = [...document.querySelectorAll('#trees li')];
      return li.length === 1 && li[0].dataset.root === r && document.getElementById('list-head').dataset.end === 'true';
    }, root, { timeout: 10000 });
    ok('a status filter lists the cancelled tree alone, to the oldest');

    // Bob, on B, cannot open alice's tree held by A.
    await page.click('#signout');
    await signIn(page, B, BOB, 'bob');
    await page.goto(`${B}/ui#/tree/${root}`);
    await page.waitForSelector('#missing:not([hidden])', { timeout: 10000 });
    ok('another principal cannot open the tree on B');

    expect(errors.length === 0, 'no script errors on the page', JSON.stringify(errors));
  } finally {
    await browser.close();
  }
  console.log(`ui cluster: ${passed} checks passed`);
}

main().catch((e) => {
  if (!e.reported) console.log('FAIL ' + (e.stack || e));
  process.exit(1);
});
