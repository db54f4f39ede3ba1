//! The DGP 0.1 HTTP binding (SPECIFICATION.md §12) over the core's frames engine.
//!
//! Every rule is in `weft_core::frames`; this module only carries requests in (principal from
//! the bearer token, time from the clock, raw bodies) and results out (JSON or problem+json),
//! and makes each write batch durable before it answers. The engine sits behind one mutex, so
//! commits are serialized; freshness is still per resource, so unrelated surfaces do not
//! invalidate each other.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::Response;
use axum::routing::{get, post};
use serde::Serialize;
use weft_core::frames::{App, Done, Engine, EngineConfig, FramesError, RecordKind, Write};

use super::store::{Put, Store};
use super::{Reply, Shared, json_response, now_ms};

/// The store namespace of the frames capability.
pub const NS: &str = "dgp";

/// One application's engine and its store.
pub struct Dgp<A: App> {
    engine: Mutex<Inner<A>>,
    store: Arc<Store>,
    limit: usize,
}

/// The engine and, per surface, the last effect batch that changed it (the policy under "").
pub struct Inner<A: App> {
    engine: Engine<A>,
    last_effect: HashMap<String, u64>,
}

/// How an engine call's writes are persisted and what its answer waits for.
#[derive(Clone, Copy)]
enum Class {
    /// A state change: wait until durable.
    Effect,
    /// A new frame of a surface: wait for earlier effects on that surface and the policy.
    Frame,
    /// An audit record (an assessment): wait for nothing.
    Audit,
    /// A read: wait for every earlier effect.
    Read,
}

fn puts(writes: Vec<Write>) -> Vec<Put> {
    writes
        .into_iter()
        .map(|w| Put {
            ns: NS,
            kind: w.kind.as_str(),
            key: w.key,
            value: w.value,
        })
        .collect()
}

fn storage(e: String) -> FramesError {
    FramesError::StorageFailure(e)
}

impl<A: App + Send + 'static> Dgp<A>
where
    A::State: Send,
{
    /// Opens the engine over the store's records (seeding a new store).
    pub async fn open(
        app: A,
        config: EngineConfig,
        store: Arc<Store>,
    ) -> Result<Arc<Self>, String> {
        let mut records = Vec::new();
        for (kind, key, value) in store.load(NS, &[RecordKind::Blob.as_str()])? {
            let k = RecordKind::parse(&kind)
                .ok_or_else(|| format!("unknown record kind `{kind}` in the store"))?;
            records.push((k, key, value));
        }
        let Done {
            value: engine,
            writes,
        } = Engine::open(app, config, records).map_err(|e| e.to_string())?;
        store.effect(puts(writes)).0.durable().await?;
        let limit = engine.config().max_message_bytes;
        Ok(Arc::new(Dgp {
            engine: Mutex::new(Inner {
                engine,
                last_effect: HashMap::new(),
            }),
            store,
            limit,
        }))
    }

    /// Runs an engine call whose writes are an effect (a commit, a policy change): the answer
    /// waits until they are durable. Errors and replays wait for every earlier effect, so no
    /// answer is ahead of durable state.
    pub async fn call<T>(
        &self,
        f: impl FnOnce(&mut Engine<A>, u64) -> Result<Done<T>, FramesError>,
    ) -> Result<T, FramesError> {
        self.run(f, Class::Effect, "").await
    }

    /// Creates a frame of `surface`: its record is queued, and the answer waits only for
    /// earlier effects on that surface or on the policy (a frame shows nothing else).
    pub async fn frame<T>(
        &self,
        surface: &str,
        f: impl FnOnce(&mut Engine<A>, u64) -> Result<Done<T>, FramesError>,
    ) -> Result<T, FramesError> {
        self.run(f, Class::Frame, surface).await
    }

    /// Records audit data (an assessment): queued in order, answered at once. A commit that
    /// uses it is queued later, so it is durable before that commit is.
    pub async fn audit<T>(
        &self,
        f: impl FnOnce(&mut Engine<A>, u64) -> Result<Done<T>, FramesError>,
    ) -> Result<T, FramesError> {
        self.run(f, Class::Audit, "").await
    }

    /// Runs a read-only engine call, answering after every earlier effect is durable.
    pub async fn read<T>(
        &self,
        f: impl FnOnce(&Engine<A>) -> Result<T, FramesError>,
    ) -> Result<T, FramesError> {
        self.run(
            |e, _| {
                f(e).map(|value| Done {
                    value,
                    writes: vec![],
                })
            },
            Class::Read,
            "",
        )
        .await
    }

    async fn run<T>(
        &self,
        f: impl FnOnce(&mut Engine<A>, u64) -> Result<Done<T>, FramesError>,
        class: Class,
        surface: &str,
    ) -> Result<T, FramesError> {
        if let Some(e) = self.store.failure() {
            return Err(storage(e));
        }
        let (result, ticket, wait_for) = {
            let mut inner = self.engine.lock().expect("engine lock");
            let (result, writes) = match f(&mut inner.engine, now_ms()) {
                Ok(Done { value, writes }) => (Ok(value), writes),
                Err(e) => (Err(e), vec![]),
            };
            match class {
                Class::Effect => {
                    let touched: Vec<String> = writes
                        .iter()
                        .filter_map(|w| match w.kind {
                            RecordKind::Surface => Some(w.key.clone()),
                            RecordKind::Meta if w.key == "policy_revision" => Some(String::new()),
                            _ => None,
                        })
                        .collect();
                    let (ticket, seq) = self.store.effect(puts(writes));
                    for t in touched {
                        inner.last_effect.insert(t, seq);
                    }
                    (result, ticket, 0)
                }
                Class::Frame => {
                    let last = |k: &str| inner.last_effect.get(k).copied().unwrap_or(0);
                    let wait_for = last(surface).max(last(""));
                    (result, self.store.audit(puts(writes), false), wait_for)
                }
                Class::Audit => (result, self.store.audit(puts(writes), false), 0),
                Class::Read => (result, self.store.audit(puts(writes), true), 0),
            }
        };
        ticket.durable().await.map_err(storage)?;
        if wait_for > 0 {
            self.store.effect_durable(wait_for).await.map_err(storage)?;
        }
        result
    }

    /// The store.
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }
}

/// Handler state: the engine plus the shared host state.
pub struct Ctx<A: App> {
    pub dgp: Arc<Dgp<A>>,
    pub shared: Shared,
}

impl<A: App> Clone for Ctx<A> {
    fn clone(&self) -> Self {
        Ctx {
            dgp: self.dgp.clone(),
            shared: self.shared.clone(),
        }
    }
}

fn to_json(v: &impl Serialize) -> Response {
    json_response(serde_json::to_vec(v).expect("records serialize"))
}

/// The DGP routes of one application.
pub fn routes<A: App + Send + 'static>(dgp: Arc<Dgp<A>>, shared: Shared) -> Router
where
    A::State: Send,
{
    Router::new()
        .route("/.well-known/dgp", get(manifest::<A>))
        .route("/dgp/surfaces", get(surfaces::<A>))
        .route("/dgp/surfaces/{id}/frame", get(frame::<A>))
        .route("/dgp/frames/{id}", get(stored_frame::<A>))
        .route("/dgp/assessments", post(assess::<A>))
        .route("/dgp/assessments/{id}", get(assessment::<A>))
        .route("/dgp/commits", post(commit::<A>))
        .route("/dgp/receipts/{id}", get(receipt::<A>))
        .route("/dgp/graphs", get(graphs::<A>))
        .route("/dgp/graphs/{id}", get(graph::<A>))
        .route("/dgp/services", get(services::<A>))
        .route("/dgp/blobs/{scope}/{digest}", get(blob::<A>))
        .with_state(Ctx { dgp, shared })
}

async fn manifest<A: App + Send + 'static>(State(c): State<Ctx<A>>) -> Reply
where
    A::State: Send,
{
    Reply(c.dgp.read(|e| Ok(to_json(&e.manifest()))).await)
}

macro_rules! authed {
    ($c:expr, $headers:expr) => {
        match $c.shared.auth.principal(&$headers) {
            Ok(p) => p,
            Err(e) => return Reply(Err(e)),
        }
    };
}

async fn surfaces<A: App + Send + 'static>(State(c): State<Ctx<A>>, headers: HeaderMap) -> Reply
where
    A::State: Send,
{
    authed!(c, headers);
    Reply(c.dgp.read(|e| Ok(to_json(&e.surfaces()))).await)
}

async fn frame<A: App + Send + 'static>(
    State(c): State<Ctx<A>>,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Reply
where
    A::State: Send,
{
    authed!(c, headers);
    let d = q.get("disclosure").cloned();
    let h = q.get("horizon").cloned();
    Reply(
        c.dgp
            .frame(&id, |e, now| {
                e.frame_json(now, &id, d.as_deref(), h.as_deref())
            })
            .await
            .map(json_response),
    )
}

async fn stored_frame<A: App + Send + 'static>(
    State(c): State<Ctx<A>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Reply
where
    A::State: Send,
{
    authed!(c, headers);
    Reply(
        c.dgp
            .read(|e| e.stored_frame(&id).map(|f| to_json(&f)))
            .await,
    )
}

async fn assessment<A: App + Send + 'static>(
    State(c): State<Ctx<A>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Reply
where
    A::State: Send,
{
    authed!(c, headers);
    Reply(
        c.dgp
            .read(|e| e.assessment(&id).map(|a| to_json(&*a)))
            .await,
    )
}

async fn receipt<A: App + Send + 'static>(
    State(c): State<Ctx<A>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Reply
where
    A::State: Send,
{
    authed!(c, headers);
    Reply(c.dgp.read(|e| e.receipt(&id).map(|r| to_json(&*r))).await)
}

async fn graphs<A: App + Send + 'static>(State(c): State<Ctx<A>>, headers: HeaderMap) -> Reply
where
    A::State: Send,
{
    authed!(c, headers);
    Reply(c.dgp.read(|e| Ok(to_json(&e.graphs()))).await)
}

async fn graph<A: App + Send + 'static>(
    State(c): State<Ctx<A>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Reply
where
    A::State: Send,
{
    authed!(c, headers);
    Reply(c.dgp.read(|e| e.graph(&id).map(to_json)).await)
}

async fn services<A: App + Send + 'static>(State(c): State<Ctx<A>>, headers: HeaderMap) -> Reply
where
    A::State: Send,
{
    authed!(c, headers);
    Reply(c.dgp.read(|e| Ok(to_json(&e.services()))).await)
}

/// Reads a JSON request body: `application/json` only, at most the engine's message limit.
pub async fn json_body(req: Request, limit: usize) -> Result<Bytes, FramesError> {
    let ctype = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let essence = ctype.split(';').next().unwrap_or("").trim();
    if !essence.eq_ignore_ascii_case("application/json") {
        return Err(FramesError::UnsupportedMediaType(format!(
            "send application/json, not `{ctype}`"
        )));
    }
    axum::body::to_bytes(req.into_body(), limit)
        .await
        .map_err(|_| {
            FramesError::PayloadTooLarge(format!("request bodies are limited to {limit} bytes"))
        })
}

async fn assess<A: App + Send + 'static>(State(c): State<Ctx<A>>, req: Request) -> Reply
where
    A::State: Send,
{
    let p = authed!(c, req.headers());
    let body = match json_body(req, c.dgp.limit).await {
        Ok(b) => b,
        Err(e) => return Reply(Err(e)),
    };
    Reply(
        c.dgp
            .audit(|e, now| e.assess_bytes(now, &p, &body))
            .await
            .map(|a| to_json(&*a)),
    )
}

async fn commit<A: App + Send + 'static>(State(c): State<Ctx<A>>, req: Request) -> Reply
where
    A::State: Send,
{
    let p = authed!(c, req.headers());
    let key = req
        .headers()
        .get("idempotency-key")
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    let body = match json_body(req, c.dgp.limit).await {
        Ok(b) => b,
        Err(e) => return Reply(Err(e)),
    };
    Reply(
        c.dgp
            .call(|e, now| e.commit_bytes(now, &p, key.as_deref(), &body))
            .await
            .map(|r| to_json(&*r)),
    )
}

async fn blob<A: App + Send + 'static>(
    State(c): State<Ctx<A>>,
    Path((scope, digest)): Path<(String, String)>,
    headers: HeaderMap,
) -> Reply
where
    A::State: Send,
{
    authed!(c, headers);
    let (meta, key) = match c.dgp.read(|e| e.blob(&scope, &digest)).await {
        Ok(x) => x,
        Err(e) => return Reply(Err(e)),
    };
    let store = c.dgp.store().clone();
    let bytes = tokio::task::spawn_blocking(move || store.get(NS, RecordKind::Blob.as_str(), &key))
        .await
        .map_err(|e| e.to_string())
        .and_then(|r| r);
    Reply(match bytes {
        Ok(Some(b)) => {
            let mut r = Response::new(Body::from(b));
            if let Ok(v) = HeaderValue::from_str(&meta.mime_type) {
                r.headers_mut().insert(header::CONTENT_TYPE, v);
            }
            Ok(r)
        }
        Ok(None) => Err(FramesError::NotFound(format!(
            "blob {digest} is not in the store"
        ))),
        Err(e) => Err(FramesError::StorageFailure(e)),
    })
}
