// The operator's web view of subtask (served at /ui; docs/operations.md).
// No build step and no dependencies: the page reads /ui/api with the
// caller's bearer token (kept in sessionStorage), follows the open tree over
// a streamed SSE response, and draws only the rows in view, so a tree of
// 10,000 tasks scrolls as smoothly as one of ten. Its timeline view draws
// one bar per task, in result order, from the task's creation to its end,
// coloured by the stages the runtime recorded (row.phases).
'use strict';

const $ = (id) => document.getElementById(id);
const ROW_H = 26;
const OVERSCAN = 12;
const STATUSES = ['working', 'input_required', 'paused', 'completed', 'failed', 'cancelled'];
const TERMINAL = new Set(['completed', 'failed', 'cancelled']);
const LABEL = { input_required: 'input required' };
// The timeline's stages (src/core/timeline.rs), in legend order.
const STAGES = ['queued', 'dependencies', 'running', 'paused', 'input', 'children', 'unrecorded', 'elided'];
const STAGE_LABEL = {
  queued: 'queued for a slot',
  dependencies: 'waiting for dependencies',
  input: 'waiting for input',
  children: 'awaiting children',
  unrecorded: 'not recorded here',
  elided: 'changes not kept',
};

const app = {
  token: sessionStorage.getItem('subtask.token') || '',
  me: null,
  listTimer: null,
  // The list's pages: the `before` of each page from the newest (null) to
  // the one shown (the last); "Older trees" pushes the shown page's
  // `next`, "Newer trees" pops.
  pages: [null],
  next: null,
  tree: null,
  // 'tree' (pre-order, collapsible) or 'timeline' (result order, bars).
  view: sessionStorage.getItem('subtask.view') === 'timeline' ? 'timeline' : 'tree',
};

// ---------------------------------------------------------------- helpers

function authHeaders(extra) {
  const h = Object.assign({}, extra || {});
  if (app.token) h.Authorization = 'Bearer ' + app.token;
  return h;
}

async function api(path, opts) {
  opts = opts || {};
  const init = { method: opts.method || 'GET', headers: authHeaders(opts.body ? { 'Content-Type': 'application/json' } : {}) };
  if (opts.body) init.body = JSON.stringify(opts.body);
  const res = await fetch(path, init);
  const text = await res.text();
  let data = null;
  try { data = JSON.parse(text); } catch (_) { data = null; }
  if (res.status === 401) {
    showLogin(app.token ? 'The server did not accept this token.' : '');
    throw new Error('unauthorized');
  }
  return { status: res.status, ok: res.ok, data };
}

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined && text !== null) e.textContent = text;
  return e;
}

function shortId(id) { return id ? id.slice(0, 8) : ''; }

function duration(ms) {
  if (ms < 0) ms = 0;
  if (ms < 1000) return ms + ' ms';
  const s = ms / 1000;
  if (s < 60) return s.toFixed(1) + ' s';
  const m = Math.floor(s / 60), rs = Math.floor(s % 60);
  if (m < 60) return m + 'm ' + String(rs).padStart(2, '0') + 's';
  const h = Math.floor(m / 60);
  return h + 'h ' + String(m % 60).padStart(2, '0') + 'm';
}

function badge(status) {
  return el('span', 'badge s-' + status, LABEL[status] || status);
}

function chip(status, n) {
  const c = el('span', 'chip t-' + status, n + ' ' + (LABEL[status] || status));
  c.dataset.status = status;
  c.dataset.count = String(n);
  return c;
}

function sleep(ms) { return new Promise((r) => setTimeout(r, ms)); }

// ---------------------------------------------------------------- sign-in

function showLogin(message) {
  stopTree();
  clearInterval(app.listTimer);
  $('app').hidden = true;
  $('login').hidden = false;
  $('signout').hidden = true;
  $('who').textContent = '';
  $('login-error').textContent = message || '';
  $('token').focus();
  // With an authorization server configured for the page, a link to sign in there.
  fetch('/ui/api/signin').then((r) => (r.ok ? r.json() : null)).then((j) => {
    $('oauth').hidden = !(j && j.available);
  }).catch(() => {});
}

async function boot() {
  let me;
  try {
    me = await api('/ui/api/me');
  } catch (_) {
    return; // the sign-in form is up
  }
  if (!me.ok) {
    $('login-error').textContent = 'The server refused the page: ' + ((me.data && me.data.error && me.data.error.message) || me.status);
    $('login').hidden = false;
    return;
  }
  app.me = me.data;
  $('login').hidden = true;
  $('app').hidden = false;
  $('server').textContent = me.data.server + ' ' + me.data.version;
  $('who').textContent = 'signed in as ' + me.data.principal;
  $('signout').hidden = !me.data.tokens;
  await refreshList();
  clearInterval(app.listTimer);
  app.listTimer = setInterval(refreshList, 2000);
  route();
}

// ---------------------------------------------------------------- tree list

const PAGE = 50;

function listQuery(before) {
  const p = new URLSearchParams();
  p.set('status', $('f-status').value);
  if ($('f-tool').value) p.set('tool', $('f-tool').value);
  if ($('f-text').value.trim()) p.set('q', $('f-text').value.trim());
  p.set('limit', String(PAGE));
  if (before) p.set('before', before);
  return '/ui/api/trees?' + p.toString();
}

// Back to the newest page (the filters changed).
function firstPage() {
  app.pages = [null];
  app.next = null;
  refreshList();
}

let listBusy = false;
let listAgain = false;
async function refreshList() {
  if ($('app').hidden) return;
  if (listBusy) { listAgain = true; return; }
  listBusy = true;
  try {
    // A page is where its `before` says: newer trees do not push it on.
    const pages = app.pages;
    const r = await api(listQuery(pages[pages.length - 1]));
    if (r.ok && pages === app.pages) drawList(r.data);
  } catch (_) {
    // shown by api()
  } finally {
    listBusy = false;
    if (listAgain) { listAgain = false; refreshList(); }
  }
}

function drawList(data) {
  const tools = $('f-tool');
  if (tools.options.length === 1) {
    for (const t of data.tools) tools.appendChild(new Option(t, t));
  }
  const skew = data.now - Date.now();
  const page = app.pages.length;
  let head = data.trees.length + ' trees shown';
  if (page > 1) head += ' · page ' + page;
  if (!data.next && page > 1) head += ' · to the oldest';
  else if (data.trees.length < PAGE) head += ' · more to look through';
  $('list-head').textContent = head + ' · ' + data.live + ' live tasks' + (data.cluster ? ' on this instance' : '');
  $('list-head').dataset.page = String(page);
  $('list-head').dataset.end = data.next ? 'false' : 'true';
  const ul = $('trees');
  const frag = document.createDocumentFragment();
  const selected = app.tree && app.tree.root;
  for (const t of data.trees) {
    const li = el('li');
    li.dataset.root = t.root;
    li.dataset.status = t.status;
    if (selected && (t.root === selected || t.root === app.tree.id)) li.classList.add('selected');
    li.appendChild(badge(t.status));
    const name = el('span', '', '');
    name.appendChild(el('span', 'tool', t.tool || '(no tool)'));
    name.appendChild(document.createTextNode(' '));
    name.appendChild(el('code', 'sid', shortId(t.root)));
    li.appendChild(name);
    li.appendChild(el('span', 'age', duration(Date.now() + skew - t.created) + ' ago'));
    const counts = el('span', 'counts');
    counts.appendChild(el('span', 'dim', t.tasks + (t.tasks === 1 ? ' task' : ' tasks')));
    for (const s of STATUSES) if (t.counts[s]) counts.appendChild(chip(s, t.counts[s]));
    li.appendChild(counts);
    if (t.msg) li.appendChild(el('span', 'msg', t.msg));
    li.addEventListener('click', () => { location.hash = '#/tree/' + t.root; });
    frag.appendChild(li);
  }
  ul.replaceChildren(frag);
  app.next = data.next || null;
  $('more').hidden = !app.next;
  $('newer').hidden = page === 1;
  $('pager').hidden = $('more').hidden && $('newer').hidden;
}

// ---------------------------------------------------------------- tree view

function stopTree() {
  if (app.tree && app.tree.ctrl) app.tree.ctrl.abort();
  app.tree = null;
}

function route() {
  const m = /^#\/tree\/([0-9a-fA-F-]{36})$/.exec(location.hash);
  if (!m) {
    stopTree();
    $('tree').hidden = true;
    $('missing').hidden = true;
    $('empty').hidden = false;
    return;
  }
  if (app.tree && app.tree.id === m[1]) return;
  openTree(m[1]);
}

function openTree(id) {
  stopTree();
  const t = {
    id,
    root: null,
    tool: null,
    nodes: new Map(),
    orphans: [],
    collapsed: new Set(),
    visible: [],
    order: [],
    structure: false,
    ended: false,
    selected: null,
    skew: 0,
    ctrl: new AbortController(),
    frame: 0,
  };
  app.tree = t;
  $('empty').hidden = true;
  $('missing').hidden = true;
  $('tree').hidden = false;
  $('tree').dataset.root = '';
  $('tree').dataset.ended = 'false';
  $('detail').hidden = true;
  $('act-result').textContent = '';
  $('window').replaceChildren();
  $('spacer').style.height = '0px';
  for (const li of $('trees').children) li.classList.toggle('selected', li.dataset.root === id);
  follow(t);
}

async function follow(t) {
  while (!t.ended && !t.ctrl.signal.aborted) {
    try {
      const res = await fetch('/ui/api/trees/' + encodeURIComponent(t.id) + '/live', {
        headers: authHeaders(),
        signal: t.ctrl.signal,
      });
      if (res.status === 404) { showMissing(); return; }
      if (res.status === 401) { showLogin('The server did not accept this token.'); return; }
      if (!res.ok || !res.body) throw new Error('stream ' + res.status);
      const reader = res.body.getReader();
      const dec = new TextDecoder();
      let buf = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += dec.decode(value, { stream: true });
        let i;
        while ((i = buf.indexOf('\n\n')) >= 0) {
          const block = buf.slice(0, i);
          buf = buf.slice(i + 2);
          onEvent(t, block);
        }
      }
    } catch (_) {
      if (t.ctrl.signal.aborted) return;
    }
    if (!t.ended) await sleep(1000);
  }
}

function showMissing() {
  $('tree').hidden = true;
  $('missing').hidden = false;
}

function onEvent(t, block) {
  if (app.tree !== t) return;
  let ev = 'message';
  let data = '';
  for (const line of block.split('\n')) {
    if (line.startsWith('event:')) ev = line.slice(6).trim();
    else if (line.startsWith('data:')) data += line.slice(5).trim();
  }
  if (ev === 'rows') {
    const msg = JSON.parse(data);
    t.skew = msg.now - Date.now();
    applyRows(t, msg.rows);
  } else if (ev === 'end') {
    t.ended = true;
    $('tree').dataset.ended = 'true';
    schedule(t);
  }
}

function applyRows(t, rows) {
  let pending = rows.concat(t.orphans);
  t.orphans = [];
  for (let pass = 0; pass < 2 && pending.length; pass++) {
    const later = [];
    for (const r of pending) {
      const known = t.nodes.get(r.id);
      if (known) {
        known.row = r;
        continue;
      }
      if (r.parent === null) {
        t.root = r.id;
        t.nodes.set(r.id, { row: r, depth: 0, children: [] });
        t.structure = true;
        continue;
      }
      const parent = t.nodes.get(r.parent);
      if (!parent) { later.push(r); continue; }
      t.nodes.set(r.id, { row: r, depth: parent.depth + 1, children: [] });
      parent.children[r.pos] = r.id;
      t.structure = true;
    }
    pending = later;
  }
  t.orphans = pending;
  if (t.selected === null && t.root) t.selected = t.root;
  schedule(t);
  if (!$('detail').hidden && rows.some((r) => r.id === $('d-id').textContent)) loadDetail(t, $('d-id').textContent);
}

function schedule(t) {
  if (t.frame) return;
  t.frame = requestAnimationFrame(() => {
    t.frame = 0;
    draw(t);
  });
}

function computeVisible(t) {
  const out = [];
  if (!t.root) { t.visible = out; return; }
  const stack = [t.root];
  while (stack.length) {
    const id = stack.pop();
    const n = t.nodes.get(id);
    if (!n) continue;
    out.push(id);
    if (!t.collapsed.has(id)) {
      for (let i = n.children.length - 1; i >= 0; i--) if (n.children[i]) stack.push(n.children[i]);
    }
  }
  t.visible = out;
}

// Every task in result order (I12): post-order by childTaskIds, each
// child's subtree in order, then the parent. Collapsing does not apply.
function computeOrder(t) {
  const out = [];
  if (t.root) {
    const stack = [[t.root, 0]];
    while (stack.length) {
      const top = stack[stack.length - 1];
      const n = t.nodes.get(top[0]);
      if (!n) { stack.pop(); continue; }
      if (top[1] < n.children.length) {
        const c = n.children[top[1]++];
        if (c) stack.push([c, 0]);
        continue;
      }
      stack.pop();
      out.push(top[0]);
    }
  }
  t.order = out;
}

function draw(t) {
  if (app.tree !== t) return;
  if (t.structure) { computeVisible(t); computeOrder(t); t.structure = false; }
  const rootNode = t.nodes.get(t.root);
  if (rootNode) {
    const r = rootNode.row;
    $('tree').dataset.root = t.root;
    const st = $('t-status');
    // The list follows the open tree's root at once, not at its next poll.
    if (st.dataset.status && st.dataset.status !== r.status) refreshList();
    st.className = 'badge s-' + r.status;
    st.textContent = LABEL[r.status] || r.status;
    st.dataset.status = r.status;
    $('t-root').textContent = t.root;
    const item = [...$('trees').children].find((li) => li.dataset.root === t.root);
    $('t-tool').textContent = item ? item.querySelector('.tool').textContent : '';
    $('t-live').textContent = t.ended ? 'ended' : 'live';
    const counts = {};
    for (const n of t.nodes.values()) counts[n.row.status] = (counts[n.row.status] || 0) + 1;
    const box = $('t-counts');
    const frag = document.createDocumentFragment();
    const total = el('span', 'dim', t.nodes.size + ' tasks');
    total.id = 't-total';
    total.dataset.count = String(t.nodes.size);
    frag.appendChild(total);
    for (const s of STATUSES) if (counts[s]) frag.appendChild(chip(s, counts[s]));
    box.replaceChildren(frag);
    $('tree').dataset.counts = JSON.stringify(counts);
  }
  drawActions(t);
  drawRows(t);
}

function drawRows(t) {
  const box = $('rows');
  const timeline = app.view === 'timeline';
  const list = timeline ? t.order : t.visible;
  const n = list.length;
  $('spacer').style.height = n * ROW_H + 'px';
  const first = Math.max(0, Math.floor(box.scrollTop / ROW_H) - OVERSCAN);
  const last = Math.min(n, Math.ceil((box.scrollTop + box.clientHeight) / ROW_H) + OVERSCAN);
  const now = Date.now() + t.skew;
  const axis = timeline ? drawAxis(t, now) : null;
  const frag = document.createDocumentFragment();
  for (let i = first; i < last; i++) {
    frag.appendChild(timeline ? timelineRowEl(t, list[i], i, now, axis) : rowEl(t, list[i], i, now));
  }
  $('window').replaceChildren(frag);
}

// ---------------------------------------------------------------- timeline

// Where a task's bar ends: its 'ended' mark once terminal (its last update
// when the mark is not recorded here), now while it runs.
function endOf(r, now) {
  if (!TERMINAL.has(r.status)) return now;
  const ph = r.phases || [];
  const last = ph[ph.length - 1];
  return last && last[0] === 'ended' ? r.created + last[1] : r.updated;
}

// The smallest 1, 2 or 5 times a power of ten that holds `ms`: the axis
// grows in steps, so a running bar visibly grows between them.
function niceSpan(ms) {
  const p = Math.pow(10, Math.floor(Math.log10(Math.max(ms, 1))));
  for (const m of [1, 2, 5, 10]) if (m * p >= ms) return m * p;
  return 10 * p;
}

// The shared time axis: from the root's creation to a nice span past the
// tree's end (or now); its ticks in the timeline's header.
function drawAxis(t, now) {
  const root = t.nodes.get(t.root);
  if (!root) return null;
  const t0 = root.row.created;
  const span = niceSpan(endOf(root.row, now) - t0);
  const box = $('tl-axis');
  if (box.dataset.span !== String(span)) {
    const frag = document.createDocumentFragment();
    for (let i = 0; i <= 5; i++) {
      const tick = el('span', 'tick', duration((span * i) / 5));
      tick.style.left = (100 * i) / 5 + '%';
      frag.appendChild(tick);
    }
    box.replaceChildren(frag);
    box.dataset.span = String(span);
  }
  return { t0, span };
}

// The bar's segments: [stage, from, to] in ms after the task's creation.
// Before its first mark a task was queued; after its last it is in that
// stage until its end. A full timeline dropped changes before its last
// mark: that stretch is drawn as 'elided'.
function segments(r, end) {
  const ph = r.phases || [];
  const out = [];
  let stage = 'queued';
  let from = 0;
  for (let i = 0; i < ph.length; i++) {
    const at = ph[i][1];
    const kept = !(r.elided && i === ph.length - 1);
    if (at > from) out.push([kept ? stage : 'elided', from, at]);
    stage = ph[i][0];
    from = Math.max(from, at);
  }
  if (stage !== 'ended' && end > from) out.push([stage, from, end]);
  return out;
}

// The cells a tree row and a timeline row share: the row at its place,
// the task's indented id and place, its status. `caret` (the tree view's
// fold control, or null) goes before the id.
function rowStart(t, id, i, cls, indentPx, caret) {
  const node = t.nodes.get(id);
  const r = node.row;
  const div = el('div', cls);
  div.style.top = i * ROW_H + 'px';
  div.dataset.id = id;
  div.dataset.status = r.status;
  if (id === t.selected) div.classList.add('selected');
  const c1 = el('span', 'c-tree');
  const indent = el('span', 'indent');
  indent.style.width = node.depth * indentPx + 'px';
  c1.appendChild(indent);
  if (caret) c1.appendChild(caret);
  c1.appendChild(el('code', 'sid', shortId(id)));
  if (node.depth === 0) c1.appendChild(el('span', '', ' root'));
  else c1.appendChild(el('span', 'dim', ' #' + r.pos));
  div.appendChild(c1);
  const c2 = el('span', 'c-status');
  c2.appendChild(badge(r.status));
  div.appendChild(c2);
  return div;
}

function timelineRowEl(t, id, i, now, axis) {
  const r = t.nodes.get(id).row;
  const div = rowStart(t, id, i, 'row tl-row', 10, null);
  const c3 = el('span', 'c-bar');
  const end = endOf(r, now);
  const life = Math.max(end - r.created, 0);
  if (axis) {
    const bar = el('span', 'tl-bar');
    if (TERMINAL.has(r.status)) bar.classList.add('end-' + r.status);
    bar.style.left = (100 * (r.created - axis.t0)) / axis.span + '%';
    bar.style.width = (100 * life) / axis.span + '%';
    const segs = segments(r, life);
    for (const [stage, from, to] of segs) {
      const seg = el('i', 'seg p-' + stage);
      seg.style.left = life ? (100 * from) / life + '%' : '0';
      seg.style.width = life ? (100 * (to - from)) / life + '%' : '100%';
      let tip = (STAGE_LABEL[stage] || stage) + ' ' + duration(to - from);
      if (stage === 'elided') tip = r.elided + ' ' + tip;
      seg.title = tip;
      bar.appendChild(seg);
    }
    bar.dataset.phases = segs.map((x) => x[0]).join(',');
    bar.dataset.start = String(r.created - axis.t0);
    bar.dataset.end = String(end - axis.t0);
    c3.appendChild(bar);
  }
  div.appendChild(c3);
  div.appendChild(el('span', 'c-time', duration(life)));
  div.addEventListener('click', () => {
    if (t.selected !== id) $('act-result').textContent = '';
    t.selected = id;
    schedule(t);
    loadDetail(t, id);
  });
  return div;
}

function drawLegend() {
  const box = $('tl-legend');
  if (box.children.length) return;
  const frag = document.createDocumentFragment();
  for (const s of STAGES) {
    const item = el('span', 'key');
    item.appendChild(el('i', 'seg p-' + s));
    item.appendChild(document.createTextNode(STAGE_LABEL[s] || s));
    item.dataset.stage = s;
    frag.appendChild(item);
  }
  box.replaceChildren(frag);
}

function setView(view) {
  app.view = view;
  sessionStorage.setItem('subtask.view', view);
  const timeline = view === 'timeline';
  $('v-tree').setAttribute('aria-pressed', String(!timeline));
  $('v-timeline').setAttribute('aria-pressed', String(timeline));
  $('rows-head').hidden = timeline;
  $('tl-head').hidden = !timeline;
  $('tl-legend').hidden = !timeline;
  $('tree').dataset.view = view;
  if (timeline) drawLegend();
  if (app.tree) drawRows(app.tree);
}

function rowEl(t, id, i, now) {
  const r = t.nodes.get(id).row;
  const caret = el('span', 'caret', r.kids ? (t.collapsed.has(id) ? '▸' : '▾') : '');
  if (r.kids) {
    caret.addEventListener('click', (e) => {
      e.stopPropagation();
      if (t.collapsed.has(id)) t.collapsed.delete(id); else t.collapsed.add(id);
      t.structure = true;
      schedule(t);
    });
  }
  const div = rowStart(t, id, i, 'row', 16, caret);
  const c3 = el('span', 'c-prog');
  if (r.kids) {
    const bar = el('span', 'bar');
    const fill = el('i');
    fill.style.width = Math.round((100 * r.done) / r.kids) + '%';
    bar.appendChild(fill);
    c3.appendChild(bar);
    c3.appendChild(document.createTextNode(r.done + '/' + r.kids));
  }
  div.appendChild(c3);
  const end = TERMINAL.has(r.status) ? r.updated : now;
  div.appendChild(el('span', 'c-time', duration(end - r.created)));
  const c5 = el('span', 'c-msg');
  if (r.inputs) c5.appendChild(el('span', 'input-flag', '⚑ ' + r.inputs + ' input request' + (r.inputs > 1 ? 's' : '') + ' '));
  c5.appendChild(document.createTextNode(r.msg || ''));
  div.appendChild(c5);
  div.addEventListener('click', () => {
    if (t.selected !== id) $('act-result').textContent = '';
    t.selected = id;
    schedule(t);
    loadDetail(t, id);
  });
  return div;
}

// ---------------------------------------------------------------- details and commands

async function loadDetail(t, id) {
  try {
    const r = await api('/ui/api/tasks/' + encodeURIComponent(id));
    if (app.tree !== t) return;
    $('detail').hidden = false;
    $('d-id').textContent = id;
    const body = r.data && (r.data.result || r.data.error || r.data);
    $('d-body').textContent = JSON.stringify(body, null, 2);
  } catch (_) {
    // shown by api()
  }
}

function drawActions(t) {
  const node = t.nodes.get(t.selected);
  const status = node ? node.row.status : null;
  const live = status !== null && !TERMINAL.has(status);
  $('act-pause').disabled = !live || status === 'paused';
  $('act-resume').disabled = status !== 'paused';
  $('act-cancel').disabled = !live;
  $('act-steer').disabled = !live;
  $('act-target').textContent = node ? 'on ' + (t.selected === t.root ? 'the root' : 'task ' + shortId(t.selected)) : '';
}

async function act(action) {
  const t = app.tree;
  if (!t || !t.selected) return;
  const out = $('act-result');
  const body = action === 'steer' ? { message: $('steer-text').value } : undefined;
  if (action === 'steer' && !body.message.trim()) {
    out.className = 'err';
    out.textContent = 'write a message first';
    return;
  }
  out.className = '';
  out.textContent = action + '…';
  try {
    const r = await api('/ui/api/tasks/' + encodeURIComponent(t.selected) + '/' + action, { method: 'POST', body: body || {} });
    if (r.data && r.data.error) {
      out.className = 'err';
      out.textContent = action + ' refused: ' + r.data.error.message;
    } else if (r.ok) {
      out.className = 'ok';
      out.textContent = action + ': done';
      refreshList();
      if (action === 'steer') $('steer-text').value = '';
    } else {
      out.className = 'err';
      out.textContent = action + ' failed (' + r.status + ')';
    }
  } catch (_) {
    // shown by api()
  }
}

// ---------------------------------------------------------------- wiring

function wire() {
  $('login-form').addEventListener('submit', (e) => {
    e.preventDefault();
    app.token = $('token').value.trim();
    sessionStorage.setItem('subtask.token', app.token);
    $('token').value = '';
    boot();
  });
  $('signout').addEventListener('click', () => {
    app.token = '';
    sessionStorage.removeItem('subtask.token');
    showLogin('');
  });
  for (const id of ['f-status', 'f-tool']) $(id).addEventListener('change', firstPage);
  let typing = 0;
  $('f-text').addEventListener('input', () => {
    clearTimeout(typing);
    typing = setTimeout(firstPage, 250);
  });
  $('more').addEventListener('click', () => {
    if (!app.next) return;
    app.pages = app.pages.concat([app.next]);
    app.next = null;
    refreshList();
    $('trees').scrollTop = 0;
  });
  $('newer').addEventListener('click', () => {
    if (app.pages.length < 2) return;
    app.pages = app.pages.slice(0, -1);
    app.next = null;
    refreshList();
    $('trees').scrollTop = 0;
  });
  $('rows').addEventListener('scroll', () => { if (app.tree) drawRows(app.tree); }, { passive: true });
  window.addEventListener('resize', () => { if (app.tree) drawRows(app.tree); });
  window.addEventListener('hashchange', route);
  $('d-close').addEventListener('click', () => { $('detail').hidden = true; });
  $('act-pause').addEventListener('click', () => act('pause'));
  $('act-resume').addEventListener('click', () => act('resume'));
  $('act-cancel').addEventListener('click', () => act('cancel'));
  $('act-steer').addEventListener('click', () => act('steer'));
  $('steer-text').addEventListener('keydown', (e) => { if (e.key === 'Enter') act('steer'); });
  $('v-tree').addEventListener('click', () => setView('tree'));
  $('v-timeline').addEventListener('click', () => setView('timeline'));
  setView(app.view);
  // Elapsed times of live tasks move on, and their bars grow.
  setInterval(() => { if (app.tree && !app.tree.ended) drawRows(app.tree); }, 1000);
}

// Back from the authorization server (`/ui/callback`): the access token
// comes in the fragment, which no server sees; it is kept like a pasted
// one and taken out of the address bar.
function takeTokenFromFragment() {
  if (!location.hash.startsWith('#token=')) return;
  app.token = decodeURIComponent(location.hash.slice('#token='.length));
  sessionStorage.setItem('subtask.token', app.token);
  history.replaceState(null, '', location.pathname + location.search);
}

takeTokenFromFragment();
wire();
boot();
