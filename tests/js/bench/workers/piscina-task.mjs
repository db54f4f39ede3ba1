// The same small task for piscina.
export default function task({ n }) {
  let s = 0;
  for (let i = 0; i < n; i++) s += i;
  return s;
}
