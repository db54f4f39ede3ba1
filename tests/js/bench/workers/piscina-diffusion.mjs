// A long task for piscina's cancel (an AbortSignal; piscina terminates the worker), and the
// small task for the next one.
export default function task({ n, ms }) {
  if (ms === undefined) {
    let s = 0;
    for (let i = 0; i < n; i++) s += i;
    return s;
  }
  const end = performance.now() + ms;
  let x = 0;
  while (performance.now() < end) x += Math.sqrt(x + 1);
  return x;
}
