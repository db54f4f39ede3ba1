//! Crash injection for the crash tests: abort the process (no cleanup, like `kill -9`) at the
//! n-th durability step of the filesystem store, optionally after writing only half of an
//! append. Compiled in only with the cargo feature `failpoints` (the crash tests enable it:
//! `cargo test -p weft-host --features failpoints --test actors_crash`, and run the
//! `weft-failpoints` binary that only that build makes); the shipped binary has no failpoint
//! and ignores `WEFT_ACTORS_CRASH_AT` / `WEFT_ACTORS_CRASH_TEAR`.

/// Where a writer crashes: at durability step `at_step`, the append of that step torn in half
/// when `tear` is set.
#[cfg(feature = "failpoints")]
#[derive(Clone, Copy, Debug)]
pub struct Failpoint {
    /// The durability step (counted from 1 in this process) that aborts.
    pub at_step: u64,
    /// Write half of that step's append before aborting.
    pub tear: bool,
}

#[cfg(feature = "failpoints")]
impl Failpoint {
    /// Reads `WEFT_ACTORS_CRASH_AT` (and `WEFT_ACTORS_CRASH_TEAR=1`).
    pub fn from_env() -> Option<Failpoint> {
        let at_step = std::env::var("WEFT_ACTORS_CRASH_AT").ok()?.parse().ok()?;
        let tear = std::env::var("WEFT_ACTORS_CRASH_TEAR").is_ok_and(|v| v == "1");
        Some(Failpoint { at_step, tear })
    }
}

/// The store's durability-step counter. Without the `failpoints` feature it holds nothing and
/// never crashes.
#[derive(Debug, Default)]
pub(crate) struct Steps {
    #[cfg(feature = "failpoints")]
    armed: Option<Failpoint>,
    #[cfg(feature = "failpoints")]
    done: u64,
}

impl Steps {
    /// Arms (or disarms) the failpoint.
    #[cfg(feature = "failpoints")]
    pub(crate) fn arm(&mut self, f: Option<Failpoint>) {
        self.armed = f;
    }

    /// Counts a durability step and aborts here when the failpoint says so.
    #[inline]
    pub(crate) fn step(&mut self) {
        #[cfg(feature = "failpoints")]
        {
            self.done += 1;
            if self.armed.is_some_and(|f| f.at_step == self.done) {
                std::process::abort();
            }
        }
    }

    /// Whether the next step is a torn one (write half of its append, then abort).
    #[inline]
    pub(crate) fn tear_now(&self) -> bool {
        #[cfg(feature = "failpoints")]
        {
            self.armed
                .is_some_and(|f| f.tear && f.at_step == self.done + 1)
        }
        #[cfg(not(feature = "failpoints"))]
        {
            false
        }
    }
}

/// Arms a writer's store with the failpoint the environment names (`failpoints` builds only;
/// otherwise does nothing).
#[cfg_attr(not(feature = "failpoints"), allow(unused_variables))]
pub fn arm_from_env(store: &mut super::FsStore) {
    #[cfg(feature = "failpoints")]
    store.set_failpoint(Failpoint::from_env());
}
