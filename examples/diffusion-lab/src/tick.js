// One re-render per animation frame for a source that reports changes (`onChange(listener)`
// returning an unsubscribe): the lab and the agent panel both follow theirs this way.
import { createSignal, onCleanup } from 'solid-js';

/** A signal that ticks at most once per frame after `source` changed. */
export function useFrameTick(source) {
  const [tick, setTick] = createSignal(0, { equals: false });
  let frame = 0;
  const off = source.onChange(() => {
    if (frame) return;
    frame = requestAnimationFrame(() => {
      frame = 0;
      setTick(0);
    });
  });
  onCleanup(off);
  return tick;
}
