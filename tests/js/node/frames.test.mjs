// The DGP engine compiled to WebAssembly, through the package as a user imports it: the same
// rules as the native engine (the shared vectors also run in wasm: wasm/tests/vectors.rs).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createFramesEngine, evidenceFor } from 'weft';

const suite = JSON.parse(readFileSync(new URL('../../vectors/frames.json', import.meta.url), 'utf8'));
const PNG = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mP8/x8AAwMCAO+/l6cAAAAASUVORK5CYII=';
const agent = { id: 'agent-1', role: 'agent' };
const human = { id: 'human-1', role: 'human' };

let clock = 1_790_000_000_000;
const now = () => clock;

function assessment(frame, node, answer, id) {
  return {
    dgp: '0.1', assessment_id: id, frame_id: frame.frame_id, decision_id: `${frame.frame_id}:${node}`,
    mode: 'live', resolver: { kind: 'rule' }, result: { status: 'answered', answer },
  };
}
const commitOf = (a) => ({ dgp: '0.1', frame_id: a.frame_id, decision_id: a.decision_id, assessment_id: a.assessment_id });
const code = (fn) => {
  try {
    fn();
  } catch (e) {
    assert.ok(e instanceof Error);
    return e.code;
  }
  return 'no error';
};

test('frames: assess, commit, replay, stale, human-only, restore from the written records', () => {
  const e = createFramesEngine({ app: suite.app, now, idSeed: 42 });
  const f = e.frame('s1');
  assert.equal(f.dgp, '0.1');
  assert.deepEqual(f.read_set.map((r) => r.revision), [1, 1]);
  const a = e.assess(agent, assessment(f, 'recovery', { choice: 'retry', input: {} }, 'a1'));
  assert.equal(a.claim_provenance, 'client_asserted');
  const r = e.commit(agent, 'k1', commitOf(a));
  assert.equal(r.state_revision, 2);
  assert.deepEqual(e.commit(agent, 'k1', commitOf(a)), r, 'replay');
  const b = e.assess(agent, assessment(f, 'recovery', { choice: 'pause', input: {} }, 'a2'));
  assert.equal(code(() => e.commit(agent, 'k2', commitOf(b))), 'STALE_FRAME');
  assert.equal(code(() => e.commit(agent, undefined, commitOf(b))), 'IDEMPOTENCY_KEY_REQUIRED');
  assert.equal(code(() => e.assess(agent, '{"dgp":"0.1","dgp":"0.1"}')), 'INVALID_JSON');
  assert.equal(code(() => e.assess(agent, assessment(f, 'recovery', { choice: 'nuke', input: {} }, 'a3'))), 'INVALID_CHOICE');

  // Drive to review; an agent cannot publish, a human can.
  const step = (who, node, answer, id) => {
    const fr = e.frame('s1');
    return e.commit(who, `k-${id}`, commitOf(e.assess(who, assessment(fr, node, answer, id))));
  };
  step(agent, 'update', { choice: 'draft_update', input: {} }, 'u');
  step(agent, 'draft_result', { value: { text: 'Draft ✓ <b>text</b>' } }, 'd');
  assert.equal(code(() => step({ id: 'agent-1', role: 'agent' }, 'review', { choice: 'publish', input: {} }, 'p1')), 'HUMAN_APPROVAL_REQUIRED');
  step(human, 'review', { choice: 'publish', input: {} }, 'p2');
  assert.deepEqual(e.entries('bulletin').map((x) => x.text), ['Draft ✓ <b>text</b>']);

  // Reopen from the records: the same state, receipts and deduplication.
  const records = e.takeWrites();
  assert.ok(records.length > 5 && records.every((w) => w.value instanceof Uint8Array));
  const again = createFramesEngine({ app: suite.app, records, now });
  assert.deepEqual(again.commit(agent, 'k1', commitOf(a)), r, 'replay after reopening');
  assert.equal(again.surfaceState('s1').state.status, 'published');
  assert.deepEqual(again.storedFrame(f.frame_id), f);
  e.free();
  again.free();
});

test('frames: images are addressed by SHA-256 and a text-only assessor is refused', () => {
  const e = createFramesEngine({ app: suite.app, now });
  const f = e.frame('s2');
  const a = e.assess(human, assessment(f, 'attach_image', { value: { mime_type: 'image/png', data_base64: PNG } }, 'i1'));
  e.commit(human, 'ki', commitOf(a));
  const g = e.frame('s2', { disclosure: 'horizon', horizon: 1 });
  assert.equal(g.disclosure.preview.horizon, 1);
  const img = g.observations.find((o) => o.kind === 'image');
  assert.equal(img.blob.byte_length, 68);
  assert.equal(code(() => evidenceFor(g, `${g.frame_id}:recovery`, ['text', 'json'])), 'UNSUPPORTED_MODALITY');
  assert.deepEqual(evidenceFor(g, `${g.frame_id}:recovery`, ['text', 'json', 'image']).evidenceIds, ['state', 'image-0']);
  const blob = e.takeWrites().find((w) => w.kind === 'blob');
  assert.equal(blob.value.length, 68);
  e.free();
});
