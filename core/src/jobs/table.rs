//! The registry's job records, keyed by their dense counter.
//!
//! Job ids are handed out in increasing order, so a record is found by its offset from the
//! oldest id still held: `index[id - first]` is the record's position in `pages` (or
//! [`NONE`] once released). Records are stored in pages of [`PAGE`] records, packed (a release
//! moves the last record into the freed place), so a lookup is two array reads, an insert
//! never copies more than one page, and a released record costs 4 bytes of index until every
//! older one is released too — or until the index is more than half holes: then its oldest
//! held entries move to a small ordered map ([`JobTable::old`]) and the holes are dropped, so
//! the index is bounded by the records held (a long-lived job among millions of released ones
//! keeps one map entry, not 4 bytes per job released since).

use std::collections::{BTreeMap, VecDeque};

use super::{Job, JobId};

/// Records per page (a power of two).
const PAGE: usize = 1024;
/// An index entry of a released record.
const NONE: u32 = u32::MAX;
/// Holes the dense index may hold beyond as many as it holds records.
const SLACK: usize = 1024;

#[derive(Debug)]
pub(crate) struct JobTable<V> {
    /// The id of `index[0]`.
    first: u64,
    /// Per id from `first`: the position of its record, or [`NONE`].
    index: VecDeque<u32>,
    /// The records, packed: position `p` is `pages[p / PAGE][p % PAGE]`.
    pages: Vec<Vec<Job<V>>>,
    len: usize,
    /// Positions of held records older than `first`, moved out of a sparse index.
    old: BTreeMap<u64, u32>,
}

impl<V> Default for JobTable<V> {
    fn default() -> Self {
        JobTable {
            first: 0,
            index: VecDeque::new(),
            pages: Vec::new(),
            len: 0,
            old: BTreeMap::new(),
        }
    }
}

impl<V> JobTable<V> {
    /// Records held.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    fn position(&self, id: &JobId) -> Option<usize> {
        if id.0 < self.first {
            return self.old.get(&id.0).map(|p| *p as usize);
        }
        let off = usize::try_from(id.0 - self.first).ok()?;
        match self.index.get(off) {
            Some(&p) if p != NONE => Some(p as usize),
            _ => None,
        }
    }

    fn at(&self, p: usize) -> &Job<V> {
        &self.pages[p / PAGE][p % PAGE]
    }

    pub(crate) fn get(&self, id: &JobId) -> Option<&Job<V>> {
        self.position(id).map(|p| self.at(p))
    }

    pub(crate) fn get_mut(&mut self, id: &JobId) -> Option<&mut Job<V>> {
        let p = self.position(id)?;
        Some(&mut self.pages[p / PAGE][p % PAGE])
    }

    /// Adds the record of a new job; ids must be inserted in increasing order.
    pub(crate) fn insert(&mut self, job: Job<V>) {
        let id = job.id.0;
        if self.index.is_empty() {
            self.first = id;
        }
        let end = self.first + self.index.len() as u64;
        assert!(id >= end, "job ids are inserted in increasing order");
        for _ in end..id {
            self.index.push_back(NONE);
        }
        let p = self.len;
        self.index
            .push_back(u32::try_from(p).expect("fewer than 2^32 - 1 records held"));
        if p.is_multiple_of(PAGE) {
            // The first page grows as needed (a registry holding a few jobs stays small); the
            // others are allocated whole.
            self.pages
                .push(Vec::with_capacity(if p == 0 { 4 } else { PAGE }));
        }
        self.pages.last_mut().expect("a page with room").push(job);
        self.len += 1;
    }

    /// Takes a record out; the last record moves into its place.
    pub(crate) fn remove(&mut self, id: &JobId) -> Option<Job<V>> {
        let p = self.position(id)?;
        if id.0 < self.first {
            self.old.remove(&id.0);
        } else {
            self.index[(id.0 - self.first) as usize] = NONE;
        }
        let last = self.pages.last_mut().expect("a record is held").pop();
        let last = last.expect("pages hold no empty page");
        if self.pages.last().is_some_and(|page| page.is_empty()) {
            self.pages.pop();
        }
        self.len -= 1;
        let job = if p == self.len {
            last
        } else {
            let moved = last.id;
            let job = std::mem::replace(&mut self.pages[p / PAGE][p % PAGE], last);
            if moved.0 < self.first {
                *self
                    .old
                    .get_mut(&moved.0)
                    .expect("an old record is in the map") = p as u32;
            } else {
                self.index[(moved.0 - self.first) as usize] = p as u32;
            }
            job
        };
        while self.index.front() == Some(&NONE) {
            self.index.pop_front();
            self.first += 1;
        }
        // More holes than records in the index: move its oldest held entries to `old` until
        // it is dense again (each id is moved at most once: amortized O(1) per release).
        let dense = self.len - self.old.len();
        if self.index.len() > 2 * dense + SLACK {
            while self.index.len() > dense.max(1) * 3 / 2 {
                let p = self.index.pop_front().expect("a non-empty index");
                if p != NONE {
                    self.old.insert(self.first, p);
                }
                self.first += 1;
            }
            while self.index.front() == Some(&NONE) {
                self.index.pop_front();
                self.first += 1;
            }
        }
        Some(job)
    }

    /// Drops the index's trailing released entries, so that the ids after the last record
    /// held may be inserted again (a withdrawn job's id is issued again: see
    /// `Registry::withdraw_unposted`).
    pub(crate) fn trim_back(&mut self) {
        while self.index.back() == Some(&NONE) {
            self.index.pop_back();
        }
    }

    /// The records in id order.
    pub(crate) fn values(&self) -> impl Iterator<Item = &Job<V>> {
        self.old
            .values()
            .chain(self.index.iter().filter(|p| **p != NONE))
            .map(|p| self.at(*p as usize))
    }
}

impl<V> std::ops::Index<&JobId> for JobTable<V> {
    type Output = Job<V>;

    fn index(&self, id: &JobId) -> &Job<V> {
        self.get(id).expect("a held job record")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobs::{EndpointId, JobState, Origin, OwnerId};

    fn job(id: u64) -> Job<()> {
        Job {
            id: JobId(id),
            owner: OwnerId::new("o"),
            origin: Origin::default(),
            endpoint: EndpointId(1),
            state: JobState::Queued,
            wire_id: None,
            capabilities: None,
            cancel_requested_at: None,
            note: false,
            wake: false,
            remote: None,
            journal: Vec::new(),
            recorded: 0,
            dropped: 0,
            windowed: 0,
            finished_at: None,
            quiet_deadline: None,
            subs: Vec::new(),
            waits: Default::default(),
            input_seq: 0,
            gen_: 1,
            watched: false,
        }
    }

    /// Lookups, removal in any order and id-order iteration agree with an ordered map, across
    /// pages and with released ids at the front, in the middle and at the end.
    #[test]
    fn table_agrees_with_an_ordered_map() {
        let mut t = JobTable::default();
        let mut model = std::collections::BTreeSet::new();
        let mut next = 7u64;
        let mut x = 1u64;
        for round in 0..6 {
            for _ in 0..1500 {
                t.insert(job(next));
                model.insert(next);
                next += 1 + (round % 2);
            }
            // Remove a pseudo-random half.
            let ids: Vec<u64> = model.iter().copied().collect();
            for id in ids {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                if x >> 63 == 1 {
                    assert_eq!(t.remove(&JobId(id)).map(|j| j.id), Some(JobId(id)));
                    model.remove(&id);
                }
            }
            assert!(t.remove(&JobId(3)).is_none());
            assert_eq!(t.len(), model.len());
            let got: Vec<u64> = t.values().map(|j| j.id.0).collect();
            assert_eq!(got, model.iter().copied().collect::<Vec<_>>());
            for id in 0..next + 2 {
                assert_eq!(t.get(&JobId(id)).map(|j| j.id.0), model.get(&id).copied());
            }
        }
        for id in model.clone() {
            assert!(t.remove(&JobId(id)).is_some());
        }
        assert_eq!(t.len(), 0);
        assert!(t.index.is_empty() && t.pages.is_empty() && t.old.is_empty());
        t.insert(job(next + 5));
        assert_eq!(t.get(&JobId(next + 5)).map(|j| j.id.0), Some(next + 5));
    }

    /// A long-lived record among many released ones keeps the index bounded by what is held
    /// (it grew by 4 bytes per job released after it), and lookups, moves and iteration still
    /// find it.
    #[test]
    fn a_long_lived_record_does_not_grow_the_index_with_every_released_job() {
        let mut t = JobTable::default();
        t.insert(job(1));
        let mut held = std::collections::VecDeque::new();
        for id in 2..200_000u64 {
            t.insert(job(id));
            held.push_back(id);
            if held.len() > 50 {
                let gone = held.pop_front().unwrap();
                assert!(t.remove(&JobId(gone)).is_some());
            }
            assert!(
                t.index.len() <= 2 * t.len() + SLACK + 1,
                "index {} for {} records",
                t.index.len(),
                t.len()
            );
        }
        assert_eq!(t.len(), 51);
        assert_eq!(t.get(&JobId(1)).map(|j| j.id.0), Some(1));
        let ids: Vec<u64> = t.values().map(|j| j.id.0).collect();
        let mut want = vec![1];
        want.extend(held.iter().copied());
        assert_eq!(ids, want);
        // Releasing the recent ones moves records across pages into old entries' places.
        for id in held.clone() {
            assert!(t.remove(&JobId(id)).is_some());
        }
        assert_eq!(t.get(&JobId(1)).map(|j| j.id.0), Some(1));
        assert!(t.remove(&JobId(1)).is_some());
        assert!(t.index.is_empty() && t.pages.is_empty() && t.old.is_empty());
    }

    /// Churn with a few long-lived records at random: records move between the dense index
    /// and the old map and across pages; every lookup and the id order agree with a model.
    #[test]
    fn churn_with_long_lived_records_agrees_with_an_ordered_map() {
        let mut t = JobTable::default();
        let mut model = std::collections::BTreeSet::new();
        let mut recent = std::collections::VecDeque::new();
        let mut x = 7u64;
        let mut rnd = || {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            x >> 33
        };
        for id in 1..60_000u64 {
            t.insert(job(id));
            model.insert(id);
            if rnd() % 100 != 0 {
                recent.push_back(id);
            }
            if recent.len() > 40 {
                let gone = recent.remove((rnd() % 40) as usize).unwrap();
                assert!(t.remove(&JobId(gone)).is_some());
                model.remove(&gone);
            }
            if rnd() % 500 == 0 && model.len() > 1 {
                // Release a long-lived one (anywhere) too.
                let all: Vec<u64> = model.iter().copied().collect();
                let gone = all[(rnd() as usize) % all.len()];
                assert!(t.remove(&JobId(gone)).is_some());
                model.remove(&gone);
                recent.retain(|r| *r != gone);
            }
            if id % 5_000 == 0 {
                let got: Vec<u64> = t.values().map(|j| j.id.0).collect();
                assert_eq!(got, model.iter().copied().collect::<Vec<_>>());
                for probe in 0..id + 2 {
                    assert_eq!(
                        t.get(&JobId(probe)).map(|j| j.id.0),
                        model.get(&probe).copied()
                    );
                }
            }
        }
        assert!(!t.old.is_empty(), "the test moves records to the old map");
        assert!(t.index.len() <= 2 * t.len() + SLACK + 1);
        for id in model.clone() {
            assert!(t.remove(&JobId(id)).is_some());
        }
        assert!(t.index.is_empty() && t.pages.is_empty() && t.old.is_empty());
    }
}
