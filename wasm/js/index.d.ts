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
  /** Present (true) when the worker announced `batch`: messages may travel in batch frames. */
  batch?: boolean;
}

export interface Origin {
  thread?: string;
  turn?: string;
  toolCall?: string;
  /** On a remote job host's journal: the client's job id. */
  remoteJob?: number;
}

export type Outcome<T = unknown> =
  | { outcome: 'succeeded'; value: T }
  | { outcome: 'failed'; message: string; code: string | null; started: boolean }
  | { outcome: 'cancelled'; evidence: 'never_started' | 'acknowledged' | 'quiet_no_ack'; quietMs?: number }
  | {
      outcome: 'lost';
      reason: string;
      /** Which transport fact made the run's fate unknown. */
      evidence?: 'transport_closed' | 'terminated' | 'owner_closed' | 'remote_disconnected' | 'remote_lost';
    };

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
  /** A job of a remote endpoint, once the host accepted it: its session and its job id there. */
  remote: { session: string; job: number } | null;
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
  | 'late_evidence'
  | 'remote_accepted'
  | 'remote_missed';

/** The fields every journal record has. */
export interface JobEventBase {
  job: number;
  seq: number;
  /** The runtime clock (ms) when it was recorded. */
  at: number;
  /** `caller`, `registry` or `endpoint-N`. */
  source: string;
}

/** A reply of the worker protocol, as `late_evidence` carries it. */
export interface WireReply {
  type: 'hello' | 'partial' | 'progress' | 'done' | 'error' | 'cancelled' | 'input_applied' | 'input_rejected';
  id?: number;
  value?: unknown;
  message?: string;
  code?: string;
  inputId?: string;
  protocol?: string | null;
  capabilities?: Capabilities;
}

/** One journal record; its fields are fixed by its `type`. */
export type JobEvent = JobEventBase &
  (
    | { type: 'submitted'; payload: unknown; reuseKey?: string }
    | { type: 'started'; wireId: number; capabilities: Capabilities }
    // `value` is what the execution reported: by convention a fraction 0..1, by the protocol
    // any structured-cloneable value.
    | { type: 'progress'; value: unknown }
    | { type: 'partial'; value: unknown }
    | { type: 'input_delivered' | 'input_applied'; inputId: string }
    | { type: 'input_rejected'; inputId: string; by: 'registry' | 'worker'; reason: string }
    | { type: 'cancel_requested' | 'terminated'; reason: string }
    | { type: 'cancel_acknowledged' }
    | { type: 'no_acknowledgement'; quietMs: number; note: string }
    | { type: 'protocol_error'; violation: Record<string, unknown>; message: string }
    | ({ type: 'outcome' } & Outcome)
    | { type: 'late_evidence'; reply: WireReply }
    // A remote job host accepted the run: the second identity.
    | { type: 'remote_accepted'; session: string; remoteJob: number }
    // The host's bounded replay buffer dropped this many progress/partial reports.
    | { type: 'remote_missed'; progress: number; partial: number }
  );

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
  /** false: never send batch frames to this endpoint, even when its worker announces `batch`
   * (default true: the transport's `post` may receive `{type: "batch", messages}`). */
  batchSends?: boolean;
}

export interface WorkerOptions extends EndpointOptions {
  /** Browser only: "module" (default) or "classic". */
  type?: 'module' | 'classic';
  name?: string;
  /** Node only: do not keep the process alive for this Worker. */
  unref?: boolean;
}

/** Options of `Runtime.openRemote`: exactly one of `script` or `kind`. */
export type RemoteOptions = {
  /** A token `weft serve` accepts (sent in the hello and resume frames, not in headers). */
  token: string;
  owner?: string;
  label?: string;
  /** How long after a disconnect the session may be resumed (default 30000; the host may shorten it). */
  resumeWindowMs?: number;
  /** Heartbeat period (default 5000); three silent periods count as a disconnect. */
  heartbeatMs?: number;
  /** The WebSocket constructor (default `globalThis.WebSocket`). */
  WebSocket?: new (url: string) => WebSocketLike;
  /** Allow `ws://` to a host that is not loopback (the token then travels unencrypted). */
  allowInsecure?: boolean;
  maxConcurrent?: number;
  maxMessageBytes?: number;
} & ({ script: string; kind?: undefined } | { kind: string; script?: undefined });

/** What `openRemote` needs of a WebSocket (the DOM's, Node's, or a test double). */
export interface WebSocketLike {
  readonly readyState: number;
  send(data: string): void;
  close(code?: number, reason?: string): void;
  // Set by the runtime: open, message (`ev.data`, a JSON text), close (`ev.code`, `ev.reason`), error.
  onopen: ((ev: any) => unknown) | null;
  onmessage: ((ev: any) => unknown) | null;
  onclose: ((ev: any) => unknown) | null;
  onerror: ((ev: any) => unknown) | null;
}

/** `Endpoint.info.remote`: the link to the remote host. */
export interface RemoteInfo {
  url: string;
  /** The host's session id, once welcomed. */
  session: string | null;
  state: 'connecting' | 'handshaking' | 'resuming' | 'live' | 'waiting' | 'closed';
  /** Connections lost after being live. */
  disconnects: number;
  /** The last host frame applied (its sequence number). */
  lastSeq: number;
  /** Client frames held for replay. */
  buffered: number;
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
  /** `requested_while_disconnected`: a remote endpoint's link is down; the cancel is delivered
   * on resumption or answered by the window's expiry. */
  cancel(reason?: string): 'requested' | 'cancelled_before_start' | 'already_requested' | 'already_finished' | 'requested_while_disconnected';
  /** Releases this finished job now (see `Runtime.forget`). */
  forget(): boolean;
  /**
   * Sends structured input to a running job that accepts it; returns the input id. A value the
   * transport cannot copy (a function, a Proxy) throws its `DataCloneError` and changes nothing:
   * no `input_delivered` event, nothing sent, the input id free to be used again; the run goes
   * on. (Should the transport have put something else on the wire as it posted this input,
   * the input cannot be withdrawn: it stays, recorded as delivered, and a `WeftError`
   * `INVALID_ARGUMENT` is thrown, the `DataCloneError` its `cause`.) On a remote endpoint the
   * value must be JSON data (see `Runtime.openRemote`): what is not throws `INVALID_JSON` and
   * changes nothing in the same way; what is sent is its JSON copy, taken at the call.
   */
  send(value: unknown, options?: { inputId?: string }): string;
  wait(options?: { signal?: AbortSignal; timeoutMs?: number }): Promise<Outcome<T>>;
  observe(listener: (d: Delivery) => void, options?: { from?: number | 'next'; capacity?: number }): () => void;
  events(options?: { from?: number | 'next'; capacity?: number }): AsyncIterableIterator<Delivery>;
}

export class Endpoint {
  readonly id: number;
  /** State, capabilities and log; `remote` for an endpoint opened with `openRemote`;
   * `framesSent` / `framesReceived`: frames put on and taken from its transport (a batch
   * frame counts once). */
  readonly info: (Record<string, unknown> & { remote?: RemoteInfo; framesSent?: number; framesReceived?: number }) | undefined;
  /**
   * Submits a job. The payload is captured at the call, as `postMessage` captures it: a run
   * that does not leave at once (queued before the hello, behind others, or held for a batch
   * frame) carries a copy, so the caller may reuse the object; a payload that cannot be
   * cloned throws `DataCloneError` here and submits nothing. (Should the transport have put
   * another run on the wire as it posted this one, the job cannot be withdrawn: it stays,
   * never delivered, and a `WeftError` `INVALID_ARGUMENT` is thrown, the `DataCloneError` its
   * `cause`.) On a remote endpoint the payload must be JSON data (see `Runtime.openRemote`):
   * what is not throws `INVALID_JSON` and submits nothing; what is recorded and sent is its
   * JSON copy, taken at the call.
   */
  submit<T = unknown>(payload: unknown, options?: SubmitOptions): Job<T>;
  terminate(reason?: string): void;
}

export class Runtime {
  now(): number;
  openWorker(specifier: string | URL | Worker, options?: WorkerOptions): Endpoint;
  openEndpoint(connect: (h: TransportHandlers) => Transport, options?: EndpointOptions): Endpoint;
  openLocal(fn: (payload: any, ctx: LocalContext) => unknown, options?: EndpointOptions & { input?: boolean }): Endpoint;
  /**
   * An endpoint on a remote job host (`weft serve --remote-script NAME=PATH` / `--remote-kind`,
   * at `ws://HOST/api/jobs/remote`), with a local endpoint's semantics. A disconnect is resumed
   * within `resumeWindowMs` with nothing lost; past it running jobs are `lost` with the
   * evidence `remote_disconnected`. UNSUPPORTED without a WebSocket; INVALID_ARGUMENT for a
   * URL that is neither `wss://` nor `ws://` to loopback (unless `allowInsecure`).
   *
   * Its wire is JSON text, so a payload or input sent to it must be JSON data: null, booleans,
   * strings, finite numbers (-0 crosses as 0), arrays, and plain objects (own enumerable string
   * keys; a property whose value is `undefined` is left out), nested at most 100 arrays or
   * objects deep (what a frame can carry). A value with `toJSON` crosses as
   * what that returns (a `Date`: its ISO string). Anything else is refused at the call with
   * `INVALID_JSON`, naming the part (`payload.f is a function`), and nothing is recorded: an
   * `undefined` value or array element (or hole), `NaN` / `±Infinity`, a BigInt, a function, a
   * symbol, a cycle, a `Map`, `Set`, typed array, class instance or other non-plain object.
   */
  openRemote(url: string | URL, options: RemoteOptions): Endpoint;
  job(id: number): Job | undefined;
  jobs(options?: { owner?: string }): JobInfo[];
  readMailbox(owner: string): Note[];
  mailboxLength(owner: string): number;
  closeOwner(owner: string): CloseReport;
  /** closeOwner in slices: unfinished jobs get their outcome and the owner's jobs become
   * unknown at once; finished jobs' records are released `slice` (default 4096) per
   * macrotask, so that closing a large owner never blocks the event loop for long. */
  closeOwnerGradually(owner: string, options?: { slice?: number }): Promise<CloseReport>;
  /** Releases finished job `id` (record, journal, reuse key) before its owner closes; false,
   * changing nothing, while it runs or a wait or observer still follows it. */
  forget(id: number): boolean;
  on(event: 'finished', listener: (e: { job: number; outcome: Outcome['outcome'] }) => void): () => void;
  on(event: 'note' | 'wake', listener: (e: { owner: string; job: number }) => void): () => void;
  close(reason?: string): void;
  /** close(), then free the registry's wasm memory; the runtime is unusable afterwards. */
  dispose(): void;
}

/** Creates a runtime. Its job registry is created on its first use, in a browser of the module
 * loaded then (the apps module once `loadApps()` has resolved: see there). */
export function createRuntime(options?: { now?: () => number; firstJobId?: number }): Runtime;

/** Bytes of wasm linear memory in use by the job registries (it grows, never shrinks): in a
 * browser the jobs-only module's and, once loaded, the apps module's; in Node the apps module's
 * (compiled by this call if nothing has used it yet). */
export function wasmMemoryBytes(): number;

/**
 * Loads the apps module (once): the WebAssembly module of the ops app and agent sessions, which
 * holds the job registry too. In a browser `import 'weft'` loads only the jobs-only module, and
 * `createApp`, `createClaims`, `createAgent` and `validateToolArguments` throw `NOT_LOADED`
 * until this resolves (importing `weft/apps` has done it), and the classes `App`, `Operation`,
 * `Claims` and `Agent` are `undefined` (for `instanceof`). A runtime creates its job registry on
 * its first use (an endpoint opened, a job submitted, `createAgent`): every runtime first used
 * after this resolves runs on the apps module's registry and can host an agent, one created at
 * page start included. A runtime used before (jobs ran on it) keeps running its jobs on the
 * jobs-only module but cannot host an agent (`createAgent` throws `RUNTIME_WITHOUT_APPS`, which
 * loading does not cure: create the agent's runtime after the load, or load before the
 * runtime's first use). In Node every
 * runtime runs on the apps module, compiled synchronously on its first use: this resolves at once.
 */
export function loadApps(): Promise<void>;

// ----- operations: change published controls, observe the consequences ----------------------

export type ControlScalar = number | string | boolean;

export type ControlSpec = {
  name: string;
  scope?: string;
  description?: string;
  value: ControlScalar;
} & (
  | { type: 'number'; min?: number; max?: number; step?: number; unit?: string }
  | { type: 'enum'; options: ControlScalar[] }
  | { type: 'boolean' }
  | { type: 'string' }
);

export type Effect =
  | { set: string; to: { value: ControlScalar } | { arg: string } | { increment: number } }
  | { rerun: string };

export interface ActionSpec {
  name: string;
  scope?: string;
  description?: string;
  params?: ({ name: string; required?: boolean; description?: string } & Omit<ControlSpec, 'name' | 'scope' | 'value' | 'description'>)[];
  /** Declared effects: validated together and applied all-or-nothing. */
  effects: Effect[];
}

export interface CellContext<P = unknown> {
  /** "instance:generation" of this calculation. */
  calc: string;
  /** Aborted when the calculation is superseded, held or its graph disposed. */
  signal: AbortSignal;
  /** The cell's last final value. */
  previous: P | undefined;
  progress(fraction: number): void;
  partial(value: P): void;
}

export interface CellSpec {
  name: string;
  scope?: string;
  description?: string;
  /** Control or cell names, or `{key, from}` to read `from` under `key`. */
  deps?: (string | { key: string; from: string })[];
  /** Constant input fields (e.g. a Worker's tuning). */
  constants?: Record<string, unknown>;
  /** The cell holds (nothing runs) unless `control` has one of the `open` values. */
  gate?: { control: string; open: ControlScalar[] };
  /** Host compute: a value, a Promise, or an AsyncIterable of partials. */
  compute?: (inputs: any, ctx: CellContext) => unknown;
  /** Or: run as a Worker job on this endpoint (the inputs are the run payload). */
  worker?: Endpoint | number;
  /**
   * Equality gating (default `'value'`): a recomputed value structurally equal to the current
   * one (plain objects, arrays and typed arrays by content, `Object.is` on leaves, other
   * objects by reference) does not trigger dependents. `'never'`: every result is a change.
   */
  equality?: 'value' | 'never';
}

export type CellState = 'unresolved' | 'pending' | 'streaming' | 'refreshing' | 'held' | 'ready' | 'errored';

export interface CellView<T = unknown> {
  state: CellState;
  /** The latest value (survives errors and holds). */
  value: T | undefined;
  valueCalc: string | null;
  valueRevision: number | null;
  /** Not a partial, nor derived from one. */
  final: boolean;
  /** Computed from the current version of every control it depends on. */
  upToDate: boolean;
  /** The calculation in flight. */
  calc: string | null;
  progress: number | null;
  error: { cell: string; calc: string; message: string; code: string | null } | null;
  /** Control → the revision of the value this cell value was computed from. */
  provenance: Record<string, number>;
}

export interface Snapshot {
  revision: number;
  instance: number;
  controls: Record<string, ControlScalar>;
  versions: Record<string, number>;
  cells: Record<string, CellView>;
}

export interface Receipt {
  write: number;
  control: string;
  requested: ControlScalar;
  accepted: ControlScalar;
  adjusted: ('snapped' | 'clamped')[];
  status: 'staged' | 'effective' | 'overwritten' | 'discarded';
  revision?: number;
  changed?: boolean;
  overwrittenBy?: number;
  by: string;
  operation?: number;
  invocation?: number;
  toolCall?: string;
  acceptedAt: number;
}

export type OpOutcomeKind = 'settled' | 'superseded' | 'failed' | 'cancelled' | 'timed_out';

export interface OpOutcome<R = unknown> {
  operation: number;
  outcome: OpOutcomeKind;
  message: string;
  revision: number;
  at: number;
  writes: Receipt[];
  /** The relevant controls at `revision`: what the result corresponds to. */
  inputs: Record<string, ControlScalar>;
  cells: Record<string, { state: CellState | null; valueCalc: string | null; processed: boolean; calc: string | null; noop: boolean | null }>;
  calculations: string[];
  /** Named outputs or the selector's return value (settled only). */
  result?: R;
  superseded?: {
    stage: 'before_effective' | 'before_execution' | 'during_execution';
    by: Receipt[];
    changedInputs: string[];
    calculations: { cell: string; calc: string; state: string }[];
  };
  failures?: { reason: 'errored' | 'held' | 'removed'; cell?: string; calc?: string | null; message: string; code?: string | null }[];
  intervening?: Receipt[];
  job?: number;
}

export interface ObserveRequest {
  writes?: Record<string, ControlScalar>;
  waitFor?: string[];
  select?: string[];
  selector?: string;
  onSupersede?: 'end' | 'follow';
  onFailure?: 'end' | 'collect';
  timeoutMs?: number;
  by?: string;
  toolCall?: string;
  signal?: AbortSignal;
}

export interface ToolDefinition {
  name: 'report' | 'set' | 'act' | 'observe' | 'wait' | 'inspect' | 'cancel';
  description: string;
  inputSchema: Record<string, unknown>;
}

/**
 * An observation of an app's operation (`App.observe`, `App.tools`): its outcome and waits.
 *
 * In a browser `weft` exports `Operation` as `undefined` until `loadApps()` resolves (or
 * `weft/apps` is imported): `x instanceof Operation` throws a TypeError before that. Node and
 * `weft/apps` export the class at once.
 */
export class Operation<R = unknown> {
  readonly id: number;
  readonly outcome: OpOutcome<R> | null;
  inspect(): Record<string, unknown>;
  /**
   * Ends only this wait on abort/timeout (WAIT_CANCELLED / WAIT_TIMED_OUT); rejects with
   * PRUNED when the finished operation's record was already pruned (see `Retention`).
   */
  wait(options?: { signal?: AbortSignal; timeoutMs?: number }): Promise<OpOutcome<R>>;
  /** Cancels the observation only; returns the outcome name. */
  cancel(reason?: string): OpOutcomeKind;
  /** Hosts the operation as a registry job (see `App.hostAsJob`). */
  hostAsJob(options?: { owner?: string; origin?: Origin; toolCall?: string }): Job<HostedOpValue>;
}

/**
 * An ops app (`createApp`): published controls and derived cells over a job runtime.
 *
 * In a browser `weft` exports `App` as `undefined` until `loadApps()` resolves (or
 * `weft/apps` is imported): `x instanceof App` throws a TypeError before that. Node and
 * `weft/apps` export the class at once.
 */
export class App {
  readonly runtime: Runtime;
  readonly revision: number;
  openWorker(specifier: string | URL | Worker, options?: WorkerOptions): Endpoint;
  openLocal(fn: (payload: any, ctx: LocalContext) => unknown, options?: EndpointOptions & { input?: boolean }): Endpoint;
  load(spec: {
    controls?: ControlSpec[];
    actions?: ActionSpec[];
    cells?: CellSpec[];
    selectors?: Record<string, ((snapshot: Snapshot, outcome: OpOutcome) => unknown) | { description?: string; select: (snapshot: Snapshot, outcome: OpOutcome) => unknown }>;
  }): void;
  replaceGraph(instance: number, cells: CellSpec[]): void;
  disposeGraph(): void;
  flush(): number | undefined;
  set(name: string, value: ControlScalar, options?: { by?: string; toolCall?: string }): Receipt;
  setMany(writes: Record<string, ControlScalar>, options?: { by?: string; toolCall?: string }): Receipt[];
  act(name: string, args?: Record<string, ControlScalar>, options?: { by?: string; toolCall?: string }): { invocation: number; writes: Receipt[] };
  start<R = unknown>(request: ObserveRequest): Operation<R>;
  /** Aborting `signal` cancels the observation (never the calculations) and rejects. */
  observe<R = unknown>(request: ObserveRequest): Promise<OpOutcome<R>>;
  operation<R = unknown>(id: number): Operation<R>;
  submitTask(cell: string, overrides?: Record<string, ControlScalar>, options?: { owner?: string; origin?: Origin; toolCall?: string }): Job;
  /**
   * Hosts a waiting operation as a job of the app's registry (`owner` default `agent`): its
   * progress goes to the job's journal, its outcome is the job's (with a mailbox note for the
   * owner). Cancelling the job cancels the observation only. Hosting again returns the same
   * job; a finished, never hosted operation is refused (INVALID_ARGUMENT).
   */
  hostAsJob(op: number | Operation, options?: { owner?: string; origin?: Origin; toolCall?: string }): Job<HostedOpValue>;
  readonly tools: {
    list(): ToolDefinition[];
    call(name: string, args?: Record<string, unknown>, options?: { by?: string; toolCall?: string; owner?: string; signal?: AbortSignal }): Promise<any>;
  };
  snapshot(): Snapshot;
  cell<T = unknown>(name: string): CellView<T>;
  report(options?: { full?: boolean }): Record<string, unknown>;
  inspect(op: number): Record<string, unknown>;
  operations(): { operation: number; state: OpOutcomeKind | 'waiting'; by: string }[];
  calc(id: string): Record<string, unknown>;
  calcsOf(cell: string): string[];
  receipt(write: number): Receipt | undefined;
  retained(): { calcs: number; writes: number; operations: number };
  subscribe(listener: (app: App) => void): () => void;
  dispose(): void;
}

/**
 * How many finished records an app keeps (default 1024 each; `Infinity`: all). Records still
 * named by a waiting or retained operation, a cell's value or error, or an unfinished Worker
 * job are never pruned; a pruned id gives a `PRUNED` error.
 */
export interface Retention {
  /** Finished operations kept, newest first. */
  operations?: number;
  /** Ended calculations nothing names any more, kept newest first. */
  calculations?: number;
  /** Write receipts nothing names any more, kept newest first. */
  writes?: number;
}

/** An ops app (in a browser: `NOT_LOADED` before `loadApps()` / `import 'weft/apps'`). */
export function createApp(options?: { now?: () => number; instance?: number; firstOp?: number; firstJobId?: number; retention?: Retention }): App;

/** The value of a hosted operation's job: the operation's outcome record. */
export type HostedOpValue = OpOutcome & { job: number };

// ----- standing desires ------------------------------------------------------------------

export type ClaimPhase = 'idle' | 'pending' | 'active' | 'error';

/** One claim's state; `held` is the desire held (the resource: `Claims.held`). */
export interface ClaimState<D = unknown> {
  phase: ClaimPhase;
  desired?: D | null;
  held?: D | null;
  error?: string | null;
  /** The claim's latest events (a window of at least the last 256). */
  journal?: { at: number; what: string; attempt: number | null }[];
  /** How many older events the journal no longer holds (absent when none). */
  journalDropped?: number;
}

/**
 * Standing desires (`weft_core::ops::claims`): per named claim the newest desire wins; one
 * acquisition or release at a time per claim; an acquisition that arrives for a superseded
 * desire is released at once, never adopted; a failed acquisition parks the claim in `error`
 * until the desire changes or `retry`. Desires are compared as JSON values. Idle claims
 * (nothing desired, held or in flight) are kept for inspection up to 256; the longest idle
 * beyond that are forgotten (their state then reads `{ phase: 'idle' }`, as a name never used).
 *
 * In a browser `weft` exports `Claims` as `undefined` until `loadApps()` resolves (or
 * `weft/apps` is imported): `x instanceof Claims` throws a TypeError before that. Node and
 * `weft/apps` export the class at once.
 */
export class Claims<D = unknown, R = unknown> {
  /** Sets what should exist now (`null`: nothing); an equal desire changes nothing. */
  desire(claim: string, desire: D | null): void;
  /** Re-attempts a claim parked in `error` (UNKNOWN_CLAIM: no such claim, or idle and forgotten). */
  retry(claim: string): void;
  phase(claim: string): ClaimPhase;
  state(claim: string): ClaimState<D>;
  /** The resource held for the newest desire, if any. */
  held(claim: string): R | undefined;
  /** Resolves once the claim is not pending; aborting ends only this wait (WAIT_CANCELLED). */
  settled(claim: string, options?: { signal?: AbortSignal }): Promise<ClaimState<D>>;
  /** Releases what is held (and acquisitions arriving later), rejects waits DISPOSED. */
  dispose(): void;
}

/** A claims board (in a browser: `NOT_LOADED` before `loadApps()` / `import 'weft/apps'`). */
export function createClaims<D = unknown, R = unknown>(options: {
  acquire: (desire: D, info: { claim: string; attempt: number }) => R | Promise<R>;
  release: (resource: R, info: { claim: string; attempt: number; desire: D }) => unknown;
  now?: () => number;
}): Claims<D, R>;
// ----- agent sessions -------------------------------------------------------------------

/** A tool as declared to an agent (the handler is bound separately). */
export interface ToolDeclaration {
  /** 1-64 characters from [A-Za-z0-9_-]. */
  name: string;
  description?: string;
  /** JSON Schema of the arguments: an object schema in weft's enforced subset (no `pattern`,
   * no `$ref`); a schema weft cannot enforce is refused with INVALID_SCHEMA. */
  parameters?: Record<string, unknown>;
  /** Adjacent calls of parallel tools overlap; others run alone (default false). */
  supportsParallel?: boolean;
  /** The handler may start background jobs with `ctx.submitJob` (default false). */
  mayStartJob?: boolean;
  /** An interrupt may abort the handler's `ctx.signal` (default false: it is left running). */
  safeToCancel?: boolean;
}

export interface ToolCallContext {
  invocation: number;
  callId: string;
  tool: string;
  step: number;
  /** Aborted when the step is interrupted and the tool is declared `safeToCancel`. A handler
   * that rejects after the abort acknowledges it (the call is reported `uncertain`). */
  signal: AbortSignal;
  /** `{thread, turn, toolCall}` of this call. */
  readonly origin: Origin;
  /** Starts a job owned by the agent with this call as its origin (tools declared
   * `mayStartJob` only). The job outlives the call and the turn. `endpoint` is an endpoint of
   * the agent's runtime or its id; another runtime's endpoint is refused (INVALID_ARGUMENT). */
  submitJob<T = unknown>(endpoint: Endpoint | number, payload: unknown, options?: { wake?: boolean; note?: boolean; reuseKey?: string }): Job<T>;
}

export type ToolHandler = (args: any, ctx: ToolCallContext) => unknown | Promise<unknown>;

export interface ModelToolCall {
  /** Unique within the step; assigned when absent. */
  id?: string;
  name: string;
  /** An object, or JSON text (as most model APIs send it). */
  arguments?: Record<string, unknown> | string;
}

export interface ModelResponse {
  text?: string | null;
  calls?: ModelToolCall[];
  /** Token counts the provider reported; recorded as a `model_usage` event of the turn. */
  usage?: ModelUsage;
}

/** Token counts of one model step. */
export interface ModelUsage {
  inputTokens: number;
  outputTokens: number;
}

export interface ModelRequest {
  session: string;
  turn: number;
  step: number;
  toolsVersion: number;
  /** The transcript so far. Read-only. */
  messages: TranscriptMessage[];
  /** The tools this step advertises (its snapshot). */
  tools: Required<ToolDeclaration>[];
}

export type Model = (
  request: ModelRequest,
  options: { signal: AbortSignal; onDelta?: (delta: ModelStreamEvent) => void },
) => ModelResponse | Promise<ModelResponse>;

/** What a streaming model reports while its step runs, in stream order. */
export type ModelStreamEvent =
  | { type: 'text_delta'; text: string }
  /** The model began call `index` (its position among the step's calls). */
  | { type: 'tool_call_start'; index: number; id: string; name: string }
  | { type: 'tool_call_delta'; index: number; arguments: string }
  | { type: 'tool_call_end'; index: number }
  /** The latest token counts (Anthropic reports output tokens as they grow). */
  | ({ type: 'usage' } & ModelUsage)
  /** Why the model stopped: `stop`, `tool_calls`, `length`, `end_turn`, `tool_use`, `max_tokens`, ... */
  | { type: 'finish'; reason: string };

/** An `agent.on('model_delta')` event: a stream event of step `step` while it runs. */
export type ModelDeltaEvent = ModelStreamEvent & { turn: number; step: number };

/** An `agent.on('model_usage')` event: the provider's token counts for step `step`. */
export interface ModelUsageEvent extends ModelUsage {
  output: 'model_usage';
  turn: number;
  step: number;
}

/** Options of `openaiModel` / `anthropicModel`. */
export interface ProviderModelOptions {
  /** The provider's model name (`gpt-4o-mini`, `claude-3-5-haiku-latest`, `llama3.2`). */
  model: string;
  /** OpenAI-style: including the API version (`https://api.openai.com/v1`, `http://localhost:11434/v1`);
   * Anthropic: `https://api.anthropic.com`. Default: the provider's public endpoint. */
  baseUrl?: string;
  /** Sent as `Authorization: Bearer` (OpenAI) or `x-api-key` (Anthropic); local servers need none. */
  apiKey?: string;
  /** The most output tokens a step may produce (4096). */
  maxTokens?: number;
  /** Whether the model may select several tool calls in one step (true). */
  parallelToolCalls?: boolean;
  /** System text sent with every step. */
  system?: string;
  /** Retries of rate limits (429, honouring Retry-After) and overload (529/503). */
  retry?: { maxAttempts?: number; baseDelayMs?: number; maxDelayMs?: number };
  /** From sending to the answer's head, and between two body chunks (60 000 ms each). */
  timeouts?: { headMs?: number; idleMs?: number };
  /** The fetch to use (default: the global one). */
  fetch?: typeof fetch;
  /** The monotonic clock of the deadlines, in milliseconds (default `performance.now()`). */
  now?: () => number;
}

/** A model function with its provider and `provider:model` label. */
export type ProviderModel = Model & { readonly provider: 'openai' | 'anthropic' | 'builtin'; readonly label: string };

/**
 * Codes of a failed model step (the WeftError the model function rejects with; its message,
 * recorded as the turn's `message`, starts with the code).
 */
export type ModelErrorCode =
  | 'MODEL_AUTH'
  | 'MODEL_RATE_LIMITED'
  | 'MODEL_OVERLOADED'
  | 'MODEL_CONTEXT_TOO_LONG'
  | 'MODEL_BAD_RESPONSE'
  | 'MODEL_TIMEOUT'
  | 'MODEL_ABORTED'
  | 'MODEL_PROVIDER_ERROR'
  | 'MODEL_CONNECT'
  | 'MODEL_INVALID_CONFIG';

/** A model on an OpenAI Chat Completions endpoint (OpenAI, Ollama, llama.cpp server, vLLM, LM Studio, OpenRouter), streaming. */
export function openaiModel(options: ProviderModelOptions): ProviderModel;
/** A model on the Anthropic Messages API, streaming. */
export function anthropicModel(options: ProviderModelOptions): ProviderModel;
/** The deterministic built-in model: says that no model is configured (MODEL_NOT_CONFIGURED) and how to configure one. */
export function builtinModel(): ProviderModel;
/**
 * The model a configuration names, by the core's rule: `model` is `PROVIDER:NAME` or
 * `PROVIDER`; a base URL alone is OpenAI-compatible; with no provider, base URL or key, the
 * built-in model. Rejects with MODEL_INVALID_CONFIG.
 */
export function resolveModel(
  choice?: Omit<ProviderModelOptions, 'model'> & { model?: string; openaiKey?: string; anthropicKey?: string },
): Promise<ProviderModel>;
/** Loads the models WebAssembly module now (a model loads it on its first step). */
export function loadModels(): Promise<void>;

export type CallStatus = 'succeeded' | 'failed' | 'rejected' | 'not_started' | 'uncertain';

/** One call's result, in model order. */
export interface CallResult {
  invocation: number;
  callId: string;
  tool: string;
  status: CallStatus;
  /** Whether the handler started (its effects may have happened). */
  started: boolean;
  value?: unknown;
  message?: string;
  code?: string;
  reason?: string;
  /** not_started: nothing happened. */
  safeToRetry?: boolean;
  /** uncertain: `abort_acknowledged` or `no_settlement`. */
  evidence?: 'abort_acknowledged' | 'no_settlement';
  /** Jobs the call started; they continue independently of the call and the turn. */
  jobs?: number[];
  handedOver?: boolean;
  [field: string]: unknown;
}

export interface Mail {
  seq: number;
  at: number;
  kind: 'job' | 'observation' | 'late_result' | 'late_job';
  note?: Note;
  source?: string;
  value?: unknown;
  result?: CallResult;
  [field: string]: unknown;
}

export type TranscriptMessage =
  | { role: 'turn_start'; turn: number; cause: { task: number } | { wake: 'job'; job: number } | { wake: 'app'; reason: string } }
  | ({ role: 'mail' } & Mail)
  | { role: 'standing'; key: string; value: unknown }
  | { role: 'task'; task: number; input: unknown }
  | { role: 'steer'; input: unknown }
  | { role: 'assistant'; step: number; text: string | null; calls: { id: string; name: string; arguments: unknown }[] }
  | ({ role: 'tool_result'; step: number } & CallResult)
  | { role: 'turn_end'; turn: number; end: TurnEnd; reason?: string; message?: string; steps?: number };

export type TurnEnd = 'completed' | 'interrupted' | 'model_failed' | 'step_limit';

export interface TurnResult {
  task: number;
  turn: number;
  end: TurnEnd;
  reason?: string;
  message?: string;
  /** The model's last text in the turn. */
  text: string | null;
  /** Every call result of the turn, in model order per step. */
  results: CallResult[];
  messages: TranscriptMessage[];
}

export type AgentPhase = 'idle' | 'model_step' | 'running_tools' | 'interrupted';

export interface AgentOptions {
  /** The agent's id: the owner and thread of the jobs its tools start (default "agent"). */
  id?: string;
  /** Asked at every model step. Without one, each step waits for `agent.respond()`. */
  model?: Model;
  /** How long an interrupt waits for started calls before reporting them uncertain (1000). */
  graceMs?: number;
  /** Model steps per turn before the turn ends with `step_limit` (64). */
  maxSteps?: number;
}

/**
 * One agent session: one authoritative turn state machine (`createAgent`).
 *
 * In a browser `weft` exports `Agent` as `undefined` until `loadApps()` resolves (or
 * `weft/apps` is imported): `x instanceof Agent` throws a TypeError before that. Node and
 * `weft/apps` export the class at once.
 */
export class Agent {
  readonly id: string;
  readonly phase: AgentPhase;
  readonly state: Record<string, unknown>;
  setModel(model: Model): void;
  /** The pending model request while the agent waits for a model step, else null. */
  pendingRequest(): ModelRequest | null;
  /** Answers model step `step` yourself (agents without a model wait for this). Throws
   * STALE_STEP / INVALID_RESPONSE and changes nothing on a bad answer. */
  respond(step: number, response: ModelResponse): void;
  registerTool(declaration: ToolDeclaration, handler: ToolHandler): number;
  /** Declares several tools, each a declaration with its `handler` (e.g. a published tool surface). */
  registerTools(tools: Iterable<ToolDeclaration & { handler: ToolHandler }>): number[];
  unregisterTool(name: string): void;
  tools(): { version: number; tools: (Required<ToolDeclaration> & { handler: number })[] };
  submitTask(input: unknown): number;
  /** Submits a task and resolves when its turn ends (rejects with CLOSED if the agent closes first). */
  run(input: unknown, options?: { signal?: AbortSignal }): Promise<TurnResult>;
  cancelTask(task: number): void;
  steer(input: unknown): void;
  wake(reason?: string): void;
  interrupt(reason?: string): 'not_running' | 'ended' | 'stopping' | 'already_interrupting';
  postObservation(source: string, value: unknown): number;
  setStanding(key: string, value: unknown): void;
  mailbox(): Mail[];
  transcript(from?: number): TranscriptMessage[];
  idle(options?: { signal?: AbortSignal }): Promise<void>;
  /** A streaming model's deltas while step `step` runs (not an `output` of the session). */
  on(event: 'model_delta', listener: (e: ModelDeltaEvent) => void): () => void;
  on(event: 'model_usage', listener: (e: ModelUsageEvent) => void): () => void;
  on(event: 'turn_started' | 'turn_ended' | 'call_finished' | 'mail_queued' | 'model_request' | 'start_call' | 'abort_call' | 'output', listener: (output: Record<string, any>) => void): () => void;
  /** Withdraws queued tasks (their run() rejects with CLOSED), interrupts the running turn,
   * asks no model again and detaches from the runtime. Jobs the tools started continue. */
  close(reason?: string): void;
  /** close(), then free the session's wasm memory; the agent is unusable afterwards. */
  dispose(): void;
}

/** An agent session on `runtime`. In a browser `NOT_LOADED` before `loadApps()` / `import
 * 'weft/apps'`, and `RUNTIME_WITHOUT_APPS` for a runtime used before the load (jobs ran on it:
 * its registry, created on its first use, is in the jobs-only module; create the agent's
 * runtime after the load). A runtime created before the load and first used after it hosts
 * an agent. */
export function createAgent(runtime: Runtime, options?: AgentOptions): Agent;

/** A deterministic model answering with `responses` in order (then SCRIPT_EXHAUSTED). */
export function scriptedModel(
  responses?: (ModelResponse | ((request: ModelRequest) => ModelResponse))[],
): Model & {
  requests: { turn: number; step: number; messages: number; tools: string[]; toolsVersion: number }[];
  push(...responses: (ModelResponse | ((request: ModelRequest) => ModelResponse))[]): void;
  remaining(): number;
};

/** Validates arguments with weft's schema rules: `{ok, errors}` (INVALID_SCHEMA if unsupported;
 * in a browser `NOT_LOADED` before `loadApps()` / `import 'weft/apps'`). */
export function validateToolArguments(schema: Record<string, unknown>, args: unknown): { ok: boolean; errors: string[] };

// ---- Decision frames (DGP 0.1) -------------------------------------------------------------

/** The DGP 0.1 records (frames, assessments, commits, receipts, ...), from the DGP schema. */
export type * as Dgp from './dgp.js';
import type * as Dgp from './dgp.js';

/** One entry of `GET /dgp/surfaces`. */
export interface SurfaceSummary {
  surface_id: string;
  title: string;
  state: string;
  revision: number;
  frame_href: string;
}

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
  manifest(): Dgp.Manifest;
  surfaces(): { dgp: '0.1'; surfaces: SurfaceSummary[] };
  graphs(): { dgp: '0.1'; graphs: { graph_id: string; graph_version: string; href: string }[] };
  services(): { dgp: '0.1'; services: Dgp.Service[] };
  frame(surfaceId: string, options?: { disclosure?: Dgp.DisclosureLevel; horizon?: number }): Dgp.Frame;
  storedFrame(frameId: string): Dgp.Frame;
  assess(principal: Principal, body: Dgp.AssessmentRequest | string): Dgp.Assessment;
  commit(principal: Principal, idempotencyKey: string | undefined, body: Dgp.CommitRequest | string): Dgp.Receipt;
  bumpPolicy(): number;
  /** The entries of an app read view, oldest first (their shape is the app's). */
  entries(view: string): Record<string, unknown>[];
  surfaceState(surfaceId: string): { state: unknown; revision: number } | null;
  takeWrites(): FramesRecord[];
  free(): void;
}

/**
 * Creates an engine. The engine is a WebAssembly module of its own, loaded on first use: in
 * Node this call loads it; in browsers import `weft/frames` (or `await loadFrames()`) first,
 * else this throws `NOT_LOADED`.
 */
export function createFramesEngine(options: FramesEngineOptions): FramesEngine;

/** Loads the frames module (once). Importing `weft/frames` has done it. */
export function loadFrames(): Promise<void>;

/** The controller's modality check; throws `UNSUPPORTED_MODALITY` for required evidence it cannot read. */
export function evidenceFor(frame: Dgp.Frame, decisionId: string, modalities: string[]): { evidenceIds: string[]; omittedOptional: string[] };

// ----- actor graph -------------------------------------------------------------------------

/** The actor graph's views (nodes, transcripts, grid, tree, temporal, fork panel, audit). */
export type * as ActorViews from './actor-views.js';
import type * as Views from './actor-views.js';

/** Harness variables (`ACTOR_AGENTIC_UI`, `ACTOR_GRAPH_EPOCHS`, `ACTOR_WAIT_GRAPH`, `ACTOR_NODE_STORE`, `GIT_CLOSEOUT`, deprecated `PROJECT_INBOX*`). */
export type ActorConfig = Record<string, string>;

export type NodeType = 'coordinator' | 'discussion' | 'task' | 'disambiguation' | (string & {});
export type NodeStatus = 'idle' | 'running' | 'blocked' | 'awaiting_user' | 'done' | 'failed' | 'cancelled';
export type Role = 'user' | 'assistant' | 'system' | 'routing' | 'tool' | 'progress' | 'completion';
export type GitCloseout = 'coordinator-batch' | 'commit-only' | 'per-node' | 'off';

export interface SpawnResult {
  id: string;
  parent: string;
  type: NodeType;
  /** The parent's routing-marker line (1-based). */
  markerLine: number;
  childLine: number | null;
  gitCloseout: GitCloseout;
  /** A disambiguation child pauses its parent until resolved. */
  pausedParent: boolean;
}

export interface Diagnostic {
  code: string;
  file: string;
  line?: number;
  message: string;
  repaired: boolean;
}

export interface OpenReport {
  diagnostics: Diagnostic[];
  repairs: string[];
  recoveryBatch?: number;
}

export interface MutationOptions {
  signal?: AbortSignal;
}

/**
 * An actor graph with its store. Mutations resolve once the store committed them; errors are
 * `WeftError`s with the core's codes (`NOT_PERSISTED`, `ROUTING_PAUSED`, `CADENCE_VIOLATION`,
 * `WAIT_BLOCKED`, `INVALID_NODE_ID`, …).
 */
export class ActorStore {
  readonly report: OpenReport;
  readonly version: number;
  spawn(args: { parent: string; type?: NodeType; id?: string; title?: string; topic?: string; reason?: string; gitCloseout?: GitCloseout; waitOn?: { node: string; mode?: 'warn' | 'enforce' }[] }, o?: MutationOptions): Promise<SpawnResult>;
  message(args: { node: string; text: string; role?: Role; tokens?: number; from?: string }, o?: MutationOptions): Promise<{ node: string; line: number }>;
  route(args: { node: string; text: string; tokens?: number }, o?: MutationOptions): Promise<{ outcome: 'continued'; node: string; line: number } | (SpawnResult & { outcome: 'spawned'; trigger: 'model' | 'policy' })>;
  status(args: { node: string; status: NodeStatus; summary?: string; awaitingUser?: boolean }, o?: MutationOptions): Promise<{ node: string; version: number; status: NodeStatus; summary: string }>;
  resolve(args: { node: string; candidates: ('continue' | { node: string } | { type: NodeType; title: string; topic?: string })[]; note?: string }, o?: MutationOptions): Promise<{ parent: string; into: string[]; created: string[] }>;
  ref(args: { node: string; line: number; summary?: string }, o?: MutationOptions): Promise<{ metaLine: number }>;
  narrate(args: { text: string }, o?: MutationOptions): Promise<{ metaLine: number }>;
  wait(args: { node: string; on: string; mode: 'warn' | 'enforce' | null }, o?: MutationOptions): Promise<unknown[]>;
  relate(args: { from: string; to: string; kind?: string }, o?: MutationOptions): Promise<null>;
  archive(args: { node: string; hidden?: boolean }, o?: MutationOptions): Promise<null>;
  reset(args: { before: number | string }, o?: MutationOptions): Promise<{ archived: string[] }>;
  bookmark(args: { scope?: string; keywords?: string[]; text?: string; image?: string }, o?: MutationOptions): Promise<{ line: number }>;
  epoch(args: { reason?: string; nodes?: string[] }, o?: MutationOptions): Promise<{ epoch: number }>;
  export(args?: {}, o?: MutationOptions): Promise<{ lines: number }>;
  /** Any mutation of `weft_core::actors::api` by name. */
  mutate(op: string, args?: object, o?: MutationOptions): Promise<unknown>;
  /** Any view by name: graph, linear, grid, tree, temporal, fork, metathread, audit, index, lineage, waits, model, mailbox. */
  view(name: string, args?: object): unknown;
  graph(): Views.GraphView;
  gridView(): Views.GridView;
  treeView(): Views.TreeView;
  linearView(args?: { node?: string }): Views.LinearView;
  temporalView(args?: { scope?: string; at?: number | string; buckets?: number }): Views.TemporalView;
  forkView(args: { node: string }): Views.ForkView;
  auditView(): Views.AuditView;
  lineageView(): string[];
  onChange(listener: (events: { seq: number; kind: string; node: string | null }[]) => void): () => void;
  /** Persists anything already queued. */
  sync(): Promise<unknown>;
  /**
   * Opens the agent of `node`: reads its lines and writes a restart's recovery lines (an
   * unfinished turn `interrupted`, a started call `uncertain`, a job `lost`). Rejects with
   * `CADENCE_VIOLATION` (host tools on the discussion surface), `AGENT_TOOL_RESERVED` (a graph
   * tool's name), `AGENT_OPEN` (the node has an open agent), `UNKNOWN_NODE`.
   */
  agent(node: string, options?: NodeAgentOptions, o?: MutationOptions): Promise<NodeAgent>;
  /** The open agent of `node` (a child spawned by an agent has one), or null. */
  agentOf(node: string): NodeAgent | null;
  /** The journal records of `job` the agent of `node` recorded in `nodes/<node>/jobs.jsonl`, after sequence number `after`. */
  jobJournal(node: string, job: number, o?: { after?: number }): Promise<Array<JobEvent | { job: number; type: 'elided'; count: number; before: number }>>;
  /** The open agents, in the order they were opened. */
  agents(): NodeAgent[];
  /** Opens an agent on every node with agent lines and none open (resume after a reload). */
  resumeAgents(options?: NodeAgentOptions | ((node: string) => NodeAgentOptions), o?: MutationOptions): Promise<NodeAgent[]>;
  /** Resolves once every open agent is idle at the same time. */
  agentsIdle(o?: { signal?: AbortSignal }): Promise<void>;
  /** Waits for queued mutations, detaches the agents (`NodeAgent.close`), releases the store. */
  close(): Promise<void>;
}

// ----- agents on actor nodes ----------------------------------------------------------------

/** What a host tool of an agent on a task node receives besides its arguments. */
export interface NodeToolContext {
  /** Aborted when the turn is interrupted (and the tool is `safeToCancel`) or the agent closes. */
  signal: AbortSignal;
  node: string;
  invocation: number;
  callId: string;
  tool: string;
  step: number;
  /** The owner the agent's jobs are submitted with (`agent:<node>`). */
  owner: string;
  /**
   * Starts a background job on `endpoint` (of the agent's `runtime`) for this call; the tool
   * must declare `mayStartJob`. The job outlives the call and the turn: a `job` line, its
   * milestones in the node's `jobs.jsonl`, its completion note a `mail` line admitted at the
   * next turn start. `endpoint` must be of the agent's runtime (else INVALID_ARGUMENT).
   */
  submitJob<T = unknown>(endpoint: Endpoint, payload: unknown, options?: Omit<SubmitOptions, 'owner' | 'origin'>): Job<T>;
}

/** A host tool of an agent (task nodes only): its declaration and its handler. */
export interface NodeAgentTool {
  /** 1-64 characters from [A-Za-z0-9_-]; not a graph tool's name (spawn, resolve, wait_on, set_status, read_mailbox). */
  name: string;
  description?: string;
  parameters?: Record<string, unknown>;
  supportsParallel?: boolean;
  safeToCancel?: boolean;
  /** Whether its calls may start background jobs (`ctx.submitJob`). */
  mayStartJob?: boolean;
  /** Its value must be JSON-like (it becomes the result line). */
  run(args: any, ctx: NodeToolContext): unknown | Promise<unknown>;
}

/**
 * An ops app's published tools (report, set, act, observe, wait, inspect, cancel) as host tools
 * of a node's agent, with the app's schemas; every call runs through `app.tools.call`.
 */
export function appTools(app: App, options?: { by?: string }): NodeAgentTool[];

/**
 * A host tool whose call starts a job on `endpoint` (`payload(args)`, default the arguments)
 * and returns `{job, state}` at once. Give the agent the endpoint's runtime: a call on an
 * agent of another runtime fails with INVALID_ARGUMENT and starts no job.
 */
export function jobTool(options: {
  name: string;
  description?: string;
  parameters?: Record<string, unknown>;
  endpoint: Endpoint;
  payload?: (args: any) => unknown;
  options?: Omit<SubmitOptions, 'owner' | 'origin'>;
  supportsParallel?: boolean;
}): NodeAgentTool;

export interface NodeAgentOptions {
  /** `openaiModel(...)`, `anthropicModel(...)`, `builtinModel()` (the default), `scriptedModel(...)` or your own. */
  model?: Model | ((request: NodeModelRequest, options: { signal: AbortSignal; onDelta?: (delta: ModelStreamEvent) => void }) => ModelResponse | Promise<ModelResponse>);
  tools?: NodeAgentTool[];
  /** The context budget of a model request in tokens (default 16000). */
  contextTokens?: number;
  /** At most this many recent lines are considered (default 400). */
  recentLines?: number;
  /** How long an interrupt waits for started calls (default 1000 ms). */
  interruptGraceMs?: number;
  maxStepsPerTurn?: number;
  /** The options of the agents of children this agent spawns (default: the same model and budget, no tools). */
  children?: NodeAgentOptions | ((child: string) => NodeAgentOptions);
  /** An ops app whose published tools (`appTools(app)`) the agent gets, before `tools`. */
  app?: App;
  /** The job runtime of the jobs its tools start (default `app.runtime`); its notes for the agent become mail lines. */
  runtime?: Runtime;
}

/** The request of one model step of an agent on a node: the node's slice. */
export interface NodeModelRequest extends ModelRequest {
  node: string;
  /** Instructions and the node's context: its mailbox, children's mailboxes, waits, the git close-out addendum. */
  system: string;
  warnings: string[];
  /** The first and last chat line the slice covers (1-based). */
  lines: [number, number];
}

/** What opening an agent found and repaired. */
export interface AgentResumeReport {
  interruptedTurn: number | null;
  modelStepInterrupted: boolean;
  uncertainCalls: string[];
  lostJobs: number[];
  requeuedMail: number;
  pendingTasks: number;
}

export interface NodeAgentState {
  node: string;
  phase: 'idle' | 'model_step' | 'running_tools' | 'interrupted' | 'waiting';
  turn: number | null;
  /** The nodes a held step waits on. */
  waiting: string[] | null;
  queuedTasks: number;
  pendingMail: number;
  openJobs: number[];
}

/** A released output of an agent (only once the lines written before it are durable). */
export type NodeAgentOutput = { node: string } & (
  | { output: 'turn_started'; turn: number; cause: unknown; admitted: number[] }
  | { output: 'model_request'; turn: number; step: number }
  | { output: 'abort_model'; step: number }
  | { output: 'model_usage'; turn: number; step: number; inputTokens: number; outputTokens: number }
  | { output: 'start_call'; invocation: number; step: number; handler: number; tool: string; callId: string; arguments: unknown }
  | { output: 'abort_call'; invocation: number; handler: number }
  | { output: 'call_finished'; invocation: number; status: string }
  | { output: 'turn_ended'; turn: number; end: string; [k: string]: unknown }
  | { output: 'handler_released'; handler: number }
  | { output: 'waiting'; turn: number; step: number; on: string[] }
  | { output: 'wait_over'; turn: number; step: number }
  | { output: 'spawned'; child: string }
);

/**
 * The agent of one actor node (`store.agent(node)`): the node is its state. Every turn, answer,
 * call result, mail and wait is a line of the node's chat; the model is shown the node's slice.
 */
export interface NodeAgent {
  readonly node: string;
  readonly report: AgentResumeReport;
  readonly modelConfigured: boolean;
  readonly closed: boolean;
  state(): NodeAgentState;
  /** A person's message (`admitUtterance`); resolves with the operation's result once durable. */
  say(text: string, o?: MutationOptions): Promise<{ outcome: 'continued'; node: string; line: number } | (SpawnResult & { outcome: 'spawned' })>;
  interrupt(reason?: string): Promise<'not_running' | 'ended' | 'stopping' | 'already_interrupting'>;
  wake(reason?: string): Promise<void>;
  /** An observation result for this agent (task nodes): a mail line admitted at the next turn. */
  observe(source: string, value: unknown): Promise<number>;
  pendingRequest(): NodeModelRequest | null;
  on(event: 'output', listener: (o: NodeAgentOutput) => void): () => void;
  on(event: 'model_delta', listener: (d: ModelDeltaEvent & { node: string }) => void): () => void;
  on(event: 'error', listener: (err: unknown) => void): () => void;
  on<K extends NodeAgentOutput['output']>(event: K, listener: (o: Extract<NodeAgentOutput, { output: K }>) => void): () => void;
  idle(o?: { signal?: AbortSignal }): Promise<void>;
  /** Detaches without writing: the next `store.agent(node)` resumes the node as a restart does. */
  close(): void;
}

/** Loads the actor-graph module (once); `openActorStore` does it on first use. */
export function loadActors(): Promise<void>;

/**
 * Opens (or creates) an actor store: IndexedDB in browsers (default there), a `$CHAT_ROOT`
 * directory in Node (`backend: 'fs'`, the default when `root` is given: the native store's
 * layout, so `weft actors` reads and writes the same root; one writer at a time, native or JS,
 * else STORE_LOCKED after `lockTimeoutMs`, default 0; a symbolic link inside the root is
 * SYMLINK_REFUSED), memory anywhere (the default elsewhere).
 */
export function openActorStore(options?: {
  backend?: 'indexeddb' | 'memory' | 'fs';
  /** The IndexedDB database (`indexeddb`). */
  name?: string;
  /** The `$CHAT_ROOT` directory (`fs`, Node only), created if needed. */
  root?: string;
  /** How long `fs` waits for another writer of `root` to release it (ms). */
  lockTimeoutMs?: number;
  config?: ActorConfig;
  title?: string;
}): Promise<ActorStore>;
/** Deletes an IndexedDB actor store. */
export function deleteActorStore(name?: string): Promise<void>;
