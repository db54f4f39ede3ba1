//! Storage and memory stay linear in useful data (issue 12, failures 1 and 2): notes are
//! stored once, frames stay within their byte budget with a count and pages for the rest, and
//! frames and assessments past their retention leave memory and the store.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use weft_core::frames::types::Frame;
use weft_core::frames::{Done, Engine, EngineConfig, Principal, RecordKind, Write};
use weft_threaddesk::ThreadDesk;

const T0: u64 = 1_789_840_714_000;

/// The engine plus an in-memory store that applies its writes (an empty value deletes).
struct Desk {
    e: Engine<ThreadDesk>,
    store: BTreeMap<(RecordKind, String), Vec<u8>>,
    now: u64,
    n: u32,
}

impl Desk {
    fn new(config: EngineConfig) -> Self {
        let (persist, engine) = Engine::open(ThreadDesk::new(), config, vec![])
            .unwrap()
            .split();
        let mut store = BTreeMap::new();
        apply(&mut store, persist.writes());
        Desk {
            e: engine.release(persist.ack()),
            store,
            now: T0,
            n: 0,
        }
    }

    /// Makes a call's writes durable in the store, then releases its value; returns it and
    /// the bytes the writes put.
    fn persist<T>(&mut self, done: Done<T>) -> (T, usize) {
        let (persist, pending) = done.split();
        let bytes = apply(&mut self.store, persist.writes());
        (pending.release(persist.ack()), bytes)
    }

    fn store_bytes(&self) -> usize {
        self.store.iter().map(|((_, k), v)| k.len() + v.len()).sum()
    }

    fn count(&self, kind: RecordKind) -> usize {
        self.store.keys().filter(|(k, _)| *k == kind).count()
    }

    /// A new frame, as its JSON bytes and parsed; `(frame, bytes, written)`.
    fn frame(&mut self, sid: &str, disclosure: Option<&str>) -> (Frame, usize, usize) {
        self.now += 1;
        let done = self
            .e
            .frame_json(weft_core::Wall::from_ms(self.now), sid, disclosure, None)
            .unwrap();
        let (value, written) = self.persist(done);
        (
            serde_json::from_slice(&value).unwrap(),
            value.len(),
            written,
        )
    }

    /// Assesses and commits a note on `f`; returns the bytes both persisted.
    fn note(&mut self, f: &Frame, text: &str) -> usize {
        self.n += 1;
        let who = Principal::agent("agent");
        let aid = format!("a-{}", self.n);
        let body = json!({"dgp": "0.1", "assessment_id": aid, "frame_id": f.frame_id,
            "decision_id": format!("{}:note", f.frame_id), "mode": "live",
            "resolver": {"kind": "rule"},
            "result": {"status": "answered", "answer": {"value": {"text": text}}}});
        let a = self
            .e
            .assess(weft_core::Wall::from_ms(self.now), &who, body)
            .unwrap();
        let mut written = self.persist(a).1;
        let c = json!({"dgp": "0.1", "frame_id": f.frame_id,
            "decision_id": format!("{}:note", f.frame_id), "assessment_id": aid});
        let r = self
            .e
            .commit(
                weft_core::Wall::from_ms(self.now),
                &who,
                Some(&format!("k-{}", self.n)),
                c,
            )
            .unwrap();
        written += self.persist(r).1;
        written
    }

    fn reopen(&mut self, config: EngineConfig) {
        let records: Vec<_> = self
            .store
            .iter()
            .map(|((k, key), v)| (*k, key.clone(), v.clone()))
            .collect();
        let done = Engine::open(ThreadDesk::new(), config, records).unwrap();
        self.e = self.persist(done).0;
    }
}

/// Applies writes to a store (an empty value deletes); returns the bytes they put.
fn apply(store: &mut BTreeMap<(RecordKind, String), Vec<u8>>, writes: &[Write]) -> usize {
    let mut bytes = 0;
    for w in writes {
        if w.is_delete() {
            store.remove(&(w.kind, w.key.clone()));
        } else {
            bytes += w.key.len() + w.value.len();
            store.insert((w.kind, w.key.clone()), w.value.clone());
        }
    }
    bytes
}

fn summary<'a>(f: &'a Frame, log: &str) -> &'a Value {
    f.observations
        .iter()
        .find(|e| e.evidence_id == format!("{log}-log"))
        .and_then(|e| e.content.as_ref())
        .unwrap_or_else(|| panic!("no {log}-log summary in {}", f.frame_id))
}

#[test]
fn four_hundred_4k_notes_are_stored_once_and_every_frame_stays_within_its_budget() {
    let config = EngineConfig {
        id_seed: 3,
        ..Default::default()
    };
    let budget = config.frame_budget_bytes;
    let mut d = Desk::new(config.clone());
    let text = |i: usize| format!("{i:04} {}", "n".repeat(3995));
    let (mut per_commit, mut largest_frame) = (Vec::new(), 0);
    for i in 0..400 {
        let (f, len, frame_written) = d.frame("thread-42", None);
        largest_frame = largest_frame.max(len);
        assert!(len <= budget, "frame {i} is {len} bytes, over {budget}");
        if i > 0 {
            let s = summary(&f, "note");
            assert_eq!(s["count"], json!(i));
            // The newest notes are shown, in order, up to the budget.
            let shown = s["shown"].as_u64().unwrap() as usize;
            assert!(shown >= 1 && shown <= i);
            let last = f.observations.last().unwrap();
            assert_eq!(last.evidence_id, format!("note-{}", i - 1));
            assert_eq!(last.content, Some(json!(text(i - 1))));
        }
        per_commit.push(frame_written + d.note(&f, &text(i)));
    }
    // A commit stores what changed: the 400th writes as much as the 10th (no thread copy).
    assert!(
        per_commit[399] <= per_commit[9] + 1024,
        "commit 10 wrote {} bytes, commit 400 {}",
        per_commit[9],
        per_commit[399]
    );
    // Each cycle stores the note twice (the assessment's answer and the log item) plus
    // bounded records: the store is linear in the notes.
    let useful = 400 * 4000;
    assert!(
        d.store_bytes() < 3 * useful + 400 * 6 * 1024,
        "store is {} bytes for {useful} bytes of notes",
        d.store_bytes()
    );
    assert_eq!(d.count(RecordKind::LogItem), 400);
    // Memory: one snapshot per thread revision was built, at most the bound (plus one per
    // surface) is held; the frames that held the others left memory with them.
    let s = d.e.stats();
    assert!(
        s.snapshots <= 256 + 2 && s.evicted > 0,
        "{} snapshots held, {} frames evicted",
        s.snapshots,
        s.evicted
    );
    eprintln!(
        "store {} bytes; commit 10 wrote {}, commit 400 {}; largest frame {largest_frame}",
        d.store_bytes(),
        per_commit[9],
        per_commit[399]
    );
    // Every disclosure variant and the stored frame stay within the budget too.
    for disclosure in ["next", "horizon", "full"] {
        let (f, len, _) = d.frame("thread-42", Some(disclosure));
        assert!(len <= budget, "{disclosure}: {len} > {budget}");
        let stored = serde_json::to_vec(&d.e.stored_frame(&f.frame_id).unwrap()).unwrap();
        assert!(stored.len() <= budget);
        assert_eq!(summary(&f, "note")["count"], json!(400));
    }
    assert!(
        largest_frame > budget / 2,
        "the budget is used: {largest_frame}"
    );
    // The rest is paged: walking `earlier_href` from the newest page yields every note once.
    let mut before: Option<String> = None;
    let mut seen = Vec::new();
    loop {
        let page =
            d.e.log_page("thread-42", "note", before.as_deref(), Some("100"))
                .unwrap();
        assert!(serde_json::to_vec(&page).unwrap().len() <= budget + 1024);
        let items: Vec<String> = page["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["content"].as_str().unwrap().to_owned())
            .collect();
        assert!(!items.is_empty());
        seen.splice(0..0, items);
        match page["earlier_href"].as_str() {
            Some(href) => before = Some(href.rsplit_once("before=").unwrap().1.to_owned()),
            None => break,
        }
    }
    assert_eq!(seen, (0..400).map(text).collect::<Vec<_>>());
    // A reopened engine shows the same log.
    d.reopen(config);
    let (f, _, _) = d.frame("thread-42", None);
    assert_eq!(summary(&f, "note")["count"], json!(400));
    assert_eq!(d.e.stats().log_items, 400);
}

#[test]
fn frames_and_assessments_past_their_ttl_leave_memory_and_the_store() {
    let config = EngineConfig {
        id_seed: 4,
        frame_ttl_ms: 10_000,
        expired_retention_ms: 5_000,
        ..Default::default()
    };
    let mut d = Desk::new(config.clone());
    let mut frames = Vec::new();
    for _ in 0..1000 {
        frames.push(d.frame("thread-73", None).0);
    }
    // One frame gets a receipt (kept forever), two more an assessment each.
    let kept = frames[10].clone();
    d.note(&kept, "kept");
    for f in [&frames[20], &frames[30]] {
        d.n += 1;
        let body = json!({"dgp": "0.1", "assessment_id": format!("x-{}", d.n), "frame_id": f.frame_id,
            "decision_id": format!("{}:note", f.frame_id), "mode": "live", "resolver": {"kind": "rule"},
            "result": {"status": "answered", "answer": {"value": {"text": "x"}}}});
        let a =
            d.e.assess(
                weft_core::Wall::from_ms(d.now),
                &Principal::agent("agent"),
                body,
            )
            .unwrap();
        d.persist(a);
    }
    let s = d.e.stats();
    assert_eq!((s.frames, s.assessments, s.receipts), (1000, 3, 1));
    assert_eq!(d.count(RecordKind::Frame), 1000);
    // Past expiry but within retention: still readable, nothing released.
    d.now += 10_000;
    let done = d.e.sweep(weft_core::Wall::from_ms(d.now), usize::MAX);
    assert_eq!(d.persist(done).0, 0);
    assert!(d.e.stored_frame(&frames[0].frame_id).is_ok());
    // Past retention: everything but the receipt's frame and assessment leaves memory, and
    // their records are deleted.
    d.now += 6_000;
    let done = d.e.sweep(weft_core::Wall::from_ms(d.now), usize::MAX);
    d.persist(done);
    let s = d.e.stats();
    assert_eq!((s.frames, s.assessments, s.receipts), (0, 0, 1));
    assert_eq!(s.expired_released, 999 + 2);
    assert_eq!(d.count(RecordKind::Frame), 1);
    assert_eq!(d.count(RecordKind::Assessment), 1);
    assert!(d.e.stored_frame(&frames[0].frame_id).is_err());
    // The receipt's frame is read back on demand (hosts do this from their store).
    let key = kept.frame_id.clone();
    assert!(d.e.needs(RecordKind::Frame, &key));
    let bytes = d.store[&(RecordKind::Frame, key.clone())].clone();
    let dep =
        d.e.admit(
            weft_core::Wall::from_ms(d.now),
            RecordKind::Frame,
            &key,
            &bytes,
        )
        .unwrap()
        .expect("its snapshot left memory with the frames");
    let snap = d.store[&dep].clone();
    assert_eq!(
        d.e.admit(weft_core::Wall::from_ms(d.now), dep.0, &dep.1, &snap)
            .unwrap(),
        None
    );
    assert_eq!(
        d.e.admit(
            weft_core::Wall::from_ms(d.now),
            RecordKind::Frame,
            &key,
            &bytes
        )
        .unwrap(),
        None
    );
    assert_eq!(
        d.e.stored_frame(&key).unwrap(),
        d.e.stored_frame(&key).unwrap()
    );
    assert_eq!(d.e.stored_frame(&key).unwrap().frame_id, key);
}

#[test]
fn past_the_cache_bound_live_frames_are_read_back_and_stale_records_compacted() {
    let config = EngineConfig {
        id_seed: 5,
        frame_ttl_ms: 10_000,
        expired_retention_ms: 0,
        max_cached_records: 100,
        ..Default::default()
    };
    let mut d = Desk::new(config.clone());
    let frames: Vec<Frame> = (0..500).map(|_| d.frame("thread-42", None).0).collect();
    let s = d.e.stats();
    // The sweep runs before each new frame is added: the bound plus the newest.
    assert!(s.frames <= 101, "{s:?}");
    assert_eq!(s.evicted, 399);
    assert_eq!(
        d.count(RecordKind::Frame),
        500,
        "evicted frames stay stored"
    );
    // An evicted live frame is read back and can be committed against.
    let old = &frames[0];
    assert!(d.e.needs(RecordKind::Frame, &old.frame_id));
    let bytes = d.store[&(RecordKind::Frame, old.frame_id.clone())].clone();
    assert_eq!(
        d.e.admit(
            weft_core::Wall::from_ms(d.now),
            RecordKind::Frame,
            &old.frame_id,
            &bytes
        )
        .unwrap(),
        None
    );
    d.note(old, "after a read-back");
    // A restarted host that loads no frames compacts the stored ones past retention.
    d.now += 20_000;
    let engine_only: Vec<_> = d
        .store
        .iter()
        .filter(|((k, _), _)| !matches!(k, RecordKind::Frame | RecordKind::Assessment))
        .map(|((k, key), v)| (*k, key.clone(), v.clone()))
        .collect();
    let done = Engine::open(ThreadDesk::new(), config, engine_only).unwrap();
    d.e = d.persist(done).0;
    let rows: Vec<(String, Vec<u8>)> = d
        .store
        .iter()
        .filter(|((k, _), _)| *k == RecordKind::Frame)
        .map(|((_, key), v)| (key.clone(), v.clone()))
        .collect();
    let deletes =
        d.e.compact(weft_core::Wall::from_ms(d.now), RecordKind::Frame, &rows);
    assert_eq!(deletes.len(), 499, "all but the receipt's frame");
    assert!(
        deletes
            .iter()
            .all(|w| w.is_delete() && w.key != old.frame_id)
    );
}
