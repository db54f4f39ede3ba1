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
//! `application/problem+json` with the core's stable `code`.

use std::collections::HashMap;
use std::convert::Infallible;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path as UrlPath, Query, State};
use axum::http::{StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use tokio::sync::watch;
use weft_core::actors::time::parse_timestamp;
use weft_core::actors::{
    ActorGraph, ActorStore, ActorsError, Candidate, GitCloseout, HarnessConfig, HeuristicProposer,
    MemoryStore, NewLine, NodeStoreMode, NodeType, Role, RouteOutcome, Scope, SpawnOutcome,
    SpawnRequest, Status, Trigger, WaitMode,
};

use crate::actors::{FsStore, Session, flush, wall_ms};

const INDEX_HTML: &str = include_str!("assets/index.html");
const DESK_JS: &str = include_str!("assets/desk.js");
const DESK_CSS: &str = include_str!("assets/desk.css");

enum Store {
    Fs(FsStore),
    Memory(MemoryStore),
}

struct Inner {
    graph: ActorGraph,
    store: Store,
}

impl Inner {
    fn flush(&mut self) -> Result<(), ActorsError> {
        match &mut self.store {
            Store::Fs(s) => flush(&mut self.graph, s).map(|_| ()),
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
            let s = match Session::writer(root, config.clone(), wait) {
                Err(ActorsError::NotInitialized) => Session::init(root, config, "Desk", wait)?,
                other => other?,
            };
            for d in &s.report.diagnostics {
                eprintln!("weft desk: {} {}: {}", d.code, d.file, d.message);
            }
            Inner {
                graph: s.graph,
                store: Store::Fs(s.store),
            }
        };
        let (changes, _) = watch::channel(inner.graph.version());
        Ok(DeskState {
            inner: Arc::new(Mutex::new(inner)),
            changes,
        })
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

fn body(b: &Bytes) -> Result<Value, ActorsError> {
    if b.is_empty() {
        return Ok(json!({}));
    }
    let v: Value = serde_json::from_slice(b)
        .map_err(|e| ActorsError::InvalidArgument(format!("the request body is not JSON: {e}")))?;
    if !v.is_object() {
        return Err(ActorsError::InvalidArgument(
            "the request body must be a JSON object".into(),
        ));
    }
    Ok(v)
}

fn field<'a>(v: &'a Value, k: &str) -> Result<&'a str, ActorsError> {
    v[k].as_str()
        .ok_or_else(|| ActorsError::InvalidArgument(format!("`{k}` (a string) is required")))
}

fn opt(v: &Value, k: &str) -> Option<String> {
    v[k].as_str().map(str::to_owned)
}

fn spawn_json(o: &SpawnOutcome) -> Value {
    json!({"id": o.child, "type": o.node_type, "parent": o.parent, "markerLine": o.marker_line, "childLine": o.child_line,
           "gitCloseout": o.git_closeout, "pausedParent": o.paused_parent, "batch": o.batch})
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
        .with_state(state)
}

/// Opens `root` and serves the desk alone on `listen` until Ctrl-C. Prints the URL.
pub async fn serve_root(
    root: &Path,
    config: HarnessConfig,
    listen: &str,
    wait: Duration,
) -> Result<(), ActorsError> {
    let state = {
        let root = root.to_owned();
        tokio::task::spawn_blocking(move || DeskState::open(&root, config, wait))
            .await
            .map_err(|e| ActorsError::StoreIo(e.to_string()))??
    };
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| ActorsError::StoreIo(format!("listen on {listen}: {e}")))?;
    let addr = listener
        .local_addr()
        .map_err(|e| ActorsError::StoreIo(e.to_string()))?;
    println!("weft desk: http://{addr}/actors/ (root {})", root.display());
    axum::serve(listener, router(state))
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
        .map_err(|e| ActorsError::StoreIo(e.to_string()))
}

async fn graph(State(s): State<DeskState>) -> Reply {
    Ok(ok(s.with(|g| Ok(g.graph_view())).await?))
}

async fn view(
    State(s): State<DeskState>,
    UrlPath(view): UrlPath<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Reply {
    let v = s
        .with(move |g| {
            let now = wall_ms();
            Ok(match view.as_str() {
                "linear" => g.linear_view(q.get("node").map(String::as_str))?,
                "grid" => g.grid_view(now),
                "tree" => g.tree_view(),
                "metathread" => g.metathread_view(q.get("limit").and_then(|l| l.parse().ok())),
                "temporal" => {
                    let scope = Scope::parse(q.get("scope").map_or("global", String::as_str))?;
                    let at = match q.get("at") {
                        Some(a) if !a.is_empty() => Some(
                            parse_timestamp(a)
                                .or_else(|| a.parse().ok())
                                .ok_or_else(|| ActorsError::InvalidArgument(format!("at={a:?}")))?,
                        ),
                        _ => None,
                    };
                    let buckets = q.get("buckets").and_then(|b| b.parse().ok()).unwrap_or(48);
                    g.temporal_view(now, &scope, at, buckets)?
                }
                other => return Err(ActorsError::InvalidArgument(format!("no view `{other}`"))),
            })
        })
        .await?;
    Ok(ok(v))
}

async fn fork(State(s): State<DeskState>, UrlPath(id): UrlPath<String>) -> Reply {
    Ok(ok(s.with(move |g| g.fork_view(&id)).await?))
}

async fn mailbox(
    State(s): State<DeskState>,
    UrlPath(id): UrlPath<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Reply {
    Ok(ok(s
        .with(move |g| g.read_mailbox(q.get("reader").map(String::as_str), &id))
        .await?))
}

async fn model(State(s): State<DeskState>, UrlPath(id): UrlPath<String>) -> Reply {
    Ok(ok(s.with(move |g| g.begin_model_call(&id, 12)).await?))
}

async fn audit(State(s): State<DeskState>) -> Reply {
    Ok(ok(s
        .with(|g| Ok(serde_json::to_value(g.audit()).expect("serializes")))
        .await?))
}

async fn events(State(s): State<DeskState>) -> impl IntoResponse {
    let rx = s.changes.subscribe();
    let first = *rx.borrow();
    let stream = futures_util::stream::unfold((rx, Some(first)), |(mut rx, pending)| async move {
        if let Some(v) = pending {
            return Some((
                Ok::<Event, Infallible>(
                    Event::default()
                        .event("change")
                        .data(json!({"version": v}).to_string()),
                ),
                (rx, None),
            ));
        }
        rx.changed().await.ok()?;
        let v = *rx.borrow_and_update();
        Some((
            Ok(Event::default()
                .event("change")
                .data(json!({"version": v}).to_string())),
            (rx, None),
        ))
    });
    Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}

async fn spawn(State(s): State<DeskState>, b: Bytes) -> Reply {
    let v = body(&b)?;
    let out = s
        .with(move |g| {
            let t = field(&v, "type").unwrap_or("task");
            let mut r = SpawnRequest::new(field(&v, "parent")?, NodeType::parse(t));
            r.id = opt(&v, "id");
            r.title = opt(&v, "title").unwrap_or_default();
            r.topic = opt(&v, "topic").unwrap_or_default();
            r.reason = opt(&v, "reason").unwrap_or_default();
            r.trigger = Trigger::User;
            r.git_closeout = match opt(&v, "gitCloseout").map(|c| GitCloseout::parse(&c)) {
                Some(GitCloseout::Other(c)) => {
                    return Err(ActorsError::InvalidArgument(format!("gitCloseout `{c}`")));
                }
                c => c,
            };
            for w in v["waitOn"].as_array().into_iter().flatten() {
                r.wait_on.push((
                    field(w, "node")?.to_owned(),
                    WaitMode::parse(w["mode"].as_str().unwrap_or("warn")),
                ));
            }
            g.spawn(wall_ms(), r)
        })
        .await?;
    Ok((StatusCode::CREATED, ok(spawn_json(&out))).into_response())
}

async fn message(State(s): State<DeskState>, UrlPath(id): UrlPath<String>, b: Bytes) -> Reply {
    let v = body(&b)?;
    let line = s
        .with(move |g| {
            let role = Role::parse(v["role"].as_str().unwrap_or("user"));
            g.append(
                wall_ms(),
                &id,
                NewLine {
                    role,
                    text: field(&v, "text")?.to_owned(),
                    tokens: v["tokens"].as_u64(),
                    from: opt(&v, "from"),
                },
            )
        })
        .await?;
    Ok(ok(json!({"line": line})))
}

async fn route(State(s): State<DeskState>, UrlPath(id): UrlPath<String>, b: Bytes) -> Reply {
    let v = body(&b)?;
    let out = s
        .with(move |g| {
            g.route(
                wall_ms(),
                &id,
                field(&v, "text")?,
                v["tokens"].as_u64(),
                &HeuristicProposer,
            )
        })
        .await?;
    Ok(ok(match out {
        RouteOutcome::Continued { node, line } => {
            json!({"outcome": "continued", "node": node, "line": line})
        }
        RouteOutcome::Spawned { trigger, spawn } => {
            let mut j = spawn_json(&spawn);
            j["outcome"] = json!("spawned");
            j["trigger"] = json!(trigger.as_str());
            j
        }
    }))
}

async fn status(State(s): State<DeskState>, UrlPath(id): UrlPath<String>, b: Bytes) -> Reply {
    let v = body(&b)?;
    let mb = s
        .with(move |g| {
            g.set_status(
                wall_ms(),
                &id,
                Status::parse(field(&v, "status")?),
                opt(&v, "summary"),
                v["awaitingUser"].as_bool(),
            )
        })
        .await?;
    Ok(ok(serde_json::to_value(mb).expect("serializes")))
}

async fn resolve(State(s): State<DeskState>, UrlPath(id): UrlPath<String>, b: Bytes) -> Reply {
    let v = body(&b)?;
    let r = s
        .with(move |g| {
            let mut cands = Vec::new();
            for c in v["candidates"].as_array().into_iter().flatten() {
                cands.push(match c {
                    Value::String(x) if x == "continue" => Candidate::Continue,
                    Value::Object(o) if o.contains_key("node") => {
                        Candidate::Existing(field(c, "node")?.to_owned())
                    }
                    Value::Object(_) => Candidate::New {
                        node_type: NodeType::parse(c["type"].as_str().unwrap_or("task")),
                        title: opt(c, "title").unwrap_or_default(),
                        topic: opt(c, "topic").unwrap_or_default(),
                    },
                    _ => return Err(ActorsError::InvalidArgument(format!("candidate {c}"))),
                });
            }
            g.resolve(wall_ms(), &id, cands, v["note"].as_str().unwrap_or(""))
        })
        .await?;
    Ok(ok(
        json!({"parent": r.parent, "into": r.into, "created": r.created, "batch": r.batch}),
    ))
}

async fn archive(State(s): State<DeskState>, UrlPath(id): UrlPath<String>, b: Bytes) -> Reply {
    let v = body(&b)?;
    let hidden = v["hidden"].as_bool().unwrap_or(true);
    s.with(move |g| g.archive(wall_ms(), &id, hidden)).await?;
    Ok(ok(json!({"hidden": hidden})))
}

async fn wait(State(s): State<DeskState>, UrlPath(id): UrlPath<String>, b: Bytes) -> Reply {
    let v = body(&b)?;
    let checks = s
        .with(move |g| {
            let mode = match v["mode"].as_str().unwrap_or("warn") {
                "none" => None,
                m => Some(WaitMode::parse(m)),
            };
            g.set_wait(wall_ms(), &id, field(&v, "on")?, mode)?;
            g.wait_checks(&id)
        })
        .await?;
    Ok(ok(serde_json::to_value(checks).expect("serializes")))
}

async fn add_ref(State(s): State<DeskState>, b: Bytes) -> Reply {
    let v = body(&b)?;
    let n = s
        .with(move |g| {
            let line = v["line"].as_u64().ok_or_else(|| {
                ActorsError::InvalidArgument("`line` (a number) is required".into())
            })?;
            g.add_ref(
                wall_ms(),
                field(&v, "node")?,
                line,
                v["summary"].as_str().unwrap_or(""),
            )
        })
        .await?;
    Ok(ok(json!({"metaLine": n})))
}

async fn narrate(State(s): State<DeskState>, b: Bytes) -> Reply {
    let v = body(&b)?;
    let n = s
        .with(move |g| g.narrate(wall_ms(), field(&v, "text")?))
        .await?;
    Ok(ok(json!({"metaLine": n})))
}

async fn bookmark(State(s): State<DeskState>, b: Bytes) -> Reply {
    let v = body(&b)?;
    let n = s
        .with(move |g| {
            let scope = Scope::parse(v["scope"].as_str().unwrap_or("global"))?;
            let kw = v["keywords"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|k| k.as_str().map(str::to_owned))
                .collect();
            g.bookmark(
                wall_ms(),
                &scope,
                kw,
                v["text"].as_str().unwrap_or(""),
                v["image"].as_str(),
            )
        })
        .await?;
    Ok(ok(json!({"bookmark": n})))
}

async fn epoch(State(s): State<DeskState>, b: Bytes) -> Reply {
    let v = body(&b)?;
    let n = s
        .with(move |g| {
            let nodes = v["nodes"].as_array().map(|a| {
                a.iter()
                    .filter_map(|n| n.as_str().map(str::to_owned))
                    .collect()
            });
            g.reframe_epoch(wall_ms(), v["reason"].as_str().unwrap_or(""), nodes)
        })
        .await?;
    Ok(ok(json!({"epoch": n})))
}

async fn reset(State(s): State<DeskState>, b: Bytes) -> Reply {
    let v = body(&b)?;
    let ids = s
        .with(move |g| {
            let before = field(&v, "before")?;
            let t = parse_timestamp(before)
                .ok_or_else(|| ActorsError::InvalidArgument(format!("before={before:?}")))?;
            g.reset(wall_ms(), t, None)
        })
        .await?;
    Ok(ok(json!({"archived": ids})))
}

async fn export(State(s): State<DeskState>) -> Reply {
    let n = s.with(|g| g.export(wall_ms())).await?;
    Ok(ok(json!({"lines": n})))
}
