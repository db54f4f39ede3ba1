//! Crash injection for the crash tests: abort the process (no cleanup, like `kill -9`) at the
//! n-th durability step of the filesystem store, optionally after writing only half of an
//! append. The step counter is always compiled in and inert: a store aborts only once armed
//! through the hidden Rust API (`FsStore::set_failpoint`, which `cli::main_with` and the desk
//! it serves call with their `Option<Failpoint>`). Nothing in weft-host arms it or reads the
//! environment for it, and the shipped `weft` passes no failpoint. The test-only binary
//! `weft-failpoints` (the crate `tests/failpoints`, never shipped) is the one place that reads
//! `WEFT_ACTORS_CRASH_AT` / `WEFT_ACTORS_CRASH_TEAR` and arms the store with them.

/// Where a writer crashes: at durability step `at_step`, the append of that step torn in half
/// when `tear` is set. For the crash tests only (`tests/failpoints`).
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Failpoint {
    /// The durability step (counted from 1 by this store) that aborts.
    pub at_step: u64,
    /// Write half of that step's append before aborting.
    pub tear: bool,
}

/// The store's durability-step counter; it never crashes unless armed.
#[derive(Debug, Default)]
pub(crate) struct Steps {
    armed: Option<Failpoint>,
    done: u64,
}

impl Steps {
    /// Arms (or disarms) the failpoint.
    pub(crate) fn arm(&mut self, f: Option<Failpoint>) {
        self.armed = f;
    }

    /// Counts a durability step and aborts here when the failpoint says so.
    #[inline]
    pub(crate) fn step(&mut self) {
        self.done += 1;
        if self.armed.is_some_and(|f| f.at_step == self.done) {
            std::process::abort();
        }
    }

    /// Whether the next step is a torn one (write half of its append, then abort).
    #[inline]
    pub(crate) fn tear_now(&self) -> bool {
        self.armed
            .is_some_and(|f| f.tear && f.at_step == self.done + 1)
    }
}
