//! `weft`: the native host's CLI. Every subcommand drives weft-core; none holds a rule.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use weft_host::{actors, agent, chat, run, serve};

/// weft — a portable runtime for applications that people and agents drive together.
#[derive(Parser)]
#[command(name = "weft", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a worker script as a child process (JSON lines on stdio) and follow its job.
    Run(run::RunArgs),
    /// Serve ThreadDesk over the DGP 0.1 HTTP binding (SQLite storage, bearer tokens).
    Serve(serve::ServeArgs),
    /// Drive DGP surfaces as an agent: read frames, judge, assess, commit; stop for humans.
    Agent(agent::AgentArgs),
    /// Agent chat as a persisted graph of actor nodes ($CHAT_ROOT): spawn, route, status, audit, desk.
    Actors(actors::cli::ActorsArgs),
    /// Send one user message to a node's agent and stream the model's reply.
    Chat(chat::ChatArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // A one-shot actor command (all but `desk`) runs on this thread: no runtime, no worker
    // threads to start and join for a process that lives a few milliseconds.
    let cli = match cli.command {
        Command::Actors(args) if args.command.is_one_shot() => {
            return actors::cli::main_one_shot(args);
        }
        command => Cli { command },
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    rt.block_on(async {
        match cli.command {
            Command::Run(args) => run::main(args).await,
            Command::Serve(args) => serve::main(args).await,
            Command::Agent(args) => agent::main(args).await,
            Command::Actors(args) => actors::cli::main(args).await,
            Command::Chat(args) => chat::main(args).await,
        }
    })
}
