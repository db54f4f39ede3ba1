// Generated from weft-core's `codes::HostError` (core/src/codes.rs); checked by
// `cargo test -p weft-host --test error_codes` (WEFT_BLESS=1 rewrites it). Do not edit.
// The outcomes only a host observes; every other code comes from the core's errors.

/** the object was disposed */
export const DISPOSED = 'DISPOSED';
/** the object was closed */
export const CLOSED = 'CLOSED';
/** aborted */
export const ABORTED = 'ABORTED';
/** the job was cancelled */
export const CANCELLED = 'CANCELLED';
/** the endpoint was terminated */
export const TERMINATED = 'TERMINATED';
/** the wait was cancelled */
export const WAIT_CANCELLED = 'WAIT_CANCELLED';
/** the wait timed out */
export const WAIT_TIMED_OUT = 'WAIT_TIMED_OUT';
/** not supported in this environment */
export const UNSUPPORTED = 'UNSUPPORTED';
/** the step was answered by respond() */
export const ANSWERED = 'ANSWERED';
/** the model script is exhausted */
export const SCRIPT_EXHAUSTED = 'SCRIPT_EXHAUSTED';
/** the async iterable finished without yielding */
export const NO_VALUE = 'NO_VALUE';
/** the cell has no compute function */
export const NO_COMPUTE = 'NO_COMPUTE';
/** this agent has no job runtime */
export const NO_RUNTIME = 'NO_RUNTIME';
/** the node already has an open agent */
export const AGENT_OPEN = 'AGENT_OPEN';
/** the node has no agent */
export const AGENT_NOT_OPEN = 'AGENT_NOT_OPEN';
/** the call is no longer running */
export const CALL_NOT_RUNNING = 'CALL_NOT_RUNNING';
/** the worker could not be started */
export const WORKER_START_FAILED = 'WORKER_START_FAILED';
/** the job body panicked */
export const PANIC = 'PANIC';
/** the turn is waiting */
export const CHAT_TURN_WAITING = 'CHAT_TURN_WAITING';
/** the turn did not end */
export const CHAT_NO_TURN = 'CHAT_NO_TURN';
/** the turn reached the step limit */
export const CHAT_TURN_STEP_LIMIT = 'CHAT_TURN_STEP_LIMIT';
/** the runtime was created before the apps module was loaded */
export const RUNTIME_WITHOUT_APPS = 'RUNTIME_WITHOUT_APPS';
