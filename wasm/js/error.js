// The package's error class, in a module of its own: the lazily loaded capabilities (frames,
// actors) throw it without pulling in the job runtime.

import { WAIT_CANCELLED } from './codes.js';

/**
 * An Error with a stable `.code`: a code of the core's errors, or a host outcome of
 * `weft_core::codes::HostError` (`./codes.js`: WAIT_CANCELLED, WAIT_TIMED_OUT, DISPOSED, ...).
 */
export class WeftError extends Error {
  constructor(code, message, options) {
    super(message, options);
    this.name = code === WAIT_CANCELLED ? 'AbortError' : 'WeftError';
    this.code = code;
  }
}
