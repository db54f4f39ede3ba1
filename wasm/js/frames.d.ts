// `weft/frames`: the DGP engine alone (its WebAssembly module is loaded by the import).
export { WeftError, Principal, FramesRecord, FramesEngineOptions, FramesEngine, createFramesEngine, evidenceFor, loadFrames,
  controllerNextStep, controllerJudgment, fulfilmentResult, EvidencePack, DecisionAdapter, TextService, DgpControllerOptions,
  DgpEvent, SurfaceRun, DgpController, createDgpController, DGP_MAX_STEPS, dgpToolDeclarations, dgpTools, dgpFixtureAdapter,
  dgpFixtureText } from './index.js';
