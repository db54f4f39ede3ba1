// The weft desk: one actor graph, three projections (linear, grid, tree), a fork panel, a
// graph strip, the coordinator thread and a temporal scrubber. Live: every change on the
// server arrives as an SSE `change` event and the visible parts are fetched again.
//
// Inside `weft serve` the API needs the human token: on 401/403 the page asks for it (like
// ThreadDesk) and keeps it in this page's memory only. The event stream is read with fetch so
// that it can carry the token. Text from people and agents is inserted as text (never HTML)
// and isolated (`<bdi>`, `unicode-bidi: isolate`) so that bidi controls cannot spoof the page.

const $ = (id) => document.getElementById(id);
const API = '/api/actors';

const state = {
  mode: localStorage.getItem('weft.desk.mode') || 'grid',
  selected: null,
  graph: null,
  temporal: null,
  scrubAt: null, // null = now (live)
};

class ProblemError extends Error {
  constructor(p) {
    super(p.detail || p.title || 'request failed');
    this.code = p.code;
  }
}

let token = '';
const refusedToken = (p) => p?.code === 'UNAUTHENTICATED' || p?.code === 'FORBIDDEN';
const withToken = (h = {}) => (token ? { ...h, authorization: `Bearer ${token}` } : h);

function askToken(p) {
  $('token-form').classList.remove('is-hidden');
  $('token-why').textContent =
    p?.code === 'FORBIDDEN' ? 'That is not the human token.' : token ? 'The token was not accepted.' : 'This desk needs the human token printed by weft serve.';
  $('token').focus();
}

async function api(path, body) {
  const init = body === undefined ? { headers: withToken() } : { method: 'POST', headers: withToken({ 'content-type': 'application/json' }), body: JSON.stringify(body) };
  const res = await fetch(API + path, init);
  const data = await res.json().catch(() => ({ code: `HTTP_${res.status}`, detail: res.statusText }));
  if (refusedToken(data)) askToken(data);
  if (!res.ok) throw new ProblemError(data);
  return data;
}

function toast(msg) {
  const t = $('toast');
  t.textContent = msg;
  t.classList.remove('is-hidden');
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => t.classList.add('is-hidden'), 4000);
}

async function act(fn) {
  try {
    await fn();
  } catch (e) {
    toast(e.code ? `${e.code}: ${e.message}` : String(e));
  }
}

function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k === 'text') e.textContent = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else if (k === 'style') Object.assign(e.style, v);
    else e.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children.flat()) if (c !== null && c !== undefined) e.append(c);
  return e;
}

const STATUS = { running: 'Working', blocked: 'Blocked', awaiting_user: 'Needs you', done: 'Done', failed: 'Failed', idle: 'Idle', cancelled: 'Cancelled' };
const label = (s) => STATUS[s] || s;

function lineItem(l) {
  if (l.corrupt !== undefined) return el('li', { class: 'corrupt', text: `${l.line}: unreadable line (${l.error || 'corrupt'})` });
  const li = el('li', { class: `role-${l.role}`, title: `${l.role} · ${l.at}` });
  li.append(el('span', { class: 'n', text: String(l.line) }), el('bdi', { dir: 'auto', text: l.text }));
  return li;
}

// ----- temporal overlay ------------------------------------------------------------------

function visibility() {
  const map = new Map();
  for (const n of state.temporal?.nodes || []) map.set(n.id, n);
  return map;
}

function applyTemporal(e, id) {
  const t = visibility().get(id);
  if (!t) return;
  e.style.opacity = String(t.visible ? t.opacity : 0.08);
  e.classList.toggle('not-yet', !t.visible);
}

// ----- views -----------------------------------------------------------------------------

function renderGrid(v) {
  const grid = el('div', { class: 'grid', 'data-testid': 'grid' });
  for (const t of v.tiles) {
    const tile = el(
      'button',
      {
        type: 'button',
        class: `tile status-${t.status}${state.selected === t.id ? ' selected' : ''}`,
        'data-node': t.id,
        'data-status': t.status,
        onclick: () => openFork(t.id),
      },
      el('span', { class: 'title', dir: 'auto', text: t.title || t.id }),
      el('span', { class: 'summary', dir: 'auto', text: t.summary }),
      el('span', {}, el('span', { class: 'dot' }), label(t.status), t.waits.some((w) => w.outcome === 'blocked') ? ' · waiting' : ''),
    );
    tile.style.opacity = String(t.opacity);
    applyTemporal(tile, t.id);
    grid.append(tile);
  }
  if (!v.tiles.length) grid.append(el('p', { class: 'muted', text: 'No task nodes yet.' }));
  return grid;
}

function renderTree(v) {
  const W = 210, H = 60;
  const wrap = el('div', { class: 'tree', 'data-testid': 'tree' });
  const maxDepth = Math.max(0, ...v.nodes.map((n) => n.depth));
  wrap.style.width = `${(maxDepth + 1) * W + 60}px`;
  wrap.style.height = `${v.nodes.length * H + 20}px`;
  const pos = new Map(v.nodes.map((n) => [n.id, { x: 10 + n.depth * W, y: 10 + n.row * H }]));
  const svg = document.createElementNS('http://www.w3.org/2000/svg', 'svg');
  svg.setAttribute('width', wrap.style.width);
  svg.setAttribute('height', wrap.style.height);
  for (const e of v.edges) {
    const a = pos.get(e.from), b = pos.get(e.to);
    if (!a || !b) continue;
    const p = document.createElementNS('http://www.w3.org/2000/svg', 'path');
    const x1 = a.x + 170, y1 = a.y + 23, x2 = b.x, y2 = b.y + 23;
    p.setAttribute('d', `M${x1},${y1} C${x1 + 20},${y1} ${x2 - 20},${y2} ${x2},${y2}`);
    p.setAttribute('fill', 'none');
    p.setAttribute('stroke', e.kind === 'spawn' ? '#3b4452' : '#d29922');
    if (e.kind !== 'spawn') p.setAttribute('stroke-dasharray', '4 3');
    svg.append(p);
  }
  wrap.append(svg);
  for (const n of v.nodes) {
    const p = pos.get(n.id);
    const box = el(
      'div',
      {
        class: `tnode status-${n.status}${n.pausedBy ? ' paused' : ''}${state.selected === n.id ? ' selected' : ''}`,
        'data-node': n.id,
        'data-status': n.status,
        style: { left: `${p.x}px`, top: `${p.y}px`, opacity: n.hidden ? '0.35' : '1' },
        onclick: () => openFork(n.id),
      },
      el('span', { class: 'title' }, el('span', { class: 'dot' }), el('bdi', { dir: 'auto', text: n.title || n.id })),
      el('span', { class: 'type', text: `${n.type} · ${label(n.status)}${n.pausedBy ? ' · paused' : ''}` }),
    );
    if (n.canSpawn.length) {
      box.append(
        el('button', {
          type: 'button',
          class: 'spawn-plus',
          'data-parent': n.id,
          title: `Spawn a child of ${n.id}`,
          text: '+',
          onclick: (e) => {
            e.stopPropagation();
            openSpawn(n, e.currentTarget);
          },
        }),
      );
    }
    applyTemporal(box, n.id);
    wrap.append(box);
  }
  return wrap;
}

function renderLinear(v) {
  const list = el('div', { class: 'list' });
  for (const d of v.discussions) {
    list.append(
      el('button', {
        type: 'button',
        class: d.id === v.focus ? 'selected' : '',
        'data-node': d.id,
        text: `${d.title || d.id} (${d.type})${d.pausedBy ? ' · paused' : ''}`,
        onclick: () => {
          state.linearFocus = d.id;
          refresh();
        },
      }),
    );
  }
  const workers = el('div', { class: 'workers' }, el('h2', { text: 'Workers' }));
  for (const w of v.workers) {
    workers.append(el('div', { class: `status-${w.status}`, 'data-node': w.id }, el('span', { class: 'dot' }), `${w.title}: ${label(w.status)} — ${w.summary}`));
  }
  list.append(workers);
  const transcript = el('ol', { class: 'lines transcript' }, v.transcript.map(lineItem));
  return el('div', { class: 'linear', 'data-testid': 'linear' }, list, transcript);
}

// ----- chrome ----------------------------------------------------------------------------

function renderStrip() {
  const strip = $('strip');
  strip.replaceChildren();
  const g = state.graph;
  if (!g) return;
  const byId = new Map(g.nodes.map((n) => [n.id, n]));
  const focus = byId.get(state.selected) || byId.get(g.root);
  if (!focus) return;
  const chip = (n) => el('span', { class: `chip status-${n.status}`, 'data-node': n.id, onclick: () => openFork(n.id) }, el('span', { class: 'dot' }), n.id);
  const chain = [];
  for (let n = focus; n; n = byId.get(n.spawnedBy)) chain.unshift(n);
  strip.append(el('span', { class: 'muted', text: 'lineage' }));
  chain.forEach((n, i) => {
    if (i) strip.append(el('span', { class: 'arrow', text: '→' }));
    strip.append(chip(n));
  });
  const kids = focus.spawned.map((c) => byId.get(c)).filter(Boolean);
  if (kids.length) {
    strip.append(el('span', { class: 'arrow', text: '⇒' }));
    kids.forEach((k) => strip.append(chip(k)));
  }
}

function renderCoordinator(lin, meta) {
  $('coord-lines').replaceChildren(...lin.transcript.map(lineItem));
  $('meta-lines').replaceChildren(
    ...meta.lines.slice(-40).map((m) => {
      const text =
        m.kind === 'ref' ? `ref ${m.node}:${m.line} — ${m.summary || ''}` :
        m.kind === 'spawn' ? `spawn ${m.parent} → ${m.child} (${m.type}, ${m.trigger || 'harness'})` :
        m.kind === 'summary' && m.node ? `${m.node}: ${m.status} — ${m.summary}` :
        m.kind === 'resolution' ? `resolved ${m.node} → ${(m.into || []).join(', ')}` :
        m.text || m.kind;
      return el('li', { title: m.at, text: `${m.line}. ${text}` });
    }),
  );
}

function renderTemporal() {
  const t = state.temporal;
  if (!t) return;
  const c = $('heat');
  const w = (c.width = c.clientWidth || 600);
  const ctx = c.getContext('2d');
  ctx.clearRect(0, 0, w, c.height);
  const bw = w / t.heat.length;
  t.heat.forEach((v, i) => {
    ctx.fillStyle = `rgba(110,181,255,${0.1 + v * 0.6})`;
    ctx.fillRect(i * bw, c.height - v * c.height, Math.max(1, bw - 1), v * c.height);
  });
  $('scrub-at').textContent = state.scrubAt ? t.at.replace('T', ' ').slice(0, 19) : 'now';
  $('bookmarks').replaceChildren(...t.bookmarks.map((b) => el('li', { title: `${b.scope} · ${b.at}`, text: `${b.text}${b.keywords?.length ? ` [${b.keywords.join(', ')}]` : ''}` })));
  const scope = $('scope');
  const want = ['global', ...(state.graph?.nodes || []).map((n) => `node:${n.id}`)];
  if (scope.options.length !== want.length) {
    const cur = scope.value;
    scope.replaceChildren(...want.map((v) => el('option', { value: v, text: v === 'global' ? 'Global' : `Subtree ${v.slice(5)}` })));
    scope.value = want.includes(cur) ? cur : 'global';
  }
}

async function loadTemporal() {
  const q = new URLSearchParams({ scope: $('scope').value || 'global', buckets: '60' });
  if (state.scrubAt) q.set('at', state.scrubAt);
  state.temporal = await api(`/views/temporal?${q}`);
  renderTemporal();
}

async function refresh() {
  const [graph, lin, meta] = await Promise.all([api('/graph'), api('/views/linear'), api('/views/metathread?limit=40')]);
  state.graph = graph;
  await loadTemporal();
  const byId = new Map(graph.nodes.map((n) => [n.id, n]));
  $('session').textContent = byId.get(graph.root)?.title || '';
  const tasks = graph.nodes.filter((n) => n.type === 'task' && !n.hidden);
  $('run-chip').textContent = `${tasks.filter((t) => t.status === 'running').length} of ${tasks.length} running`;
  renderCoordinator(lin, meta);
  let body;
  if (state.mode === 'grid') body = renderGrid(await api('/views/grid'));
  else if (state.mode === 'tree') body = renderTree(await api('/views/tree'));
  else body = renderLinear(await api(`/views/linear${state.linearFocus ? `?node=${encodeURIComponent(state.linearFocus)}` : ''}`));
  $('view').replaceChildren(body);
  for (const b of document.querySelectorAll('.modes button')) b.setAttribute('aria-selected', String(b.dataset.mode === state.mode));
  renderStrip();
  if (state.selected) await renderFork();
}

async function renderFork() {
  let f;
  try {
    f = await api(`/nodes/${encodeURIComponent(state.selected)}`);
  } catch {
    closeFork();
    return;
  }
  const n = f.node;
  $('fork').classList.remove('is-hidden');
  $('fork').dataset.node = n.id;
  document.querySelector('.desk').classList.remove('no-fork');
  $('fork-title').textContent = n.title || n.id;
  $('fork-meta').textContent = `${n.id} · ${n.type} · ${label(n.status)} · mailbox v${n.mailboxVersion} · close-out ${f.closeout.gitCloseout}${f.closeout.allowsAutomaticPush ? ' (pushes)' : ' (no push)'}`;
  $('fork-meta').dataset.status = n.status;
  $('fork-summary').textContent = n.summary;
  $('fork-waits').replaceChildren(...f.waits.map((w) => el('div', { class: w.outcome === 'blocked' ? 'warn' : 'muted', text: `waits on ${w.node} (${w.mode}): ${w.message}` })));
  const pending = n.type === 'disambiguation' && !n.resolvedInto && state.graph?.nodes.some((p) => p.pausedBy === n.id);
  $('fork-resolve').classList.toggle('is-hidden', !pending);
  $('fork-lines').replaceChildren(...f.transcript.map(lineItem));
}

function openFork(id) {
  state.selected = id;
  act(refresh);
}

function closeFork() {
  state.selected = null;
  $('fork').classList.add('is-hidden');
  document.querySelector('.desk').classList.add('no-fork');
  renderStrip();
}

function openSpawn(node, anchor) {
  const pop = $('spawn-pop');
  $('spawn-parent').textContent = node.id;
  pop.dataset.parent = node.id;
  $('spawn-type').replaceChildren(...node.canSpawn.map((t) => el('option', { value: t, text: t })));
  $('spawn-type').value = node.canSpawn.includes('task') ? 'task' : node.canSpawn[0];
  const r = anchor.getBoundingClientRect();
  pop.style.left = `${Math.min(r.right + 8, window.innerWidth - 340)}px`;
  pop.style.top = `${r.top}px`;
  pop.classList.remove('is-hidden');
  $('spawn-title').value = '';
  $('spawn-title').focus();
}

// ----- wiring ----------------------------------------------------------------------------

for (const b of document.querySelectorAll('.modes button')) {
  b.addEventListener('click', () => {
    state.mode = b.dataset.mode;
    localStorage.setItem('weft.desk.mode', state.mode);
    act(refresh);
  });
}
$('fork-close').addEventListener('click', closeFork);
$('spawn-cancel').addEventListener('click', () => $('spawn-pop').classList.add('is-hidden'));
$('spawn-form').addEventListener('submit', (e) => {
  e.preventDefault();
  const parent = $('spawn-pop').dataset.parent;
  act(async () => {
    const out = await api('/spawn', { parent, type: $('spawn-type').value, title: $('spawn-title').value, reason: 'spawned from the desk' });
    $('spawn-pop').classList.add('is-hidden');
    state.selected = out.id;
    await refresh();
  });
});
$('coord-compose').addEventListener('submit', (e) => {
  e.preventDefault();
  const text = $('coord-input').value.trim();
  if (!text) return;
  act(async () => {
    const out = await api(`/nodes/${encodeURIComponent(state.graph?.root || 'coordinator')}/route`, { text });
    $('coord-input').value = '';
    if (out.outcome === 'spawned') state.selected = out.id;
    await refresh();
  });
});
$('fork-compose').addEventListener('submit', (e) => {
  e.preventDefault();
  const text = $('fork-input').value.trim();
  if (!text || !state.selected) return;
  act(async () => {
    const out = await api(`/nodes/${encodeURIComponent(state.selected)}/route`, { text });
    $('fork-input').value = '';
    if (out.outcome === 'spawned') state.selected = out.id;
    await refresh();
  });
});
for (const b of document.querySelectorAll('.actions [data-status]')) {
  b.addEventListener('click', () => act(() => api(`/nodes/${encodeURIComponent(state.selected)}/status`, { status: b.dataset.status })));
}
$('fork-archive').addEventListener('click', () =>
  act(async () => {
    await api(`/nodes/${encodeURIComponent(state.selected)}/archive`, { hidden: true });
    closeFork();
  }),
);
$('resolve-continue').addEventListener('click', () => act(() => api(`/nodes/${encodeURIComponent(state.selected)}/resolve`, { candidates: ['continue'] })));
$('resolve-new').addEventListener('click', () =>
  act(() => api(`/nodes/${encodeURIComponent(state.selected)}/resolve`, { candidates: [{ type: 'task', title: $('resolve-title').value || 'follow-up' }] })),
);
$('scope').addEventListener('change', () => act(async () => { await loadTemporal(); await refresh(); }));
$('scrubber').addEventListener('input', () => {
  const t = state.temporal;
  if (!t) return;
  const from = Date.parse(t.from), to = Date.parse(t.to);
  const v = Number($('scrubber').value);
  state.scrubAt = v >= 1000 ? null : new Date(from + ((to - from) * v) / 1000).toISOString();
  act(refresh);
});
$('scrub-live').addEventListener('click', () => {
  state.scrubAt = null;
  $('scrubber').value = '1000';
  act(refresh);
});

closeFork();
let pending = null;
let stream = null;
// Server-sent events over fetch (an EventSource cannot send the token); reconnects after the
// stream ends unless the token was refused.
async function connect() {
  stream?.abort();
  const ctl = new AbortController();
  stream = ctl;
  try {
    const res = await fetch(`${API}/events`, { headers: withToken({ accept: 'text/event-stream' }), signal: ctl.signal });
    if (!res.ok) {
      $('live').classList.add('off');
      const p = await res.json().catch(() => null);
      if (refusedToken(p)) return askToken(p);
    } else {
      $('live').classList.remove('off');
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value.replace(/\r\n/g, '\n');
        for (let i = buf.indexOf('\n\n'); i >= 0; i = buf.indexOf('\n\n')) {
          const block = buf.slice(0, i);
          buf = buf.slice(i + 2);
          if (/^event: ?change$/m.test(block)) {
            // Coalesce bursts of changes into one refresh.
            clearTimeout(pending);
            pending = setTimeout(() => act(refresh), 30);
          }
        }
      }
    }
  } catch {
    if (ctl.signal.aborted) return;
  }
  $('live').classList.add('off');
  setTimeout(() => stream === ctl && connect(), 2000);
}
$('token-form').addEventListener('submit', (e) => {
  e.preventDefault();
  token = $('token').value.trim();
  $('token-form').classList.add('is-hidden');
  connect();
  act(refresh);
});
connect();
act(refresh);
