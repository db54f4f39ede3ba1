//! `weft serve`: the HTTP host. Capabilities contribute axum routers that share one state
//! ([`Shared`]: credentials, the store — SQLite, or PostgreSQL with `--store` —, the clock);
//! [`router`] merges them under one boundary (exactly one `Host` header, Host/Origin checks,
//! security headers, every error as problem+json). Connections are served by [`http::serve`]
//! (timeouts, a connection cap, a graceful drain on SIGINT / SIGTERM).
//!
//! Mounted: the DGP 0.1 binding ([`dgp`]) serving ThreadDesk, the ThreadDesk browser UI and its
//! read views ([`threaddesk`]), and the actor desk ([`crate::desk`]) over `$CHAT_ROOT`
//! (`--chat-root`, default `chat` in the data directory) with agents running on its nodes
//! (the model of `--model`/`--base-url`, or the built-in model; `--no-agents` turns them off).
//! Every task node's agent also gets the DGP tools (`dgp_surfaces`, `dgp_run_surface`) bound to
//! this server's own DGP app ([`agent_dgp_tools`]), so a node's agent can drive ThreadDesk,
//! and the Worker-job tools of `--job-tool NAME=PATH.mjs` ([`crate::agent_jobs`]).
//! With `--remote-script` / `--remote-kind`, the remote job endpoint ([`remote`],
//! `/api/jobs/remote`: remote runtimes run jobs here over WebSocket sessions).

pub mod auth;
pub mod dgp;
pub mod http;
pub mod pg;
pub mod remote;
pub mod store;
pub mod threaddesk;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use weft_core::frames::FramesError;

use self::auth::Auth;
use self::store::Store;

/// Arguments of `weft serve`.
#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// Address to listen on (`127.0.0.1:0` picks a free port; the URL is printed).
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Directory of the embedded SQLite database (created if missing).
    #[arg(long, default_value = "weft-data")]
    pub data_dir: PathBuf,
    /// Keep the DGP records in PostgreSQL instead of SQLite: `postgres://user@host/db` or
    /// `host=/run/postgresql user=weft dbname=weft`. Several instances may share one
    /// database (each with its own --data-dir for the actor desk).
    #[arg(long, value_name = "postgres://… | \"host=… user=…\"")]
    pub store: Option<String>,
    /// Connections of the PostgreSQL pool (with --store).
    #[arg(long, default_value_t = 8)]
    pub store_pool: usize,
    /// How long a frame may be committed against, in seconds.
    #[arg(long, default_value_t = 900)]
    pub frame_ttl_secs: u64,
    /// Seed this many extra synthetic ThreadDesk threads when the store is new (load tests).
    #[arg(long, default_value_t = 0)]
    pub extra_threads: u32,
    /// The `$CHAT_ROOT` the actor desk (`/actors/`, `/api/actors/…`) serves (initialised when
    /// empty; default: `chat` inside the data directory). The server holds the root's writer
    /// lock while it runs.
    #[arg(long)]
    pub chat_root: Option<PathBuf>,
    /// Serve the actor desk without agents (nobody answers the lines people type).
    #[arg(long)]
    pub no_agents: bool,
    /// Let the actor desk's read routes (`GET /api/actors/…`) answer without the human token.
    /// Writes always need it.
    #[arg(long)]
    pub desk_reads_without_token: bool,
    /// Who proposes a spawn when a message is routed in the desk: `heuristic` (deterministic
    /// drift keywords) or `model` (the model of --model proposes; without a configured model
    /// the server says so and the heuristic decides).
    #[arg(long, default_value = "heuristic")]
    pub desk_proposer: String,
    /// A Worker-job tool for the task nodes' agents (repeatable): `NAME=PATH.mjs`, a DOM-style
    /// worker script (as `weft run` takes it). A call of NAME starts a job running the script;
    /// its journal goes to the node's `jobs.jsonl`, its completion note arrives as mail.
    #[arg(long = "job-tool", value_name = "NAME=PATH.mjs",
        value_parser = crate::agent_jobs::parse_job_tool)]
    pub job_tool: Vec<crate::agent_jobs::JobToolSpec>,
    /// The Node executable that runs the job tools' worker scripts.
    #[arg(long = "job-node", env = "WEFT_NODE", default_value = "node")]
    pub job_node: String,
    #[command(flatten)]
    pub model: crate::model::ModelFlags,
    #[command(flatten)]
    pub limits: http::LimitArgs,
    #[command(flatten)]
    pub remote: remote::RemoteArgs,
}

/// State every capability shares.
#[derive(Clone)]
pub struct Shared {
    pub auth: Arc<Auth>,
    pub store: Arc<Store>,
    /// The bound address (for Host checks).
    pub addr: SocketAddr,
}

/// Wall-clock milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Random bytes from the operating system.
pub fn random_bytes<const N: usize>() -> [u8; N] {
    use std::io::Read;
    let mut b = [0u8; N];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .expect("/dev/urandom is readable");
    b
}

/// A problem+json response.
pub fn problem(e: &FramesError) -> Response {
    let body = serde_json::to_vec(&e.problem()).expect("problems serialize");
    let mut r = Response::new(Body::from(body));
    *r.status_mut() =
        StatusCode::from_u16(e.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    r
}

/// A JSON response.
pub fn json_response(bytes: Vec<u8>) -> Response {
    let mut r = Response::new(Body::from(bytes));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// Merges capability routers under the shared boundary. An unknown route, or a known one with
/// another method, is `404 NOT_FOUND` as in the reference server (after authentication under
/// `/dgp/`, so that no route list leaks to a caller without a token). `remote_origins` may
/// open remote job sessions from their pages (see [`BoundaryConfig`]).
pub fn router(shared: Shared, parts: Vec<Router>, remote_origins: Vec<String>) -> Router {
    let mut app = Router::new();
    for p in parts {
        app = app.merge(p);
    }
    let unknown = {
        let shared = shared.clone();
        move |headers: HeaderMap, uri: axum::http::Uri| {
            let shared = shared.clone();
            async move {
                if uri.path().starts_with("/dgp/")
                    && let Err(e) = shared.auth.principal(&headers)
                {
                    return problem(&e);
                }
                problem(&FramesError::NotFound("no such route".into()))
            }
        }
    };
    let addr = shared.addr;
    let app = app
        .fallback(unknown.clone())
        .method_not_allowed_fallback(unknown)
        .layer(middleware::from_fn_with_state(shared, dgp_bodies));
    guard_with(
        app,
        BoundaryConfig {
            addr,
            remote_origins: remote_origins.into(),
        },
    )
}

/// The reference server's checks of a DGP request body that precede its JSON (after the
/// principal): `Transfer-Encoding` is refused (`400 INVALID_TRANSFER`) and an empty
/// `application/json` body is `413 PAYLOAD_TOO_LARGE` (bodies are 1..limit bytes). The media
/// type, the upper size limit and the JSON itself are checked by the DGP binding.
async fn dgp_bodies(State(shared): State<Shared>, req: Request, next: Next) -> Response {
    if req.method() != Method::POST || !req.uri().path().starts_with("/dgp/") {
        return next.run(req).await;
    }
    let h = req.headers();
    if let Err(e) = shared.auth.principal(h) {
        return problem(&e);
    }
    if h.contains_key(header::TRANSFER_ENCODING) {
        return problem(&FramesError::InvalidTransfer(
            "chunked request bodies are not supported: send a Content-Length".into(),
        ));
    }
    let json = h
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"));
    let empty = h
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .is_none_or(|v| v.trim() == "0");
    if json && empty {
        return problem(&FramesError::PayloadTooLarge(
            "request bodies must have at least 1 byte".into(),
        ));
    }
    next.run(req).await
}

/// Puts `app` behind the boundary of a server bound to `addr` (see [`boundary`]); `weft serve`
/// and the standalone desk both use it.
pub fn guard(app: Router, addr: SocketAddr) -> Router {
    guard_with(
        app,
        BoundaryConfig {
            addr,
            remote_origins: Arc::new([]),
        },
    )
}

/// What the boundary checks against: the bound address, and the foreign origins that may open
/// remote job sessions (`--remote-origin`: on [`remote::ROUTE`] only; every other route keeps
/// refusing them).
#[derive(Clone)]
pub struct BoundaryConfig {
    pub addr: SocketAddr,
    pub remote_origins: Arc<[String]>,
}

/// Puts `app` behind the boundary `config` describes (see [`boundary`]).
pub fn guard_with(app: Router, config: BoundaryConfig) -> Router {
    app.layer(middleware::from_fn_with_state(config, boundary))
}

fn host_allowed(addr: SocketAddr, host: &str) -> bool {
    if !addr.ip().is_loopback() {
        return true; // bound to a routable address: the operator chose the names
    }
    let port = addr.port();
    [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        format!("[::1]:{port}"),
    ]
    .iter()
    .any(|h| h == host)
}

/// Decodes `%XX` escapes of a URL path; `None` when the result is not UTF-8.
fn decoded_path(path: &str) -> Option<String> {
    let b = path.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
        if b[i] == b'%'
            && i + 2 < b.len()
            && let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2]))
        {
            out.push(h << 4 | l);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The problem for an error response some layer wrote as plain text (an extractor's
/// rejection, a body limit): the same status class, with a code.
fn problem_for(status: StatusCode, detail: String) -> Response {
    let e = match status.as_u16() {
        401 => FramesError::Unauthenticated(detail),
        403 => FramesError::Forbidden(detail),
        404 | 405 => FramesError::NotFound(detail),
        413 => FramesError::PayloadTooLarge(detail),
        415 => FramesError::UnsupportedMediaType(detail),
        422 => FramesError::InvalidMessage(detail),
        s if s >= 500 => FramesError::InternalError(detail),
        _ => FramesError::InvalidRequest(detail),
    };
    problem(&e)
}

/// The request checks every route shares: exactly one `Host` header, a UTF-8 path,
/// DNS-rebinding and cross-origin protection. Every error response leaves as
/// `application/problem+json` (plain-text rejections are rewritten), and every response
/// carries the security headers.
async fn boundary(State(config): State<BoundaryConfig>, req: Request, next: Next) -> Response {
    let addr = config.addr;
    let headers: &HeaderMap = req.headers();
    let hosts = headers.get_all(header::HOST).iter().count();
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("");
    let mut resp = if hosts != 1 {
        problem(&FramesError::InvalidRequest(format!(
            "a request needs exactly one Host header, not {hosts}"
        )))
    } else if decoded_path(req.uri().path()).is_none() {
        problem(&FramesError::InvalidRequest(
            "the request path is not UTF-8 once percent-decoded".into(),
        ))
    } else if !host_allowed(addr, host) {
        problem(&FramesError::UntrustedHost(format!(
            "unexpected Host header `{host}`"
        )))
    } else if let Some(origin) = headers.get(header::ORIGIN).and_then(|o| o.to_str().ok())
        && origin != format!("http://{host}")
        && origin != format!("https://{host}")
        && !(req.uri().path() == remote::ROUTE && config.remote_origins.iter().any(|o| o == origin))
    {
        problem(&FramesError::UntrustedOrigin(
            "cross-origin access is not enabled".into(),
        ))
    } else {
        let resp = next.run(req).await;
        let is_problem = resp
            .headers()
            .get(header::CONTENT_TYPE)
            .is_some_and(|c| c.as_bytes().starts_with(b"application/problem+json"));
        if resp.status().as_u16() >= 400 && !is_problem {
            let status = resp.status();
            let text = axum::body::to_bytes(resp.into_body(), 4096)
                .await
                .map(|b| String::from_utf8_lossy(&b).trim().to_owned())
                .unwrap_or_default();
            let detail = if text.is_empty() {
                status.canonical_reason().unwrap_or("error").to_owned()
            } else {
                text
            };
            problem_for(status, detail)
        } else {
            resp
        }
    };
    let h = resp.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' blob:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
        ),
    );
    resp
}

/// Text-service requests the desk agents' DGP controller may make over the server's life.
pub const AGENT_SERVICE_CALLS: u32 = 32;

/// The DGP tools of the desk's task-node agents, bound to this server's own DGP app: base URL
/// `http://{addr}` (the bound loopback address), the agent token, decisions judged by `judge`
/// (the agents' model, when one is configured) or else the deterministic fixtures, service
/// texts by the fixtures. The controller connects on the first call.
pub fn agent_dgp_tools(
    addr: SocketAddr,
    agent_token: String,
    judge: Option<crate::model::ReqwestModel>,
) -> crate::agents::HostTools {
    use crate::agent::adapters::{DecisionAdapter, FixtureAdapter, FixtureText, ModelAdapter};
    use crate::agent::controller::{Controller, RunOptions};
    use crate::agent::tools::DgpTools;
    let base = format!("http://{addr}");
    DgpTools::host_tools(move || {
        let (base, token, judge) = (base.clone(), agent_token.clone(), judge.clone());
        Box::pin(async move {
            let adapter: Box<dyn DecisionAdapter> = match judge {
                Some(model) => Box::new(ModelAdapter { model }),
                None => Box::new(FixtureAdapter),
            };
            let c = Controller::connect(
                &base,
                Some(token),
                false,
                adapter,
                Box::new(FixtureText),
                AGENT_SERVICE_CALLS,
            )
            .await?;
            Ok(DgpTools::new(Arc::new(c), RunOptions::default()))
        })
    })
}

/// Runs `weft serve`.
pub async fn main(args: ServeArgs) -> ExitCode {
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("weft serve: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: ServeArgs) -> Result<(), String> {
    // From here on SIGINT and SIGTERM start a graceful stop instead of killing the process.
    let stop = http::stop_signal();
    std::fs::create_dir_all(&args.data_dir)
        .map_err(|e| format!("{}: {e}", args.data_dir.display()))?;
    let db = args.data_dir.join("weft.sqlite3");
    let (store, seeding) = match &args.store {
        None => (
            Arc::new(Store::Sqlite(store::SqliteStore::open(&db)?)),
            None,
        ),
        Some(conninfo) => {
            let (pg, lock) = pg::PgStore::open(conninfo, args.store_pool).await?;
            (Arc::new(Store::Postgres(pg)), Some(lock))
        }
    };
    let (auth, generated) = Auth::from_env()?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let shared = Shared {
        auth: Arc::new(auth),
        store: store.clone(),
        addr,
    };
    let config = weft_core::frames::EngineConfig {
        frame_ttl_ms: args.frame_ttl_secs * 1000,
        id_seed: u64::from_be_bytes(random_bytes::<8>()),
        ..Default::default()
    };
    let desk = dgp::Dgp::open(
        weft_threaddesk::ThreadDesk::new().with_extra_threads(args.extra_threads),
        config,
        shared.store.clone(),
    )
    .await?;
    // A new database is seeded by one instance at a time.
    if let Some(lock) = seeding {
        lock.release().await?;
    }
    // Its live streams (`/threaddesk/events`) end when the server stops.
    let live = desk.clone();
    let mut parts = vec![
        dgp::routes(desk.clone(), shared.clone()),
        threaddesk::routes(desk, shared.clone()),
    ];
    let shutdown = http::Shutdown::default();
    let root = args
        .chat_root
        .clone()
        .unwrap_or_else(|| args.data_dir.join("chat"));
    let access = crate::desk::DeskAccess {
        auth: shared.auth.clone(),
        reads_without_token: args.desk_reads_without_token,
    };
    let proposer = crate::actors::cli::route_model(&args.desk_proposer, &args.model)
        .map_err(|e| format!("weft serve: error[{}]: {e}", e.code()))?;
    // The desk's agents answer with the model of --model (the built-in model without one).
    let agents = if args.no_agents {
        None
    } else {
        Some(
            crate::model::HostModel::from_choice(&args.model.choice())
                .map_err(|e| format!("error[{}]: {e}", e.code()))?,
        )
    };
    let agents_line = match &agents {
        None => "off (--no-agents)".to_owned(),
        Some(m @ crate::model::HostModel::Remote(_)) => format!("on, model {}", m.label()),
        Some(_) => format!(
            "on, no model configured ({}): {}; the built-in model answers",
            weft_core::model::NO_MODEL_CONFIGURED,
            weft_core::model::builtin::HOW_TO_CONFIGURE
        ),
    };
    let judge = match &agents {
        Some(crate::model::HostModel::Remote(m)) => Some(m.clone()),
        _ => None,
    };
    let tools = agents.as_ref().map(|_| {
        let dgp = agent_dgp_tools(addr, shared.auth.agent_token().to_owned(), judge);
        crate::agent_jobs::with_job_tools(dgp, &args.job_tool, &args.job_node)
    });
    // The desk serves loopback addresses only: on another address it is mounted only when
    // --chat-root asks for it (and then refused, as before).
    let desk = args.chat_root.is_some() || addr.ip().is_loopback();
    let mut desk_state = None;
    if desk {
        let (routes, state) = crate::desk::mount(
            &root,
            addr,
            access,
            proposer,
            agents,
            tools,
            shutdown.signal(),
        )
        .await?;
        parts.push(routes);
        desk_state = Some(state);
    }
    let remote = remote::Remote::mount(&args.remote, addr, shared.auth.clone(), &args.job_node);
    if let Some(r) = &remote {
        parts.push(r.routes());
    }
    let app = router(shared.clone(), parts, args.remote.remote_origin.clone());
    println!("weft serve: ThreadDesk (DGP 0.1) on http://{addr}/");
    if desk {
        println!(
            "  actor desk:  http://{addr}/actors/ (root {}; {} need the human token)",
            root.display(),
            if args.desk_reads_without_token {
                "writes"
            } else {
                "reads and writes"
            }
        );
        println!("  agents:      {agents_line}");
    } else {
        println!("  actor desk:  off (it serves loopback addresses only; listening on {addr})");
    }
    match &args.store {
        None => println!("  data:        {} ({})", db.display(), store.durability()),
        Some(_) => println!(
            "  data:        {} ({})",
            store.postgres().map_or(String::new(), |p| p.describe()),
            store.durability()
        ),
    }
    let note = |g: bool| {
        if g {
            " (generated)"
        } else {
            " (from the environment)"
        }
    };
    println!(
        "  human token: {}{}",
        shared.auth.human_token(),
        note(generated.0)
    );
    println!(
        "  agent token: {}{}",
        shared.auth.agent_token(),
        note(generated.1)
    );
    if let Some(line) = remote::banner(remote.as_ref(), &args.remote, addr) {
        println!("  remote jobs: {line}");
    }
    println!("  discovery:   http://{addr}/.well-known/dgp   (Ctrl-C or SIGTERM stops)");
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    let limits = args.limits.limits();
    let server = tokio::spawn(http::serve(listener, app, limits, shutdown.signal()));
    let signal = stop.await;
    // The running agent steps end `interrupted` ("host stopped") on disk before the process
    // goes; a store that cannot finish within a few seconds is left to the restart rules.
    let mut stuck = false;
    if let Some(d) = desk_state.take() {
        stuck = !d.stop_agents("host stopped", STOP_AGENTS_WITHIN).await;
        if stuck {
            eprintln!("weft serve: the agents' store did not finish in time; stopping anyway");
        }
    }
    // Remote sessions end before the connections drain: their jobs terminated and recorded,
    // their sockets closed 1001.
    if let Some(r) = &remote {
        r.stop("server stopping").await;
    }
    eprintln!("weft serve: {signal}: draining connections");
    live.close_changes();
    shutdown.start();
    let dropped = server.await.map_err(|e| e.to_string())?;
    if dropped > 0 {
        eprintln!(
            "weft serve: {dropped} connection(s) still open after the grace period were closed"
        );
    }
    // Every connection (and with it the desk and its chat-root lock) is gone; make what was
    // queued durable and close the database.
    store.close().await;
    eprintln!("weft serve: stopped");
    if stuck {
        // A blocking task still waits on the store: do not wait for it on the way out.
        std::process::exit(0);
    }
    Ok(())
}

/// How long a stopping `weft serve` waits for the agents' interruption lines to be durable.
const STOP_AGENTS_WITHIN: std::time::Duration = std::time::Duration::from_secs(3);

/// `IntoResponse` for results of handlers.
pub struct Reply(pub Result<Response, FramesError>);

impl IntoResponse for Reply {
    fn into_response(self) -> Response {
        match self.0 {
            Ok(r) => r,
            Err(e) => problem(&e),
        }
    }
}
