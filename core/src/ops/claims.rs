//! Standing desires: resource claims reconciled to the newest desire.
//!
//! Mode settings and resource claims ("keep this agent connected", "maintain a Worker for the
//! selected source") are *desires*: the latest one wins, intermediate ones may be skipped. A
//! claim's operations are strictly sequential (a release completes before the next acquire
//! starts); distinct claims are independent. A desire that changes while an acquisition is in
//! flight supersedes it: the late acquisition is released immediately and never adopted, then
//! the newest desire is applied. An acquisition error parks the claim until the desire changes
//! or [`Claims::retry`] is called — no hot retry loops.
//!
//! Submitted *tasks* are different: submitting A then B means run both. Tasks are jobs of the
//! registry (FIFO per endpoint); see [`super::App::submit_task`]. Never adapt one into the other.
//!
//! Sans-IO: the host performs [`ClaimOutput::Acquire`] / [`ClaimOutput::Release`] and reports
//! back with [`Claims::acquired`], [`Claims::acquire_failed`] and [`Claims::released`].

use std::collections::{BTreeMap, VecDeque};

use serde_json::{Value, json};

use crate::Mono;

/// A claim's phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClaimPhase {
    /// Nothing desired, nothing held.
    Idle,
    /// Working towards the newest desire.
    Pending,
    /// Holding a resource for the newest desire.
    Active,
    /// The last acquisition for the newest desire failed; parked until it changes or a retry.
    Error,
}

impl ClaimPhase {
    /// The stable name.
    pub fn as_str(&self) -> &'static str {
        match self {
            ClaimPhase::Idle => "idle",
            ClaimPhase::Pending => "pending",
            ClaimPhase::Active => "active",
            ClaimPhase::Error => "error",
        }
    }
}

/// Work for the host.
#[derive(Clone, Debug, PartialEq)]
pub enum ClaimOutput<D> {
    /// Acquire a resource for `desire`; report with `attempt`.
    Acquire {
        claim: String,
        attempt: u64,
        desire: D,
    },
    /// Release the resource acquired by `attempt` (for `desire`); report with `attempt`.
    Release {
        claim: String,
        attempt: u64,
        desire: D,
    },
}

/// One claim's history record.
#[derive(Clone, Debug, PartialEq)]
pub struct ClaimEvent {
    pub at: Mono,
    pub what: &'static str,
    pub attempt: Option<u64>,
    pub detail: Option<String>,
}

#[derive(Clone, Debug, PartialEq)]
enum Busy {
    Acquiring(u64),
    Releasing(u64),
}

#[derive(Clone, Debug)]
struct Claim<D> {
    desired: Option<D>,
    /// `(attempt, desire)` actually held.
    actual: Option<(u64, D)>,
    busy: Option<Busy>,
    /// The desire the in-flight acquisition is for.
    acquiring_for: Option<D>,
    error: Option<String>,
    /// The last events, at most `2 * JOURNAL_WINDOW` (older ones are counted in `dropped`).
    journal: Vec<ClaimEvent>,
    dropped: u64,
}

/// How many of a claim's latest events its journal keeps at least: a standing claim whose
/// desire changes forever keeps a window, not its whole history.
const JOURNAL_WINDOW: usize = 256;

impl<D> Claim<D> {
    fn log(&mut self, event: ClaimEvent) {
        if self.journal.len() >= 2 * JOURNAL_WINDOW {
            let cut = self.journal.len() - JOURNAL_WINDOW;
            self.journal.drain(..cut);
            self.dropped += cut as u64;
        }
        self.journal.push(event);
    }
}

/// A set of independent claims over desires of type `D`.
#[derive(Clone, Debug)]
pub struct Claims<D> {
    claims: BTreeMap<String, Claim<D>>,
    next_attempt: u64,
    outputs: VecDeque<ClaimOutput<D>>,
}

impl<D> Default for Claims<D> {
    fn default() -> Self {
        Claims {
            claims: BTreeMap::new(),
            next_attempt: 1,
            outputs: VecDeque::new(),
        }
    }
}

/// Errors of the claim reconciler (stable codes).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ClaimsError {
    #[error("no claim `{0}`")]
    UnknownClaim(String),
    #[error("claim `{claim}` has no attempt {attempt} in flight")]
    NotInFlight { claim: String, attempt: u64 },
}

impl ClaimsError {
    /// `UNKNOWN_CLAIM` or `ATTEMPT_NOT_IN_FLIGHT`.
    pub fn code(&self) -> &'static str {
        match self {
            ClaimsError::UnknownClaim(_) => "UNKNOWN_CLAIM",
            ClaimsError::NotInFlight { .. } => "ATTEMPT_NOT_IN_FLIGHT",
        }
    }
}

impl crate::ErrorCode for ClaimsError {
    fn code(&self) -> &'static str {
        ClaimsError::code(self)
    }
}

impl<D: Clone + PartialEq + std::fmt::Debug> Claims<D> {
    /// No claims yet; they are created by their first desire.
    pub fn new() -> Self {
        Self::default()
    }

    fn claim_mut(&mut self, name: &str) -> Result<&mut Claim<D>, ClaimsError> {
        self.claims
            .get_mut(name)
            .ok_or_else(|| ClaimsError::UnknownClaim(name.into()))
    }

    /// Sets what should exist now (`None`: nothing). An equal desire changes nothing.
    pub fn desire(&mut self, now: Mono, name: &str, desire: Option<D>) {
        let c = self.claims.entry(name.into()).or_insert_with(|| Claim {
            desired: None,
            actual: None,
            busy: None,
            acquiring_for: None,
            error: None,
            journal: vec![],
            dropped: 0,
        });
        if c.desired == desire {
            return;
        }
        c.desired = desire.clone();
        c.error = None;
        c.log(ClaimEvent {
            at: now,
            what: "desired",
            attempt: None,
            detail: Some(format!("{desire:?}")),
        });
        self.step(now, name);
    }

    /// Drives one claim towards its newest desire when nothing is in flight.
    fn step(&mut self, now: Mono, name: &str) {
        let Some(c) = self.claims.get_mut(name) else {
            return;
        };
        if c.busy.is_some() || c.error.is_some() {
            return;
        }
        if let Some((attempt, held)) = &c.actual {
            if Some(held) == c.desired.as_ref() {
                return;
            }
            let (attempt, held) = (*attempt, held.clone());
            c.busy = Some(Busy::Releasing(attempt));
            c.log(ClaimEvent {
                at: now,
                what: "release",
                attempt: Some(attempt),
                detail: None,
            });
            self.outputs.push_back(ClaimOutput::Release {
                claim: name.into(),
                attempt,
                desire: held,
            });
            return;
        }
        if let Some(d) = c.desired.clone() {
            let attempt = self.next_attempt;
            self.next_attempt += 1;
            c.busy = Some(Busy::Acquiring(attempt));
            c.acquiring_for = Some(d.clone());
            c.log(ClaimEvent {
                at: now,
                what: "acquire",
                attempt: Some(attempt),
                detail: None,
            });
            self.outputs.push_back(ClaimOutput::Acquire {
                claim: name.into(),
                attempt,
                desire: d,
            });
        }
    }

    fn take_acquiring(&mut self, name: &str, attempt: u64) -> Result<D, ClaimsError> {
        let c = self.claim_mut(name)?;
        if c.busy != Some(Busy::Acquiring(attempt)) {
            return Err(ClaimsError::NotInFlight {
                claim: name.into(),
                attempt,
            });
        }
        c.busy = None;
        Ok(c.acquiring_for.take().expect("acquiring has a desire"))
    }

    /// The host acquired the resource of `attempt`. Adopted only if it is still the newest
    /// desire; otherwise released at once (a late acquisition is never adopted).
    pub fn acquired(&mut self, now: Mono, name: &str, attempt: u64) -> Result<bool, ClaimsError> {
        let desire = self.take_acquiring(name, attempt)?;
        let c = self.claim_mut(name)?;
        if c.desired.as_ref() == Some(&desire) {
            c.actual = Some((attempt, desire));
            c.log(ClaimEvent {
                at: now,
                what: "active",
                attempt: Some(attempt),
                detail: None,
            });
            Ok(true)
        } else {
            c.busy = Some(Busy::Releasing(attempt));
            c.log(ClaimEvent {
                at: now,
                what: "stale_released",
                attempt: Some(attempt),
                detail: Some("the desire changed while acquiring; never adopted".into()),
            });
            self.outputs.push_back(ClaimOutput::Release {
                claim: name.into(),
                attempt,
                desire,
            });
            Ok(false)
        }
    }

    /// The host failed to acquire. Parks the claim in `error` if this was for the newest
    /// desire; otherwise moves on to the newest desire.
    pub fn acquire_failed(
        &mut self,
        now: Mono,
        name: &str,
        attempt: u64,
        error: &str,
    ) -> Result<(), ClaimsError> {
        let desire = self.take_acquiring(name, attempt)?;
        let c = self.claim_mut(name)?;
        c.log(ClaimEvent {
            at: now,
            what: "acquire_failed",
            attempt: Some(attempt),
            detail: Some(error.into()),
        });
        if c.desired.as_ref() == Some(&desire) {
            c.error = Some(error.into());
        } else {
            self.step(now, name);
        }
        Ok(())
    }

    /// The host released the resource of `attempt` (an error is reported, and the resource is
    /// dropped anyway: a failing release must not wedge the claim).
    pub fn released(
        &mut self,
        now: Mono,
        name: &str,
        attempt: u64,
        error: Option<&str>,
    ) -> Result<(), ClaimsError> {
        let c = self.claim_mut(name)?;
        if c.busy != Some(Busy::Releasing(attempt)) {
            return Err(ClaimsError::NotInFlight {
                claim: name.into(),
                attempt,
            });
        }
        c.busy = None;
        if c.actual.as_ref().is_some_and(|(a, _)| *a == attempt) {
            c.actual = None;
        }
        c.log(ClaimEvent {
            at: now,
            what: if error.is_some() {
                "release_failed"
            } else {
                "released"
            },
            attempt: Some(attempt),
            detail: error.map(str::to_owned),
        });
        self.step(now, name);
        Ok(())
    }

    /// Re-attempts a claim parked in `error` with its unchanged desire.
    pub fn retry(&mut self, now: Mono, name: &str) -> Result<(), ClaimsError> {
        let c = self.claim_mut(name)?;
        if c.error.take().is_some() {
            self.step(now, name);
        }
        Ok(())
    }

    /// A claim's phase.
    pub fn phase(&self, name: &str) -> ClaimPhase {
        let Some(c) = self.claims.get(name) else {
            return ClaimPhase::Idle;
        };
        if c.error.is_some() {
            return ClaimPhase::Error;
        }
        match (&c.desired, &c.actual, &c.busy) {
            (None, None, None) => ClaimPhase::Idle,
            (Some(d), Some((_, a)), None) if d == a => ClaimPhase::Active,
            _ => ClaimPhase::Pending,
        }
    }

    /// The next output for the host.
    #[must_use]
    pub fn poll_output(&mut self) -> Option<ClaimOutput<D>> {
        self.outputs.pop_front()
    }

    /// All pending outputs.
    #[must_use]
    pub fn drain_outputs(&mut self) -> std::collections::vec_deque::Drain<'_, ClaimOutput<D>> {
        self.outputs.drain(..)
    }

    /// The claim's latest history: a window of at least the last 256 events (see
    /// [`journal_dropped`](Self::journal_dropped) for how many older ones are gone).
    pub fn journal(&self, name: &str) -> &[ClaimEvent] {
        self.claims
            .get(name)
            .map(|c| c.journal.as_slice())
            .unwrap_or(&[])
    }

    /// How many of the claim's oldest events its journal no longer holds.
    pub fn journal_dropped(&self, name: &str) -> u64 {
        self.claims.get(name).map_or(0, |c| c.dropped)
    }

    /// The desire currently held, if any.
    pub fn held(&self, name: &str) -> Option<&D> {
        self.claims.get(name)?.actual.as_ref().map(|(_, d)| d)
    }
}

impl Claims<Value> {
    /// The JSON state of one claim (for vectors and reports).
    pub fn to_json(&self, name: &str) -> Value {
        let Some(c) = self.claims.get(name) else {
            return json!({"phase": "idle"});
        };
        let mut v = json!({
            "phase": self.phase(name).as_str(),
            "desired": c.desired,
            "held": c.actual.as_ref().map(|(_, d)| d),
            "error": c.error,
            "journal": c.journal.iter().map(|e| json!({"at": e.at, "what": e.what, "attempt": e.attempt})).collect::<Vec<_>>(),
        });
        if c.dropped > 0 {
            v["journalDropped"] = json!(c.dropped);
        }
        v
    }
}

impl<D: Clone> ClaimOutput<D> {
    /// The JSON form with the desire rendered by `f`.
    pub fn to_json(&self, f: impl Fn(&D) -> Value) -> Value {
        match self {
            ClaimOutput::Acquire {
                claim,
                attempt,
                desire,
            } => {
                json!({"output": "acquire", "claim": claim, "attempt": attempt, "desire": f(desire)})
            }
            ClaimOutput::Release {
                claim,
                attempt,
                desire,
            } => {
                json!({"output": "release", "claim": claim, "attempt": attempt, "desire": f(desire)})
            }
        }
    }
}

#[cfg(test)]
mod bound_tests {
    use super::*;

    /// A standing claim whose desire changes forever keeps a window of its journal, not every
    /// event (it kept ~5 per change before).
    #[test]
    fn a_claim_changed_ten_thousand_times_keeps_a_window_of_its_journal() {
        let mut c: Claims<Value> = Claims::new();
        for i in 0..10_000u64 {
            c.desire(Mono::from_ms(i), "gpu", Some(json!(i)));
            while let Some(o) = c.poll_output() {
                match o {
                    ClaimOutput::Acquire { attempt, .. } => {
                        c.acquired(Mono::from_ms(i), "gpu", attempt).unwrap();
                    }
                    ClaimOutput::Release { attempt, .. } => {
                        c.released(Mono::from_ms(i), "gpu", attempt, None).unwrap();
                    }
                }
            }
        }
        let kept = c.journal("gpu").len();
        assert!(
            (JOURNAL_WINDOW..=2 * JOURNAL_WINDOW).contains(&kept),
            "{kept} events kept"
        );
        assert!(c.journal_dropped("gpu") > 40_000);
        assert_eq!(c.held("gpu"), Some(&json!(9_999)));
        assert_eq!(
            c.to_json("gpu")["journalDropped"],
            json!(c.journal_dropped("gpu"))
        );
    }
}
