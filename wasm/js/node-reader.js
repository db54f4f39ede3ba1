// Node: the lazily loaded WebAssembly modules are read synchronously on first use.
import { readFileSync } from 'node:fs';
import { setSyncReader } from './lazy.js';

setSyncReader((url) => readFileSync(url));
