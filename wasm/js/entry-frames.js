// `weft/frames`: the DGP engine and the DGP controller's agent tools. Importing it loads its
// WebAssembly module (weft_frames_bg.wasm) and nothing of the job runtime.
import { loaded, loadFrames } from './frames.js';

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
} from './dgp-tools.js';
/** The most steps one `dgp_run_surface` call may take (the core's). */
export const DGP_MAX_STEPS = loaded().dgpMaxSteps();
export { WeftError } from './error.js';
