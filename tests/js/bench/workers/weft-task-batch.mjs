// weft-task.js behind `weft/worker` (the package's worker.js: the `batch` capability in a DOM
// Worker). ?pkg= names the package (default /tests/js/node_modules/weft).
const pkg = new URL(import.meta.url).searchParams.get('pkg') ?? '/tests/js/node_modules/weft';
await import(`${pkg}/worker.js`);
await import('./weft-task.js');
