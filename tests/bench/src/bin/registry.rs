//! Registry throughput: submit → progress → succeed N in-process jobs with full journals.
//! Prints jobs/s, journal events/s and heap bytes per retained job.
//!
//!     cargo run --release -p weft-bench --bin registry [-- N]

use std::time::Instant;

use serde_json::json;
use weft_bench::{Counting, live_bytes};
use weft_core::jobs::{EndpointSpec, Hello, Registry, Submit};

#[global_allocator]
static ALLOC: Counting = Counting;

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000);
    let mut best = f64::MAX;
    let mut report = String::new();
    for round in 0..3 {
        let before = live_bytes();
        let mut reg = Registry::default();
        let mut spec = EndpointSpec::new("app", "in-process");
        spec.hello = Hello::Skip;
        let ep = reg.open_endpoint(weft_core::Mono::from_ms(0), spec);
        let progress = json!({"id": 0, "type": "progress", "value": 0.5});
        let t = Instant::now();
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
        }
        let secs = t.elapsed().as_secs_f64();
        let events = reg.events_recorded();
        let retained = live_bytes() - before;
        assert_eq!(reg.jobs().count() as u64, n);
        if secs < best {
            best = secs;
            report = format!(
                "registry (native): {n} jobs, {events} journal events in {:.1} ms: {:.0} jobs/s, {:.0} events/s; \
                 {:.0} heap bytes per retained job (journal + completion note)",
                secs * 1e3,
                n as f64 / secs,
                events as f64 / secs,
                retained as f64 / n as f64
            );
        }
        eprintln!("round {round}: {:.1} ms", secs * 1e3);
        drop(reg);
    }
    println!("{report}");
}
