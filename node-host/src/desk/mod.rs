//! The actor desk: an HTTP API over one `$CHAT_ROOT` and the browser UI that uses it (grid of
//! task tiles, tree with `+` spawn, linear view, fork panel, graph strip, coordinator thread,
//! temporal scrubber), with live updates over server-sent events.
//!
//! [`router`] is an axum `Router` to mount in any server (`weft serve` mounts it; `weft actors
//! desk` serves it alone). Routes:
//!
//! * UI: `GET /actors/` (and `/actors/desk.js`, `/actors/desk.css`).
//! * Reads: `GET /api/actors/graph`, `/api/actors/views/{linear|grid|tree|temporal|metathread}`
//!   (query: `node`, `scope`, `at`, `buckets`), `/api/actors/nodes/{id}` (fork panel),
//!   `/api/actors/nodes/{id}/mailbox?reader=`, `/api/actors/nodes/{id}/model`,
//!   `/api/actors/audit`, `/api/actors/events` (SSE: `change` events carrying the version).
//! * Writes (JSON bodies): `POST /api/actors/spawn`, `/api/actors/nodes/{id}/messages`,
//!   `…/route`, `…/status`, `…/resolve`, `…/archive`, `…/wait`, `POST /api/actors/refs`,
//!   `/api/actors/narrate`, `/api/actors/bookmarks`, `/api/actors/epochs`,
//!   `/api/actors/reset`, `/api/actors/export`.
//!
//! Every write is answered after the store acknowledged it. Errors are
//! `application/problem+json` with the core's stable `code`. JSON bodies are read strictly
//! (duplicate keys are refused) and limited to [`MAX_BODY`] bytes. The event stream ends when
//! the server shuts down.
//!
//! Access: mounted in `weft serve` ([`mount`]), every `/api/actors/…` route needs the human
//! token (`Authorization: Bearer …`; reads may be opened with
//! [`DeskAccess::reads_without_token`]); the page asks for the token. The standalone `weft
//! actors desk` ([`serve_root`]) has no tokens: it refuses any but a loopback address, and the
//! boundary refuses foreign `Host` and `Origin` headers.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::DefaultBodyLimit;
use axum::extract::Request;
use axum::extract::{Path as UrlPath, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use tokio::sync::watch;
use weft_core::actors::{
    ActorGraph, ActorStore, ActorsError, HarnessConfig, HeuristicProposer, MemoryStore,
    NodeStoreMode, api, proposer,
};

use crate::actors::{FsStore, Session, flush, wall_ms};
use crate::serve::auth::Auth;
use crate::serve::http::{self, Shutdown, ShutdownSignal};

/// The largest JSON body a desk write accepts (larger ones are `413 PAYLOAD_TOO_LARGE`).
pub const MAX_BODY: usize = 2 * 1024 * 1024;

const INDEX_HTML: &str = include_str!("assets/index.html");
const DESK_JS: &str = include_str!("assets/desk.js");
const DESK_CSS: &str = include_str!("assets/desk.css");

enum Store {
    Fs(Box<FsStore>),
    Memory(MemoryStore),
}

struct Inner {
    graph: ActorGraph,
    store: Store,
}

impl Inner {
    fn flush(&mut self) -> Result<(), ActorsError> {
        match &mut self.store {
            Store::Fs(s) => flush(&mut self.graph, s.as_mut()).map(|_| ()),
            Store::Memory(m) => {
                for b in self.graph.take_batches() {
                    m.apply(&b).map_err(ActorsError::StoreIo)?;
                    self.graph.ack(b.id)?;
                }
                Ok(())
            }
        }
    }
}

/// The desk's shared state: the graph, its store, and a change signal for live views.
#[derive(Clone)]
pub struct DeskState {
    inner: Arc<Mutex<Inner>>,
    changes: watch::Sender<u64>,
    /// Ends the event streams when the server shuts down.
    closing: Option<ShutdownSignal>,
    /// The model that proposes spawns on `route` (`None`: the keyword heuristic).
    proposer: Option<crate::model::ReqwestModel>,
}

impl DeskState {
    /// Opens `root` as its writer (the desk holds the writer lock while it runs; CLI writers
    /// then wait and time out with `STORE_LOCKED`). `ACTOR_NODE_STORE=off` keeps the graph in
    /// memory only. An empty root is initialised.
    pub fn open(
        root: &Path,
        config: HarnessConfig,
        wait: Duration,
    ) -> Result<DeskState, ActorsError> {
        let inner = if config.node_store == NodeStoreMode::Off {
            let graph =
                ActorGraph::init(config, "memory:", &Default::default(), wall_ms(), "Desk")?;
            let mut i = Inner {
                graph,
                store: Store::Memory(MemoryStore::default()),
            };
            i.flush()?;
            i
        } else {
            let mut s = match Session::writer(root, config.clone(), wait) {
                Err(ActorsError::NotInitialized) => Session::init(root, config, "Desk", wait)?,
                other => other?,
            };
            // Crash injection (tests): a long-lived writer aborted at a durability step.
            if let Some(f) = crate::actors::fs_store::Failpoint::from_env() {
                s.store.set_failpoint(Some(f));
            }
            for d in &s.report.diagnostics {
                eprintln!("weft desk: {} {}: {}", d.code, d.file, d.message);
            }
            Inner {
                graph: s.graph,
                store: Store::Fs(Box::new(s.store)),
            }
        };
        let (changes, _) = watch::channel(inner.graph.version());
        Ok(DeskState {
            inner: Arc::new(Mutex::new(inner)),
            changes,
            closing: None,
            proposer: None,
        })
    }

    /// Routes with `model` proposing spawns (the core's proposal rules) instead of the keyword
    /// heuristic; `None` keeps the heuristic.
    pub fn with_model_proposer(mut self, model: Option<crate::model::ReqwestModel>) -> DeskState {
        self.proposer = model;
        self
    }

    /// Ends every event stream once `signal` fires (server shutdown).
    pub fn closing_on(mut self, signal: ShutdownSignal) -> DeskState {
        self.closing = Some(signal);
        self
    }

    /// Runs `f` on the graph in the blocking pool; performs and acknowledges what it queued;
    /// signals live views.
    async fn with<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut ActorGraph) -> Result<T, ActorsError> + Send + 'static,
    ) -> Result<T, ActorsError> {
        let inner = self.inner.clone();
        let changes = self.changes.clone();
        tokio::task::spawn_blocking(move || {
            let mut g = inner.lock().unwrap_or_else(|p| p.into_inner());
            let out = f(&mut g.graph);
            let flushed = g.flush();
            let v = g.graph.version();
            changes.send_if_modified(|old| {
                let changed = *old != v;
                *old = v;
                changed
            });
            let out = out?;
            flushed?;
            Ok(out)
        })
        .await
        .map_err(|e| ActorsError::StoreIo(format!("desk task: {e}")))?
    }
}

fn status_of(e: &ActorsError) -> StatusCode {
    match e.code() {
        "UNKNOWN_NODE" | "NOT_INITIALIZED" => StatusCode::NOT_FOUND,
        "INVALID_ARGUMENT" | "INVALID_NODE_ID" | "CONFIG_INVALID" => StatusCode::BAD_REQUEST,
        "CADENCE_VIOLATION" | "SPAWN_RULE" | "REF_INVALID" => StatusCode::UNPROCESSABLE_ENTITY,
        "STORE_FAILED" | "STORE_LOCKED" => StatusCode::SERVICE_UNAVAILABLE,
        "STORE_IO" => StatusCode::INTERNAL_SERVER_ERROR,
        c if c.starts_with("MODEL_") => StatusCode::BAD_GATEWAY,
        _ => StatusCode::CONFLICT,
    }
}

/// An error as `application/problem+json` with the stable `code`.
pub struct Problem(pub ActorsError);

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let status = status_of(&self.0);
        let body = json!({
            "type": format!("https://weft.invalid/problems/actors/{}", self.0.code().to_lowercase()),
            "title": status.canonical_reason().unwrap_or("error"),
            "status": status.as_u16(),
            "code": self.0.code(),
            "detail": self.0.to_string(),
        });
        (
            status,
            [(header::CONTENT_TYPE, "application/problem+json")],
            body.to_string(),
        )
            .into_response()
    }
}

impl From<ActorsError> for Problem {
    fn from(e: ActorsError) -> Self {
        Problem(e)
    }
}

fn ok(v: Value) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], v.to_string()).into_response()
}

type Reply = Result<Response, Problem>;

/// A write's JSON body. Writes must say `content-type: application/json`: a browser cannot send
/// that cross-origin without a CORS preflight, which the desk never answers.
fn body(h: &HeaderMap, b: &Bytes) -> Result<Value, ActorsError> {
    let json_type = h
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(';')
                .next()
                .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"))
        });
    if !json_type {
        return Err(ActorsError::InvalidArgument(
            "writes need `content-type: application/json`".into(),
        ));
    }
    if b.is_empty() {
        return Ok(json!({}));
    }
    // The core's strict reader: duplicate keys, trailing data and non-finite numbers fail.
    let v = weft_core::frames::validate::parse_strict(b).map_err(|e| {
        ActorsError::InvalidArgument(format!("the request body is not strict JSON: {e}"))
    })?;
    if !v.is_object() {
        return Err(ActorsError::InvalidArgument(
            "the request body must be a JSON object".into(),
        ));
    }
    Ok(v)
}

/// The desk routes (see the module docs), with `state`.
pub fn router(state: DeskState) -> Router {
    Router::new()
        .route(
            "/actors",
            get(|| async { axum::response::Redirect::permanent("/actors/") }),
        )
        .route(
            "/actors/",
            get(|| async {
                (
                    [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
                    INDEX_HTML,
                )
            }),
        )
        .route(
            "/actors/desk.js",
            get(|| async {
                (
                    [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
                    DESK_JS,
                )
            }),
        )
        .route(
            "/actors/desk.css",
            get(|| async {
                (
                    [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
                    DESK_CSS,
                )
            }),
        )
        .route("/api/actors/graph", get(graph))
        .route("/api/actors/views/{view}", get(view))
        .route("/api/actors/nodes/{id}", get(fork))
        .route("/api/actors/nodes/{id}/mailbox", get(mailbox))
        .route("/api/actors/nodes/{id}/model", get(model))
        .route("/api/actors/audit", get(audit))
        .route("/api/actors/events", get(events))
        .route("/api/actors/spawn", post(spawn))
        .route("/api/actors/nodes/{id}/messages", post(message))
        .route("/api/actors/nodes/{id}/route", post(route))
        .route("/api/actors/nodes/{id}/status", post(status))
        .route("/api/actors/nodes/{id}/resolve", post(resolve))
        .route("/api/actors/nodes/{id}/archive", post(archive))
        .route("/api/actors/nodes/{id}/wait", post(wait))
        .route("/api/actors/refs", post(add_ref))
        .route("/api/actors/narrate", post(narrate))
        .route("/api/actors/bookmarks", post(bookmark))
        .route("/api/actors/epochs", post(epoch))
        .route("/api/actors/reset", post(reset))
        .route("/api/actors/export", post(export))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(state)
}

/// Who may use a desk mounted in `weft serve`: the holder of the human token.
pub struct DeskAccess {
    /// The server's tokens.
    pub auth: Arc<Auth>,
    /// Reads (`GET`) answer without a token; writes still need the human token.
    pub reads_without_token: bool,
}

/// The desk's access rule inside `weft serve`: the UI (`/actors/…`) is public (it asks for
/// the token); `/api/actors/…` needs the human token (reads may be opened). An agent token is
/// `403 FORBIDDEN`; no or a wrong token is `401 UNAUTHENTICATED`.
async fn access(State(a): State<Arc<DeskAccess>>, req: Request, next: Next) -> Response {
    let read = matches!(
        *req.method(),
        axum::http::Method::GET | axum::http::Method::HEAD
    );
    if !req.uri().path().starts_with("/api/actors/") || (read && a.reads_without_token) {
        return next.run(req).await;
    }
    match a.auth.principal(req.headers()) {
        Ok(p) if p.role == weft_core::frames::Role::Human => next.run(req).await,
        Ok(_) => crate::serve::problem(&weft_core::frames::FramesError::Forbidden(
            "the actor desk needs the human token".into(),
        )),
        Err(e) => crate::serve::problem(&e),
    }
}

/// The desk has no authentication of its own: it only listens on loopback addresses.
fn check_loopback(addr: SocketAddr) -> Result<(), ActorsError> {
    if addr.ip().is_loopback() {
        Ok(())
    } else {
        Err(ActorsError::InvalidArgument(format!(
            "the actor desk has no authentication; serve it on a loopback address, not {addr}"
        )))
    }
}

/// Opens `root` (with the harness variables of the environment) for a server bound to `addr`
/// and returns the desk's routes to merge into it (what `weft serve --chat-root` does), behind
/// `access`; with `proposer`, that model proposes spawns on `route`. Its event streams end
/// when `closing` fires.
pub async fn mount(
    root: &Path,
    addr: SocketAddr,
    access: DeskAccess,
    proposer: Option<crate::model::ReqwestModel>,
    closing: ShutdownSignal,
) -> Result<Router, String> {
    let fail = |e: ActorsError| format!("{}: error[{}]: {e}", root.display(), e.code());
    check_loopback(addr).map_err(fail)?;
    let (config, notes) = crate::actors::config_from_env().map_err(fail)?;
    for n in notes {
        eprintln!("weft serve: note: {n}");
    }
    let owned = root.to_owned();
    let state = tokio::task::spawn_blocking(move || {
        DeskState::open(&owned, config, Duration::from_secs(10))
    })
    .await
    .map_err(|e| e.to_string())?
    .map_err(fail)?;
    Ok(
        router(state.with_model_proposer(proposer).closing_on(closing)).layer(
            axum::middleware::from_fn_with_state(Arc::new(access), self::access),
        ),
    )
}

/// Opens `root` and serves the desk alone on `listen` until SIGINT (Ctrl-C) or SIGTERM, with
/// the connection limits of `weft serve`'s defaults. No tokens: loopback only. Prints the URL.
/// With `proposer`, that model proposes spawns on `route`.
pub async fn serve_root(
    root: &Path,
    config: HarnessConfig,
    listen: &str,
    wait: Duration,
    proposer: Option<crate::model::ReqwestModel>,
) -> Result<(), ActorsError> {
    let stop = http::stop_signal();
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| ActorsError::StoreIo(format!("listen on {listen}: {e}")))?;
    let addr = listener
        .local_addr()
        .map_err(|e| ActorsError::StoreIo(e.to_string()))?;
    check_loopback(addr)?;
    let state = {
        let root = root.to_owned();
        tokio::task::spawn_blocking(move || DeskState::open(&root, config, wait))
            .await
            .map_err(|e| ActorsError::StoreIo(e.to_string()))??
            .with_model_proposer(proposer)
    };
    println!("weft desk: http://{addr}/actors/ (root {})", root.display());
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    let shutdown = Shutdown::default();
    let app = crate::serve::guard(router(state.closing_on(shutdown.signal())), addr);
    let server = tokio::spawn(http::serve(
        listener,
        app,
        http::Limits::default(),
        shutdown.signal(),
    ));
    let signal = stop.await;
    eprintln!("weft desk: {signal}: stopping");
    shutdown.start();
    server
        .await
        .map_err(|e| ActorsError::StoreIo(e.to_string()))?;
    Ok(())
}

/// Runs a core operation (`weft_core::actors::api`) with `args` and answers with its JSON.
async fn call(s: &DeskState, op: &'static str, args: Value) -> Result<Value, Problem> {
    if let (true, Some(m), Some(node), Some(text)) = (
        op == "route",
        &s.proposer,
        args["node"].as_str(),
        args["text"].as_str(),
    ) {
        // The model is asked outside the graph's lock; its answer is read and applied by the
        // core's rules in one step.
        let (node, text) = (node.to_owned(), text.to_owned());
        let chat = s
            .with(move |g| {
                Ok(proposer::ProposalContext::of(g, &node, &text)?
                    .map(|cx| proposer::proposal_request(&cx)))
            })
            .await?;
        if let Some(chat) = chat {
            let answer = m
                .ask(&chat, &mut |_| {})
                .await
                .map_err(ActorsError::from)?
                .text
                .unwrap_or_default();
            return Ok(s
                .with(move |g| {
                    let (node, text) = (
                        args["node"].as_str().unwrap_or(""),
                        args["text"].as_str().unwrap_or(""),
                    );
                    match proposer::ProposalContext::of(g, node, text)? {
                        Some(cx) => {
                            let p = proposer::parse_proposal(&cx, &answer)?;
                            api::call(g, wall_ms(), op, &args, &proposer::DecidedProposer(p))
                        }
                        None => api::call(g, wall_ms(), op, &args, &HeuristicProposer),
                    }
                })
                .await?);
        }
    }
    Ok(
        s.with(move |g| api::call(g, wall_ms(), op, &args, &HeuristicProposer))
            .await?,
    )
}

fn with_node(mut args: Value, id: String) -> Value {
    args["node"] = Value::String(id);
    args
}

/// `GET` of a view: the query string becomes the arguments.
async fn read(
    s: DeskState,
    op: &'static str,
    q: HashMap<String, String>,
    node: Option<String>,
) -> Reply {
    let mut args = json!({});
    for (k, v) in q {
        args[k.as_str()] = match v.parse::<u64>() {
            Ok(n) if k != "node" && k != "reader" && k != "scope" => json!(n),
            _ => json!(v),
        };
    }
    if let Some(id) = node {
        args["node"] = json!(id);
    }
    Ok(ok(call(&s, op, args).await?))
}

async fn graph(State(s): State<DeskState>) -> Reply {
    read(s, "graph", HashMap::new(), None).await
}

async fn view(
    State(s): State<DeskState>,
    UrlPath(view): UrlPath<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Reply {
    let op = match view.as_str() {
        "linear" => "linear",
        "grid" => "grid",
        "tree" => "tree",
        "temporal" => "temporal",
        "metathread" => "metathread",
        other => return Err(ActorsError::InvalidArgument(format!("no view `{other}`")).into()),
    };
    read(s, op, q, None).await
}

async fn fork(State(s): State<DeskState>, UrlPath(id): UrlPath<String>) -> Reply {
    read(s, "fork", HashMap::new(), Some(id)).await
}

async fn mailbox(
    State(s): State<DeskState>,
    UrlPath(id): UrlPath<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Reply {
    read(s, "mailbox", q, Some(id)).await
}

async fn model(State(s): State<DeskState>, UrlPath(id): UrlPath<String>) -> Reply {
    read(
        s,
        "model",
        HashMap::from([("recent".to_owned(), "12".to_owned())]),
        Some(id),
    )
    .await
}

async fn audit(State(s): State<DeskState>) -> Reply {
    read(s, "audit", HashMap::new(), None).await
}

async fn events(State(s): State<DeskState>) -> impl IntoResponse {
    let rx = s.changes.subscribe();
    let first = *rx.borrow();
    let closing = s.closing.clone();
    let stream = futures_util::stream::unfold(
        (rx, Some(first), closing),
        |(mut rx, pending, mut closing)| async move {
            let v = match pending {
                Some(v) => v,
                None => {
                    let closed = async {
                        match closing.as_mut() {
                            Some(c) => c.fired().await,
                            None => std::future::pending().await,
                        }
                    };
                    tokio::select! {
                        r = rx.changed() => r.ok()?,
                        _ = closed => return None,
                    }
                    *rx.borrow_and_update()
                }
            };
            let ev = Event::default()
                .event("change")
                .data(json!({"version": v}).to_string());
            Some((Ok::<Event, Infallible>(ev), (rx, None, closing)))
        },
    );
    Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}

async fn spawn(State(s): State<DeskState>, h: HeaderMap, b: Bytes) -> Reply {
    let mut args = body(&h, &b)?;
    args["trigger"] = json!("user");
    Ok((StatusCode::CREATED, ok(call(&s, "spawn", args).await?)).into_response())
}

macro_rules! node_op {
    ($name:ident, $op:literal) => {
        async fn $name(
            State(s): State<DeskState>,
            UrlPath(id): UrlPath<String>,
            h: HeaderMap,
            b: Bytes,
        ) -> Reply {
            Ok(ok(call(&s, $op, with_node(body(&h, &b)?, id)).await?))
        }
    };
}

macro_rules! root_op {
    ($name:ident, $op:literal) => {
        async fn $name(State(s): State<DeskState>, h: HeaderMap, b: Bytes) -> Reply {
            Ok(ok(call(&s, $op, body(&h, &b)?).await?))
        }
    };
}

node_op!(message, "message");
node_op!(route, "route");
node_op!(status, "status");
node_op!(resolve, "resolve");
node_op!(archive, "archive");
node_op!(wait, "wait");
root_op!(add_ref, "ref");
root_op!(narrate, "narrate");
root_op!(bookmark, "bookmark");
root_op!(epoch, "epoch");
root_op!(reset, "reset");
root_op!(export, "export");
