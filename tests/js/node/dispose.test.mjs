// `app.dispose()` in the same tick as a change, with `subscribe()` listeners: no uncaught error
// (the listener call and flush scheduled by the change are dropped), reads throw DISPOSED.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { createApp } from 'weft';
import { disposeInTheSameTick } from '../dispose-scenarios.mjs';

test('disposing an app in the same tick as a change throws nothing uncaught', async () => {
  const uncaught = [];
  const collect = (err) => uncaught.push(err);
  process.on('uncaughtException', collect);
  try {
    const r = await disposeInTheSameTick({ createApp });
    await new Promise((resolve) => setTimeout(resolve, 20));
    assert.deepEqual(uncaught.map(String), []);
    assert.equal(r.cases, 5);
    assert.equal(r.listenerCalls, 0, 'a disposed app calls no listener');
    assert.deepEqual(r.readCodes, Array(20).fill('DISPOSED'));
    assert.deepEqual(r.waitCodes, Array(5).fill('DISPOSED'));
    assert.equal(r.afterDisposingListener, 0);
  } finally {
    process.off('uncaughtException', collect);
  }
});
