// Type definitions of the weft JS package.

/** An Error with a stable machine-readable code. */
export class WeftError extends Error {
  /** e.g. UNKNOWN_JOB, INPUT_UNSUPPORTED, REUSE_CONFLICT, WAIT_CANCELLED, WAIT_TIMED_OUT. */
  readonly code: string;
}

export interface Capabilities {
  input: boolean;
  cancelAck: boolean;
  errorCode: boolean;
}

export interface Origin {
  thread?: string;
  turn?: string;
  toolCall?: string;
}

export type Outcome<T = unknown> =
  | { outcome: 'succeeded'; value: T }
  | { outcome: 'failed'; message: string; code: string | null; started: boolean }
  | { outcome: 'cancelled'; evidence: 'never_started' | 'acknowledged' | 'quiet_no_ack'; quietMs?: number }
  | { outcome: 'lost'; reason: string };

export type JobState = 'queued' | 'running' | 'succeeded' | 'failed' | 'cancelled' | 'lost';

export interface JobInfo {
  job: number;
  owner: string;
  origin: Origin;
  endpoint: number;
  state: JobState;
  wireId: number | null;
  capabilities: Capabilities | null;
  cancelRequested: boolean;
  outcome: Outcome | null;
  events: number;
}

export type EventType =
  | 'submitted'
  | 'started'
  | 'progress'
  | 'partial'
  | 'input_delivered'
  | 'input_applied'
  | 'input_rejected'
  | 'cancel_requested'
  | 'cancel_acknowledged'
  | 'no_acknowledgement'
  | 'terminated'
  | 'protocol_error'
  | 'outcome'
  | 'late_evidence';

/** One journal record. Extra fields depend on `type` (value, payload, reason, reply, ...). */
export interface JobEvent {
  job: number;
  seq: number;
  at: number;
  /** `caller`, `registry` or `endpoint-N`. */
  source: string;
  type: EventType;
  [field: string]: unknown;
}

/** Told to an observer whose bounded queue overflowed: events from..to are in the journal. */
export interface Missed {
  type: 'missed';
  job: number;
  from: number;
  to: number;
}

export type Delivery = JobEvent | Missed;

export interface Note {
  correlation: string;
  job: number;
  owner: string;
  origin: Origin;
  outcome: Outcome['outcome'];
  summary: string;
  at: number;
}

export interface CloseReport {
  owner: string;
  jobs: { job: number; was: string; outcome: Outcome['outcome']; summary: string }[];
  endpoints: number[];
  unreadNotes: Note[];
}

export interface EndpointOptions {
  owner?: string;
  label?: string;
  /** "await" (default: queue runs until the worker's hello or helloTimeoutMs), "skip" (an
   * unmodified AIUI worker), or the declared capabilities. */
  hello?: 'await' | 'skip' | { declared: Partial<Capabilities> };
  helloTimeoutMs?: number;
  /** Quiet period after a cancel before a worker without cancelAck counts as stopped. */
  quietMs?: number;
  maxConcurrent?: number;
  maxMessageBytes?: number;
}

export interface WorkerOptions extends EndpointOptions {
  /** Browser only: "module" (default) or "classic". */
  type?: 'module' | 'classic';
  name?: string;
  /** Node only: do not keep the process alive for this Worker. */
  unref?: boolean;
}

export interface SubmitOptions {
  owner?: string;
  origin?: Origin;
  /** Return the owner's existing job with this key (same payload) instead of a new one. */
  reuseKey?: string;
  /** Queue a completion note in the owner's mailbox (default true). */
  note?: boolean;
  /** Emit a `wake` event for the owner on completion (default false). */
  wake?: boolean;
}

export interface TransportHandlers {
  message(data: unknown): void;
  undecodable(detail: string): void;
  closed(reason: string): void;
}

export interface Transport {
  post(message: unknown): void;
  terminate(): void;
}

export interface LocalContext {
  signal: AbortSignal;
  progress(value: unknown): void;
  partial(value: unknown): void;
  onInput(handler: (value: unknown) => void): void;
}

export class Job<T = unknown> {
  readonly id: number;
  /** True when an existing job was returned for the reuse key. */
  readonly reused: boolean;
  readonly info: JobInfo | undefined;
  readonly state: JobState | undefined;
  readonly outcome: Outcome<T> | null;
  journal(from?: number): JobEvent[];
  cancel(reason?: string): 'requested' | 'cancelled_before_start' | 'already_requested' | 'already_finished';
  send(value: unknown, options?: { inputId?: string }): string;
  wait(options?: { signal?: AbortSignal; timeoutMs?: number }): Promise<Outcome<T>>;
  observe(listener: (d: Delivery) => void, options?: { from?: number | 'next'; capacity?: number }): () => void;
  events(options?: { from?: number | 'next'; capacity?: number }): AsyncIterableIterator<Delivery>;
}

export class Endpoint {
  readonly id: number;
  readonly info: Record<string, unknown> | undefined;
  submit<T = unknown>(payload: unknown, options?: SubmitOptions): Job<T>;
  terminate(reason?: string): void;
}

export class Runtime {
  now(): number;
  openWorker(specifier: string | URL | Worker, options?: WorkerOptions): Endpoint;
  openEndpoint(connect: (h: TransportHandlers) => Transport, options?: EndpointOptions): Endpoint;
  openLocal(fn: (payload: any, ctx: LocalContext) => unknown, options?: EndpointOptions & { input?: boolean }): Endpoint;
  job(id: number): Job | undefined;
  jobs(options?: { owner?: string }): JobInfo[];
  readMailbox(owner: string): Note[];
  mailboxLength(owner: string): number;
  closeOwner(owner: string): CloseReport;
  on(event: 'finished', listener: (e: { job: number; outcome: Outcome['outcome'] }) => void): () => void;
  on(event: 'note' | 'wake', listener: (e: { owner: string; job: number }) => void): () => void;
  close(reason?: string): void;
}

export function createRuntime(options?: { now?: () => number; firstJobId?: number }): Runtime;

// ---- Decision frames (DGP 0.1) -------------------------------------------------------------

/** An authenticated principal: the role decides who may commit human-only effects. */
export interface Principal {
  id: string;
  role: 'human' | 'agent';
}

/** A persisted record of the frames engine. */
export interface FramesRecord {
  kind: string;
  key: string;
  value: Uint8Array;
}

/** Options of {@link createFramesEngine}. */
export interface FramesEngineOptions {
  /** A declarative app: `{name, resource_kind?, policy?, graph, services?, surfaces, states, always?}`. */
  app: object;
  /** Records an earlier engine wrote (reopen after a restart). */
  records?: FramesRecord[];
  frameTtlMs?: number;
  serviceBudget?: number;
  idSeed?: number;
  maxMessageBytes?: number;
  /** Wall-clock milliseconds since the Unix epoch (default `Date.now`). */
  now?: () => number;
}

/** The DGP engine. Errors are `Error`s with `.code` (`STALE_FRAME`, `HUMAN_APPROVAL_REQUIRED`, ...). */
export class FramesEngine {
  manifest(): any;
  surfaces(): { dgp: '0.1'; surfaces: any[] };
  graphs(): any;
  services(): any;
  frame(surfaceId: string, options?: { disclosure?: 'next' | 'horizon' | 'full'; horizon?: number }): any;
  storedFrame(frameId: string): any;
  assess(principal: Principal, body: object | string): any;
  commit(principal: Principal, idempotencyKey: string | undefined, body: object | string): any;
  bumpPolicy(): number;
  entries(view: string): any[];
  surfaceState(surfaceId: string): { state: any; revision: number } | null;
  takeWrites(): FramesRecord[];
  free(): void;
}

export function createFramesEngine(options: FramesEngineOptions): FramesEngine;

/** The controller's modality check; throws `UNSUPPORTED_MODALITY` for required evidence it cannot read. */
export function evidenceFor(frame: any, decisionId: string, modalities: string[]): { evidenceIds: string[]; omittedOptional: string[] };
