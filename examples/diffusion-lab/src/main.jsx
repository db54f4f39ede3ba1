// The diffusion lab page: the published controls (requested vs effective), the cells with
// their states and progress, the profile plot, and every operation with its timeline — the
// same application an agent drives through the published tools (window.lab.tools), and the
// Agent panel: a node agent whose tools are those published tools and a Worker job.
import { For, Show, createMemo, createSignal } from 'solid-js';
import { useFrameTick } from './tick.js';
import { render } from 'solid-js/web';
import { createLab } from './lab.js';
import { openLabAgent } from './agent.js';
import { AgentPanel } from './AgentPanel.jsx';
import { analytic, WIDTH } from './graph.js';
import './style.css';

const lab = createLab();
window.lab = lab;

// The node agent of the lab (IndexedDB; see agent.js), opened beside the page.
const [labAgent, setLabAgent] = createSignal(null);
const [labAgentError, setLabAgentError] = createSignal(null);
openLabAgent(lab).then(
  (ctl) => {
    window.labAgent = ctl;
    setLabAgent(ctl);
    window.labAgentReady = true;
  },
  (err) => {
    console.warn('lab agent:', err);
    setLabAgentError(`${err.code ?? 'ERROR'}: ${err.message}`);
  },
);


const fmt = (v) => (typeof v === 'number' ? String(Number(v.toPrecision(4))) : String(v));

function ControlRow(props) {
  const c = () => props.control;
  const requested = () => {
    props.tick();
    return lab.requested.get(c().name);
  };
  // A memo: the input is rewritten only when the effective value changes, never while a
  // person is typing during unrelated updates.
  const effective = createMemo(() => props.snapshot().controls[c().name]);
  const input = () => {
    const k = c();
    if (k.type === 'number') {
      return (
        <input
          type="number"
          data-control={k.name}
          min={k.min}
          max={k.max}
          step={k.step}
          value={effective()}
          onChange={(e) => lab.setFromUi(k.name, Number(e.currentTarget.value))}
        />
      );
    }
    if (k.type === 'enum') {
      return (
        <select data-control={k.name} value={effective()} onChange={(e) => lab.setFromUi(k.name, e.currentTarget.value)}>
          <For each={k.options}>{(o) => <option value={o}>{o}</option>}</For>
        </select>
      );
    }
    if (k.type === 'boolean') {
      return <input type="checkbox" data-control={k.name} checked={effective()} onChange={(e) => lab.setFromUi(k.name, e.currentTarget.checked)} />;
    }
    return <input data-control={k.name} value={effective()} onChange={(e) => lab.setFromUi(k.name, e.currentTarget.value)} />;
  };
  return (
    <tr>
      <td title={c().description}>
        {c().name}
        <Show when={c().unit}>
          <span class="dim"> {c().unit}</span>
        </Show>
      </td>
      <td>{input()}</td>
      <td class="mono" data-requested={c().name}>
        {requested() ? `${fmt(requested().value)} (${requested().by})` : '—'}
      </td>
      <td class="mono" data-effective={c().name}>
        {fmt(effective())} <span class="dim">r{props.snapshot().versions[c().name]}</span>
        <Show when={requested()?.accepted != null && requested().accepted !== requested().value}>
          <span class="warn"> (accepted {fmt(requested().accepted)})</span>
        </Show>
      </td>
    </tr>
  );
}

function CellCard(props) {
  const cell = () => props.snapshot().cells[props.name];
  return (
    <div class="cell" data-cell={props.name} data-state={cell()?.state} data-progress={cell()?.progress ?? ''}>
      <div>
        <b>{props.name}</b> <span class={`badge ${cell()?.state}`}>{cell()?.state}</span>
      </div>
      <div class="bar">
        <div style={{ width: `${Math.round((cell()?.progress ?? (cell()?.state === 'ready' ? 1 : 0)) * 100)}%` }} />
      </div>
      <div class="mono dim">
        value {cell()?.valueCalc ?? '—'} {cell()?.final ? 'final' : 'partial'} {cell()?.upToDate ? '· up to date' : '· stale'}
        <Show when={cell()?.calc}> · running {cell()?.calc}</Show>
      </div>
      <Show when={cell()?.error}>
        <div class="err">
          {cell().error.cell}: {cell().error.message}
        </div>
      </Show>
    </div>
  );
}

function Plot(props) {
  const W = 520;
  const H = 220;
  const path = (pts) => pts.map(([x, y], i) => `${i ? 'L' : 'M'}${(x * W).toFixed(1)},${(H - y * (H - 10)).toFixed(1)}`).join('');
  const curves = () => {
    const s = props.snapshot();
    const p = s.cells.profile?.value;
    if (!p) return null;
    const n = p.u.length;
    const stride = Math.max(1, Math.floor(n / 400));
    const num = [];
    for (let i = 0; i < n; i += stride) num.push([i / (n - 1), p.u[i]]);
    let exact = null;
    if (s.controls.initial === 'gaussian') {
      exact = [];
      for (let i = 0; i <= 200; i++) exact.push([i / 200, analytic(i / 200, p.t, s.controls.diffusivity, WIDTH)]);
    }
    return { num, exact, t: p.t };
  };
  return (
    <svg viewBox={`0 0 ${W} ${H}`} class="plot" data-plot>
      <Show when={curves()}>
        <path d={path(curves().num)} class="num" />
        <Show when={curves().exact}>
          <path d={path(curves().exact)} class="exact" />
        </Show>
        <text x="8" y="16" class="mono">
          t = {fmt(curves().t)} s
        </text>
      </Show>
    </svg>
  );
}

function OperationCard(props) {
  const rec = () => {
    props.tick();
    return lab.app.inspect(props.id);
  };
  const event = (e) => {
    switch (e.type) {
      case 'accepted':
        return `accepted writes ${e.writes.map((w) => `w-${w}`).join(', ') || '(none)'}`;
      case 'effective':
        return `effective${e.coalesced.length ? `, batched with ${e.coalesced.map((w) => `w-${w}`).join(', ')}` : ''}${e.noop.length ? `, no-op ${e.noop.map((w) => `w-${w}`).join(', ')}` : ''}`;
      case 'calculation':
        return `calculation ${e.calc} of ${e.cell}`;
      case 'processed':
        return `${e.cell} processed by ${e.calc}${e.noop ? ' (already current)' : ''}`;
      case 'reopened':
        return `${e.cell} reopened: ${e.calc ?? 'a new calculation'} replaces ${e.was}`;
      case 'cell_failed':
        return `${e.cell ?? ''} failed: ${e.message}`;
      case 'intervening':
        return `intervening change of ${e.controls.join(', ')}`;
      case 'hosted':
        return `hosted as job ${e.job}`;
      case 'graph_replaced':
        return `graph ${e.from} → ${e.to}`;
      case 'outcome':
        return `outcome: ${e.outcome}`;
      default:
        return e.type;
    }
  };
  return (
    <div class="op" data-op={props.id} data-outcome={rec().outcome?.outcome ?? 'waiting'}>
      <div>
        <b>op-{props.id}</b> by {rec().by} <span class={`badge ${rec().state}`}>{rec().state}</span>{' '}
        <span class="mono dim">
          {rec()
            .writes.map((w) => `${w.control}=${fmt(w.requested)}${w.accepted !== w.requested ? `→${fmt(w.accepted)}` : ''}`)
            .join(' ')}{' '}
          ⇢ {rec().waitFor.join(', ')}
        </span>
      </div>
      <Show when={rec().outcome}>
        <div class="msg" data-op-message>
          {rec().outcome.message}
        </div>
      </Show>
      <ol class="timeline mono">
        <For each={rec().journal}>
          {(e) => (
            <li>
              <span class="dim">r{e.revision}</span> {event(e)}
            </li>
          )}
        </For>
      </ol>
    </div>
  );
}

function App() {
  const tick = useFrameTick(lab);
  const snapshot = () => {
    tick();
    return lab.app.snapshot();
  };
  const report = lab.app.report({ full: true });
  const ops = () => {
    tick();
    return lab.app
      .operations()
      .map((o) => o.operation)
      .slice(-6)
      .reverse();
  };
  const calls = () => {
    tick();
    // Copies: the log entries are plain objects updated in place.
    return lab.calls
      .slice(-8)
      .reverse()
      .map((c) => ({ ...c }));
  };
  const [agentBusy, setAgentBusy] = createSignal(false);
  const askAgentLike = async () => {
    setAgentBusy(true);
    try {
      await lab.tools.call('observe', { writes: { diffusivity: 0.5 }, waitFor: ['errors'], selector: 'summary' });
    } catch {
      // shown in the tool log
    } finally {
      setAgentBusy(false);
    }
  };
  return (
    <main>
      <h1>weft diffusion lab</h1>
      <p class="dim">
        1-D heat equation on a Worker. People move the controls here; agents use the published tools (<code>window.lab.tools</code>):
        report, set, act, observe, wait, inspect, cancel. The Agent panel is a node agent with those tools and a Worker job; name
        its model in the address (<code>?model=openai:NAME&amp;baseUrl=…</code>).
      </p>
      <div class="grid">
        <section>
          <h2>Controls</h2>
          <table>
            <thead>
              <tr>
                <th>control</th>
                <th>set</th>
                <th>requested</th>
                <th>effective</th>
              </tr>
            </thead>
            <tbody>
              <For each={report.controls}>{(c) => <ControlRow control={c} snapshot={snapshot} tick={tick} />}</For>
            </tbody>
          </table>
          <div class="actions">
            <For each={report.actions}>
              {(a) => (
                <button type="button" data-action={a.name} title={a.description} onClick={() => lab.actFromUi(a.name)}>
                  {a.name}
                </button>
              )}
            </For>
            <button type="button" data-ask-agent disabled={agentBusy()} onClick={askAgentLike}>
              observe κ=0.5 (as an agent)
            </button>
          </div>
          <h2>Cells</h2>
          <For each={['evolution', 'profile', 'errors']}>{(n) => <CellCard name={n} snapshot={snapshot} />}</For>
          <div class="mono" data-errors>
            <Show when={snapshot().cells.errors?.value} fallback="errors: —">
              L2 {fmt(snapshot().cells.errors.value.l2)} · max {fmt(snapshot().cells.errors.value.max)} at t = {fmt(snapshot().cells.errors.value.t)}
            </Show>
          </div>
          <h2>Agent</h2>
          <Show when={labAgent()} fallback={<p class="dim">{labAgentError() ?? 'opening the agent…'}</p>}>
            <AgentPanel ctl={labAgent()} />
          </Show>
        </section>
        <section>
          <h2>Profile</h2>
          <Plot snapshot={snapshot} />
          <p class="dim mono">solid: numerical · dashed: analytic Gaussian · revision r{snapshot().revision}</p>
          <h2>Agent tool calls</h2>
          <ol class="calls mono">
            <For each={calls()}>
              {(c) => (
                <li data-tool-call={c.n} data-tool-status={c.status}>
                  #{c.n} {c.name} {JSON.stringify(c.args)} → <b>{c.status}</b>
                  <Show when={c.error}> {c.error}</Show>
                </li>
              )}
            </For>
          </ol>
          <h2>Operations</h2>
          <For each={ops()}>{(id) => <OperationCard id={id} tick={tick} />}</For>
        </section>
      </div>
    </main>
  );
}

render(() => <App />, document.getElementById('root'));
window.labReady = true;
