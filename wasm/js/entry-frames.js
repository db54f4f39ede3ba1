// `weft/frames`: the DGP engine and the DGP controller's agent tools. Importing it loads its
// WebAssembly module (weft_frames_bg.wasm) and nothing of the job runtime.
import { loadFrames } from './frames.js';

await loadFrames();

export { createFramesEngine, FramesEngine, evidenceFor, loadFrames } from './frames.js';
export {
  controllerNextStep,
  controllerJudgment,
  fulfilmentResult,
  dgpTools,
  dgpToolDeclarations,
  createDgpController,
  dgpFixtureAdapter,
  dgpFixtureText,
  DGP_MAX_STEPS,
} from './dgp-tools.js';
export { WeftError } from './error.js';
