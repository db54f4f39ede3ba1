// `weft/frames`: the DGP engine and the DGP controller's agent tools (its WebAssembly module is
// loaded by the import).
import type { ToolDeclaration, ToolHandler } from './index.js';
import type { Decision, Frame, Resolver, Result, AssessmentRequest, CommitRequest, Receipt, Evidence } from './dgp.js';

export { WeftError, Principal, FramesRecord, FramesEngineOptions, FramesEngine, SurfaceSummary, createFramesEngine, evidenceFor, loadFrames } from './index.js';
export type * as Dgp from './dgp.js';

/** The controller's next move on a frame; throws `CAPABILITY_REQUIRED` for a feature outside
 * `supportedFeatures` (default: every feature weft's controller understands). */
export function controllerNextStep(
  frame: Frame,
  supportedFeatures?: string[],
): { step: 'quiescent' } | { step: 'assess' | 'fulfil' | 'input_required'; decisionId: string };

/** Checks a judgment against the frame's decision (`INVALID_CHOICE`, `INVALID_ANSWER`, ...) and
 * builds the assessment request to record, what follows it, and the commit request when an
 * agent may commit it (`after: 'commit'`; never for a human-only effect). */
export function controllerJudgment(
  frame: Frame,
  decisionId: string,
  judgment: { result: Result; resolver: Resolver; assessmentId: string; speculative?: boolean },
): { assessment: AssessmentRequest; after: 'commit' | 'speculative' | 'abstained' | 'human_required'; commit: CommitRequest | null };

/** The result an input decision with a `fulfillment` receives from its service's text (checked, never truncated). */
export function fulfilmentResult(frame: Frame, decisionId: string, text: string): Result;

// ----- the DGP controller as agent tools ------------------------------------------------------

/** What a decision adapter or text service may see: the evidence it reads, and the optional
 * evidence it cannot (recorded, never silently dropped). */
export interface EvidencePack {
  evidence: Evidence[];
  omittedOptional: string[];
}

/** Judges a decision: resolves to `{result, resolver}` (an AssessmentResult and the Resolver to
 * record). `modalities`: the evidence kinds it really reads (default `['text', 'json']`); a
 * decision whose required evidence it cannot read stops the run with `UNSUPPORTED_MODALITY`. */
export interface DecisionAdapter {
  (decision: Decision, evidence: EvidencePack, frame: Frame, options: { signal?: AbortSignal }): Promise<{ result: Result; resolver?: Resolver }> | { result: Result; resolver?: Resolver };
  modalities?: string[];
  /** The resolver recorded when an answer names none. */
  resolver?: Resolver;
}

/** Writes the text of an input decision that names a `fulfillment` service. */
export interface TextService {
  (decision: Decision, evidence: EvidencePack, frame: Frame, options: { signal?: AbortSignal }): Promise<{ text: string; resolver?: Resolver } | string> | { text: string; resolver?: Resolver } | string;
  modalities?: string[];
  resolver?: Resolver;
}

export interface DgpControllerOptions {
  /** The DGP server, e.g. `http://127.0.0.1:8080`: https, or plain http to a loopback host
   * unless `allowInsecureHttp` (else `INVALID_ARGUMENT`). */
  baseUrl: string;
  /** Allow plain http to a non-loopback host (the token travels unencrypted). Default false. */
  allowInsecureHttp?: boolean;
  /** Bearer token (an agent's). */
  token?: string;
  adapter: DecisionAdapter;
  textService?: TextService;
  /** Default `globalThis.fetch`. */
  fetch?: typeof fetch;
  /** Text-service requests this controller may make over its life (default 3). */
  maxServiceCalls?: number;
}

/** One event of a run (`frame`, `service_text`, `assessed`, `commit_intent`, `commit_retry`,
 * `committed`, or the stop). */
export interface DgpEvent {
  surface: string;
  event: string;
  [field: string]: unknown;
}

/** A run's report (`SurfaceRun::to_json` natively). `ended`: `quiescent`, `input_required`,
 * `human_review_required`, `abstained`, `speculative_recorded`, `stopped` (with a `problem`),
 * `step_budget_reached` or `interrupted`. */
export interface SurfaceRun {
  surface_id: string;
  ended: string;
  steps: number;
  /** The receipts of the commits the run made, in order. */
  commits: Receipt[];
  /** The commit intent whose outcome is unknown (transport failure after retries), or null. */
  commit_in_doubt: DgpEvent | null;
  stop: DgpEvent;
  events: DgpEvent[];
}

export interface DgpController {
  surfaces(options?: { signal?: AbortSignal }): Promise<import('./index.js').SurfaceSummary[]>;
  /** Drives a surface until it stops; `signal` stops it at its next safe point (never with a
   * commit in flight). Never rejects: a failure is a `stopped` event. */
  runSurface(surfaceId: string, options?: { steps?: number; speculative?: boolean }, io?: { signal?: AbortSignal; onEvent?: (e: DgpEvent) => void }): Promise<SurfaceRun>;
  readonly serviceCalls: number;
}

export function createDgpController(options: DgpControllerOptions): DgpController;

/** The most steps one `dgp_run_surface` call may take (32). */
export const DGP_MAX_STEPS: number;

/** The declarations of `dgp_surfaces` and `dgp_run_surface {surface_id, max_steps?, speculative?}`. */
export function dgpToolDeclarations(): Required<Omit<ToolDeclaration, 'mayStartJob'>>[];

/** The DGP controller as agent tools: `agent.registerTools(dgpTools({...}))`. Both tools are
 * parallel-eligible and safe to cancel; two runs of one surface queue. */
export function dgpTools(
  options: (DgpControllerOptions | { controller: DgpController }) & {
    /** Default steps of a run (8). */
    steps?: number;
    /** Default mode of a run (false). */
    speculative?: boolean;
    /** Every event of every run, as it happens. */
    onEvent?: (e: DgpEvent) => void;
  },
): (ToolDeclaration & { handler: ToolHandler })[] & { controller: DgpController };

/** Deterministic fixtures reproducing the ThreadDesk walkthroughs (not a model). */
export const dgpFixtureAdapter: DecisionAdapter;
/** Canned fixture texts for `llm.reason` / `llm.generate_text` (not model output). */
export const dgpFixtureText: TextService;
