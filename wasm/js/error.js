// The package's error class, in a module of its own: the lazily loaded capabilities (frames,
// actors) throw it without pulling in the job runtime.

/** An Error with a stable `.code` (the core's codes, plus WAIT_CANCELLED / WAIT_TIMED_OUT). */
export class WeftError extends Error {
  constructor(code, message, options) {
    super(message, options);
    this.name = code === 'WAIT_CANCELLED' ? 'AbortError' : 'WeftError';
    this.code = code;
  }
}
