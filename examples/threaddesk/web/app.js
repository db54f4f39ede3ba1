// ThreadDesk's browser UI: a thin client of the DGP 0.1 operations (frames, assessments,
// commits, receipts). Every piece of server or user text is inserted with textContent, never as
// HTML. Images are shown only after their size and SHA-256 match the frame's blob record.
const $ = (id) => document.getElementById(id);
const MAX_IMAGE = 256 * 1024;
const IMAGE_TYPES = ['image/png', 'image/jpeg', 'image/webp'];
let objectUrls = [];

/** Builds an element; `text` becomes a text node. */
function el(tag, { text, cls, attrs } = {}, ...children) {
  const n = document.createElement(tag);
  if (text !== undefined) n.textContent = String(text);
  if (cls) n.className = cls;
  for (const [k, v] of Object.entries(attrs ?? {})) n.setAttribute(k, v);
  n.append(...children);
  return n;
}

/** A refused protocol call: carries the problem's `code`. */
class Problem extends Error {
  constructor(status, body) {
    super(`${body?.code ?? `HTTP_${status}`}: ${body?.detail ?? 'request failed'}`);
    this.code = body?.code ?? `HTTP_${status}`;
    this.status = status;
  }
}

async function api(path, { body, key } = {}) {
  const headers = { Authorization: `Bearer ${$('token').value}`, Accept: 'application/json' };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  if (key) headers['Idempotency-Key'] = key;
  const r = await fetch(path, { method: body === undefined ? 'GET' : 'POST', headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const data = await r.json().catch(() => null);
  if (!r.ok) throw new Problem(r.status, data);
  return data;
}

function explain(e) {
  const why = {
    STALE_FRAME: 'This thread changed after this page read its frame (another tab, a person or an agent acted). Nothing was applied. Refresh to read a new frame.',
    FRAME_EXPIRED: 'This frame expired. Refresh to read a new frame.',
    HUMAN_APPROVAL_REQUIRED: 'Only an authenticated human may commit this. The token in use is not a human token.',
    UNAUTHENTICATED: 'The token was not accepted.',
  }[e.code];
  return why ? `${e.message}\n${why}` : e.message;
}

function showAlert(message) {
  const a = $('alert');
  a.textContent = message;
  a.hidden = !message;
}

const hex = (buf) => Array.from(new Uint8Array(buf), (b) => b.toString(16).padStart(2, '0')).join('');

/** Fetches a blob, checks its length and SHA-256 against the frame, then shows it. */
async function imageEvidence(e) {
  const box = el('div', { cls: 'evidence untrusted', attrs: { 'data-evidence': e.evidence_id } });
  box.append(el('div', { cls: 'label', text: `${e.evidence_id} · ${e.mime_type} · ${e.trust} · from ${e.source.id}${e.required ? ' · required' : ''}` }));
  try {
    if (!IMAGE_TYPES.includes(e.mime_type)) throw new Error(`unsupported image type ${e.mime_type}`);
    if (!e.blob.href.startsWith('/dgp/blobs/')) throw new Error('the blob link leaves this server');
    const r = await fetch(e.blob.href, { headers: { Authorization: `Bearer ${$('token').value}` } });
    if (!r.ok) throw new Error(`could not fetch the image (HTTP ${r.status})`);
    const bytes = await r.arrayBuffer();
    const sha = hex(await crypto.subtle.digest('SHA-256', bytes));
    if (bytes.byteLength !== e.blob.byte_length || bytes.byteLength > MAX_IMAGE || sha !== e.blob.sha256) {
      throw new Error('integrity check failed: the bytes do not match the frame’s size and SHA-256');
    }
    const url = URL.createObjectURL(new Blob([bytes], { type: e.mime_type }));
    objectUrls.push(url);
    box.append(el('img', { attrs: { src: url, alt: `image evidence ${e.evidence_id}`, 'data-verified': 'true' } }));
  } catch (err) {
    box.append(el('p', { cls: 'card-error', text: `Image not shown: ${err.message}`, attrs: { 'data-image-error': e.evidence_id } }));
  }
  return box;
}

function textEvidence(e) {
  const content = e.kind === 'json' ? JSON.stringify(e.content, null, 1) : e.content;
  return el(
    'div',
    { cls: `evidence ${e.trust}`, attrs: { 'data-evidence': e.evidence_id } },
    el('div', { cls: 'label', text: `${e.evidence_id} · ${e.kind} · ${e.trust} · from ${e.source.kind}:${e.source.id}` }),
    // Evidence text is untrusted: its direction is isolated so bidi controls cannot reorder the page around it.
    el('pre', { text: content, attrs: { dir: 'auto' } }),
  );
}

/**
 * A log's summary (`note-log`, `image-log`): how many items it has, how many the frame shows
 * (the newest, within the frame's byte budget), and a button that pages in earlier ones.
 */
function logSummary(e) {
  const c = e.content;
  const box = el('div', { cls: 'log', attrs: { 'data-log': c.log } });
  const line = el('p', { cls: 'meta', attrs: { 'data-role': 'log-count' } });
  const earlier = el('div', { attrs: { 'data-role': 'earlier' } });
  let href = c.earlier_href;
  let shown = c.shown;
  const count = () => {
    line.textContent = `${c.count} ${c.log} item(s); showing the newest ${shown}` + (href ? '' : ' (all)');
  };
  count();
  box.append(line, earlier);
  if (href) {
    const b = el('button', { text: 'Show earlier', cls: 'secondary', attrs: { type: 'button', 'data-role': 'earlier-button' } });
    b.addEventListener('click', async () => {
      b.disabled = true;
      try {
        if (!href.startsWith('/dgp/surfaces/')) throw new Error('the page link leaves this server');
        const page = await api(href);
        const items = [];
        for (const item of page.items) items.push(item.kind === 'image' ? await imageEvidence(item) : textEvidence(item));
        earlier.prepend(...items);
        shown += page.items.length;
        href = page.earlier_href;
        count();
        if (!href) b.remove();
      } catch (err) {
        showAlert(explain(err));
      } finally {
        b.disabled = false;
      }
    });
    box.append(b);
  }
  return box;
}

async function submit(card, frame, decision, answer) {
  const error = card.querySelector('[data-role="error"]');
  error.textContent = '';
  showAlert('');
  const assessment = {
    dgp: '0.1',
    assessment_id: `a-${crypto.randomUUID()}`,
    frame_id: frame.frame_id,
    decision_id: decision.decision_id,
    mode: 'live',
    resolver: { kind: 'human', provider: 'threaddesk-ui' },
    result: { status: 'answered', answer },
  };
  const commit = { dgp: '0.1', frame_id: frame.frame_id, decision_id: decision.decision_id, assessment_id: assessment.assessment_id };
  const key = `k-${crypto.randomUUID()}`;
  try {
    await api('/dgp/assessments', { body: assessment });
    // The exact request stays visible until the outcome is known; a retry must reuse its key.
    $('receipt').textContent = JSON.stringify({ pending_commit: commit, idempotency_key: key }, null, 2);
    const receipt = await api('/dgp/commits', { body: commit, key });
    $('receipt').textContent = JSON.stringify(receipt, null, 2);
    await refreshTo(frame.surface_id, receipt.state_revision);
  } catch (e) {
    const text = explain(e);
    if ($('receipt').textContent.includes(key)) {
      $('receipt').textContent = JSON.stringify({ refused: e.code, commit, idempotency_key: key }, null, 2);
    }
    error.textContent = text;
    error.setAttribute('data-code', e.code ?? 'ERROR');
    showAlert(`${frame.surface_id}: ${text}`);
  }
}

function decisionView(card, frame, d) {
  const box = el('section', { cls: 'decision', attrs: { 'data-node': d.node_id } });
  box.append(el('h3', { text: d.question }, el('span', { cls: 'kind', text: ` · ${d.kind}, ${d.dispatch.replace('_', ' ')}` })));
  if (d.kind === 'choice') {
    const actions = el('div', { cls: 'actions' });
    for (const o of d.options) {
      const human = o.effect.required_actor === 'human';
      const b = el('button', { text: o.label, cls: human ? 'human' : '', attrs: { type: 'button', title: o.meaning, 'data-option': o.id } });
      b.addEventListener('click', async () => {
        b.disabled = true;
        try {
          await submit(card, frame, d, { choice: o.id, input: {} });
        } finally {
          b.disabled = false;
        }
      });
      actions.append(b);
    }
    box.append(actions);
  } else if (d.node_id === 'attach_image') {
    const file = el('input', { attrs: { type: 'file', accept: IMAGE_TYPES.join(','), 'data-role': 'image' } });
    const b = el('button', { text: 'Attach as required evidence', cls: 'secondary', attrs: { type: 'button' } });
    b.addEventListener('click', async () => {
      const error = card.querySelector('[data-role="error"]');
      const f = file.files[0];
      if (!f) return void (error.textContent = 'Choose an image first.');
      if (f.size > MAX_IMAGE) return void (error.textContent = 'Images are limited to 256 KiB.');
      if (!IMAGE_TYPES.includes(f.type)) return void (error.textContent = 'Only PNG, JPEG and WebP images are accepted.');
      const bytes = new Uint8Array(await f.arrayBuffer());
      let bin = '';
      for (let i = 0; i < bytes.length; i += 0x8000) bin += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
      await submit(card, frame, d, { value: { mime_type: f.type, data_base64: btoa(bin) } });
    });
    box.append(file, b);
  } else if (d.kind === 'input') {
    const props = d.input_schema?.properties ?? {};
    const field = (d.input_schema?.required ?? Object.keys(props))[0];
    const area = el('textarea', { attrs: { 'data-role': 'text', maxlength: String(props[field]?.maxLength ?? 4000) } });
    const b = el('button', { text: 'Submit text', cls: 'secondary', attrs: { type: 'button' } });
    b.addEventListener('click', () => submit(card, frame, d, { value: { [field]: area.value } }));
    box.append(area, b);
  }
  return box;
}

async function threadCard(surface) {
  const disclosure = $('disclosure').value;
  const frame = await api(`${surface.frame_href}?disclosure=${encodeURIComponent(disclosure)}&horizon=2`);
  const card = el('article', { cls: 'card', attrs: { 'data-surface': surface.surface_id, 'data-frame': frame.frame_id, 'data-revision': String(surface.revision ?? -1) } });
  const rev = frame.read_set.map((r) => `${r.resource_id}@${r.revision}`).join(', ');
  card.append(
    el('h2', { text: surface.title }),
    el('p', { cls: 'meta', text: `State: ${surface.state} · read set ${rev} · ${frame.policy_ref} · service calls left ${frame.service_calls_remaining}`, attrs: { 'data-role': 'meta' } }),
  );
  for (const e of frame.observations) {
    if (e.kind === 'image') card.append(await imageEvidence(e));
    else if (e.evidence_id.endsWith('-log') && e.kind === 'json') card.append(logSummary(e));
    else if (e.evidence_id !== 'state') card.append(textEvidence(e));
  }
  card.append(el('p', { cls: 'card-error', attrs: { role: 'status', 'data-role': 'error' } }));
  for (const d of frame.decisions) card.append(decisionView(card, frame, d));
  if (frame.disclosure.preview) {
    const p = frame.disclosure.preview;
    card.append(el('p', { cls: 'meta', text: `Preview (${p.completeness}, horizon ${p.horizon ?? 'full'}): ${p.nodes.join(', ')} — descriptive only; nothing in it can be committed.` }));
  }
  const raw = el('details', {}, el('summary', { text: 'Inspect the immutable frame' }), el('pre', { text: JSON.stringify(frame, null, 2) }));
  card.append(raw);
  return card;
}

// Every re-render runs in turn, so a live update and the page's own refresh never interleave.
let queue = Promise.resolve();
function serial(task) {
  const p = queue.then(task);
  queue = p.catch(() => {});
  return p;
}

const ready = () => document.body.setAttribute('data-ready', String(Date.now()));
const cardOf = (id) => Array.from($('threads').children).find((c) => c.dataset.surface === id);
const shownRevision = (id) => Number(cardOf(id)?.dataset.revision ?? -1);

async function refreshBulletin() {
  const { entries } = await api('/dgp/bulletin');
  $('bulletin').replaceChildren(...entries.map((e) => el('li', { text: e.text, attrs: { 'data-entry': e.id, dir: 'auto' } })));
}

async function refreshAll() {
  wanted.clear();
  for (const u of objectUrls) URL.revokeObjectURL(u);
  objectUrls = [];
  const { surfaces } = await api('/dgp/surfaces');
  const cards = [];
  for (const s of surfaces) cards.push(await threadCard(s));
  $('threads').replaceChildren(...cards);
  await refreshBulletin();
  ready();
}

/** Re-reads one thread's frame (and the bulletin) in place; the other cards stay as they are. */
async function refreshSurface(id) {
  const { surfaces } = await api('/dgp/surfaces');
  const s = surfaces.find((x) => x.surface_id === id);
  const old = cardOf(id);
  if (!s || !old || surfaces.length !== $('threads').children.length) return refreshAll();
  const card = await threadCard(s);
  const gone = new Set(Array.from(old.querySelectorAll('img'), (i) => i.src).filter((u) => u.startsWith('blob:')));
  for (const u of gone) URL.revokeObjectURL(u);
  objectUrls = objectUrls.filter((u) => !gone.has(u));
  old.replaceWith(card);
  await refreshBulletin();
  ready();
}

const refresh = () => serial(refreshAll);
/** After this page's own commit: re-reads the thread unless a live update already showed `revision`. */
const refreshTo = (id, revision) => serial(() => (typeof revision !== 'number' ? refreshAll() : shownRevision(id) < revision ? refreshSurface(id) : undefined));

// Live updates. Threads the server announced newer than their card, with the revision announced;
// `'*'` asks for everything (a policy change, a `reset`, a reconnect after missed events).
const wanted = new Map();
const RETRY_MS = 2000;
let stream = null;

function catchUp() {
  return serial(async () => {
    try {
      if (wanted.has('*')) return await refreshAll();
      for (const [id, revision] of Array.from(wanted)) {
        wanted.delete(id);
        if (shownRevision(id) < revision) await refreshSurface(id);
      }
    } catch (e) {
      showAlert(explain(e));
    }
  });
}

function onLive(event, data) {
  if (event === 'surface' && typeof data?.surface === 'string' && typeof data.revision === 'number') {
    if (!cardOf(data.surface)) wanted.set('*', 0);
    else if (shownRevision(data.surface) < data.revision) wanted.set(data.surface, Math.max(data.revision, wanted.get(data.surface) ?? 0));
    else return;
  } else if (event === 'policy' || event === 'reset') {
    wanted.set('*', 0);
  } else {
    return;
  }
  catchUp();
}

function setLive(state) {
  const l = $('live');
  l.dataset.state = state;
  l.textContent = { live: 'live', reconnecting: 'reconnecting…', off: 'not live' }[state];
}

// One server-sent event block → {event, data}.
function parseEvent(block) {
  let event = 'message';
  const data = [];
  for (const line of block.split('\n')) {
    if (line.startsWith(':')) continue;
    const i = line.indexOf(':');
    const field = i < 0 ? line : line.slice(0, i);
    const value = i < 0 ? '' : line.slice(i + 1).replace(/^ /, '');
    if (field === 'event') event = value;
    else if (field === 'data') data.push(value);
  }
  try {
    return { event, data: JSON.parse(data.join('\n')) };
  } catch {
    return { event, data: null };
  }
}

/**
 * Opens `/threaddesk/events`: server-sent events read over fetch, because an EventSource cannot
 * send the bearer token (and the token stays out of URLs). Resolves once the stream is open or
 * has failed; a dropped stream reconnects every RETRY_MS and then re-reads everything (the events
 * missed meanwhile are not replayed). A refused token ends it.
 */
function listen() {
  stream?.abort();
  const ctl = new AbortController();
  stream = ctl;
  return new Promise((opened) => {
    const run = async (again) => {
      try {
        const r = await fetch('/threaddesk/events', { headers: { Authorization: `Bearer ${$('token').value}`, Accept: 'text/event-stream' }, signal: ctl.signal });
        if (r.status === 401 || r.status === 403) {
          setLive('off');
          return;
        }
        if (r.ok) {
          setLive('live');
          if (again) onLive('reset');
          opened();
          const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
          let buf = '';
          for (;;) {
            const { value, done } = await reader.read();
            if (done) break;
            buf += value.replace(/\r\n?/g, '\n');
            for (let i = buf.indexOf('\n\n'); i >= 0; i = buf.indexOf('\n\n')) {
              const { event, data } = parseEvent(buf.slice(0, i));
              buf = buf.slice(i + 2);
              onLive(event, data);
            }
          }
        }
      } catch {
        // A network error or an abort: handled below.
      } finally {
        opened();
      }
      if (ctl.signal.aborted || stream !== ctl) return;
      setLive('reconnecting');
      setTimeout(() => stream === ctl && run(true), RETRY_MS);
    };
    run(false);
  });
}

$('connect').addEventListener('submit', async (ev) => {
  ev.preventDefault();
  showAlert('');
  try {
    // The stream opens first, so nothing committed after the page's read goes unannounced.
    await listen();
    await refresh();
  } catch (e) {
    showAlert(explain(e));
  }
});
$('disclosure').addEventListener('change', () => $('connect').requestSubmit());
