//! `weft-failpoints actors …`: the `weft actors` commands with crash injection, for the crash
//! tests only (`tests/failpoints/tests/actors_crash.rs`). Never shipped: weft-host always has
//! the step counter but nothing in it arms one or reads these variables; this binary reads
//! `WEFT_ACTORS_CRASH_AT` (and `WEFT_ACTORS_CRASH_TEAR=1`) and arms the writer's store through
//! the hidden `actors::cli::main_with`. A binary of its own, so that no build of `weft` (which
//! shares `target/debug/weft`) can stand in for it.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use weft_host::actors;
use weft_host::actors::failpoint::Failpoint;

/// `weft actors …` with `WEFT_ACTORS_CRASH_AT` / `WEFT_ACTORS_CRASH_TEAR` honoured.
#[derive(Parser)]
#[command(name = "weft-failpoints", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// The actor commands of `weft`, aborting at the durability step the environment names.
    Actors(actors::cli::ActorsArgs),
}

/// The failpoint the environment names: `WEFT_ACTORS_CRASH_AT=<step>` (counted from 1), torn
/// with `WEFT_ACTORS_CRASH_TEAR=1`; none without a step.
fn failpoint_from_env() -> Option<Failpoint> {
    let at_step = std::env::var("WEFT_ACTORS_CRASH_AT").ok()?.parse().ok()?;
    let tear = std::env::var("WEFT_ACTORS_CRASH_TEAR").is_ok_and(|v| v == "1");
    Some(Failpoint { at_step, tear })
}

fn main() -> ExitCode {
    let Command::Actors(args) = Cli::parse().command;
    let failpoint = failpoint_from_env();
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
        .block_on(actors::cli::main_with(args, failpoint))
}
