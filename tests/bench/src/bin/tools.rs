//! Scheduling overhead of the agent session per tool call, natively.
//!
//! Each turn: a task arrives, the model selects N calls (instant handlers: every `StartCall`
//! is settled at once with a value), the results enter the transcript in model order, and the
//! model answers with text. The figure is the session's own cost: (time per turn with N calls −
//! time per turn with no calls) / N, for all-parallel, all-exclusive and alternating steps; each
//! figure is the best of three runs.
//! Run: `cargo run --release -p weft-bench --bin tools`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use weft_core::tools::{
    ModelResponse, Output, Session, SessionConfig, Settlement, StepId, ToolCall, ToolDecl,
};

#[derive(Clone, Copy)]
enum Pattern {
    Parallel,
    Exclusive,
    Alternating,
}

fn session() -> Session<Value> {
    let mut s = Session::new(SessionConfig::new("bench"));
    let schema =
        json!({"type": "object", "properties": {"i": {"type": "integer"}}, "required": ["i"]});
    s.register_tool(ToolDecl::new("par", "parallel", schema.clone()).parallel(true))
        .unwrap();
    s.register_tool(ToolDecl::new("exc", "exclusive", schema))
        .unwrap();
    s
}

fn calls(n: usize, p: Pattern) -> Vec<ToolCall> {
    (0..n)
        .map(|i| {
            let tool = match p {
                Pattern::Parallel => "par",
                Pattern::Exclusive => "exc",
                Pattern::Alternating if i % 2 == 0 => "par",
                Pattern::Alternating => "exc",
            };
            ToolCall::new(format!("c{i}"), tool, json!({"i": i}))
        })
        .collect()
}

/// Runs `turns` turns with `n` calls each; returns the elapsed time.
fn run(turns: usize, n: usize, p: Pattern) -> Duration {
    let template = calls(n, p);
    let mut s = session();
    let mut now = 0;
    let mut starts = Vec::with_capacity(n);
    let t0 = Instant::now();
    for t in 0..turns {
        // A fresh session now and then keeps the transcript (memory) bounded.
        if t % 256 == 255 {
            s = session();
        }
        now += 1;
        s.submit_task(weft_core::Mono::from_ms(now), json!("task"));
        let mut step = StepId(0);
        for o in s.drain_outputs() {
            if let Output::ModelRequest { step: st, .. } = o {
                step = st;
            }
        }
        let response = if n == 0 {
            ModelResponse::text("nothing to do")
        } else {
            ModelResponse::calls(template.clone())
        };
        s.on_model_response(weft_core::Mono::from_ms(now), step, response)
            .unwrap();
        loop {
            starts.clear();
            let mut next = None;
            for o in s.drain_outputs() {
                match o {
                    Output::StartCall { invocation, .. } => starts.push(invocation),
                    Output::ModelRequest { step, .. } => next = Some(step),
                    _ => {}
                }
            }
            if let Some(step) = next {
                s.on_model_response(
                    weft_core::Mono::from_ms(now),
                    step,
                    ModelResponse::text("done"),
                )
                .unwrap();
                s.drain_outputs().for_each(drop);
                break;
            }
            if starts.is_empty() {
                break;
            }
            for &inv in &starts {
                s.on_call_settled(
                    weft_core::Mono::from_ms(now),
                    inv,
                    Settlement::Returned(json!(inv.0)),
                )
                .unwrap();
            }
        }
        black_box(s.history().len());
    }
    t0.elapsed()
}

fn main() {
    let budget = Duration::from_millis(250);
    println!("agent session scheduling overhead per tool call (native, instant handlers)");
    println!(
        "{:<12} {:>6} {:>14} {:>16} {:>16}",
        "pattern", "calls", "turns", "µs per turn", "µs per call"
    );
    // The cost of a turn without calls (task, one model step, turn end).
    let base = {
        let turns = 20_000;
        run(1000, 0, Pattern::Parallel);
        (0..3)
            .map(|_| run(turns, 0, Pattern::Parallel).as_secs_f64() * 1e6 / turns as f64)
            .fold(f64::INFINITY, f64::min)
    };
    println!(
        "{:<12} {:>6} {:>14} {:>16.2} {:>16}",
        "(no calls)", 0, 20_000, base, "-"
    );
    for p in [Pattern::Parallel, Pattern::Exclusive, Pattern::Alternating] {
        let name = match p {
            Pattern::Parallel => "parallel",
            Pattern::Exclusive => "exclusive",
            Pattern::Alternating => "alternating",
        };
        let mut per_turn_of = [0.0f64; 3];
        for (k, n) in [1usize, 8, 64].into_iter().enumerate() {
            // Calibrate the number of turns to the time budget; best of three runs (the
            // machine may be shared: take the least disturbed run).
            let mut probe_turns = 50;
            let mut probe = run(probe_turns, n, p);
            while probe < Duration::from_millis(20) {
                probe_turns *= 4;
                probe = run(probe_turns, n, p);
            }
            let turns = ((budget.as_secs_f64() / probe.as_secs_f64()) * probe_turns as f64)
                .max(50.0) as usize;
            let per_turn = (0..3)
                .map(|_| run(turns, n, p).as_secs_f64() * 1e6 / turns as f64)
                .fold(f64::INFINITY, f64::min);
            per_turn_of[k] = per_turn;
            let per_call = (per_turn - base).max(0.0) / n as f64;
            println!("{name:<12} {n:>6} {turns:>14} {per_turn:>16.2} {per_call:>16.3}");
        }
        let marginal = (per_turn_of[2] - per_turn_of[1]) / 56.0;
        println!(
            "{name:<12} marginal cost of one more call in a step (64 vs 8 calls): {marginal:.3} µs"
        );
    }
    println!(
        "µs per call = (turn with N calls − turn without calls) / N; a turn with calls has a second model step, amortized over N."
    );
    println!("target: < 5 µs per call natively");
}
