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
    /// Its place in [`Claims::idle`] while it is idle (nothing desired, held or in flight).
    idle_seq: Option<u64>,
}

/// How many of a claim's latest events its journal keeps at least: a standing claim whose
/// desire changes forever keeps a window, not its whole history.
const JOURNAL_WINDOW: usize = 256;

/// How many idle claims (nothing desired, held or in flight) are kept for inspection; the
/// longest idle beyond this are forgotten, so a reconciler that names a new claim per thread,
/// source or session holds the claims in use plus this window, not every name it ever saw.
pub const IDLE_CLAIMS_KEPT: usize = 256;

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
    /// Idle claims, oldest first (by the sequence number of the moment they became idle).
    idle: BTreeMap<u64, String>,
    next_idle: u64,
}

impl<D> Default for Claims<D> {
    fn default() -> Self {
        Claims {
            claims: BTreeMap::new(),
            next_attempt: 1,
            outputs: VecDeque::new(),
            idle: BTreeMap::new(),
            next_idle: 0,
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

    /// Sets what should exist now (`None`: nothing). An equal desire changes nothing (nothing
    /// for a claim it does not know: no claim is created to desire nothing).
    pub fn desire(&mut self, now: Mono, name: &str, desire: Option<D>) {
        if desire.is_none() && !self.claims.contains_key(name) {
            return;
        }
        let c = self.claims.entry(name.into()).or_insert_with(|| Claim {
            desired: None,
            actual: None,
            busy: None,
            acquiring_for: None,
            error: None,
            journal: vec![],
            dropped: 0,
            idle_seq: None,
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
        self.track_idle(name);
    }

    /// Keeps [`Self::idle`] in step with the claim's phase after a change, and forgets the
    /// longest-idle claims beyond [`IDLE_CLAIMS_KEPT`].
    fn track_idle(&mut self, name: &str) {
        let idle = self.phase(name) == ClaimPhase::Idle;
        let Some(c) = self.claims.get_mut(name) else {
            return;
        };
        match (idle, c.idle_seq) {
            (true, None) => {
                c.idle_seq = Some(self.next_idle);
                self.idle.insert(self.next_idle, name.to_owned());
                self.next_idle += 1;
            }
            (false, Some(seq)) => {
                c.idle_seq = None;
                self.idle.remove(&seq);
            }
            _ => {}
        }
        while self.idle.len() > IDLE_CLAIMS_KEPT {
            if let Some((_, old)) = self.idle.pop_first() {
                self.claims.remove(&old);
            }
        }
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
        let adopted = self.acquired_inner(now, name, attempt)?;
        self.track_idle(name);
        Ok(adopted)
    }

    fn acquired_inner(&mut self, now: Mono, name: &str, attempt: u64) -> Result<bool, ClaimsError> {
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
        self.track_idle(name);
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
        self.track_idle(name);
        Ok(())
    }

    /// Re-attempts a claim parked in `error` with its unchanged desire (`UNKNOWN_CLAIM` for a
    /// name never desired, or idle and forgotten beyond [`IDLE_CLAIMS_KEPT`]).
    pub fn retry(&mut self, now: Mono, name: &str) -> Result<(), ClaimsError> {
        let c = self.claim_mut(name)?;
        if c.error.take().is_some() {
            self.step(now, name);
        }
        self.track_idle(name);
        Ok(())
    }

    /// How many claims are kept: those in use plus at most [`IDLE_CLAIMS_KEPT`] idle ones.
    pub fn len(&self) -> usize {
        self.claims.len()
    }

    /// No claim is kept.
    pub fn is_empty(&self) -> bool {
        self.claims.is_empty()
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

    /// Drives every output to completion (acquisitions succeed).
    fn settle(c: &mut Claims<Value>, now: Mono) {
        while let Some(o) = c.poll_output() {
            match o {
                ClaimOutput::Acquire { claim, attempt, .. } => {
                    c.acquired(now, &claim, attempt).unwrap();
                }
                ClaimOutput::Release { claim, attempt, .. } => {
                    c.released(now, &claim, attempt, None).unwrap();
                }
            }
        }
    }

    /// A reconciler naming a new claim per session holds the claims in use and a window of
    /// idle ones, not every name it ever saw (it kept all 10,000 before).
    #[test]
    fn claims_released_to_idle_are_forgotten_beyond_a_window() {
        let mut c: Claims<Value> = Claims::new();
        c.desire(Mono::from_ms(0), "kept", Some(json!("gpu")));
        settle(&mut c, Mono::from_ms(0));
        for i in 0..10_000u64 {
            let name = format!("session-{i}");
            c.desire(Mono::from_ms(i), &name, Some(json!(i)));
            settle(&mut c, Mono::from_ms(i));
            c.desire(Mono::from_ms(i), &name, None);
            settle(&mut c, Mono::from_ms(i));
            assert_eq!(c.phase(&name), ClaimPhase::Idle);
        }
        assert_eq!(c.len(), 1 + IDLE_CLAIMS_KEPT);
        // The claim in use is never forgotten; the newest idle ones are still inspectable.
        assert_eq!(c.phase("kept"), ClaimPhase::Active);
        assert_eq!(c.held("kept"), Some(&json!("gpu")));
        let newest = c.journal("session-9999");
        assert_eq!(newest.last().map(|e| e.what), Some("released"));
        // The oldest are gone: idle, and retry names them as unknown.
        assert!(c.journal("session-0").is_empty());
        assert_eq!(
            c.retry(Mono::from_ms(10_000), "session-0")
                .unwrap_err()
                .code(),
            "UNKNOWN_CLAIM"
        );
        // Desiring nothing of an unknown name creates nothing.
        c.desire(Mono::from_ms(10_000), "never", None);
        assert_eq!(c.len(), 1 + IDLE_CLAIMS_KEPT);
    }

    /// A claim that becomes busy again leaves the idle window: it is never forgotten while it
    /// holds or works towards something, however many other claims go idle.
    #[test]
    fn a_revived_claim_is_not_forgotten() {
        let mut c: Claims<Value> = Claims::new();
        c.desire(Mono::from_ms(0), "a", Some(json!(1)));
        settle(&mut c, Mono::from_ms(0));
        c.desire(Mono::from_ms(0), "a", None);
        settle(&mut c, Mono::from_ms(0));
        c.desire(Mono::from_ms(1), "a", Some(json!(2)));
        // Revived: it leaves the idle window and is kept while others come and go.
        for i in 0..(2 * IDLE_CLAIMS_KEPT as u64) {
            let name = format!("s{i}");
            c.desire(Mono::from_ms(2), &name, Some(json!(i)));
            c.desire(Mono::from_ms(2), &name, None);
            settle(&mut c, Mono::from_ms(2));
        }
        assert_eq!(c.phase("a"), ClaimPhase::Active);
        assert_eq!(c.held("a"), Some(&json!(2)));
        assert_eq!(c.len(), 1 + IDLE_CLAIMS_KEPT);
    }
}
