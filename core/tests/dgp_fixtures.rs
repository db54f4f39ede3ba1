//! The DGP 0.1 example messages (`../shared/fixtures/dgp/examples`, from the public reference
//! repository) parse into weft's wire types and serialize back to equivalent JSON.

use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use weft_core::frames::types::*;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/dgp/examples")
}

fn round_trip<T: DeserializeOwned + Serialize>(file: &str) {
    let text = std::fs::read_to_string(dir().join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
    let original: Value = serde_json::from_str(&text).unwrap();
    let typed: T = serde_json::from_value(original.clone())
        .unwrap_or_else(|e| panic!("{file} does not parse: {e}"));
    let back = serde_json::to_value(&typed).unwrap();
    assert_eq!(
        back, original,
        "{file} does not serialize back equivalently"
    );
}

#[test]
fn every_example_round_trips_through_the_core_types() {
    let index: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string(dir().join("fixture-index.json")).unwrap())
            .unwrap();
    assert_eq!(index.len(), 11);
    for entry in index {
        let file = entry["file"].as_str().unwrap();
        match entry["schema"].as_str().unwrap() {
            "Manifest" => round_trip::<Manifest>(file),
            "Frame" => round_trip::<Frame>(file),
            "AssessmentRequest" => round_trip::<AssessmentRequest>(file),
            "Assessment" => round_trip::<Assessment>(file),
            "CommitRequest" => round_trip::<CommitRequest>(file),
            "Receipt" => round_trip::<Receipt>(file),
            "Graph" => round_trip::<Graph>(file),
            other => panic!("no type for schema {other}"),
        }
    }
}

#[test]
fn examples_with_unknown_fields_or_another_version_do_not_parse() {
    let text = std::fs::read_to_string(dir().join("05-commit-request.json")).unwrap();
    let mut v: Value = serde_json::from_str(&text).unwrap();
    v["force"] = Value::Bool(true);
    assert!(serde_json::from_value::<CommitRequest>(v.clone()).is_err());
    v.as_object_mut().unwrap().remove("force");
    v["dgp"] = Value::String("0.2".into());
    assert!(serde_json::from_value::<CommitRequest>(v).is_err());
    let text = std::fs::read_to_string(dir().join("11-frame-image.json")).unwrap();
    let mut v: Value = serde_json::from_str(&text).unwrap();
    v["observations"][2]["content"] = Value::String("a caption".into());
    let frame: Frame = serde_json::from_value(v).unwrap();
    let e = weft_core::frames::validate::check_evidence(&frame.observations[2]).unwrap_err();
    assert!(e.contains("both content and blob"), "{e}");
}
