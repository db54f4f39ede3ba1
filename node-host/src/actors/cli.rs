//! `weft actors <command> <root>`: the actor graph from the command line.
//!
//! Writers (`init`, `spawn`, `message`, `route`, `status --set`, `resolve`, `ref`, `narrate`,
//! `wait`, `bookmark`, `epoch`, `archive`, `reset`, `export`, `recover`) take the root's writer
//! lock (waiting `--lock-timeout-ms`), recover what a crashed writer left, perform the change
//! durably and print the result once the store has acknowledged it. Readers (`graph`, `status`
//! without `--set`, `audit`) take no lock. `--json` prints one JSON document on stdout; errors
//! are `{"error": {"code", "message"}}`.
//!
//! Exit status: 0 done; 1 refused by a rule (`ROUTING_PAUSED`, `NOT_PERSISTED`, ...); 64 bad
//! arguments (`INVALID_NODE_ID`, `CONFIG_INVALID`, ...); 66 no actor graph at the root;
//! 74 I/O error; 75 another writer holds the root.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use serde_json::{Value, json};
use weft_core::actors::time::{format_rfc3339, parse_timestamp};
use weft_core::actors::{
    ActorsError, Candidate, GitCloseout, HarnessConfig, HeuristicProposer, NewLine, NodeType,
    RelatedKind, Role, RouteOutcome, Scope, SpawnOutcome, SpawnRequest, Status, Trigger, WaitMode,
};

use weft_core::actors::proposer::{
    DecidedProposer, ProposalContext, parse_proposal, proposal_request,
};

use super::failpoint::Failpoint;
use super::{Session, config_from_env, wall_ms};

/// Arguments of `weft actors`.
#[derive(clap::Args, Debug)]
pub struct ActorsArgs {
    #[command(subcommand)]
    pub command: ActorsCommand,
}

/// Options every command takes.
#[derive(clap::Args, Debug, Clone)]
pub struct Common {
    /// The `$CHAT_ROOT` directory.
    pub root: PathBuf,
    /// Print one JSON document on stdout.
    #[arg(long)]
    pub json: bool,
    /// How long a writer waits for another writer to release the root (ms).
    #[arg(long, default_value_t = 10_000)]
    pub lock_timeout_ms: u64,
}

/// The `weft actors` commands.
#[derive(clap::Subcommand, Debug)]
pub enum ActorsCommand {
    /// Create a graph: the root coordinator, graph.json and the metathread.
    Init {
        #[command(flatten)]
        c: Common,
        /// The session title.
        #[arg(long, default_value = "Session")]
        title: String,
    },
    /// Spawn a child node (a user gesture); prints it once its lineage is durable.
    Spawn {
        #[command(flatten)]
        c: Common,
        #[arg(long, default_value = "coordinator")]
        parent: String,
        /// task, discussion, disambiguation, or another type.
        #[arg(long = "type", default_value = "task")]
        node_type: String,
        /// The child id (derived from the title when absent).
        #[arg(long)]
        id: Option<String>,
        #[arg(long, default_value = "")]
        title: String,
        #[arg(long, default_value = "")]
        topic: String,
        #[arg(long, default_value = "")]
        reason: String,
        /// coordinator-batch, commit-only, per-node or off (default: the policy).
        #[arg(long)]
        git_closeout: Option<String>,
        /// A wait subscription, `node` or `node:enforce` (repeatable).
        #[arg(long = "wait-on")]
        wait_on: Vec<String>,
        /// Spawn this many children in one batch (a wave: the same three durable rounds as
        /// one spawn). With `--id`, the ids are `<id>-1` … `<id>-N`; prints a JSON array.
        #[arg(long, default_value_t = 1)]
        count: usize,
    },
    /// Append a line to a node's chat.
    Message {
        #[command(flatten)]
        c: Common,
        #[arg(long)]
        node: String,
        /// The text; `-` reads it from stdin.
        #[arg(long)]
        text: String,
        /// user, assistant, system, tool, progress, completion.
        #[arg(long, default_value = "user")]
        role: String,
        #[arg(long)]
        tokens: Option<u64>,
        /// The node the line comes from.
        #[arg(long)]
        from: Option<String>,
    },
    /// Route a user utterance: continue, spawn a child (drift or policy) or disambiguate.
    Route {
        #[command(flatten)]
        c: Common,
        #[arg(long)]
        node: String,
        #[arg(long)]
        text: String,
        /// Who proposes a spawn: `heuristic` (deterministic drift keywords) or `model` (the
        /// model of --model proposes; without a configured model it says so and the
        /// heuristic decides).
        #[arg(long, default_value = "heuristic")]
        proposer: String,
        #[command(flatten)]
        model: crate::model::ModelFlags,
    },
    /// Show mailboxes (all nodes, or one with --node); with --set, update one.
    Status {
        #[command(flatten)]
        c: Common,
        #[arg(long)]
        node: Option<String>,
        /// idle, running, blocked, awaiting_user, done, failed, cancelled.
        #[arg(long)]
        set: Option<String>,
        #[arg(long)]
        summary: Option<String>,
        #[arg(long)]
        awaiting_user: Option<bool>,
    },
    /// Print the graph: every node with its type, spawnedBy and spawned list.
    Graph {
        #[command(flatten)]
        c: Common,
        /// graph, tree, grid, linear, temporal, metathread.
        #[arg(long, default_value = "graph")]
        view: String,
        /// For --view temporal: the time to replay (RFC 3339).
        #[arg(long)]
        at: Option<String>,
        /// For --view temporal: `global` or `node:<id>`.
        #[arg(long, default_value = "global")]
        scope: String,
        /// For --view linear: the focused node.
        #[arg(long)]
        node: Option<String>,
    },
    /// Walk the metathread's refs and peek at each referenced line; writes orchestrator/index.json
    /// when the root is not held by another writer.
    Audit {
        #[command(flatten)]
        c: Common,
    },
    /// Write thread.jsonl (a merged export, never read back) and orchestrator/index.json.
    Export {
        #[command(flatten)]
        c: Common,
    },
    /// Resolve a disambiguation: --continue, --into <existing child>, --new <type>:<title>.
    Resolve {
        #[command(flatten)]
        c: Common,
        #[arg(long)]
        node: String,
        #[arg(long = "continue")]
        continue_parent: bool,
        #[arg(long)]
        into: Vec<String>,
        #[arg(long = "new")]
        new: Vec<String>,
        #[arg(long, default_value = "")]
        note: String,
    },
    /// Add a metathread ref to a line of a node.
    Ref {
        #[command(flatten)]
        c: Common,
        #[arg(long)]
        node: String,
        #[arg(long)]
        line: u64,
        #[arg(long, default_value = "")]
        summary: String,
    },
    /// Add a coordinator narrative line to the metathread.
    Narrate {
        #[command(flatten)]
        c: Common,
        #[arg(long)]
        text: String,
    },
    /// Declare (or with --mode none remove) a wait subscription.
    Wait {
        #[command(flatten)]
        c: Common,
        #[arg(long)]
        node: String,
        #[arg(long)]
        on: String,
        /// warn, enforce, or none.
        #[arg(long, default_value = "warn")]
        mode: String,
    },
    /// Add a related edge (references, soft-dependency, waits-on).
    Relate {
        #[command(flatten)]
        c: Common,
        #[arg(long)]
        from: String,
        #[arg(long)]
        to: String,
        #[arg(long, default_value = "references")]
        kind: String,
    },
    /// Add a timeline bookmark.
    Bookmark {
        #[command(flatten)]
        c: Common,
        #[arg(long, default_value = "global")]
        scope: String,
        #[arg(long, default_value = "")]
        text: String,
        #[arg(long = "keyword")]
        keywords: Vec<String>,
    },
    /// Snapshot the grid into views/epoch-N.json (ACTOR_GRAPH_EPOCHS=on).
    Epoch {
        #[command(flatten)]
        c: Common,
        #[arg(long, default_value = "")]
        reason: String,
        #[arg(long = "node")]
        nodes: Vec<String>,
    },
    /// Archive (hide) a node, or restore it with --restore. Nothing is deleted.
    Archive {
        #[command(flatten)]
        c: Common,
        #[arg(long)]
        node: String,
        #[arg(long)]
        restore: bool,
    },
    /// Global reset: archive nodes idle before a time (RFC 3339). Nothing is deleted.
    Reset {
        #[command(flatten)]
        c: Common,
        #[arg(long)]
        before: String,
    },
    /// Open as writer and recover what a crashed writer left; print what was found.
    Recover {
        #[command(flatten)]
        c: Common,
    },
    /// Serve the desk (HTTP API and browser UI) for this root.
    Desk {
        #[command(flatten)]
        c: Common,
        /// The address to listen on (port 0 picks a free port; the URL is printed).
        #[arg(long, default_value = "127.0.0.1:8787")]
        listen: String,
        /// Who proposes spawns on `route`: `heuristic` or `model` (see --model).
        #[arg(long, default_value = "heuristic")]
        proposer: String,
        #[command(flatten)]
        model: crate::model::ModelFlags,
    },
}

impl ActorsCommand {
    /// Whether the command runs once and exits (every command but `desk`, which serves).
    pub fn is_one_shot(&self) -> bool {
        !matches!(self, ActorsCommand::Desk { .. })
    }

    /// The options every command has.
    pub fn common(&self) -> &Common {
        match self {
            ActorsCommand::Init { c, .. }
            | ActorsCommand::Spawn { c, .. }
            | ActorsCommand::Message { c, .. }
            | ActorsCommand::Route { c, .. }
            | ActorsCommand::Status { c, .. }
            | ActorsCommand::Graph { c, .. }
            | ActorsCommand::Audit { c }
            | ActorsCommand::Export { c }
            | ActorsCommand::Resolve { c, .. }
            | ActorsCommand::Ref { c, .. }
            | ActorsCommand::Narrate { c, .. }
            | ActorsCommand::Wait { c, .. }
            | ActorsCommand::Relate { c, .. }
            | ActorsCommand::Bookmark { c, .. }
            | ActorsCommand::Epoch { c, .. }
            | ActorsCommand::Archive { c, .. }
            | ActorsCommand::Reset { c, .. }
            | ActorsCommand::Recover { c }
            | ActorsCommand::Desk { c, .. } => c,
        }
    }
}

/// The exit status of a failed actor command (`weft actors …`, `weft chat`), by error.
pub(crate) fn exit_code(e: &ActorsError) -> u8 {
    match e {
        ActorsError::InvalidArgument(_)
        | ActorsError::InvalidNodeId { .. }
        | ActorsError::Config { .. } => 64,
        ActorsError::NotInitialized => 66,
        ActorsError::StoreIo(_)
        | ActorsError::SymlinkRefused(_)
        | ActorsError::HardLinkRefused(_) => 74,
        ActorsError::StoreLocked(_) => 75,
        _ => 1,
    }
}

fn fail(e: &ActorsError, json: bool) -> ExitCode {
    if json {
        println!(
            "{}",
            json!({"error": {"code": e.code(), "message": e.to_string()}})
        );
    }
    eprintln!("weft actors: error[{}]: {e}", e.code());
    ExitCode::from(exit_code(e))
}

fn parse_type(s: &str) -> Result<NodeType, ActorsError> {
    if s.trim().is_empty() || s.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(ActorsError::InvalidArgument(format!("node type {s:?}")));
    }
    Ok(NodeType::parse(s))
}

fn parse_closeout(s: &str) -> Result<GitCloseout, ActorsError> {
    match GitCloseout::parse(s) {
        GitCloseout::Other(v) => Err(ActorsError::InvalidArgument(format!(
            "--git-closeout {v} (expected {})",
            GitCloseout::KNOWN.join(", ")
        ))),
        c => Ok(c),
    }
}

fn parse_mode(s: &str) -> Result<Option<WaitMode>, ActorsError> {
    match s {
        "none" => Ok(None),
        "warn" => Ok(Some(WaitMode::Warn)),
        "enforce" => Ok(Some(WaitMode::Enforce)),
        _ => Err(ActorsError::InvalidArgument(format!(
            "wait mode `{s}` (expected warn, enforce or none)"
        ))),
    }
}

fn spawn_json(o: &SpawnOutcome, s: &Session) -> Value {
    json!({
        "id": o.child, "type": o.node_type, "parent": o.parent,
        "address": s.graph.node(o.child.as_str()).map(|n| n.address.clone()),
        "markerLine": o.marker_line, "childLine": o.child_line, "gitCloseout": o.git_closeout,
        "pausedParent": o.paused_parent, "batch": o.batch,
    })
}

/// Runs `weft actors …`.
pub async fn main(args: ActorsArgs) -> ExitCode {
    main_with(args, None).await
}

/// Runs a one-shot `weft actors …` command (every command but `desk`) on the calling thread,
/// outside any Tokio runtime: the store is synchronous, so a one-shot command needs no runtime
/// and no worker threads to start and join (`route --proposer model` starts a current-thread
/// runtime for its one model call). `weft` calls this for those commands, [`main`] for `desk`.
pub fn main_one_shot(args: ActorsArgs) -> ExitCode {
    one_shot(args, None)
}

/// [`main`] with the writer's store armed with `failpoint` (the process aborts at that
/// durability step). For the crash tests only: the `weft-failpoints` binary of
/// `tests/failpoints` calls it; the shipped `weft` runs [`main_one_shot`] and [`main`], which arm
/// nothing.
#[doc(hidden)]
pub async fn main_with(args: ActorsArgs, failpoint: Option<Failpoint>) -> ExitCode {
    if args.command.is_one_shot() {
        return match tokio::task::spawn_blocking(move || one_shot(args, failpoint)).await {
            Ok(code) => code,
            Err(e) => {
                eprintln!("weft actors: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let json = args.command.common().json;
    let config = match configured(json) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let ActorsCommand::Desk {
        c,
        listen,
        proposer,
        model,
    } = args.command
    else {
        unreachable!("one-shot commands ran above")
    };
    let proposer = match route_model(&proposer, &model) {
        Ok(p) => p,
        Err(e) => return fail(&e, json),
    };
    match crate::desk::serve_root(
        &c.root,
        config,
        &listen,
        Duration::from_millis(c.lock_timeout_ms),
        proposer,
        failpoint,
    )
    .await
    {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&e, json),
    }
}

/// The harness configuration from the environment, its notes printed; a bad value is the
/// command's failure (in `--json` form when asked).
fn configured(json: bool) -> Result<HarnessConfig, ExitCode> {
    let (config, notes) = config_from_env().map_err(|e| fail(&e, json))?;
    for n in &notes {
        eprintln!("weft actors: note: {n}");
    }
    Ok(config)
}

/// A one-shot command (not `desk`), synchronously on this thread: the configuration, the
/// command, its output.
fn one_shot(args: ActorsArgs, failpoint: Option<Failpoint>) -> ExitCode {
    let json = args.command.common().json;
    let config = match configured(json) {
        Ok(c) => c,
        Err(code) => return code,
    };
    if config.node_store == weft_core::actors::NodeStoreMode::Off {
        return fail(
            &ActorsError::InvalidArgument(
                "ACTOR_NODE_STORE=off: nothing would persist; the CLI needs a store".into(),
            ),
            json,
        );
    }
    match run(args.command, config, failpoint) {
        Ok((v, human)) => {
            if json {
                println!("{}", serde_json::to_string_pretty(&v).expect("serializes"));
            } else {
                println!("{human}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => fail(&e, json),
    }
}

/// The model `--proposer model` asks, or `None` for the heuristic (asked for, or no model
/// configured: then a note says so on stderr). Also `weft serve --desk-proposer`.
pub(crate) fn route_model(
    proposer: &str,
    flags: &crate::model::ModelFlags,
) -> Result<Option<crate::model::ReqwestModel>, ActorsError> {
    match proposer {
        "heuristic" => Ok(None),
        "model" => match weft_core::model::ModelConfig::resolve(&flags.choice())? {
            Some(c) => Ok(Some(crate::model::ReqwestModel::new(c)?)),
            None => {
                eprintln!(
                    "weft actors: note: no model configured ({}): {}; the keyword heuristic \
                     proposes instead",
                    weft_core::model::NO_MODEL_CONFIGURED,
                    weft_core::model::builtin::HOW_TO_CONFIGURE
                );
                Ok(None)
            }
        },
        other => Err(ActorsError::InvalidArgument(format!(
            "unknown proposer `{other}` (heuristic or model)"
        ))),
    }
}

/// Asks `model` for the proposal of `text` in `node` (the rules are the core's:
/// `proposal_request`, `parse_proposal`); `None` where `route` consults no proposer. Runs on a
/// blocking thread of the runtime, or outside any runtime (then on a current-thread runtime of
/// its own).
fn propose_with_model(
    model: &crate::model::ReqwestModel,
    s: &Session,
    node: &str,
    text: &str,
) -> Result<Option<DecidedProposer>, ActorsError> {
    let Some(cx) = ProposalContext::of(&s.graph, node, text)? else {
        return Ok(None);
    };
    let chat = proposal_request(&cx);
    let answer = match tokio::runtime::Handle::try_current() {
        Ok(h) => h.block_on(model.ask(&chat, &mut |_| {}))?,
        // A one-shot command runs outside any runtime (`main_one_shot`): one for this call.
        Err(_) => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("tokio runtime")
            .block_on(model.ask(&chat, &mut |_| {}))?,
    };
    Ok(Some(DecidedProposer(parse_proposal(
        &cx,
        answer.text.as_deref().unwrap_or(""),
    )?)))
}

fn writer(
    c: &Common,
    config: HarnessConfig,
    failpoint: Option<Failpoint>,
) -> Result<Session, ActorsError> {
    let s = Session::writer(&c.root, config, Duration::from_millis(c.lock_timeout_ms))?;
    armed(s, failpoint)
}

/// The writer of a one-shot command that touches only `targets` (a lazy open: see
/// [`Session::writer_lazy`]).
fn lazy_writer(
    c: &Common,
    config: HarnessConfig,
    targets: &[&str],
    spawns: bool,
    failpoint: Option<Failpoint>,
) -> Result<Session, ActorsError> {
    let s = Session::writer_lazy(
        &c.root,
        config,
        Duration::from_millis(c.lock_timeout_ms),
        targets,
        spawns,
    )?;
    armed(s, failpoint)
}

fn armed(mut s: Session, failpoint: Option<Failpoint>) -> Result<Session, ActorsError> {
    s.store.set_failpoint(failpoint);
    report_diagnostics(&s);
    for r in &s.report.repairs {
        eprintln!("weft actors: recovered: {r}");
    }
    Ok(s)
}

fn report_diagnostics(s: &Session) {
    for d in &s.report.diagnostics {
        eprintln!(
            "weft actors: {} {}{}: {}",
            d.code,
            d.file,
            d.line.map(|l| format!(":{l}")).unwrap_or_default(),
            d.message
        );
    }
}

fn tree_text(v: &Value) -> String {
    let mut out = String::new();
    for n in v["nodes"].as_array().into_iter().flatten() {
        let depth = n["depth"].as_u64().unwrap_or(0) as usize;
        let paused = n["pausedBy"]
            .as_str()
            .map(|p| format!(" (paused by {p})"))
            .unwrap_or_default();
        out.push_str(&format!(
            "{}{} [{}] {} — {}{}\n",
            "  ".repeat(depth),
            n["id"].as_str().unwrap_or(""),
            n["type"].as_str().unwrap_or(""),
            n["status"].as_str().unwrap_or(""),
            n["summary"].as_str().unwrap_or(""),
            paused
        ));
    }
    out.trim_end().to_owned()
}

fn run(
    cmd: ActorsCommand,
    config: HarnessConfig,
    fp: Option<Failpoint>,
) -> Result<(Value, String), ActorsError> {
    let now = wall_ms();
    match cmd {
        ActorsCommand::Init { c, title } => {
            let s = Session::init(
                &c.root,
                config,
                &title,
                Duration::from_millis(c.lock_timeout_ms),
            )?;
            let v = json!({"root": s.graph.root(), "path": s.store.address(), "title": title});
            Ok((
                v,
                format!(
                    "initialised {} (root node `coordinator`)",
                    s.store.address()
                ),
            ))
        }
        ActorsCommand::Spawn {
            c,
            parent,
            node_type,
            id,
            title,
            topic,
            reason,
            git_closeout,
            wait_on,
            count,
        } => {
            let mut r = SpawnRequest::new(parent, parse_type(&node_type)?);
            r.id = id;
            r.title = title;
            r.topic = topic;
            r.reason = reason;
            r.trigger = Trigger::User;
            r.git_closeout = git_closeout.as_deref().map(parse_closeout).transpose()?;
            for w in wait_on {
                let (n, m) = w.split_once(':').unwrap_or((&w, "warn"));
                let m = parse_mode(m)?
                    .ok_or_else(|| ActorsError::InvalidArgument("--wait-on mode none".into()))?;
                r.wait_on.push((n.to_owned(), m));
            }
            let mut targets = vec![r.parent.as_str()];
            targets.extend(r.wait_on.iter().map(|(n, _)| n.as_str()));
            let mut s = lazy_writer(&c, config, &targets, true, fp)?;
            if count != 1 {
                let reqs = (1..=count)
                    .map(|i| {
                        let mut q = r.clone();
                        q.id = r.id.as_ref().map(|p| format!("{p}-{i}"));
                        q
                    })
                    .collect();
                let outs = s.graph.spawn_batch(now, reqs)?;
                s.flush()?;
                let v: Vec<Value> = outs.iter().map(|o| spawn_json(o, &s)).collect();
                let h = outs
                    .iter()
                    .map(|o| format!("spawned {} `{}` under `{}`", o.node_type, o.child, o.parent))
                    .collect::<Vec<_>>()
                    .join("\n");
                return Ok((Value::Array(v), h));
            }
            let o = s.graph.spawn(now, r)?;
            s.flush()?;
            let v = spawn_json(&o, &s);
            Ok((
                v,
                format!("spawned {} `{}` under `{}`", o.node_type, o.child, o.parent),
            ))
        }
        ActorsCommand::Message {
            c,
            node,
            text,
            role,
            tokens,
            from,
        } => {
            let text = if text == "-" {
                let mut t = String::new();
                std::io::Read::read_to_string(&mut std::io::stdin(), &mut t)
                    .map_err(|e| ActorsError::InvalidArgument(format!("stdin: {e}")))?;
                t.trim_end_matches('\n').to_owned()
            } else {
                text
            };
            let mut targets = vec![node.as_str()];
            targets.extend(from.as_deref());
            let mut s = lazy_writer(&c, config, &targets, false, fp)?;
            let line = s.graph.append(
                now,
                &node,
                NewLine {
                    role: Role::parse(&role),
                    text,
                    tokens,
                    from,
                },
            )?;
            s.flush()?;
            Ok((
                json!({"node": node, "line": line}),
                format!("{node}:{line}"),
            ))
        }
        ActorsCommand::Route {
            c,
            node,
            text,
            proposer,
            model,
        } => {
            let model = route_model(&proposer, &model)?;
            let mut s = writer(&c, config, fp)?;
            let decided = match &model {
                Some(m) => propose_with_model(m, &s, &node, &text)?,
                None => None,
            };
            let out = match &decided {
                Some(d) => s.graph.route(now, &node, &text, None, d)?,
                None => s.graph.route(now, &node, &text, None, &HeuristicProposer)?,
            };
            s.flush()?;
            Ok(match out {
                RouteOutcome::Continued { node, line } => (
                    json!({"outcome": "continued", "node": node, "line": line}),
                    format!("continued in {node}:{line}"),
                ),
                RouteOutcome::Spawned { trigger, spawn } => {
                    let mut v = spawn_json(&spawn, &s);
                    v["outcome"] = json!("spawned");
                    v["trigger"] = json!(trigger.as_str());
                    let h = format!(
                        "{} spawn: `{}` ({}) under `{}`{}",
                        trigger.as_str(),
                        spawn.child,
                        spawn.node_type,
                        spawn.parent,
                        if spawn.paused_parent {
                            "; the parent is paused until it resolves"
                        } else {
                            ""
                        }
                    );
                    (v, h)
                }
            })
        }
        ActorsCommand::Status {
            c,
            node,
            set,
            summary,
            awaiting_user,
        } => {
            if let Some(st) = set {
                let node =
                    node.ok_or_else(|| ActorsError::InvalidArgument("--set needs --node".into()))?;
                let mut s = lazy_writer(&c, config, &[node.as_str()], false, fp)?;
                let mb =
                    s.graph
                        .set_status(now, &node, Status::parse(&st), summary, awaiting_user)?;
                s.flush()?;
                let h = format!(
                    "{node}: {} — {} (mailbox v{})",
                    mb.status, mb.summary, mb.version
                );
                return Ok((serde_json::to_value(mb).expect("serializes"), h));
            }
            let s = Session::reader(&c.root, config)?;
            report_diagnostics(&s);
            match node {
                Some(n) => {
                    let v = s.graph.fork_view(&n)?;
                    let h = format!(
                        "{n} [{}] {} — {}\nwaits: {}",
                        v["node"]["type"].as_str().unwrap_or(""),
                        v["node"]["status"].as_str().unwrap_or(""),
                        v["node"]["summary"].as_str().unwrap_or(""),
                        v["waits"]
                    );
                    Ok((v, h))
                }
                None => {
                    let v = s.graph.tree_view();
                    let h = tree_text(&v);
                    Ok((v, h))
                }
            }
        }
        ActorsCommand::Graph {
            c,
            view,
            at,
            scope,
            node,
        } => {
            let s = Session::reader(&c.root, config)?;
            report_diagnostics(&s);
            let v = match view.as_str() {
                "graph" => s.graph.graph_view(),
                "tree" => s.graph.tree_view(),
                "grid" => s.graph.grid_view(now),
                "linear" => s.graph.linear_view(node.as_deref())?,
                "metathread" => s.graph.metathread_view(None),
                "temporal" => {
                    let at = at
                        .map(|a| {
                            parse_timestamp(&a)
                                .ok_or_else(|| ActorsError::InvalidArgument(format!("--at {a:?}")))
                        })
                        .transpose()?;
                    s.graph.temporal_view(now, &Scope::parse(&scope)?, at, 24)?
                }
                other => return Err(ActorsError::InvalidArgument(format!("--view {other}"))),
            };
            let h = if view == "graph" || view == "tree" {
                tree_text(&s.graph.tree_view())
            } else {
                v.to_string()
            };
            Ok((v, h))
        }
        ActorsCommand::Audit { c } => {
            let s = Session::reader(&c.root, config.clone())?;
            report_diagnostics(&s);
            let started = std::time::Instant::now();
            let report = s.graph.audit();
            let ms = started.elapsed().as_secs_f64() * 1000.0;
            // Refresh orchestrator/index.json when nobody else is writing.
            let index = match Session::writer(&c.root, config, Duration::ZERO) {
                Ok(mut w) => {
                    w.graph.write_index(now)?;
                    w.flush()?;
                    json!({"written": true})
                }
                Err(ActorsError::StoreLocked(h)) => json!({"written": false, "reason": h}),
                Err(e) => return Err(e),
            };
            let mut h = format!(
                "{} refs, {} ok, {} problems ({ms:.2} ms)",
                report.refs, report.ok, report.problems
            );
            for e in report.entries.iter().filter(|e| !e.ok) {
                h.push_str(&format!(
                    "\n  meta line {}: {} {}:{} — {}",
                    e.meta_line,
                    e.kind,
                    e.node,
                    e.line,
                    e.problem.as_deref().unwrap_or("")
                ));
            }
            let mut v = serde_json::to_value(&report).expect("serializes");
            v["walkMs"] = json!(ms);
            v["index"] = index;
            Ok((v, h))
        }
        ActorsCommand::Export { c } => {
            let mut s = writer(&c, config, fp)?;
            let n = s.graph.export(now)?;
            s.flush()?;
            let p = c.root.join("thread.jsonl");
            Ok((
                json!({"lines": n, "path": p}),
                format!("exported {n} lines to {}", p.display()),
            ))
        }
        ActorsCommand::Resolve {
            c,
            node,
            continue_parent,
            into,
            new,
            note,
        } => {
            let mut cands = Vec::new();
            if continue_parent {
                cands.push(Candidate::Continue);
            }
            cands.extend(into.into_iter().map(Candidate::Existing));
            for n in new {
                let (t, title) = n.split_once(':').unwrap_or(("task", &n));
                cands.push(Candidate::New {
                    node_type: parse_type(t)?,
                    title: title.to_owned(),
                    topic: String::new(),
                });
            }
            let mut s = writer(&c, config, fp)?;
            let r = s.graph.resolve(now, &node, cands, &note)?;
            s.flush()?;
            let v =
                json!({"parent": r.parent, "into": r.into, "created": r.created, "batch": r.batch});
            Ok((
                v,
                format!("`{node}` resolved; `{}` continues routing", r.parent),
            ))
        }
        ActorsCommand::Ref {
            c,
            node,
            line,
            summary,
        } => {
            let mut s = writer(&c, config, fp)?;
            let n = s.graph.add_ref(now, &node, line, &summary)?;
            s.flush()?;
            Ok((
                json!({"metaLine": n}),
                format!("ref {node}:{line} at metathread line {n}"),
            ))
        }
        ActorsCommand::Narrate { c, text } => {
            let mut s = writer(&c, config, fp)?;
            let n = s.graph.narrate(now, &text)?;
            s.flush()?;
            Ok((json!({"metaLine": n}), format!("metathread line {n}")))
        }
        ActorsCommand::Wait { c, node, on, mode } => {
            let mode = parse_mode(&mode)?;
            let mut s = writer(&c, config, fp)?;
            s.graph.set_wait(now, &node, &on, mode)?;
            s.flush()?;
            let v = serde_json::to_value(s.graph.wait_checks(&node)?).expect("serializes");
            Ok((
                json!({"node": node, "waits": v}),
                format!("{node} waits: {v}"),
            ))
        }
        ActorsCommand::Relate { c, from, to, kind } => {
            let mut s = writer(&c, config, fp)?;
            s.graph.relate(now, &from, &to, RelatedKind::parse(&kind))?;
            s.flush()?;
            Ok((
                json!({"from": from, "to": to, "kind": kind}),
                format!("{from} —{kind}→ {to}"),
            ))
        }
        ActorsCommand::Bookmark {
            c,
            scope,
            text,
            keywords,
        } => {
            let scope = Scope::parse(&scope)?;
            let mut s = writer(&c, config, fp)?;
            let n = s.graph.bookmark(now, &scope, keywords, &text, None)?;
            s.flush()?;
            Ok((
                json!({"bookmark": n, "scope": scope.to_string()}),
                format!("bookmark {n}"),
            ))
        }
        ActorsCommand::Epoch { c, reason, nodes } => {
            let mut s = writer(&c, config, fp)?;
            let n = s
                .graph
                .reframe_epoch(now, &reason, (!nodes.is_empty()).then_some(nodes))?;
            s.flush()?;
            Ok((json!({"epoch": n}), format!("views/epoch-{n}.json")))
        }
        ActorsCommand::Archive { c, node, restore } => {
            let mut s = writer(&c, config, fp)?;
            s.graph.archive(now, &node, !restore)?;
            s.flush()?;
            Ok((
                json!({"node": node, "hidden": !restore}),
                format!("{node} {}", if restore { "restored" } else { "archived" }),
            ))
        }
        ActorsCommand::Reset { c, before } => {
            let t = parse_timestamp(&before)
                .ok_or_else(|| ActorsError::InvalidArgument(format!("--before {before:?}")))?;
            let mut s = writer(&c, config, fp)?;
            let ids = s.graph.reset(now, t, None)?;
            s.flush()?;
            Ok((
                json!({"archived": ids, "before": format_rfc3339(t)}),
                format!("archived {} nodes", ids.len()),
            ))
        }
        ActorsCommand::Recover { c } => {
            let s = writer(&c, config, fp)?;
            let v = json!({"report": s.report, "violations": s.graph.lineage_violations(), "nodes": s.graph.node_ids().len()});
            let h = format!(
                "{} nodes; {} diagnostics; {} repairs; lineage {}",
                s.graph.node_ids().len(),
                s.report.diagnostics.len(),
                s.report.repairs.len(),
                if s.graph.lineage_violations().is_empty() {
                    "consistent"
                } else {
                    "INCONSISTENT"
                }
            );
            Ok((v, h))
        }
        ActorsCommand::Desk { .. } => unreachable!("served above"),
    }
}
