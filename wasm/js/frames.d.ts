// `weft/frames`: the DGP engine alone (its WebAssembly module is loaded by the import).
export { WeftError, Principal, FramesRecord, FramesEngineOptions, FramesEngine, createFramesEngine, evidenceFor, loadFrames } from './index.js';
