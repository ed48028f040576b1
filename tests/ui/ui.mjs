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

/** Every task of the tree under `id` in result order (I12), from tasks/get. */
async function resultOrder(token, id) {
  const t = await mcp(token, 'tasks/get', { taskId: id }, id);
  const out = [];
  for (const c of t.childTaskIds || []) out.push(...(await resultOrder(token, c)));
  out.push(id);
  return out;
}

/** The timeline's drawn rows, top to bottom: id, status, the bar's stages and extent. */
async function bars(page) {
  return page.evaluate(() => [...document.querySelectorAll('#window .row.tl-row')]
    .sort((a, b) => parseFloat(a.style.top) - parseFloat(b.style.top))
    .map((r) => {
      const b = r.querySelector('.tl-bar');
      return {
        id: r.dataset.id,
        status: r.dataset.status,
        phases: b ? b.dataset.phases.split(',').filter(Boolean) : [],
        end: b ? Number(b.dataset.end) : null,
        width: b ? b.getBoundingClientRect().width : 0,
        cls: b ? b.className : '',
      };
    }));
}

/** Waits until `pred(bars)` holds; fails the check with the last bars seen. */
async function waitBars(page, pred, check, timeout = 20000) {
  const deadline = Date.now() + timeout;
  let seen = [];
  while (Date.now() < deadline) {
    seen = await bars(page);
    if (pred(seen)) { ok(check); return seen; }
    await page.waitForTimeout(100);
  }
  fail(check, JSON.stringify(seen));
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

    // The timeline: one bar per task, in result order, each with the pause
    // it went through, the running ones growing to now.
    await page.click('#v-timeline');
    await page.waitForSelector('#tree[data-view="timeline"]', { timeout: 5000 });
    const order = await resultOrder(ALICE, root);
    const drawnBars = await bars(page);
    expect(drawnBars.length === 13 && drawnBars.every((b) => b.width > 0), 'the timeline draws a bar for each of the 13 tasks',
      JSON.stringify(drawnBars));
    expect(JSON.stringify(drawnBars.map((b) => b.id)) === JSON.stringify(order), 'the bars are in result order',
      JSON.stringify(drawnBars.map((b) => b.id)) + ' != ' + JSON.stringify(order));
    expect(drawnBars[12].id === root, 'the root\'s bar comes last', drawnBars[12].id);
    await waitBars(page, (bs) => bs.length === 13 && bs.every((b) => {
      const p = b.phases.indexOf('paused');
      return p >= 0 && b.phases.lastIndexOf('running') > p && b.phases[b.phases.length - 1] === 'running';
    }), 'every bar shows the pause, then running again');
    const legend = await page.$$eval('#tl-legend .key', (els) => els.map((e) => e.dataset.stage));
    expect(['queued', 'dependencies', 'running', 'paused', 'input', 'children'].every((s) => legend.includes(s)),
      'the timeline has a legend of its stages', JSON.stringify(legend));
    const span0 = await page.getAttribute('#tl-axis', 'data-span');
    const look0 = (await bars(page)).find((b) => b.id === root);
    await page.waitForTimeout(1500);
    const span1 = await page.getAttribute('#tl-axis', 'data-span');
    const look1 = (await bars(page)).find((b) => b.id === root);
    expect(look1.end >= look0.end + 1000 && (span0 !== span1 || look1.width > look0.width),
      'a running bar grows while the tree runs', JSON.stringify({ look0, look1, span0, span1 }));
    await shot(page, '3b-timeline-live');
    await page.click('#v-tree');
    await page.waitForSelector('#tree[data-view="tree"]', { timeout: 5000 });

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

    // A tree whose timeline has every kind of stage: node 0.1.2 waits for
    // input, so 0.1 and the root await their children; 0.2 and its
    // children are paused for a while.
    const rich = await startFanout(ALICE, { width: 3, depth: 2, steps: 6, stepMs: 250, inputAt: '0.1.2' });
    await page.goto(`${BASE}/ui#/tree/${rich}`);
    await page.waitForSelector('#t-total[data-count="13"]', { timeout: 10000 });
    await page.click('#v-timeline');
    const richKids = (await mcp(ALICE, 'tasks/get', { taskId: rich }, rich)).childTaskIds;
    const n01 = richKids[1];
    const n02 = richKids[2];
    const n012 = (await mcp(ALICE, 'tasks/get', { taskId: n01 }, n01)).childTaskIds[2];
    await mcp(ALICE, 'tasks/pause', { taskId: n02 }, n02);
    await page.waitForTimeout(1000);
    await mcp(ALICE, 'tasks/resume', { taskId: n02 }, n02);
    const barOf = (bs, id) => bs.find((b) => b.id === id) || { phases: [] };
    const lastStage = (b) => b.phases[b.phases.length - 1];
    await waitBars(page, (bs) => lastStage(barOf(bs, n012)) === 'input' && lastStage(barOf(bs, n01)) === 'children' && lastStage(barOf(bs, rich)) === 'children',
      'a task waiting for input shows it, and its ancestors await their children');
    await shot(page, '6a-timeline-input');
    await page.waitForTimeout(800);
    const richAll = await resultOrder(ALICE, rich);
    const n02Subtree = richAll.slice(8, 12);
    await mcp(ALICE, 'tasks/update', { taskId: n012, inputResponses: { 'confirm-0.1.2': { action: 'accept', content: {} } } }, n012);
    await page.waitForSelector('#tree[data-ended="true"]', { timeout: 30000 });
    const done = await waitBars(page, (bs) => bs.length === 13 && bs.every((b) => b.status === 'completed' && b.cls.includes('end-completed')),
      'every bar of the finished tree ends completed');
    expect(JSON.stringify(done.map((b) => b.id)) === JSON.stringify(richAll), 'the finished tree\'s bars are in result order',
      JSON.stringify(done.map((b) => b.id)));
    const b012 = barOf(done, n012);
    // It asks for input as it starts: a running (or queued) sliver before
    // the input stage is drawn only when it lasted a millisecond or more.
    const i012 = b012.phases.indexOf('input');
    expect(i012 >= 0 && b012.phases.slice(i012).join(',') === 'input,running'
      && b012.phases.slice(0, i012).every((p) => p === 'queued' || p === 'running'),
    'the input task\'s bar: input, then running', b012.phases.join(','));
    const bRich = barOf(done, rich);
    // A root waits for a slot before it runs: on a loaded machine that
    // wait lasts a millisecond or more and is drawn (queued) first.
    const richRun = bRich.phases.findIndex((p) => p !== 'queued');
    expect(richRun >= 0 && bRich.phases[richRun] === 'running' && bRich.phases.slice(richRun).includes('children'),
      'the root\'s bar: running (after any wait for a slot), then awaiting children', bRich.phases.join(','));
    expect(n02Subtree.every((id) => barOf(done, id).phases.includes('paused')), 'the paused subtree\'s bars show the pause',
      JSON.stringify(n02Subtree.map((id) => barOf(done, id).phases)));
    expect(done.filter((b) => !n02Subtree.includes(b.id)).every((b) => !b.phases.includes('paused')), 'no other bar shows a pause',
      JSON.stringify(done.map((b) => b.phases)));
    await shot(page, '6b-timeline-done');
    // The README's picture: the tree pane down to its last bar.
    const clip = await page.evaluate(() => {
      const pane = document.getElementById('tree-pane').getBoundingClientRect();
      const rows = [...document.querySelectorAll('#window .row')].map((r) => r.getBoundingClientRect().bottom);
      return { x: pane.left, y: 0, width: pane.width, height: Math.min(Math.max(...rows) + 10, pane.bottom) };
    });
    await page.screenshot({ path: `${SHOTS}/timeline.png`, clip });
    await page.click('#v-tree');

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
    // The same tree as a timeline: still only the visible rows, and its
    // last bar, at the end of the result order, is the root's.
    await page.click('#v-timeline');
    await page.waitForSelector('#tree[data-view="timeline"]', { timeout: 5000 });
    const tlDrawn = await page.$$eval('#window .row.tl-row', (els) => els.length);
    expect(tlDrawn > 0 && tlDrawn < 120, 'the 9,724-task timeline draws only the visible bars', tlDrawn + ' bars');
    const tlLongest = await page.evaluate(async () => {
      let worst = 0;
      const obs = new PerformanceObserver((l) => { for (const e of l.getEntries()) worst = Math.max(worst, e.duration); });
      obs.observe({ type: 'longtask', buffered: false });
      const box = document.getElementById('rows');
      for (let i = 0; i <= 30; i++) {
        box.scrollTop = (box.scrollHeight * i) / 30;
        await new Promise((r) => setTimeout(r, 100));
      }
      obs.disconnect();
      return worst;
    });
    console.log(`# longest main-thread task while scrolling the 9724-task timeline: ${Math.round(tlLongest)} ms`);
    await page.$eval('#rows', (b) => { b.scrollTop = b.scrollHeight; });
    const tlUntil = Date.now() + 5000;
    let tlLast = await lastDrawn();
    while (tlLast !== big && Date.now() < tlUntil) {
      await page.waitForTimeout(50);
      tlLast = await lastDrawn();
    }
    expect(tlLast === big, 'scrolled to the end, the timeline\'s last bar is the root\'s', `${tlLast} != ${big}`);
    await shot(page, '7b-big-timeline');
    await page.click('#v-tree');
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
