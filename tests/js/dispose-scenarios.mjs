// `app.dispose()` in the same tick as a change (the issue 12 crash: a listener call scheduled by
// the change ran on the freed core and threw `null pointer passed to rust`). Runs in Node and
// Chromium; the caller collects uncaught errors its own way and checks there were none.
const tick = () => new Promise((r) => setTimeout(r, 0));

function app(createApp) {
  const a = createApp();
  a.load({
    controls: [{ name: 'a', type: 'number', min: 0, max: 10, step: 1, value: 1 }],
    actions: [{ name: 'bump', effects: [{ set: 'a', to: { value: 5 } }] }],
    cells: [
      { name: 'double', deps: ['a'], compute: ({ a: x }) => x * 2 },
      { name: 'slow', deps: ['a'], compute: async ({ a: x }) => (await tick(), x + 1) },
    ],
  });
  return a;
}

/** Each way of changing the app, then disposing it before the tick ends. Returns what the
 * listeners saw and the error codes of reads after dispose. */
export async function disposeInTheSameTick({ createApp }) {
  const changes = {
    set: (a) => a.set('a', 3),
    setMany: (a) => a.setMany({ a: 4 }),
    act: (a) => a.act('bump'),
    start: (a) => a.start({ writes: { a: 2 }, waitFor: ['double'] }),
    flushed: (a) => (a.set('a', 6), a.flush()),
  };
  const result = { listenerCalls: 0, readCodes: [], waitCodes: [], cases: 0 };
  for (const change of Object.values(changes)) {
    const a = app(createApp);
    await tick();
    a.subscribe(() => result.listenerCalls++);
    a.subscribe(() => result.listenerCalls++);
    change(a);
    a.dispose();
    a.dispose();
    result.cases++;
    for (const read of [() => a.snapshot(), () => a.cell('double'), () => a.revision, () => a.report()]) {
      try {
        read();
        result.readCodes.push('none');
      } catch (err) {
        result.readCodes.push(err?.code ?? String(err));
      }
    }
    // Waiting on an operation of a disposed app rejects (it never hangs or throws synchronously).
    result.waitCodes.push(await a.operation(1).wait().then(() => 'none', (err) => err?.code ?? String(err)));
  }
  // A listener that disposes the app while others are still to be called.
  const a = app(createApp);
  await tick();
  let after = 0;
  a.subscribe((x) => x.dispose());
  a.subscribe(() => after++);
  a.set('a', 7);
  await tick();
  await tick();
  result.afterDisposingListener = after;
  return result;
}
