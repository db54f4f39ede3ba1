// The DGP controller of the JS package bound as agent tools (`dgp_surfaces`, `dgp_run_surface`)
// on a JS agent session, against a live `weft serve` (ThreadDesk): a scripted model lists the
// surfaces and drives thread-42 to the human-only publication; an interrupt stops a run at a
// safe point (while judging, and while a commit is in flight: the commit is carried to its
// receipt, or past the grace period reported uncertain with the report mailed later); a commit
// whose answer is lost is retried with the same key; two runs of one
// surface queue instead of racing; and a human-only effect is never committed by the agent.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { createAgent, createRuntime, scriptedModel } from 'weft';
import { controllerJudgment, controllerNextStep, createDgpController, DGP_MAX_STEPS, dgpFixtureAdapter, dgpFixtureText, dgpToolDeclarations, dgpTools } from 'weft/frames';
import { AGENT, HUMAN, startServe } from '../lib/weft.mjs';

let server;
before(async () => {
  server = await startServe();
});
after(async () => {
  await server?.close();
});

/** Each test drives its own surface state: ThreadDesk is reset by a fresh server. */
async function freshServer(t) {
  const s = await startServe();
  t.after(() => s.close());
  return s;
}

async function get(url, path, token = AGENT) {
  const res = await fetch(url + path, { headers: { authorization: `Bearer ${token}` } });
  return { status: res.status, body: await res.json() };
}

const surfaceOf = async (url, sid) => (await get(url, '/dgp/surfaces')).body.surfaces.find((s) => s.surface_id === sid);

/** Every run invariant: no commit in doubt, every commit intent answered by a receipt. */
function checkRun(run) {
  const intents = run.events.filter((e) => e.event === 'commit_intent');
  const committed = run.events.filter((e) => e.event === 'committed');
  assert.equal(committed.length, intents.length, 'every commit intent has its receipt');
  assert.deepEqual(
    committed.map((e) => e.receipt.assessment_id),
    intents.map((e) => e.request.assessment_id),
    'receipts answer the intents in order',
  );
  assert.deepEqual(run.commits, committed.map((e) => e.receipt));
  assert.equal(run.commit_in_doubt, null);
  assert.equal(run.stop, run.events.at(-1));
  assert.equal(run.ended, run.stop.event);
  for (const r of run.commits) assert.match(r.receipt_id, /\S/);
}

/** The chosen option of each committed assessment, in order. */
const committedChoices = (run) => {
  const assessed = new Map(run.events.filter((e) => e.event === 'assessed').map((e) => [e.assessment.assessment_id, e.assessment]));
  return run.commits.map((r) => {
    const a = assessed.get(r.assessment_id).result.answer;
    return a.choice ?? Object.keys(a.value ?? {}).join(',');
  });
};

/**
 * A fetch that holds every commit's answer until `release()`; `committing` resolves when the
 * first commit reached the server (its answer is then on its way back, held).
 */
function holdingCommits() {
  let release;
  const held = new Promise((r) => (release = r));
  let inFlight;
  const committing = new Promise((r) => (inFlight = r));
  const hold = async (url, init) => {
    const res = await fetch(url, init);
    if (String(url).endsWith('/dgp/commits')) {
      inFlight();
      await held;
    }
    return res;
  };
  return { fetch: hold, committing, release };
}

function agentWith(tools, model, options = {}) {
  const rt = createRuntime();
  const agent = createAgent(rt, { id: 'desk-agent', model, ...options });
  agent.registerTools(tools);
  return {
    agent,
    close() {
      agent.close();
      rt.close();
    },
  };
}

test('a scripted model lists the surfaces and drives thread-42 to the human-only publication', { timeout: 60_000 }, async () => {
  const seen = [];
  const tools = dgpTools({ baseUrl: server.url, token: AGENT, adapter: dgpFixtureAdapter, textService: dgpFixtureText, onEvent: (e) => seen.push(e) });
  const model = scriptedModel([
    { calls: [{ id: 'c1', name: 'dgp_surfaces', arguments: {} }] },
    {
      calls: [
        { id: 'c2', name: 'dgp_run_surface', arguments: { surface_id: 'thread-42' } },
        // The published schema is enforced before any handler runs (the native tool's names).
        { id: 'c3', name: 'dgp_run_surface', arguments: { surface: 'thread-42' } },
      ],
    },
    { text: 'thread-42 waits for a human to publish' },
  ]);
  const { agent, close } = agentWith(tools, model);
  try {
    const decls = agent.tools().tools;
    assert.deepEqual(
      decls.map((t) => [t.name, t.supportsParallel, t.safeToCancel, t.mayStartJob]),
      [
        ['dgp_surfaces', true, true, false],
        ['dgp_run_surface', true, true, false],
      ],
    );
    const turn = await agent.run('Work through thread-42.');
    assert.equal(turn.end, 'completed');
    assert.deepEqual(
      turn.results.map((r) => [r.callId, r.status]),
      [
        ['c1', 'succeeded'],
        ['c2', 'succeeded'],
        ['c3', 'rejected'],
      ],
    );
    assert.equal(turn.results[2].code, 'INVALID_ARGUMENTS');
    const listed = turn.results[0].value.surfaces.map((s) => s.surface_id);
    assert.ok(listed.includes('thread-42') && listed.includes('thread-73'), JSON.stringify(listed));

    const run = turn.results[1].value;
    checkRun(run);
    assert.equal(run.surface_id, 'thread-42');
    assert.equal(run.ended, 'human_review_required', JSON.stringify(run.stop));
    assert.equal(run.commits.length, 3, 'retry, draft_update, the drafted text; never the publication');
    assert.deepEqual(committedChoices(run).slice(0, 2), ['retry', 'draft_update']);
    assert.match(run.commits[0].outcome, /No tests were actually run/);
    assert.ok(run.events.some((e) => e.event === 'service_text' && e.service_id === 'llm.generate_text'));
    assert.match(run.stop.frame_id, /\S/);
    // Every receipt is the server's: it serves each one back.
    for (const r of run.commits) {
      const back = await get(server.url, `/dgp/receipts/${encodeURIComponent(r.receipt_id)}`);
      assert.equal(back.status, 200);
      assert.deepEqual(back.body, r);
    }
    // The live events were the result's events, in order.
    assert.deepEqual(seen, run.events);
    assert.equal(tools.controller.serviceCalls, 1);
  } finally {
    close();
  }
});

test('the human-only publication is never committed by the agent; a human may commit it', { timeout: 60_000 }, async (t) => {
  const s = await freshServer(t);
  const tools = dgpTools({ baseUrl: s.url, token: AGENT, adapter: dgpFixtureAdapter, textService: dgpFixtureText });
  const first = await tools.controller.runSurface('thread-42');
  checkRun(first);
  assert.equal(first.ended, 'human_review_required');
  const before = await surfaceOf(s.url, 'thread-42');
  // The same surface again: the publication is judged and recorded, and the run stops there.
  const { agent, close } = agentWith(
    tools,
    scriptedModel([{ calls: [{ id: 'p', name: 'dgp_run_surface', arguments: { surface_id: 'thread-42' } }] }, { text: 'a human must publish' }]),
  );
  try {
    const turn = await agent.run('Publish thread-42.');
    const run = turn.results[0].value;
    checkRun(run);
    assert.equal(run.ended, 'human_review_required');
    assert.deepEqual(run.commits, [], 'nothing committed for that decision');
    assert.ok(!run.events.some((e) => e.event === 'commit_intent'), 'no commit was even attempted');
    const publish = run.events.find((e) => e.event === 'assessed').assessment;
    assert.equal(publish.result.answer.choice, 'publish');
    assert.equal(run.stop.assessment_id, publish.assessment_id);
    const afterRun = await surfaceOf(s.url, 'thread-42');
    assert.deepEqual([afterRun.state, afterRun.revision], [before.state, before.revision], 'the surface did not move');
    // The server agrees it is a human's to commit: the agent's own commit of it is refused, a
    // human's judgment of the same decision is committed.
    const refused = await fetch(`${s.url}/dgp/commits`, {
      method: 'POST',
      headers: { authorization: `Bearer ${AGENT}`, 'content-type': 'application/json', 'idempotency-key': 'k-agent-tries' },
      body: JSON.stringify({ dgp: '0.1', frame_id: publish.frame_id, decision_id: publish.decision_id, assessment_id: publish.assessment_id }),
    });
    assert.equal(refused.status, 403);
    assert.equal((await refused.json()).code, 'HUMAN_APPROVAL_REQUIRED');
    const receipt = await humanAct(s.url, 'thread-42', 'review', { choice: 'publish', input: {} });
    assert.equal(receipt.status, 'succeeded');
    assert.equal((await surfaceOf(s.url, 'thread-42')).revision, before.revision + 1, 'the human publication moved the surface');
  } finally {
    close();
  }
});

test('an interrupt stops a run at its next safe point: while judging it is abandoned, a commit in flight gets its receipt', { timeout: 60_000 }, async (t) => {
  const s = await freshServer(t);
  // (1) The second judgment of thread-42 hangs until its signal aborts; the agent is
  // interrupted while it waits.
  let judgments = 0;
  let judging;
  const judged = new Promise((r) => (judging = r));
  const slow = async (d, ev, frame, { signal }) => {
    if (++judgments === 2) {
      judging();
      await new Promise((_, reject) => signal.addEventListener('abort', () => reject(signal.reason), { once: true }));
    }
    return dgpFixtureAdapter(d, ev, frame);
  };
  slow.modalities = dgpFixtureAdapter.modalities;
  const { agent, close } = agentWith(
    dgpTools({ baseUrl: s.url, token: AGENT, adapter: slow, textService: dgpFixtureText }),
    scriptedModel([{ calls: [{ id: 'r', name: 'dgp_run_surface', arguments: { surface_id: 'thread-42' } }] }]),
  );
  try {
    const turn = agent.run('Work through thread-42.');
    await judged;
    agent.interrupt('the user changed their mind');
    const { end, results } = await turn;
    assert.equal(end, 'interrupted');
    const run = results[0].value;
    assert.ok(run, JSON.stringify(results[0]));
    checkRun(run);
    assert.equal(run.ended, 'interrupted');
    assert.equal(run.stop.at, 'judging');
    assert.deepEqual(committedChoices(run), ['retry'], 'the one commit made has its receipt');
  } finally {
    close();
  }

  // (2) The commit of the next judgment is held on its way back; the interrupt arrives while
  // it is in flight. The run waits for the answer, lists the receipt, then stops.
  const { fetch: holdCommit, committing, release } = holdingCommits();
  const b = agentWith(
    dgpTools({ baseUrl: s.url, token: AGENT, adapter: dgpFixtureAdapter, textService: dgpFixtureText, fetch: holdCommit }),
    scriptedModel([{ calls: [{ id: 'r2', name: 'dgp_run_surface', arguments: { surface_id: 'thread-42' } }] }]),
    { graceMs: 10_000 },
  );
  try {
    const turn = b.agent.run('Continue thread-42.');
    await committing;
    b.agent.interrupt('stop now');
    setTimeout(release, 100);
    const { end, results } = await turn;
    assert.equal(end, 'interrupted');
    const run = results[0].value;
    assert.ok(run, JSON.stringify(results[0]));
    checkRun(run);
    assert.equal(run.ended, 'interrupted');
    assert.equal(run.stop.at, 'between_steps', 'it stopped after the commit, not during it');
    assert.equal(run.commits.length, 1);
    assert.deepEqual(committedChoices(run), ['draft_update']);
    const back = await get(s.url, `/dgp/receipts/${encodeURIComponent(run.commits[0].receipt_id)}`);
    assert.deepEqual(back.body, run.commits[0]);
  } finally {
    b.close();
  }
});

test('a commit whose answer is lost is retried with the same key and body, and answered by the same receipt', { timeout: 60_000 }, async (t) => {
  const s = await freshServer(t);
  const commits = [];
  const lossy = async (url, init) => {
    const res = await fetch(url, init);
    if (String(url).endsWith('/dgp/commits')) {
      commits.push({ key: init.headers['idempotency-key'], body: init.body, receipt: await res.clone().json() });
      if (commits.length === 1) throw new TypeError('fetch failed: the connection was reset');
    }
    return res;
  };
  const tools = dgpTools({ baseUrl: s.url, token: AGENT, adapter: dgpFixtureAdapter, textService: dgpFixtureText, fetch: lossy });
  const run = await tools.controller.runSurface('thread-42', { steps: 1 });
  checkRun(run);
  assert.equal(run.ended, 'step_budget_reached');
  const retry = run.events.find((e) => e.event === 'commit_retry');
  assert.ok(retry, 'the lost answer was retried');
  assert.equal(commits.length, 2);
  assert.equal(commits[1].key, commits[0].key, 'the same idempotency key');
  assert.equal(commits[1].body, commits[0].body, 'the same body');
  assert.equal(retry.idempotency_key, commits[0].key);
  assert.deepEqual(run.commits, [commits[0].receipt], 'the replay is the receipt of the first, applied once');
});

test('two runs of one surface in one parallel step queue instead of racing (no STALE_FRAME)', { timeout: 60_000 }, async (t) => {
  const s = await freshServer(t);
  const seen = [];
  const { agent, close } = agentWith(
    dgpTools({ baseUrl: s.url, token: AGENT, adapter: dgpFixtureAdapter, textService: dgpFixtureText, onEvent: (e) => seen.push(e) }),
    scriptedModel([
      {
        calls: [
          { id: 'a', name: 'dgp_run_surface', arguments: { surface_id: 'thread-42', max_steps: 2 } },
          { id: 'b', name: 'dgp_run_surface', arguments: { surface_id: 'thread-42' } },
          { id: 'c', name: 'dgp_run_surface', arguments: { surface_id: 'thread-73' } },
        ],
      },
      { text: 'done' },
    ]),
  );
  try {
    const starts = [];
    agent.on('start_call', (o) => starts.push(o.callId));
    const turn = await agent.run('Both at once.');
    assert.equal(turn.end, 'completed');
    assert.deepEqual(starts, ['a', 'b', 'c'], 'all three started together (one parallel group)');
    const [a, b, c] = turn.results.map((r) => r.value);
    for (const run of [a, b, c]) {
      checkRun(run);
      assert.notEqual(run.stop.problem?.code, 'STALE_FRAME', JSON.stringify(run.stop));
      assert.ok(!run.events.some((e) => e.event === 'stopped'), JSON.stringify(run.stop));
    }
    assert.equal(a.ended, 'step_budget_reached');
    assert.deepEqual(committedChoices(a), ['retry', 'draft_update']);
    // b ran after a, on the frames a's commits produced.
    assert.equal(b.ended, 'human_review_required');
    assert.equal(b.commits.length, 1, 'the drafted text');
    const lastOfA = seen.indexOf(a.stop);
    const firstOfB = seen.indexOf(b.events[0]);
    assert.ok(lastOfA >= 0 && firstOfB > lastOfA, 'b began after a ended');
    // thread-73 is independent: it ran meanwhile.
    assert.equal(c.ended, 'quiescent', JSON.stringify(c.stop));
    const firstOfC = seen.indexOf(c.events[0]);
    assert.ok(firstOfC < lastOfA, 'thread-73 did not wait for thread-42');
  } finally {
    close();
  }
});

const PNG = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mP8/x8AAwMCAO+/l6cAAAAASUVORK5CYII=';

/** A human's frame, assessment and commit of `node` on `sid`. */
async function humanAct(url, sid, node, answer) {
  const call = async (method, path, body, key) => {
    const headers = { authorization: `Bearer ${HUMAN}`, 'content-type': 'application/json' };
    if (key) headers['idempotency-key'] = key;
    const res = await fetch(url + path, { method, headers, body: body && JSON.stringify(body) });
    assert.equal(res.status, 200, `${path}: ${await res.clone().text()}`);
    return res.json();
  };
  const frame = await call('GET', `/dgp/surfaces/${sid}/frame`);
  const a = {
    dgp: '0.1',
    assessment_id: `a-human-${node}`,
    frame_id: frame.frame_id,
    decision_id: `${frame.frame_id}:${node}`,
    mode: 'live',
    resolver: { kind: 'human' },
    result: { status: 'answered', answer },
  };
  await call('POST', '/dgp/assessments', a);
  return call('POST', '/dgp/commits', { dgp: '0.1', frame_id: a.frame_id, decision_id: a.decision_id, assessment_id: a.assessment_id }, `k-human-${node}`);
}

test('a text-only adapter stops on required image evidence with UNSUPPORTED_MODALITY; an image-capable one sees the image', { timeout: 60_000 }, async (t) => {
  const s = await freshServer(t);
  await humanAct(s.url, 'thread-73', 'attach_image', { value: { mime_type: 'image/png', data_base64: PNG } });
  const textOnly = dgpTools({ baseUrl: s.url, token: AGENT, adapter: dgpFixtureAdapter, textService: dgpFixtureText });
  const run = await textOnly[1].handler({ surface_id: 'thread-73' }, {});
  checkRun(run);
  assert.equal(run.ended, 'stopped');
  assert.equal(run.stop.problem.code, 'UNSUPPORTED_MODALITY', JSON.stringify(run.stop));
  assert.equal(run.stop.problem.status, 422);
  assert.ok(!run.events.some((e) => e.event === 'assessed'), 'nothing was judged without the image');

  const seenEvidence = [];
  const pixels = async (d, pack) => {
    seenEvidence.push(...pack.evidence.map((e) => e.kind));
    const image = pack.evidence.find((e) => e.kind === 'image' && e.blob?.byte_length === 68);
    return { result: { status: 'answered', answer: { choice: image ? 'pause' : 'retry', input: {} } }, resolver: { kind: 'decision_model', model: 'sees-pixels' } };
  };
  pixels.modalities = ['text', 'json', 'image'];
  const capable = dgpTools({ baseUrl: s.url, token: AGENT, adapter: pixels, textService: dgpFixtureText });
  const judged = await capable[1].handler({ surface_id: 'thread-73', max_steps: 1 }, {});
  checkRun(judged);
  assert.ok(seenEvidence.includes('image'), JSON.stringify(seenEvidence));
  assert.deepEqual(committedChoices(judged), ['pause']);
});

test('a run aborted while it waits for its surface never begins; the run ahead is unaffected', { timeout: 60_000 }, async (t) => {
  const s = await freshServer(t);
  let go;
  const gate = new Promise((r) => (go = r));
  let entered;
  const inside = new Promise((r) => (entered = r));
  const held = async (d, ev, frame) => {
    entered();
    await gate;
    return dgpFixtureAdapter(d, ev, frame);
  };
  held.modalities = ['text', 'json'];
  const [, run] = dgpTools({ baseUrl: s.url, token: AGENT, adapter: held, textService: dgpFixtureText });
  const first = run.handler({ surface_id: 'thread-42', max_steps: 1 }, { signal: new AbortController().signal });
  await inside;
  const ac = new AbortController();
  const queued = run.handler({ surface_id: 'thread-42' }, { signal: ac.signal });
  const third = run.handler({ surface_id: 'thread-42', max_steps: 1 }, {});
  ac.abort(new Error('not needed'));
  const q = await queued;
  assert.equal(q.ended, 'interrupted');
  assert.equal(q.stop.at, 'waiting_for_surface');
  assert.equal(q.steps, 0);
  assert.deepEqual(q.commits, []);
  go();
  const a = await first;
  checkRun(a);
  assert.deepEqual([a.ended, committedChoices(a)], ['step_budget_reached', ['retry']]);
  // The one behind the aborted waiter still gets its turn, after the first.
  const c = await third;
  checkRun(c);
  assert.deepEqual([c.ended, committedChoices(c)], ['step_budget_reached', ['draft_update']]);
});

test('the controller rules cross into JS as the core decides them, with coded errors', { timeout: 30_000 }, async () => {
  const frame = (await get(server.url, '/dgp/surfaces/thread-73/frame')).body;
  const next = controllerNextStep(frame);
  assert.equal(next.step, 'assess');
  const d = frame.decisions.find((x) => x.decision_id === next.decisionId);
  assert.equal(d.dispatch, 'automatic');
  const code = (fn) => {
    try {
      fn();
    } catch (err) {
      return [err.code, err.status];
    }
    return 'no error';
  };
  // A frame needing a feature the client lacks is refused, not half-understood.
  assert.deepEqual(code(() => controllerNextStep(frame, [])), ['CAPABILITY_REQUIRED', 406]);
  const resolver = { kind: 'rule' };
  assert.equal(
    code(() => controllerJudgment(frame, d.decision_id, { result: { status: 'answered', answer: { choice: 'no-such-option', input: {} } }, resolver, assessmentId: 'a-1' }))[0],
    'INVALID_CHOICE',
  );
  const ok = controllerJudgment(frame, d.decision_id, { result: { status: 'answered', answer: { choice: d.options[0].id, input: {} } }, resolver, assessmentId: 'a-2' });
  assert.equal(ok.after, 'commit');
  assert.deepEqual(ok.commit, { dgp: '0.1', frame_id: frame.frame_id, decision_id: d.decision_id, assessment_id: 'a-2' });
  const spec = controllerJudgment(frame, d.decision_id, { result: ok.assessment.result, resolver, assessmentId: 'a-3', speculative: true });
  assert.deepEqual([spec.after, spec.commit, spec.assessment.mode], ['speculative', null, 'speculative']);
  const abstain = controllerJudgment(frame, d.decision_id, { result: { status: 'abstain', reason: 'unsure' }, resolver, assessmentId: 'a-4' });
  assert.deepEqual([abstain.after, abstain.commit], ['abstained', null]);
});

test('a run still waiting for its commit answer when the grace period ends is uncertain; its report arrives as mail', { timeout: 60_000 }, async (t) => {
  const s = await freshServer(t);
  const { fetch: holdCommit, committing, release } = holdingCommits();
  const { agent, close } = agentWith(
    dgpTools({ baseUrl: s.url, token: AGENT, adapter: dgpFixtureAdapter, textService: dgpFixtureText, fetch: holdCommit }),
    scriptedModel([{ calls: [{ id: 'slow', name: 'dgp_run_surface', arguments: { surface_id: 'thread-42' } }] }]),
    { graceMs: 50 },
  );
  try {
    const turn = agent.run('Work through thread-42.');
    await committing;
    agent.interrupt('stop now');
    const { end, results } = await turn;
    assert.equal(end, 'interrupted');
    assert.deepEqual([results[0].status, results[0].started], ['uncertain', true], JSON.stringify(results[0]));
    const mailed = new Promise((resolve) => agent.on('mail_queued', resolve));
    release();
    await mailed;
    const late = agent.mailbox().find((m) => m.kind === 'late_result');
    assert.ok(late, JSON.stringify(agent.mailbox()));
    const run = late.result.value;
    checkRun(run);
    assert.equal(run.ended, 'interrupted');
    assert.deepEqual(committedChoices(run), ['retry'], 'the commit in flight was carried to its receipt');
  } finally {
    close();
  }
});

test('base URLs follow the core rule: https anywhere, plain http to loopback unless allowInsecureHttp', () => {
  const adapter = dgpFixtureAdapter;
  for (const baseUrl of ['https://dgp.example/api', 'http://127.0.0.1:8080', 'http://localhost:1']) {
    assert.equal(createDgpController({ baseUrl, adapter }).serviceCalls, 0, baseUrl);
  }
  const refused = (o) => {
    try {
      createDgpController({ adapter, ...o });
    } catch (err) {
      return err.code;
    }
    return 'accepted';
  };
  assert.equal(refused({ baseUrl: 'http://dgp.example' }), 'INVALID_ARGUMENT');
  assert.equal(refused({ baseUrl: 'http://dgp.example', allowInsecureHttp: true }), 'accepted');
  assert.equal(refused({ baseUrl: 'ftp://dgp.example' }), 'INVALID_ARGUMENT');
  assert.equal(refused({ baseUrl: 'https://user@dgp.example' }), 'INVALID_ARGUMENT');
  // The declarations are the core's (the native tool's names and limits).
  const [list, run] = dgpToolDeclarations();
  assert.deepEqual([list.name, run.name, run.parameters.properties.max_steps.maximum], ['dgp_surfaces', 'dgp_run_surface', DGP_MAX_STEPS]);
  assert.equal(DGP_MAX_STEPS, 32);
});
