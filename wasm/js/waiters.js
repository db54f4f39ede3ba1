// Promises waiting for a condition a host loop notices (an agent going idle): one place for
// the cancellation rule, so every waiter rejects an aborted wait the same way.
import { WeftError } from './error.js';
import { WAIT_CANCELLED } from './codes.js';

/** Waiters released together when their condition holds. */
export class Waiters {
  #entries = [];

  /**
   * A promise that resolves at the next `resolveAll()`; it rejects with `WAIT_CANCELLED` when
   * `signal` aborts (the waited-for work continues).
   */
  wait(signal, what = 'the agent continues') {
    if (signal?.aborted) return Promise.reject(new WeftError(WAIT_CANCELLED, 'the wait was cancelled', { cause: signal.reason }));
    return new Promise((resolve, reject) => {
      const entry = { resolve, reject };
      this.#entries.push(entry);
      signal?.addEventListener(
        'abort',
        () => {
          this.#entries = this.#entries.filter((e) => e !== entry);
          reject(new WeftError(WAIT_CANCELLED, `the wait was cancelled; ${what}`, { cause: signal.reason }));
        },
        { once: true },
      );
    });
  }

  /** How many wait. */
  get size() {
    return this.#entries.length;
  }

  /** Resolves every waiter. */
  resolveAll() {
    for (const w of this.#entries.splice(0)) w.resolve();
  }

  /** Rejects every waiter with `err`. */
  rejectAll(err) {
    for (const w of this.#entries.splice(0)) w.reject(err);
  }
}
