// A worker that floods its host: `payload.count` progress messages of about `payload.size`
// bytes each (written to stdout in 1 MB chunks, each after the previous one reached the pipe,
// so the host's pace sets ours), then optionally one line of `payload.longLine` bytes, then
// writes the file `payload.marker` and waits for a cancel, which it acknowledges.
import { writeFileSync } from 'node:fs';

const write = (buf) => new Promise((resolve, reject) => process.stdout.write(buf, (err) => (err ? reject(err) : resolve())));

self.postMessage({ type: 'hello', protocol: 'weft-worker/1', capabilities: { cancelAck: true } });
self.onmessage = async (e) => {
  const m = e.data;
  if (m.type === 'cancel') {
    self.postMessage({ id: m.id, type: 'cancelled' });
    return;
  }
  if (m.type !== 'run') return;
  const { count, size = 2000, longLine = 0, marker } = m.payload;
  const value = { fraction: 0.5, pad: 'x'.repeat(Math.max(0, size - 70)) };
  const line = JSON.stringify({ id: m.id, type: 'progress', value }) + '\n';
  const perChunk = Math.max(1, Math.floor((1 << 20) / line.length));
  const chunk = Buffer.from(line.repeat(perChunk));
  let left = count;
  for (; left >= perChunk; left -= perChunk) await write(chunk);
  if (left > 0) await write(Buffer.from(line.repeat(left)));
  if (longLine > 0) {
    const mb = Buffer.alloc(1 << 20, 'y');
    for (let n = 0; n < longLine; n += mb.length) await write(mb.subarray(0, Math.min(mb.length, longLine - n)));
    await write(Buffer.from('\n'));
  }
  await write(JSON.stringify({ id: m.id, type: 'progress', value: 1 }) + '\n');
  writeFileSync(marker, 'flooded');
};
