//! Registry throughput: submit → progress → succeed N in-process jobs with full journals, none
//! released (the block ending at N has N jobs retained). Prints jobs/s, journal events/s, the
//! jobs/s of the 10k-job blocks ending at 10k, 100k and 1M retained (when N reaches them: flat
//! means per-job cost does not grow with what is retained), heap bytes per retained job and
//! allocations per job (reallocations counted; the test's own messages included).
//!
//!     cargo run --release -p weft-bench --bin registry [-- N]

use std::time::Instant;

use serde_json::json;
use weft_bench::{Counting, allocations, live_bytes};
use weft_core::jobs::{EndpointSpec, Hello, Registry, Submit};

#[global_allocator]
static ALLOC: Counting = Counting;

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000);
    const BLOCK: u64 = 10_000;
    let marks: Vec<u64> = [10_000, 100_000, 1_000_000]
        .into_iter()
        .filter(|m| *m <= n)
        .collect();
    // Per mark, the fastest block over the rounds (seconds).
    let mut blocks = vec![f64::MAX; marks.len()];
    let mut best = f64::MAX;
    let mut report = String::new();
    for round in 0..3 {
        let before = live_bytes();
        let allocs_before = allocations();
        let mut reg = Registry::default();
        let mut spec = EndpointSpec::new("app", "in-process");
        spec.hello = Hello::Skip;
        let ep = reg.open_endpoint(weft_core::Mono::from_ms(0), spec);
        let progress = json!({"id": 0, "type": "progress", "value": 0.5});
        let t = Instant::now();
        let mut tb = Instant::now();
        for i in 0..n {
            let job = reg
                .submit(
                    weft_core::Mono::from_ms(i),
                    Submit::new("agent", ep, json!({"n": i})),
                )
                .unwrap()
                .job;
            let wire = reg.job(job).unwrap().wire_id.unwrap();
            let mut p = progress.clone();
            p["id"] = json!(wire);
            reg.on_message(weft_core::Mono::from_ms(i), ep, &p).unwrap();
            reg.on_message(
                weft_core::Mono::from_ms(i),
                ep,
                &json!({"id": wire, "type": "done", "value": i}),
            )
            .unwrap();
            reg.drain_outputs().for_each(drop);
            if (i + 1) % BLOCK == 0 {
                if let Some(k) = marks.iter().position(|m| *m == i + 1) {
                    blocks[k] = blocks[k].min(tb.elapsed().as_secs_f64());
                }
                tb = Instant::now();
            }
        }
        let secs = t.elapsed().as_secs_f64();
        let events = reg.events_recorded();
        let retained = live_bytes() - before;
        let allocs = allocations() - allocs_before;
        assert_eq!(reg.jobs().count() as u64, n);
        if secs < best {
            best = secs;
            report = format!(
                "registry (native): {n} jobs, {events} journal events in {:.1} ms: {:.0} jobs/s, {:.0} events/s; \
                 {:.0} heap bytes per retained job (journal + completion note), {:.2} allocations per job",
                secs * 1e3,
                n as f64 / secs,
                events as f64 / secs,
                retained as f64 / n as f64,
                allocs as f64 / n as f64
            );
        }
        eprintln!("round {round}: {:.1} ms", secs * 1e3);
        drop(reg);
    }
    let marks: Vec<String> = marks
        .iter()
        .zip(&blocks)
        .map(|(m, s)| {
            let at = if *m >= 1_000_000 {
                format!("{}M", m / 1_000_000)
            } else {
                format!("{}k", m / 1000)
            };
            format!("{at} {:.0}k", BLOCK as f64 / s / 1e3)
        })
        .collect();
    println!(
        "{report}; jobs/s in the 10k-job block ending at {} retained",
        marks.join(", ")
    );
}
