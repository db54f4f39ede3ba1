// Node: the lazily loaded WebAssembly modules are read synchronously on first use. Only the
// frames glue is imported here (its first use may be a synchronous call); the actor graph and
// the model codecs are first used through a Promise (`openActorStore`, `loadActors`, a model
// step), so their glue is imported then and `import 'weft'` parses neither.
import { readFileSync } from 'node:fs';
import { setSyncLoading } from './lazy.js';
import * as frames from './weft_frames.js';

setSyncLoading((url) => readFileSync(url), { frames });
