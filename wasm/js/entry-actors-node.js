// `weft/actors` in Node: modules are read from disk synchronously; `openActorStore({ root })`
// opens a `$CHAT_ROOT` directory (the `fs` backend, loaded on first use).
import './node-reader.js';
import { setFsBackend } from './actors.js';

setFsBackend(() => import('./actors-fs.js'));

export * from './entry-actors.js';
