//! `weft-failpoints actors …`: the `weft actors` commands with crash injection, for the crash
//! tests only (`node-host/tests/actors_crash.rs`). Built only with the `failpoints` feature and
//! never shipped; a binary of its own so that no default build of `weft` (which shares
//! `target/debug/weft`) can stand in for it.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use weft_host::actors;

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

fn main() -> ExitCode {
    let Command::Actors(args) = Cli::parse().command;
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
        .block_on(actors::cli::main(args))
}
