//! Helpers shared by the actor-host tests: the `weft` binary, and (in `disk`, which names no
//! binary and which the crash tests of `tests/failpoints` include too) scratch directories and
//! an on-disk lineage checker that reads `$CHAT_ROOT` with plain serde_json (independent of the
//! core's own checker).
#![allow(dead_code)]

mod disk;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub use disk::*;
use serde_json::Value;

pub fn weft() -> Command {
    without_harness_vars(Command::new(env!("CARGO_BIN_EXE_weft")))
}

fn without_harness_vars(mut c: Command) -> Command {
    for k in [
        "ACTOR_AGENTIC_UI",
        "ACTOR_GRAPH_EPOCHS",
        "ACTOR_WAIT_GRAPH",
        "ACTOR_NODE_STORE",
        "GIT_CLOSEOUT",
        "PROJECT_INBOX",
        "PROJECT_INBOX_CHAPTERS",
    ] {
        c.env_remove(k);
    }
    c
}

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

pub fn run(args: &[&str]) -> Output {
    weft().args(args).output().expect("weft runs")
}

/// Runs and expects success; returns stdout as JSON.
pub fn run_json(args: &[&str]) -> Value {
    let out = run(args);
    assert!(
        out.status.success(),
        "weft {args:?} failed ({:?}):\n{}\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("weft {args:?}: stdout is not JSON ({e})"))
}

/// Runs and expects failure with `code` (in `--json` error output) and exit status `status`.
pub fn run_err(args: &[&str], code: &str, status: i32) -> Value {
    let out = run(args);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "weft {args:?}: stdout is not JSON ({e}): {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert_eq!(v["error"]["code"], code, "weft {args:?}: {v}");
    assert_eq!(out.status.code(), Some(status), "weft {args:?}: {v}");
    v
}
