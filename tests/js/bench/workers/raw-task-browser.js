// The small task of the start-up benchmark over bare DOM Worker postMessage (the floor).
self.onmessage = (e) => {
  let s = 0;
  for (let i = 0; i < e.data.n; i++) s += i;
  self.postMessage({ id: e.data.id, value: s });
};
