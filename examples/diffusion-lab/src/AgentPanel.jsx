// The Agent panel: a person types to the lab's node agent (agent.js); the panel shows the
// node's lines as the store holds them (the person's messages, the assistant's text and tool
// calls, the tool results, the job line with its live progress, the job's completion note,
// the turn boundaries), the text of the step streaming now, the agent's state and a Stop
// button. The agent's tools are the lab's published tools, so its calls move the same
// controls and cells the page shows.
import { For, Show, createEffect, createSignal } from 'solid-js';
import { useFrameTick } from './tick.js';

const PHASES = { idle: 'idle', model_step: 'running', running_tools: 'running', waiting: 'waiting', interrupted: 'stopping' };

const short = (v, n = 160) => {
  const s = typeof v === 'string' ? v : JSON.stringify(v);
  return s.length > n ? `${s.slice(0, n - 1)}…` : s;
};


function Line(props) {
  const l = () => props.line;
  const a = () => l().agent;
  const job = () => {
    props.tick();
    return a()?.entry === 'job' ? props.ctl.jobs.get(a().job) : null;
  };
  const body = () => {
    const e = a()?.entry;
    if (l().role === 'user') return <span>you: {l().text}</span>;
    if (e === 'assistant') {
      const calls = a().calls ?? [];
      const text = calls.length && l().text.startsWith('→') ? '' : l().text;
      return (
        <span>
          <Show when={text}>
            <span class="said">{text}</span>
          </Show>
          <For each={calls}>
            {(c) => (
              <span class="call" data-agent-call={c.name}>
                → {c.name}({short(c.arguments ?? {}, 120)})
              </span>
            )}
          </For>
        </span>
      );
    }
    if (e === 'tool_result') {
      const v = a().value;
      const what = a().error ?? v?.message ?? (v !== undefined ? short(v) : '');
      return (
        <span data-tool-result={a().tool} data-result-status={a().status}>
          {a().tool} → <b>{a().status}</b> {what}
        </span>
      );
    }
    if (e === 'job') {
      return (
        <span data-job={a().job} data-job-state={job()?.state ?? 'unknown'}>
          {l().text}
          <Show when={job()}>
            {' '}
            <span class="bar inline">
              <span style={{ width: `${Math.round((job().progress ?? 0) * 100)}%` }} />
            </span>{' '}
            <span data-job-progress>{Math.round((job().progress ?? 0) * 100)}%</span> {job().state}
          </Show>
        </span>
      );
    }
    return <span>{l().text}</span>;
  };
  return (
    <li data-line={l().line} data-role={l().role} data-entry={a()?.entry ?? ''} class={`role-${l().role}`}>
      {body()}
    </li>
  );
}

/** The panel for `ctl` (from `openLabAgent`). */
export function AgentPanel(props) {
  const ctl = props.ctl;
  const tick = useFrameTick(ctl);
  const lines = () => {
    tick();
    // The person's messages and the agent's records (not the node's setup lines).
    return ctl.lines().filter((l) => l.role === 'user' || l.agent);
  };
  const state = () => {
    tick();
    return ctl.state();
  };
  const live = () => {
    tick();
    const v = ctl.live;
    if (!v || !v.text) return null;
    // Once the step's line is written it replaces the live text.
    return ctl.lines(8).some((l) => l.agent?.entry === 'assistant' && l.agent.turn === v.turn && l.agent.step === v.step) ? null : v;
  };
  const [text, setText] = createSignal('');
  const [error, setError] = createSignal(null);
  const send = async (e) => {
    e.preventDefault();
    const t = text().trim();
    if (!t) return;
    setText('');
    setError(null);
    try {
      await ctl.send(t);
    } catch (err) {
      setError(`${err.code ?? 'ERROR'}: ${err.message}`);
    }
  };
  const stop = async () => {
    try {
      await ctl.stop();
    } catch (err) {
      setError(`${err.code ?? 'ERROR'}: ${err.message}`);
    }
  };
  const report = ctl.agent.report;
  let list;
  // Follows the newest line.
  createEffect(() => {
    lines();
    live();
    queueMicrotask(() => list && (list.scrollTop = list.scrollHeight));
  });
  return (
    <div class="agent" data-agent-panel>
      <div class="agent-head">
        <b>node {ctl.agent.node}</b>{' '}
        <span class={`badge ${PHASES[state().phase] ?? state().phase}`} data-agent-state={PHASES[state().phase] ?? state().phase} data-agent-phase={state().phase}>
          {PHASES[state().phase] ?? state().phase}
        </span>{' '}
        <Show when={ctl.agent.modelConfigured}>
          <span class="mono dim" data-model-chip>
            model {ctl.model.label}
          </span>
        </Show>{' '}
        <button type="button" data-agent-stop disabled={state().phase === 'idle'} onClick={stop}>
          Stop
        </button>
      </div>
      <Show when={!ctl.agent.modelConfigured}>
        <div class="banner" data-model-banner>
          <b>No model is configured.</b> <Show when={ctl.modelNote}>{ctl.modelNote} </Show>The built-in deterministic model answers; it calls no tools.
          Name one in the address: <code>?model=openai:NAME&amp;baseUrl=http://127.0.0.1:8080/v1</code> (or <code>?model=anthropic&amp;apiKey=…</code>).
        </div>
      </Show>
      <Show when={report.interruptedTurn != null || report.uncertainCalls.length || report.lostJobs.length}>
        <div class="banner" data-agent-resumed>
          Resumed from IndexedDB:
          <Show when={report.interruptedTurn != null}> turn {report.interruptedTurn} was interrupted{report.modelStepInterrupted ? ' during a model step' : ''};</Show>
          <Show when={report.uncertainCalls.length}> {report.uncertainCalls.length} call(s) uncertain;</Show>
          <Show when={report.lostJobs.length}> {report.lostJobs.length} job(s) lost;</Show> nothing was re-run.
        </div>
      </Show>
      <ol class="agent-lines mono" ref={list}>
        <For each={lines()}>{(l) => <Line line={l} ctl={ctl} tick={tick} />}</For>
        <Show when={live()}>
          <li class="role-assistant live" data-agent-live>
            <span class="said">{live().text}</span>
            <span class="dim"> ▍</span>
          </li>
        </Show>
      </ol>
      <form class="agent-form" data-agent-form onSubmit={send}>
        <input
          data-agent-input
          placeholder="e.g. set κ to 0.5 and check the error, then simulate at 2000 points"
          value={text()}
          onInput={(e) => setText(e.currentTarget.value)}
        />
        <button type="submit">Send</button>
      </form>
      <Show when={error()}>
        <div class="err">{error()}</div>
      </Show>
    </div>
  );
}
