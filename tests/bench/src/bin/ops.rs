//! Operation overhead: N `observe` round trips, each one write and one synchronous cell —
//! observe → flush → the host computes the cell → the operation settles → its outcome is read.
//! Two paths: the core API (outcome record), and the published `observe` tool (JSON reply, what
//! an agent receives). Prints operations/s and heap bytes per retained operation (its write
//! receipt, calculation record and journal, operation record and journal, outcome) with
//! retention unbounded, and the heap the app holds after N round trips under the default
//! retention (1024 of each record).
//!
//!     cargo run --release -p weft-bench --bin ops [-- N]

use std::time::Instant;

use serde_json::{Value, json};
use weft_bench::{Counting, live_bytes};
use weft_core::jobs::{Registry, RegistryConfig};
use weft_core::ops::tools::ToolReply;
use weft_core::ops::{
    Actor, App, AppConfig, AppOutput, GraphSpec, ObserveRequest, OpOutcomeKind, Retention,
    Selection,
};

#[global_allocator]
static ALLOC: Counting = Counting;

/// The app and, beside it, the job registry it borrows per call.
fn app(retention: Retention) -> (App<Value>, Registry<Value>) {
    let spec: GraphSpec = serde_json::from_value(json!({
        "controls": [{"name": "x", "type": "number", "min": 0, "max": 1e12, "value": 0}],
        "cells": [{"name": "y", "deps": ["x"]}]
    }))
    .unwrap();
    let mut app = App::new(AppConfig {
        retention,
        ..AppConfig::default()
    });
    let mut reg = Registry::new(RegistryConfig::default());
    app.load(weft_core::Mono::from_ms(0), &mut reg, spec)
        .unwrap();
    drive(&mut app, &mut reg, 0);
    (app, reg)
}

/// The host: computes every requested cell synchronously (y = 2x); returns settled operations.
fn drive(app: &mut App<Value>, reg: &mut Registry<Value>, now: u64) -> usize {
    let mut settled = 0;
    while let Some(o) = app.poll_output() {
        match o {
            AppOutput::Compute { calc, inputs, .. } => {
                let x = inputs["x"].as_f64().unwrap();
                app.calc_done(weft_core::Mono::from_ms(now), reg, calc, json!(2.0 * x))
                    .unwrap();
            }
            AppOutput::OpFinished { outcome, .. } => {
                assert_eq!(outcome, OpOutcomeKind::Settled);
                settled += 1;
            }
            _ => {}
        }
    }
    settled
}

fn core_path(n: u64, retention: Retention) -> (f64, usize) {
    let (mut app, mut reg) = app(retention);
    let before = live_bytes();
    let t = Instant::now();
    for i in 1..=n {
        let mut req = ObserveRequest::new(vec![("x".to_owned(), json!(i))], vec!["y".to_owned()]);
        req.select = Selection::Outputs(vec!["y".to_owned()]);
        let op = app
            .observe(weft_core::Mono::from_ms(i), &mut reg, req)
            .unwrap();
        app.flush(weft_core::Mono::from_ms(i), &mut reg);
        assert_eq!(drive(&mut app, &mut reg, i), 1);
        let out = app.operation(op).unwrap().outcome.as_ref().unwrap();
        assert_eq!(out.result.as_ref().unwrap()["y"], json!(2.0 * i as f64));
    }
    let secs = t.elapsed().as_secs_f64();
    let retained = live_bytes() - before;
    let kept = app.retained().2 as u64;
    assert_eq!(kept, n.min((retention.operations as u64).saturating_add(1)));
    (secs, retained)
}

fn tool_path(n: u64) -> f64 {
    let (mut app, mut reg) = app(Retention::default());
    let t = Instant::now();
    for i in 1..=n {
        let args = json!({"writes": {"x": i}, "waitFor": ["y"], "select": ["y"]});
        let reply = app
            .call_tool(
                weft_core::Mono::from_ms(i),
                &mut reg,
                "observe",
                &args,
                Actor::new("agent"),
            )
            .unwrap();
        let ToolReply::Wait { op, .. } = reply else {
            panic!("a host cell needs the host")
        };
        // The host computes the cell; the app replies to the call itself (`ToolReplied`).
        let mut replies = Vec::new();
        while let Some(o) = app.poll_output() {
            match o {
                AppOutput::Compute { calc, inputs, .. } => {
                    let x = inputs["x"].as_f64().unwrap();
                    app.calc_done(weft_core::Mono::from_ms(i), &mut reg, calc, json!(2.0 * x))
                        .unwrap();
                }
                AppOutput::ToolReplied { op: id, reply, .. } if id == op => {
                    replies.push(reply.unwrap());
                }
                _ => {}
            }
        }
        assert_eq!(replies.len(), 1);
        assert_eq!(replies[0]["outcome"], "settled");
    }
    t.elapsed().as_secs_f64()
}

fn main() {
    if std::env::var_os("ONLY_CORE").is_some() {
        for _ in 0..5 {
            let (s, _) = core_path(30000, Retention::unbounded());
            eprintln!("{:.0}", 30000.0 / s);
        }
        return;
    }
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_000);
    let mut best_core = f64::MAX;
    let mut best_tool = f64::MAX;
    let mut per_op = 0.0;
    let (_, bounded) = core_path(n, Retention::default());
    for round in 0..3 {
        let (secs, retained) = core_path(n, Retention::unbounded());
        if round == 0 {
            per_op = retained as f64 / n as f64;
        }
        best_core = best_core.min(secs);
        let tsecs = tool_path(n);
        best_tool = best_tool.min(tsecs);
        eprintln!(
            "round {round}: core {:.1} ms, tool {:.1} ms",
            secs * 1e3,
            tsecs * 1e3
        );
    }
    println!(
        "ops (native): {n} observe round trips (one write, one synchronous cell): core API {:.0} ops/s ({:.2} µs each), \
         observe tool with JSON reply {:.0} ops/s ({:.2} µs each); {:.0} heap bytes per retained operation \
         (write receipt + calculation + operation records and journals, retention unbounded); \
         {:.0} KiB held after {n} round trips under the default retention (1024 of each record)",
        n as f64 / best_core,
        best_core * 1e6 / n as f64,
        n as f64 / best_tool,
        best_tool * 1e6 / n as f64,
        per_op,
        bounded as f64 / 1024.0
    );
}
