// The conformance vectors (tests/vectors/{jobs,tools,ops}.json) through the package's public JS
// API in Node (tests/js/vectors/runner.mjs): every vector runs, is skipped for a stated reason,
// or is a known disagreement — and the counts are pinned, so a vector silently dropped fails.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import * as weft from 'weft';
import { EXPECTED, KNOWN_DISAGREEMENTS, SKIPS, STEP_SKIPS, counts, runSuite } from '../vectors/runner.mjs';

const suite = (name) => JSON.parse(readFileSync(new URL(`../../vectors/${name}.json`, import.meta.url), 'utf8'));

for (const [name, want] of Object.entries(EXPECTED)) {
  test(`${name} vectors through the public JS API`, async () => {
    const s = suite(name);
    const report = await runSuite(weft, s);
    const failed = report.results.filter((r) => r.status === 'failed');
    assert.deepEqual(failed.map((r) => `${r.name}\n  ${r.failures.join('\n  ')}`), []);
    assert.deepEqual(counts(report), want);
    // Every listed skip and disagreement names a vector of the suite (a renamed vector fails).
    const names = new Set(s.vectors.map((v) => v.name));
    for (const n of [...Object.keys(SKIPS[name] ?? {}), ...Object.keys(STEP_SKIPS[name] ?? {}), ...Object.keys(KNOWN_DISAGREEMENTS[name] ?? {})]) {
      assert.ok(names.has(n), `listed vector not in ${name}.json: ${n}`);
    }
    // A known disagreement that starts passing is reported, so that its entry is removed.
    for (const n of Object.keys(KNOWN_DISAGREEMENTS[name] ?? {})) {
      assert.equal(report.results.find((r) => r.name === n).status, 'disagrees', `${n} now passes: remove it from KNOWN_DISAGREEMENTS`);
    }
  });
}

test('the JS step driver reports every kind of mismatch the core driver reports', async () => {
  // The vector of conformance.rs `the_step_driver_reports_every_kind_of_mismatch`.
  const { results } = await runSuite(weft, {
    suite: 'jobs',
    vectors: [
      {
        name: 'ok',
        steps: [{ at: 0, op: 'open_endpoint', hello: 'skip', expect: { endpoint: 1 } }],
        expect: { endpoints: { 1: { state: 'ready' } } },
      },
      {
        name: 'wrong',
        steps: [
          { at: 0, op: 'open_endpoint', hello: 'skip', expect: { endpoint: 2 } },
          { at: 1, op: 'cancel', job: 9 },
          { at: 2, op: 'advance', expectError: 'UNKNOWN_JOB' },
          { at: 3, op: 'submit', endpoint: 1, payload: 1, outputs: [] },
          { at: 1, op: 'advance' },
          { at: 9, op: 'open_endpoint', expect: { endpoint: 1 } },
        ],
        expect: { endpoints: { 1: { state: 'closed' } } },
      },
    ],
  });
  assert.equal(results[0].status, 'passed', results[0].failures.join('\n'));
  const f = results[1].failures;
  assert.equal(f.length, 6, f.join('\n'));
  assert.ok(f[0].startsWith('step 0 (open_endpoint): result.endpoint'), f[0]);
  assert.ok(f[1].startsWith('step 1 (cancel): unexpected error UNKNOWN_JOB'), f[1]);
  assert.ok(f[2].startsWith('step 2 (advance): expected error "UNKNOWN_JOB"'), f[2]);
  assert.ok(f[3].startsWith('step 3 (submit): outputs'), f[3]);
  assert.equal(f[4], 'step 4: time goes backwards (1 < 3)');
  assert.ok(f[5].startsWith('final.endpoints.1.state'), f[5]);
});

test('a granted tool wait is checked by when the call replies: a wrong waitMs fails', async () => {
  const s = suite('ops');
  const v = structuredClone(s.vectors.find((x) => x.steps?.some((st) => st.op === 'tool' && st.expect?.waitMs === 50)));
  for (const st of v.steps) if (st.expect?.waitMs === 50) st.expect.waitMs = 49;
  for (const st of v.steps) if (st.expect?.waitMs === 1000) st.expect.waitMs = 0;
  const { results } = await runSuite(weft, { ...s, vectors: [v] });
  assert.deepEqual(results[0].failures, [
    'step 13 (tool): granted 49 ms, the call replied with a handle after 50 ms',
    'step 18 (tool): granted 0 ms, the call replied with its outcome after 1 ms',
  ]);
});
