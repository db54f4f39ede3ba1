//! Property tests of the engine's commit invariants over random interleavings (the scripted app
//! of the conformance suite): one winner per revision, identical replays, atomic refusals, and
//! a reopened engine that continues exactly where the records left it.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::Wall;
use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;

fn app() -> ScriptedApp {
    let suite: Value =
        serde_json::from_str(include_str!("../../../tests/vectors/frames.json")).unwrap();
    ScriptedApp::from_json(&suite["app"]).unwrap()
}

#[derive(Clone, Debug)]
enum Op {
    Frame(usize),
    Assess {
        frame: usize,
        answer: usize,
        who: usize,
    },
    Commit {
        assessment: usize,
        key: usize,
        who: usize,
    },
    BumpPolicy,
    Restart,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..2usize).prop_map(Op::Frame),
        4 => (0..3usize, 0..6usize, 0..3usize).prop_map(|(frame, answer, who)| Op::Assess { frame, answer, who }),
        4 => (0..3usize, 0..4usize, 0..6usize).prop_map(|(assessment, key, who)| Op::Commit { assessment, key, who }),
        1 => Just(Op::BumpPolicy),
        1 => Just(Op::Restart),
    ]
}

const ANSWERS: [(&str, &str); 6] = [
    ("recovery", "retry"),
    ("recovery", "pause"),
    ("update", "finish"),
    ("note", ""),
    ("recovery", "investigate"),
    ("review", "publish"),
];
const WHO: [(&str, Role); 3] = [
    ("agent", Role::Agent),
    ("human", Role::Human),
    ("agent2", Role::Agent),
];

fn open(records: &BTreeMap<(RecordKind, String), Vec<u8>>) -> Engine<ScriptedApp> {
    let recs = records
        .iter()
        .map(|((k, key), v)| (*k, key.clone(), v.clone()));
    Engine::open(
        app(),
        EngineConfig {
            id_seed: 3,
            ..Default::default()
        },
        recs,
    )
    .unwrap()
    .into_value_if_clean()
    .unwrap_or_else(|_| panic!("reopening a store writes nothing"))
}

/// Makes a call's writes durable in the test store, then releases its value.
fn persist<T>(store: &mut BTreeMap<(RecordKind, String), Vec<u8>>, done: Done<T>) -> T {
    let (persist, pending) = done.split();
    for w in persist.writes() {
        store.insert((w.kind, w.key.clone()), w.value.clone());
    }
    pending.release(persist.ack())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: crate::test_cases(96), ..ProptestConfig::default() })]

    #[test]
    fn commits_keep_their_invariants(ops in proptest::collection::vec(op(), 1..60)) {
        let mut store: BTreeMap<(RecordKind, String), Vec<u8>> = BTreeMap::new();
        let first = Engine::open(app(), EngineConfig { id_seed: 3, ..Default::default() }, vec![]).unwrap();
        let mut e = persist(&mut store, first);
        let mut frames: Vec<types::Frame> = vec![];
        let mut assessments: Vec<(String, Value)> = vec![];
        let mut winners: HashSet<(String, u64)> = HashSet::new();
        let mut receipts: HashMap<(String, String), (String, types::Receipt)> = HashMap::new();
        let mut now = 1_790_000_000_000u64;
        for op in ops {
            now += 7;
            match op {
                Op::Frame(s) => {
                    let d = e.frame(Wall::from_ms(now), ["s1", "s2"][s], None, None).unwrap();
                    frames.push(persist(&mut store, d));
                }
                Op::Assess { frame, answer, who } => {
                    // Mostly the newest frames, sometimes an older (stale) one.
                    let Some(f) = frames.len().checked_sub(1 + frame).and_then(|i| frames.get(i)).cloned() else { continue };
                    let (node, choice) = ANSWERS[answer];
                    let ans = if choice.is_empty() { json!({"value": {"text": "n"}}) } else { json!({"choice": choice, "input": {}}) };
                    let id = format!("a{}", assessments.len());
                    let body = json!({"dgp": "0.1", "assessment_id": id, "frame_id": f.frame_id,
                        "decision_id": format!("{}:{node}", f.frame_id), "mode": "live", "resolver": {"kind": "rule"},
                        "result": {"status": "answered", "answer": ans}});
                    let p = Principal { id: WHO[who].0.into(), role: WHO[who].1 };
                    if let Ok(d) = e.assess(Wall::from_ms(now), &p, body.clone()) {
                        persist(&mut store, d);
                        assessments.push((p.id, body));
                    }
                }
                Op::Commit { assessment, key, who } => {
                    let Some((owner, a)) = assessments.len().checked_sub(1 + assessment).and_then(|i| assessments.get(i)).cloned() else { continue };
                    // Mostly the owner; sometimes another principal (which must be refused).
                    let p = match WHO.iter().find(|w| w.0 == owner) {
                        Some(w) if who >= 3 => Principal { id: w.0.into(), role: w.1 },
                        _ => Principal { id: WHO[who % 3].0.into(), role: WHO[who % 3].1 },
                    };
                    let body = json!({"dgp": "0.1", "frame_id": a["frame_id"], "decision_id": a["decision_id"], "assessment_id": a["assessment_id"]});
                    let k = format!("k{key}");
                    let frame = frames.iter().find(|f| f.frame_id == a["frame_id"]).unwrap().clone();
                    let before: Vec<u64> = frame.read_set.iter().map(|r| {
                        let sid = r.resource_id.strip_prefix("thread:").unwrap_or("");
                        e.surface_state(sid).map_or(e.policy_revision(), |(_, rev)| rev)
                    }).collect();
                    let snapshot = e.surface_state(&frame.surface_id).map(|(s, r)| (s.clone(), r));
                    match e.commit(Wall::from_ms(now), &p, Some(&k), body.clone()) {
                        Ok(d) => {
                            let clean = d.is_clean();
                            let r = (*persist(&mut store, d)).clone();
                            let fp = validate::fingerprint(&body);
                            if let Some((old_fp, old)) = receipts.get(&(p.id.clone(), k.clone())) {
                                // A replay: the same body returns the same receipt, nothing changes.
                                prop_assert_eq!(old_fp, &fp);
                                prop_assert_eq!(old, &r);
                                prop_assert!(clean);
                            } else {
                                prop_assert_eq!(&owner, &p.id, "only the owner commits");
                                let read: Vec<u64> = frame.read_set.iter().map(|x| x.revision).collect();
                                prop_assert_eq!(&read, &before, "a commit succeeds only against current revisions");
                                prop_assert!(winners.insert((frame.surface_id.clone(), read[0])), "one winner per revision");
                                prop_assert_eq!(r.state_revision, read[0] + 1);
                                receipts.insert((p.id.clone(), k), (fp, r));
                            }
                        }
                        Err(_) => {
                            // A refusal changes nothing.
                            prop_assert_eq!(e.surface_state(&frame.surface_id).map(|(s, r)| (s.clone(), r)), snapshot);
                        }
                    }
                }
                Op::BumpPolicy => {
                    persist(&mut store, e.bump_policy());
                }
                Op::Restart => {
                    let reopened = open(&store);
                    for s in ["s1", "s2"] {
                        prop_assert_eq!(reopened.surface_state(s).map(|(x, r)| (x.clone(), r)), e.surface_state(s).map(|(x, r)| (x.clone(), r)));
                    }
                    prop_assert_eq!(reopened.policy_revision(), e.policy_revision());
                    for f in &frames {
                        prop_assert_eq!(&reopened.stored_frame(&f.frame_id).unwrap(), f);
                    }
                    e = reopened;
                }
            }
        }
        for s in ["s1", "s2"] {
            let wins = winners.iter().filter(|(x, _)| x == s).count() as u64;
            prop_assert_eq!(e.surface_state(s).unwrap().1, 1 + wins, "each win moved the revision once");
        }
    }
}
