// What wasm/build.sh's glue steps (guard-exports.mjs, lazy-exports.mjs) read of a WebAssembly
// module's bytes: its sections' places, its function types' results, which type each defined
// function has, how many functions and tables it imports or defines, and its exports. Nothing
// is compiled or executed.

/** Reads an unsigned LEB128 number of `bytes` at `at`: `[value, the offset after it]`. */
export function readUleb(bytes, at) {
  let r = 0;
  let shift = 0;
  let x;
  do {
    x = bytes[at++];
    r += (x & 0x7f) * 2 ** shift;
    shift += 7;
  } while (x & 0x80);
  return [r, at];
}

/** `n` as an unsigned LEB128 number. */
export function uleb(n) {
  const out = [];
  do {
    let x = n % 128;
    n = Math.floor(n / 128);
    if (n) x |= 0x80;
    out.push(x);
  } while (n);
  return Buffer.from(out);
}

/**
 * Reads the module `bytes` (`who` names the step in errors). Returns `{ sections, importedFuncs,
 * tables, exports, resultsOf }`: `sections` each `{ id, start, body, end }` (the section's
 * first byte, its contents' first byte, the byte after it); `tables` counts imported and defined
 * tables; `exports` each `{ name, kind, index, bytes }` (`bytes`: the entry as encoded);
 * `resultsOf(index)` gives a defined function's result types (an array of value type bytes), or
 * undefined for an imported one.
 */
export function readModule(bytes, who) {
  if (bytes.readUInt32LE(0) !== 0x6d736100) throw new Error(`${who}: not a wasm module`);
  let p = 8;
  const leb = () => {
    const [v, next] = readUleb(bytes, p);
    p = next;
    return v;
  };
  const skipLimits = () => {
    const flags = bytes[p++];
    leb();
    if (flags & 1) leb();
  };
  const sections = [];
  const types = [];
  const funcTypes = [];
  const exports = [];
  let importedFuncs = 0;
  let tables = 0;
  while (p < bytes.length) {
    const start = p;
    const id = bytes[p++];
    const size = leb();
    const body = p;
    const end = p + size;
    sections.push({ id, start, body, end });
    if (id === 1) {
      for (let i = leb(); i > 0; i--) {
        if (bytes[p++] !== 0x60) throw new Error(`${who}: a type that is not a function type`);
        const params = leb();
        p += params;
        const results = [];
        for (let r = leb(); r > 0; r--) results.push(bytes[p++]);
        types.push(results);
      }
    } else if (id === 2) {
      for (let i = leb(); i > 0; i--) {
        // the module's and the field's names (`p += leb()` would add to p as it was before)
        for (let k = 0; k < 2; k++) {
          const n = leb();
          p += n;
        }
        const kind = bytes[p++];
        if (kind === 0) {
          leb();
          importedFuncs++;
        } else if (kind === 1) {
          p++;
          skipLimits();
          tables++;
        } else if (kind === 2) skipLimits();
        else if (kind === 3) p += 2;
        else throw new Error(`${who}: import kind ${kind}`);
      }
    } else if (id === 3) {
      for (let i = leb(); i > 0; i--) funcTypes.push(leb());
    } else if (id === 4) {
      tables += leb();
    } else if (id === 7) {
      for (let i = leb(); i > 0; i--) {
        const e0 = p;
        const n = leb();
        const name = bytes.subarray(p, p + n).toString('utf8');
        p += n;
        const kind = bytes[p++];
        const index = leb();
        exports.push({ name, kind, index, bytes: bytes.subarray(e0, p) });
      }
    }
    p = end;
  }
  const resultsOf = (index) => (index < importedFuncs ? undefined : types[funcTypes[index - importedFuncs]]);
  return { sections, importedFuncs, tables, exports, resultsOf };
}
