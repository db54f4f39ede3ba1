//! Several engines over one store (the PostgreSQL case), interleaved by hand: a shared
//! `BTreeMap` stands in for the database and each test plays the host's transaction steps
//! (lock the read set's rows, refresh them, prepare, write, apply).

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use crate::Wall;
use serde_json::{Map, Value, json};

use super::types::*;
use super::*;

type Db = BTreeMap<(RecordKind, String), Vec<u8>>;

/// The scripted app of the vectors, plus a `notes` log item and a `feed` entry per note.
struct Logging(ScriptedApp);

impl App for Logging {
    type State = <ScriptedApp as App>::State;
    fn name(&self) -> &str {
        self.0.name()
    }
    fn resource_kind(&self) -> &str {
        self.0.resource_kind()
    }
    fn policy_id(&self) -> &str {
        self.0.policy_id()
    }
    fn graph(&self) -> &Graph {
        self.0.graph()
    }
    fn services(&self) -> &[Service] {
        self.0.services()
    }
    fn initial_surfaces(&self) -> Vec<(String, Self::State)> {
        self.0.initial_surfaces()
    }
    fn summary(&self, state: &Self::State) -> Summary {
        self.0.summary(state)
    }
    fn observations(&self, ctx: &SurfaceCtx, state: &Self::State) -> Vec<Evidence> {
        self.0.observations(ctx, state)
    }
    fn decisions(&self, ctx: &SurfaceCtx, state: &Self::State, ev: &[Evidence]) -> Vec<Decision> {
        self.0.decisions(ctx, state, ev)
    }
    fn apply(
        &self,
        ctx: &ApplyCtx,
        state: &mut Self::State,
        decision: &Decision,
        answer: &Answer,
    ) -> Result<Applied, FramesError> {
        let mut applied = self.0.apply(ctx, state, decision, answer)?;
        if decision.node_id == "note" {
            let text = match answer {
                Answer::Value(v) => v.value["text"].clone(),
                _ => Value::Null,
            };
            applied.appended.push((
                "notes".into(),
                Evidence {
                    evidence_id: "pending".into(),
                    kind: EvidenceKind::Json,
                    mime_type: "application/json".into(),
                    required: false,
                    trust: Trust::Observed,
                    source: Source {
                        kind: SourceKind::Application,
                        id: "test".into(),
                        model: None,
                        based_on_frame: None,
                        extensions: None,
                    },
                    content: Some(json!({"text": text, "by": ctx.principal.id})),
                    blob: None,
                    derived_from: None,
                    extensions: None,
                },
            ));
            let mut body = Map::new();
            body.insert("text".into(), text);
            applied.entries.push(("feed".into(), body));
        }
        Ok(applied)
    }
}

fn app() -> Logging {
    let suite: Value =
        serde_json::from_str(include_str!("../../../tests/vectors/frames.json")).unwrap();
    Logging(ScriptedApp::from_json(&suite["app"]).unwrap())
}

type E = Engine<Logging>;

fn persist(db: &mut Db, writes: &[Write]) {
    for w in writes {
        assert!(
            !(w.kind == RecordKind::Meta && w.key == "reserved"),
            "no id block with an instance"
        );
        if w.is_delete() {
            db.remove(&(w.kind, w.key.clone()));
        } else {
            db.insert((w.kind, w.key.clone()), w.value.clone());
        }
    }
}

/// Makes a call's writes durable in `db`, then releases its value.
fn persisted<T>(db: &mut Db, done: Done<T>) -> T {
    let (p, pending) = done.split();
    persist(db, p.writes());
    pending.release(p.ack())
}

/// Writes a prepared commit's records to `db` (the transaction), then hands back its decision
/// acknowledged (after COMMIT), for `apply_commit`.
fn committed<S>(db: &mut Db, prepared: Prepared<S>) -> Committed<S> {
    let (p, pending) = prepared.split();
    persist(db, p.writes());
    pending.release(p.ack())
}

/// A call's value whose writes this test never reads back (they are dropped).
fn unpersisted<T>(done: Done<T>) -> T {
    let (p, pending) = done.split();
    let (_dropped, handed) = p.hand_off();
    pending.release(handed)
}

fn open(db: &mut Db, instance: u64) -> E {
    let records: Vec<_> = db
        .iter()
        .map(|((k, key), v)| (*k, key.clone(), v.clone()))
        .collect();
    let d = Engine::open(
        app(),
        EngineConfig {
            id_seed: 9,
            instance: Some(instance),
            ..Default::default()
        },
        records,
    )
    .unwrap();
    persisted(db, d)
}

/// The host's step under the surface row lock: the surface's log items in index order, then
/// the row itself; then the policy row.
fn sync_surface(e: &mut E, db: &Db, sid: &str) {
    let (start, end) = E::log_key_range(sid);
    let mut items: Vec<(u64, &str, &[u8])> = db
        .range((RecordKind::LogItem, start)..(RecordKind::LogItem, end))
        .map(|((_, k), v)| {
            let (s, _, i): (String, String, u64) = serde_json::from_str(k).unwrap();
            assert_eq!(s, sid);
            (i, k.as_str(), v.as_slice())
        })
        .collect();
    items.sort_by_key(|x| x.0);
    for (_, k, v) in items {
        assert_ne!(
            e.refresh(RecordKind::LogItem, k, v).unwrap(),
            Refreshed::Gap
        );
    }
    if let Some(v) = db.get(&(RecordKind::Surface, sid.to_owned())) {
        e.refresh(RecordKind::Surface, sid, v).unwrap();
    }
}

fn sync_scopes(e: &mut E, db: &Db, frame_id: &str) {
    let scopes = e.scopes(frame_id);
    assert!(!scopes.is_empty(), "the frame is held");
    for (kind, key) in scopes {
        match kind {
            RecordKind::Surface => sync_surface(e, db, &key),
            _ => {
                let v = &db[&(kind, key.clone())];
                e.refresh(kind, &key, v).unwrap();
            }
        }
    }
}

/// The frame and assessment a body names, read back from the store as the host does today.
fn prefetch(e: &mut E, db: &Db, body: &Value) {
    let mut todo = E::named_records(&serde_json::to_vec(body).unwrap());
    while let Some((kind, key)) = todo.pop() {
        if !e.needs(kind, &key) {
            continue;
        }
        if let Some(v) = db.get(&(kind, key.clone()))
            && let Some(dep) = e.admit(Wall::from_ms(NOW), kind, &key, v).unwrap()
        {
            todo.push((kind, key));
            todo.push(dep);
        }
    }
}

/// The host's step under the idempotency key's advisory lock.
fn sync_idem(e: &mut E, db: &Db, p: &Principal, key: &str) {
    let ik = E::idempotency_key(&p.id, key);
    if let Some(v) = db.get(&(RecordKind::Idempotency, ik.clone())) {
        e.refresh(RecordKind::Idempotency, &ik, v).unwrap();
        let rid = e.idempotent_receipt(&p.id, key).unwrap().to_owned();
        if e.needs(RecordKind::Receipt, &rid) {
            let r = &db[&(RecordKind::Receipt, rid.clone())];
            e.admit(Wall::from_ms(0), RecordKind::Receipt, &rid, r)
                .unwrap();
        }
    }
}

/// Everything of one kind in the store (what a NOTIFY-driven refresh would bring).
fn sync_all(e: &mut E, db: &Db, kind: RecordKind) {
    for ((k, key), v) in db.iter().filter(|((k, _), _)| *k == kind) {
        e.refresh(*k, key, v).unwrap();
    }
}

/// Reads a frame (after the point read of its surface row) and assesses a note on it;
/// returns the commit body.
fn frame_and_note(e: &mut E, db: &mut Db, now: u64, p: &Principal, sid: &str, text: &str) -> Value {
    sync_surface(e, db, sid);
    let f = e.frame(Wall::from_ms(now), sid, None, None).unwrap();
    let fid = persisted(db, f).frame_id;
    let aid = format!("a-{fid}");
    let body = json!({"dgp": "0.1", "assessment_id": aid, "frame_id": fid,
        "decision_id": format!("{fid}:note"), "mode": "live", "resolver": {"kind": "rule"},
        "result": {"status": "answered", "answer": {"value": {"text": text}}}});
    let d = e.assess(Wall::from_ms(now), p, body).unwrap();
    persisted(db, d);
    json!({"dgp": "0.1", "frame_id": fid, "decision_id": format!("{fid}:note"), "assessment_id": aid})
}

/// The whole host commit: idempotency, read-set rows, prepare, write, apply.
fn host_commit(
    e: &mut E,
    db: &mut Db,
    now: u64,
    p: &Principal,
    key: &str,
    body: &Value,
) -> Result<Arc<Receipt>, FramesError> {
    prefetch(e, db, body);
    sync_idem(e, db, p, key);
    sync_scopes(e, db, body["frame_id"].as_str().unwrap());
    let prepared = e.prepare_commit(Wall::from_ms(now), p, Some(key), body.clone())?;
    let done = e.apply_commit(committed(db, prepared));
    Ok(persisted(db, done))
}

const NOW: u64 = 1_790_000_000_000;

#[test]
fn the_commit_applied_first_wins_and_the_other_is_stale_after_refresh() {
    let mut db = Db::new();
    let mut a = open(&mut db, 1);
    let mut b = open(&mut db, 2);
    let (alice, bob) = (Principal::human("alice"), Principal::human("bob"));
    let body_a = frame_and_note(&mut a, &mut db, NOW, &alice, "s1", "from a");
    let body_b = frame_and_note(&mut b, &mut db, NOW + 1, &bob, "s1", "from b");
    let fa = body_a["frame_id"].as_str().unwrap();
    assert_eq!(
        a.scopes(fa),
        vec![
            (RecordKind::Surface, "s1".to_owned()),
            (RecordKind::Meta, "policy_revision".to_owned())
        ]
    );
    // Both decide against revision 1.
    sync_scopes(&mut a, &db, fa);
    let pa = a
        .prepare_commit(Wall::from_ms(NOW + 2), &alice, Some("ka"), body_a.clone())
        .unwrap();
    sync_scopes(&mut b, &db, body_b["frame_id"].as_str().unwrap());
    let pb = b
        .prepare_commit(Wall::from_ms(NOW + 2), &bob, Some("kb"), body_b.clone())
        .unwrap();
    assert_eq!((pa.base_revision, pb.base_revision), (1, 1));
    assert!(pa.replay.is_none() && pb.replay.is_none());
    // Preparing changed nothing visible.
    assert_eq!(a.surface_state("s1").unwrap().1, 1);
    assert_eq!(a.log_len("s1", "notes"), 0);
    // A's transaction commits first; B's waited on the row lock, then re-reads it.
    let receipt = unpersisted(a.apply_commit(committed(&mut db, pa)));
    assert_eq!(receipt.state_revision, 2);
    drop(pb);
    let err = host_commit(&mut b, &mut db, NOW + 3, &bob, "kb", &body_b).unwrap_err();
    assert_eq!(err.code(), "STALE_FRAME");
    // B now holds A's commit: its next frame shows revision 2 and A's note (caches cleared).
    assert_eq!(b.surface_state("s1").unwrap().1, 2);
    assert_eq!(b.log_len("s1", "notes"), 1);
    let fb = unpersisted(b.frame(Wall::from_ms(NOW + 4), "s1", None, None).unwrap());
    let fa2 = unpersisted(a.frame(Wall::from_ms(NOW + 4), "s1", None, None).unwrap());
    assert_eq!(fb.read_set, fa2.read_set);
    assert_eq!(fb.observations, fa2.observations);
    assert!(fb.observations.iter().any(|e| e.evidence_id == "notes-0"));
    // A policy bump on A reaches B's decisions through refresh.
    persisted(&mut db, a.bump_policy());
    let body_b2 = frame_and_note(&mut b, &mut db, NOW + 5, &bob, "s1", "b again");
    let err = host_commit(&mut b, &mut db, NOW + 6, &bob, "kb2", &body_b2).unwrap_err();
    assert_eq!(err.code(), "STALE_FRAME");
    assert_eq!(b.policy_revision(), 2);
}

#[test]
fn replays_across_instances_return_the_identical_receipt() {
    let mut db = Db::new();
    let mut a = open(&mut db, 1);
    let mut b = open(&mut db, 2);
    let alice = Principal::human("alice");
    let body = frame_and_note(&mut a, &mut db, NOW, &alice, "s1", "once");
    let first = host_commit(&mut a, &mut db, NOW + 1, &alice, "k", &body).unwrap();
    let stored = db[&(RecordKind::Receipt, first.receipt_id.clone())].clone();
    // B has neither the frame nor the assessment: the replay needs only the key's records.
    let p = b.prepare_commit(Wall::from_ms(NOW + 2), &alice, Some("k"), body.clone());
    assert!(
        p.is_err(),
        "without the idempotency record B would decide afresh"
    );
    sync_idem(&mut b, &db, &alice, "k");
    let p = b
        .prepare_commit(Wall::from_ms(NOW + 2), &alice, Some("k"), body.clone())
        .unwrap();
    assert!(p.writes().is_empty());
    let replay = p.replay.clone().expect("a replay");
    let (persist, pending) = p.split();
    assert!(persist.is_empty());
    let done = b.apply_commit(pending.release(persist.ack()));
    assert!(done.is_clean());
    let done = done.into_value_if_clean().expect("a replay writes nothing");
    assert_eq!(serde_json::to_vec(&*replay).unwrap(), stored);
    assert_eq!(
        serde_json::to_vec(&*done).unwrap(),
        serde_json::to_vec(&*first).unwrap()
    );
    assert_eq!(b.receipt(&first.receipt_id).unwrap(), first);
    // Same key, another body: refused on B as on A.
    let other = json!({"dgp": "0.1", "frame_id": body["frame_id"], "decision_id": body["decision_id"], "assessment_id": "a-other"});
    let err = host_commit(&mut b, &mut db, NOW + 3, &alice, "k", &other).unwrap_err();
    assert_eq!(err.code(), "IDEMPOTENCY_KEY_REUSED");
    // The same key of another principal is another key.
    assert!(b.idempotent_receipt("bob", "k").is_none());
}

#[test]
fn ids_of_two_instances_never_collide() {
    let mut db = Db::new();
    let mut a = open(&mut db, 1);
    let mut b = open(&mut db, 2);
    let mut ids = HashSet::new();
    for i in 0..300u64 {
        for e in [&mut a, &mut b] {
            let f = e
                .frame(
                    Wall::from_ms(NOW + i),
                    ["s1", "s2"][i as usize % 2],
                    None,
                    None,
                )
                .unwrap();
            let f = persisted(&mut db, f);
            assert!(f.frame_id.starts_with("f-") && f.frame_id.len() == 34);
            assert!(ids.insert(f.frame_id), "an id minted twice");
        }
    }
    assert_eq!(ids.len(), 600);
    // A third process (a restart draws a new number) mints none of them either.
    let mut c = open(&mut db, 3);
    let f = unpersisted(c.frame(Wall::from_ms(NOW), "s1", None, None).unwrap());
    assert!(!ids.contains(&f.frame_id));
    // Without an instance the ids are those of the id block (the vectors pin them).
    let solo = Engine::open(
        app(),
        EngineConfig {
            id_seed: 9,
            ..Default::default()
        },
        vec![],
    )
    .unwrap();
    assert!(solo.writes().iter().all(|w| w.key != "reserved"));
    let mut solo = unpersisted(solo);
    let d = solo.frame(Wall::from_ms(NOW), "s1", None, None).unwrap();
    assert!(d.writes().iter().any(|w| w.key == "reserved"));
    assert!(!ids.contains(&unpersisted(d).frame_id));
}

#[test]
fn interleaved_commits_keep_log_indexes_contiguous() {
    let mut db = Db::new();
    let mut a = open(&mut db, 1);
    let mut b = open(&mut db, 2);
    let (alice, bob) = (Principal::human("alice"), Principal::human("bob"));
    let mut now = NOW;
    for round in 0..3 {
        for (e, p, name) in [(&mut a, &alice, "a"), (&mut b, &bob, "b")] {
            now += 10;
            let text = format!("{name}{round}");
            let body = frame_and_note(e, &mut db, now, p, "s1", &text);
            host_commit(e, &mut db, now + 1, p, &format!("k{text}"), &body).unwrap();
        }
    }
    // A decides and COMMITs, but before it applies, B refreshes that commit and commits a
    // later one, which A refreshes first (a NOTIFY handled before A's own apply).
    now += 10;
    let body = frame_and_note(&mut a, &mut db, now, &alice, "s1", "late");
    sync_scopes(&mut a, &db, body["frame_id"].as_str().unwrap());
    let pa = a
        .prepare_commit(Wall::from_ms(now + 1), &alice, Some("klate"), body)
        .unwrap();
    assert_eq!(pa.base_revision, 7);
    // A's transaction COMMITs; B commits before A applies to memory.
    let (persist_a, pending_a) = pa.split();
    persist(&mut db, persist_a.writes());
    let body = frame_and_note(&mut b, &mut db, now + 2, &bob, "s1", "later");
    host_commit(&mut b, &mut db, now + 3, &bob, "klater", &body).unwrap();
    assert_eq!(b.surface_state("s1").unwrap().1, 9);
    sync_surface(&mut a, &db, "s1");
    assert_eq!(a.surface_state("s1").unwrap().1, 9);
    let receipt = unpersisted(a.apply_commit(pending_a.release(persist_a.ack())));
    assert_eq!(receipt.state_revision, 8);
    assert_eq!(a.surface_state("s1").unwrap().1, 9, "apply never goes back");
    assert_eq!(a.receipt(&receipt.receipt_id).unwrap(), receipt);
    // Both hold 8 contiguous items, the store holds exactly indexes 0..8, and a fresh engine
    // over the store (whose open checks contiguity) agrees.
    let keys: Vec<String> = (0..8).map(|i| E::log_key("s1", "notes", i)).collect();
    let stored: Vec<&String> = db
        .keys()
        .filter(|(k, _)| *k == RecordKind::LogItem)
        .map(|(_, key)| key)
        .collect();
    assert_eq!(stored.len(), 8);
    assert!(
        keys.iter()
            .all(|k| db.contains_key(&(RecordKind::LogItem, k.clone())))
    );
    for e in [&mut a, &mut b] {
        sync_all(e, &db, RecordKind::Entry);
        assert_eq!(e.log_lens("s1"), vec![("notes".to_owned(), 8)]);
    }
    let mut c = open(&mut db, 3);
    assert_eq!(c.log_len("s1", "notes"), 8);
    let texts = |e: &E| -> Vec<Value> {
        e.entries("feed")
            .iter()
            .map(|x| x.body["text"].clone())
            .collect()
    };
    let want: Vec<Value> = ["a0", "b0", "a1", "b1", "a2", "b2", "late", "later"]
        .iter()
        .map(|t| json!(t))
        .collect();
    assert_eq!(texts(&a), want);
    assert_eq!(texts(&b), want);
    assert_eq!(texts(&c), want);
    // The frames agree, item for item.
    let obs: Vec<Vec<Evidence>> = [&mut a, &mut b, &mut c]
        .into_iter()
        .map(|e| {
            unpersisted(e.frame(Wall::from_ms(now + 9), "s1", None, None).unwrap()).observations
        })
        .collect();
    assert_eq!(obs[0], obs[1]);
    assert_eq!(obs[0], obs[2]);
    let notes: Vec<&str> = obs[0]
        .iter()
        .filter(|e| e.evidence_id.starts_with("notes-") && e.evidence_id != "notes-log")
        .map(|e| e.evidence_id.as_str())
        .collect();
    assert_eq!(notes.len(), 8);
    // Refreshing an item past the end is a gap, not a hole.
    let ev = db[&(RecordKind::LogItem, keys[0].clone())].clone();
    assert_eq!(
        c.refresh(RecordKind::LogItem, &E::log_key("s1", "notes", 10), &ev)
            .unwrap(),
        Refreshed::Gap
    );
    assert_eq!(c.log_len("s1", "notes"), 8);
}

#[test]
fn a_frame_read_on_one_instance_commits_on_the_other() {
    let mut db = Db::new();
    let mut a = open(&mut db, 1);
    let mut b = open(&mut db, 2);
    let alice = Principal::human("alice");
    let body = frame_and_note(&mut a, &mut db, NOW, &alice, "s2", "via b");
    let fid = body["frame_id"].as_str().unwrap();
    assert!(b.scopes(fid).is_empty(), "B has not read the frame yet");
    // B reads the frame, its snapshot and the assessment back from the store.
    let receipt = host_commit(&mut b, &mut db, NOW + 1, &alice, "k", &body).unwrap();
    assert_eq!(receipt.state_revision, 2);
    assert_eq!(b.stored_frame(fid).unwrap(), a.stored_frame(fid).unwrap());
    // A takes B's commit in and refuses the same transition as stale, replays the key.
    sync_idem(&mut a, &db, &alice, "k");
    let p = a
        .prepare_commit(Wall::from_ms(NOW + 2), &alice, Some("k"), body.clone())
        .unwrap();
    assert_eq!(p.replay.as_deref(), Some(&*receipt));
    let _ = a.apply_commit(committed(&mut db, p));
    let err = host_commit(&mut a, &mut db, NOW + 2, &alice, "k2", &body).unwrap_err();
    assert_eq!(err.code(), "STALE_FRAME");
    assert_eq!(a.surface_state("s2").unwrap().1, 2);
}

/// The frame left memory between the host's prefetch and its `scopes` call: the host locked
/// nothing, so the decision is refused (retryable) instead of made without row locks; with
/// the read set locked it is decided; on the last attempt an absent frame is `NOT_FOUND`.
#[test]
fn a_commit_whose_read_set_is_not_locked_is_refused() {
    let mut db = Db::new();
    let mut a = open(&mut db, 1);
    let mut b = open(&mut db, 2);
    let alice = Principal::human("alice");
    let body = frame_and_note(&mut a, &mut db, NOW, &alice, "s1", "x");
    let bytes = serde_json::to_vec(&body).unwrap();
    let fid = body["frame_id"].as_str().unwrap();
    // B never held the frame (as after an eviction): no scopes, nothing locked.
    assert!(b.scopes(fid).is_empty());
    let err = b
        .prepare_commit_locked_bytes(Wall::from_ms(NOW + 1), &alice, Some("k"), &bytes, &[], 0)
        .err()
        .unwrap();
    assert_eq!((err.code(), err.http_status()), ("SCOPES_NOT_LOCKED", 503));
    let last = COMMIT_LOCK_ATTEMPTS - 1;
    let err = b
        .prepare_commit_locked_bytes(Wall::from_ms(NOW + 1), &alice, Some("k"), &bytes, &[], last)
        .err()
        .unwrap();
    assert_eq!(err.code(), "NOT_FOUND");
    // Once held (re-admitted by another request), a partial lock set is still refused.
    prefetch(&mut b, &db, &body);
    let scopes = b.scopes(fid);
    assert_eq!(scopes.len(), 2, "{scopes:?}");
    for locked in [&[][..], &scopes[..1]] {
        let err = b
            .prepare_commit_locked_bytes(
                Wall::from_ms(NOW + 1),
                &alice,
                Some("k"),
                &bytes,
                locked,
                last,
            )
            .err()
            .unwrap();
        assert_eq!(err.code(), "SCOPES_NOT_LOCKED");
    }
    sync_scopes(&mut b, &db, fid);
    let p = b
        .prepare_commit_locked_bytes(
            Wall::from_ms(NOW + 1),
            &alice,
            Some("k"),
            &bytes,
            &scopes,
            0,
        )
        .unwrap();
    assert!(p.replay.is_none());
    let done = unpersisted(b.apply_commit(committed(&mut db, p)));
    // A replay needs no row lock.
    let p = b
        .prepare_commit_locked_bytes(Wall::from_ms(NOW + 2), &alice, Some("k"), &bytes, &[], 0)
        .unwrap();
    assert_eq!(p.replay.as_deref(), Some(&*done));
}

/// A policy change on a shared database: decided without touching memory, applied by the
/// refresh of its own write after COMMIT (and not at all when the COMMIT fails).
#[test]
fn a_prepared_policy_change_moves_memory_only_when_refreshed() {
    let mut db = Db::new();
    let mut a = open(&mut db, 1);
    let before = a.policy_revision();
    let (persist, pending) = a.prepare_bump_policy().split();
    assert_eq!(a.policy_revision(), before, "nothing changes before COMMIT");
    let w = &persist.writes()[0];
    assert_eq!(
        a.refresh(w.kind, &w.key, &w.value).unwrap(),
        Refreshed::Changed
    );
    assert_eq!(pending.release(persist.ack()), before + 1);
    assert_eq!(a.policy_revision(), before + 1);
}
