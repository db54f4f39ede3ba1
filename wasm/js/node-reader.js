// Node: the lazily loaded WebAssembly modules are read synchronously on first use.
import { readFileSync } from 'node:fs';
import { setSyncLoading } from './lazy.js';
import * as frames from './weft_frames.js';
import * as actors from './weft_actors.js';
import * as models from './weft_models.js';

setSyncLoading((url) => readFileSync(url), { frames, actors, models });
