// The weft desk: one actor graph, three projections (linear, grid, tree), a fork panel, a
// graph strip, the coordinator thread and a temporal scrubber. Live: every change on the
// server arrives as an SSE `change` event and the visible parts are fetched again.
//
// Inside `weft serve` the API needs the human token: on 401/403 the page asks for it (like
// ThreadDesk) and keeps it in this page's memory only. The event stream is read with fetch so
// that it can carry the token. Text from people and agents is inserted as text (never HTML)
// and isolated (`<bdi>`, `unicode-bidi: isolate`) so that bidi controls cannot spoof the page.
//
// Live agents (when the server runs them; feature-detected with `GET /api/actors/agents`, an
// older server answers 404 and the page works as before): a per-node badge (running, waiting
// on X, idle) from `agent` events and that list, a Stop button (`POST …/interrupt`), a live
// assistant bubble fed by `delta` events and replaced by the assistant line once it is on disk,
// agent lines drawn by kind (turn boundaries subtle, calls and results in a task's fork panel,
// routing markers one line), and a banner when no model is configured. With agents on, a
// person's message goes to `POST …/messages` (the node's agent takes it); otherwise `…/route`.
// A page loaded mid-step restores the bubble from the agent state's `streaming` text and joins
// the deltas by their offset (`at`). The stream is resumable: the page keeps the last SSE id
// (durable agent lines carry one) and sends it as `Last-Event-ID` when it reconnects; the
// server replays the lines missed meanwhile, or sends `reset` and the page fetches everything.
//
// The store's spare node directories (`GET /api/actors/store`; an older server answers 404
// and the page shows nothing): a chip with how many are ready and used, and a warning with the
// store's last error while it says it is failing (spawns then build their directories without
// one). The thread that makes them announces nothing, so the page reads it on each refresh and
// every few seconds while visible.

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

// Live agents: `api` is null until known, then true (the server runs agents) or false.
const agents = {
  api: null,
  model: null,
  states: {},
  // node → {turn, step, text}: the model step streaming now (one per node, bounded).
  live: new Map(),
  // node → the last step whose bubble ended (a late `streaming` state does not bring it back).
  ended: new Map(),
};

// The store's status: `api` is null until known, false when the server has no such route.
const store = { api: null };

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
    // A refused token already shows the token form.
    if (refusedToken(e)) return;
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

// One argument list as a short readable text (`{"a":1}` → `a: 1`), cut at `max` characters.
function brief(v, max = 120) {
  let s;
  if (v && typeof v === 'object' && !Array.isArray(v)) s = Object.entries(v).map(([k, x]) => `${k}: ${typeof x === 'string' ? x : JSON.stringify(x)}`).join(', ');
  else s = typeof v === 'string' ? v : JSON.stringify(v ?? '');
  s = String(s).replace(/\s+/g, ' ');
  return s.length > max ? `${s.slice(0, max)}…` : s;
}

// A line of a transcript. Agent lines (an `agent` field, see weft_core::agents) are drawn by
// kind; `work` is true in the fork panel of a task node, where calls, results and jobs show
// in full (on the discussion surface they are one-line markers).
function lineItem(l, work = false) {
  if (l.corrupt !== undefined) return el('li', { class: 'corrupt', text: `${l.line}: unreadable line (${l.error || 'corrupt'})` });
  const a = l.agent && typeof l.agent === 'object' && !Array.isArray(l.agent) ? l.agent : null;
  const kind = a && typeof a.entry === 'string' ? a.entry : null;
  const cls = [`role-${l.role}`];
  if (kind) cls.push('agent', `agent-${kind}`);
  // Results (and other agent records) are one line; the full text is the tooltip.
  const title = `${l.role}${kind ? ` · ${kind}` : ''} · ${l.at}${kind && kind !== 'assistant' ? `\n${l.text}` : ''}`;
  const li = el('li', { class: cls.join(' '), title, 'data-line': l.line, 'data-entry': kind });
  li.append(el('span', { class: 'n', text: String(l.line) }));
  const calls = kind === 'assistant' && Array.isArray(a.calls) ? a.calls : [];
  if (kind === 'assistant') {
    if (a.step !== undefined) li.dataset.step = String(a.step);
    // A step that only called tools is written as "→ name, …".
    const callsOnly = calls.length > 0 && String(l.text).startsWith('→');
    if (callsOnly) li.classList.add('calls-only');
    if (!(work && callsOnly)) li.append(el('bdi', { dir: 'auto', text: l.text }));
    if (calls.length && work) {
      li.append(
        el('ul', { class: 'calls' }, calls.map((c) => el('li', { class: 'call', 'data-tool': c.name }, el('b', { text: `⚙ ${c.name}` }), el('bdi', { dir: 'auto', text: ` ${brief(c.arguments)}` })))),
      );
    } else if (calls.length && !callsOnly) {
      li.append(el('span', { class: 'muted calls-inline', text: ` → ${calls.map((c) => c.name).join(', ')}` }));
    }
    return li;
  }
  if (kind === 'turn_end' && a.end && a.end !== 'completed') li.classList.add('turn-not-completed');
  if (kind === 'tool_result' && a.status && a.status !== 'succeeded') li.classList.add('call-not-succeeded');
  li.append(el('bdi', { dir: 'auto', text: l.text }));
  if (work && kind === 'tool_result' && a.value !== undefined && a.value !== null) {
    li.append(el('details', { class: 'result' }, el('summary', { text: 'value' }), el('pre', { text: JSON.stringify(a.value, null, 2) })));
  }
  return li;
}

// ----- live agents -----------------------------------------------------------------------

const agentOf = (id) => (agents.api ? agents.states[id] : undefined);

function badgeInfo(s) {
  switch (s.phase) {
    case 'waiting':
      return { phase: 'waiting', text: `waiting on ${(s.waiting || []).join(', ') || '…'}` };
    case 'idle':
      return { phase: 'idle', text: s.queuedTasks ? `idle · ${s.queuedTasks} queued` : 'idle' };
    case 'interrupted':
      return { phase: 'stopping', text: 'stopping' };
    case 'running_tools':
      return { phase: 'running', text: 'running · tools' };
    default:
      return { phase: 'running', text: 'running' };
  }
}

// The agent badge of node `id`, or null when the node has no agent (or agents are off).
function agentBadge(id) {
  const s = agentOf(id);
  if (!s) return null;
  const b = badgeInfo(s);
  const jobs = Array.isArray(s.openJobs) && s.openJobs.length ? ` · ${s.openJobs.length} job${s.openJobs.length > 1 ? 's' : ''}` : '';
  return el('span', {
    class: `agent-badge agent-${b.phase}`,
    'data-testid': 'agent-badge',
    'data-node': id,
    'data-phase': b.phase,
    title: `agent of ${id}: ${s.phase}${s.turn != null ? `, turn ${s.turn}` : ''}`,
    text: `${b.text}${jobs}`,
  });
}

// The agent bar (badge + Stop) of node `id` into container `box`.
function renderAgentBar(box, id) {
  const badge = id ? agentBadge(id) : null;
  box.classList.toggle('is-hidden', !badge);
  if (!badge) return box.replaceChildren();
  const busy = badge.dataset.phase !== 'idle';
  box.replaceChildren(
    el('span', { class: 'muted', text: 'agent' }),
    badge,
    el('button', {
      type: 'button',
      class: 'stop',
      'data-testid': 'agent-stop',
      'data-node': id,
      disabled: !busy,
      title: 'Interrupt the running turn (a wait included)',
      text: 'Stop',
      onclick: () =>
        act(async () => {
          const out = await api(`/nodes/${encodeURIComponent(id)}/interrupt`, { reason: 'stopped from the desk' });
          if (out?.status && out.status !== 'ended') toast(`stop: ${out.status}`);
          await refresh();
        }),
    }),
  );
}

function renderBanner() {
  const m = agents.api ? agents.model : null;
  const banner = $('model-banner');
  const chip = $('model-chip');
  banner.classList.toggle('is-hidden', !m || m.configured !== false);
  chip.classList.toggle('is-hidden', !m || !m.configured);
  if (!m) return;
  if (m.configured === false) {
    banner.replaceChildren(
      el('b', { text: 'No model is configured. ' }),
      el('bdi', { dir: 'auto', text: m.note || '' }),
      el('span', { text: `${m.note ? ' ' : ''}The built-in deterministic model answers.` }),
    );
  } else {
    chip.textContent = `model ${[m.provider, m.name].filter(Boolean).join(':') || 'configured'}`;
  }
}

// Reads the agents list; a server without it (404) or whose desk runs no agents switches the
// agent parts off.
async function loadAgents() {
  if (agents.api === false) return;
  let res;
  try {
    res = await fetch(`${API}/agents`, { headers: withToken() });
  } catch {
    return;
  }
  if (res.status === 404 || res.status === 405 || res.status === 501) {
    agents.api = false;
    renderBanner();
    return;
  }
  const data = await res.json().catch(() => null);
  if (!res.ok) {
    if (refusedToken(data)) askToken(data);
    return;
  }
  // A desk that runs no agents (`running: false`, the standalone `weft actors desk`) is a desk
  // without them: messages are routed by the desk, no banner.
  if (!data || typeof data.agents !== 'object' || data.agents === null || data.running === false) {
    agents.api = false;
  } else {
    agents.api = true;
    agents.model = data.model || null;
    agents.states = data.agents;
    for (const [node, st] of Object.entries(data.agents)) restoreLive(node, st?.streaming);
  }
  renderBanner();
}

// A step that streamed before this page loaded: its text so far becomes the live bubble
// (unless the page already has more of it, or the step ended meanwhile).
function restoreLive(node, s) {
  if (!s || typeof s.text !== 'string' || typeof s.step !== 'number') return;
  if ((agents.ended.get(node) ?? -1) >= s.step) return;
  const l = agents.live.get(node);
  if (l && l.step === s.step && l.text.length >= s.text.length) return;
  agents.live.set(node, { turn: s.turn, step: s.step, text: s.text });
}

function endLive(node) {
  const l = agents.live.get(node);
  if (!l) return;
  agents.ended.set(node, Math.max(l.step, agents.ended.get(node) ?? -1));
  agents.live.delete(node);
}

// The live bubble of `node`'s streaming step, or null.
function liveItem(node) {
  const l = agents.live.get(node);
  if (!l || !l.text) return null;
  return el(
    'li',
    { class: 'role-assistant streaming', 'data-testid': 'live-bubble', 'data-node': node, 'data-step': l.step, title: 'streaming…' },
    el('span', { class: 'n', text: '…' }),
    el('bdi', { dir: 'auto', text: l.text }),
    el('span', { class: 'cursor', text: '▍' }),
  );
}

// Draws `lines` of `node` into `list`, with the live bubble last unless its step has landed.
function renderLines(list, node, lines, work = false) {
  const l = agents.live.get(node);
  if (l && lines.some((x) => x.agent?.entry === 'assistant' && x.agent.step === l.step && x.agent.turn === l.turn)) endLive(node);
  list.dataset.node = node || '';
  const items = lines.map((x) => lineItem(x, work));
  const bubble = liveItem(node);
  if (bubble) items.push(bubble);
  list.replaceChildren(...items);
}

// A `delta` event: grows the bubble in place wherever the node's transcript is shown.
function onDelta(d) {
  if (!d || typeof d.node !== 'string' || typeof d.text !== 'string') return;
  if ((agents.ended.get(d.node) ?? -1) >= d.step) return;
  let l = agents.live.get(d.node);
  if (!l || l.step !== d.step) {
    l = { turn: d.turn, step: d.step, text: '' };
    agents.live.set(d.node, l);
  }
  // `at` is where the delta starts in the step's text: a restored text may hold it already.
  const at = typeof d.at === 'number' ? d.at : l.text.length;
  if (at + d.text.length <= l.text.length) return;
  l.text += at <= l.text.length ? d.text.slice(l.text.length - at) : d.text;
  for (const list of document.querySelectorAll('ol.lines[data-node]')) {
    if (list.dataset.node !== d.node) continue;
    const old = list.querySelector(':scope > [data-testid=live-bubble]');
    const fresh = liveItem(d.node);
    if (old && fresh) old.replaceWith(fresh);
    else if (fresh) list.append(fresh);
    list.parentElement?.scrollTo?.({ top: list.parentElement.scrollHeight });
  }
}

// An `agent` event: the bubble ends with its turn or an aborted step; the views refresh.
function onAgentEvent(e) {
  if (!e || typeof e.node !== 'string') return;
  const l = agents.live.get(e.node);
  if (l && (e.output === 'turn_ended' || e.output === 'abort_model' || (e.output === 'model_request' && e.step !== l.step))) endLive(e.node);
  if (agents.api === false) agents.api = null; // a server that sends agent events has them
  scheduleRefresh();
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
      agentBadge(t.id),
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
      el('span', { class: 'type', text: `${n.type} · ${label(n.status)}${n.pausedBy ? ' · paused' : ''}` }, agentBadge(n.id)),
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
          act(refresh);
        },
      }, agentBadge(d.id)),
    );
  }
  const workers = el('div', { class: 'workers' }, el('h2', { text: 'Workers' }));
  for (const w of v.workers) {
    workers.append(el('div', { class: `status-${w.status}`, 'data-node': w.id }, el('span', { class: 'dot' }), `${w.title}: ${label(w.status)} — ${w.summary} `, agentBadge(w.id)));
  }
  list.append(workers);
  const transcript = el('ol', { class: 'lines transcript' });
  renderLines(transcript, v.focus, v.transcript);
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

function renderCoordinator(lin, meta, root) {
  renderLines($('coord-lines'), root, lin.transcript);
  renderAgentBar($('coord-agent'), root);
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

// Refreshes run one at a time; one asked for meanwhile runs once more after it.
let refreshing = null;
let refreshAgain = false;
function refresh() {
  if (refreshing) {
    refreshAgain = true;
    return refreshing;
  }
  refreshing = (async () => {
    try {
      do {
        refreshAgain = false;
        await refreshOnce();
      } while (refreshAgain);
    } finally {
      refreshing = null;
    }
  })();
  return refreshing;
}

let pending = null;
// Coalesces bursts of events into one refresh.
function scheduleRefresh() {
  clearTimeout(pending);
  pending = setTimeout(() => act(refresh), 30);
}

function renderSpares(sp) {
  const chip = $('spare-chip');
  const banner = $('spare-banner');
  chip.classList.toggle('is-hidden', !sp);
  banner.classList.toggle('is-hidden', !sp?.failing);
  if (!sp) return;
  chip.textContent = `spare nodes ${sp.ready} ready, ${sp.used} used${sp.failing ? ', failing' : ''}`;
  chip.classList.toggle('warn', !!sp.failing);
  chip.classList.toggle('muted', !sp.failing);
  if (sp.failing) {
    banner.replaceChildren(
      el('b', { text: 'Spare node directories cannot be made: ' }),
      el('bdi', { dir: 'auto', text: sp.lastError || 'unknown error' }),
      el('span', { text: ` (${sp.errors} failure${sp.errors === 1 ? '' : 's'}). Spawns build their directories without one (slower) while the server retries.` }),
    );
  }
}

// Reads the store's status; a server without the route (404) hides its parts for good.
async function loadStore() {
  if (store.api === false) return;
  let res;
  try {
    res = await fetch(`${API}/store`, { headers: withToken() });
  } catch {
    return;
  }
  if (res.status === 404 || res.status === 405) {
    store.api = false;
    renderSpares(null);
    return;
  }
  // A refused token is asked for by the refresh's reads (not by this poll: no focus taken).
  if (!res.ok) return;
  const data = await res.json().catch(() => null);
  store.api = true;
  renderSpares(data?.spareNodes || null);
}

async function refreshOnce() {
  const [graph, lin, meta] = await Promise.all([api('/graph'), api('/views/linear'), api('/views/metathread?limit=40'), loadAgents(), loadStore()]);
  state.graph = graph;
  await loadTemporal();
  const byId = new Map(graph.nodes.map((n) => [n.id, n]));
  $('session').textContent = byId.get(graph.root)?.title || '';
  const tasks = graph.nodes.filter((n) => n.type === 'task' && !n.hidden);
  $('run-chip').textContent = `${tasks.filter((t) => t.status === 'running').length} of ${tasks.length} running`;
  renderCoordinator(lin, meta, graph.root);
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
  renderAgentBar($('fork-agent'), n.id);
  renderLines($('fork-lines'), n.id, f.transcript, n.type === 'task');
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
// A person's message: with agents on, the node's agent takes it (`messages`: the server
// admits it, the agent's spawn tool decides on drift); otherwise the desk routes it.
async function say(node, text) {
  if (agents.api === null) await loadAgents();
  return api(`/nodes/${encodeURIComponent(node)}/${agents.api ? 'messages' : 'route'}`, { text });
}
$('coord-compose').addEventListener('submit', (e) => {
  e.preventDefault();
  const text = $('coord-input').value.trim();
  if (!text) return;
  act(async () => {
    const out = await say(state.graph?.root || 'coordinator', text);
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
    const out = await say(state.selected, text);
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
let stream = null;
// The id of the last event that carried one (sent back as `Last-Event-ID` on reconnects).
let lastEventId = null;

// One server-sent event block → {event, data, id}.
function parseEvent(block) {
  let event = 'message';
  let id = null;
  const data = [];
  for (const line of block.split('\n')) {
    if (line.startsWith(':')) continue;
    const i = line.indexOf(':');
    const field = i < 0 ? line : line.slice(0, i);
    const value = i < 0 ? '' : line.slice(i + 1).replace(/^ /, '');
    if (field === 'event') event = value;
    else if (field === 'data') data.push(value);
    else if (field === 'id') id = value;
  }
  return { event, data: data.join('\n'), id };
}

function json(text) {
  try {
    return JSON.parse(text);
  } catch {
    return null;
  }
}
// Server-sent events over fetch (an EventSource cannot send the token); reconnects after the
// stream ends unless the token was refused, with the last id as `Last-Event-ID` (as an
// EventSource would).
async function connect() {
  stream?.abort();
  const ctl = new AbortController();
  stream = ctl;
  try {
    const headers = withToken({ accept: 'text/event-stream' });
    if (lastEventId) headers['last-event-id'] = lastEventId;
    const res = await fetch(`${API}/events`, { headers, signal: ctl.signal });
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
          const { event, data, id } = parseEvent(buf.slice(0, i));
          buf = buf.slice(i + 2);
          if (id !== null) lastEventId = id;
          if (event === 'change' || event === 'reset') scheduleRefresh();
          else if (event === 'delta') onDelta(json(data));
          else if (event === 'agent') onAgentEvent(json(data));
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
setInterval(() => {
  if (!document.hidden && store.api !== false && $('token-form').classList.contains('is-hidden')) loadStore();
}, 5000);
