//! The DGP 0.1 HTTP binding (SPECIFICATION.md §12) over the core's frames engine.
//!
//! Every rule is in `weft_core::frames`; this module only carries requests in (principal from
//! the bearer token, time from the clock, raw bodies, stored records the engine asks for) and
//! results out (JSON or problem+json), and makes each write batch durable before it answers:
//! a frame, an assessment and a commit are answered only once fsynced (group commit). The
//! engine sits behind one mutex, so commits are serialized; freshness is still per resource, so
//! unrelated surfaces do not invalidate each other.
//!
//! Start-up loads surfaces, receipts, idempotency records, logs and entries; frames,
//! assessments and snapshots are read back on demand (`Engine::needs` / `Engine::admit`), so
//! opening does not replay every frame. A background task runs the engine's retention every
//! second and walks the stored frame and assessment records to delete those past retention
//! (`Engine::compact`); deletions are queued behind answered batches and not waited for.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

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

/// Record kinds read back on demand instead of at start-up (and blobs, served from the store).
const ON_DEMAND: [RecordKind; 4] = [
    RecordKind::Frame,
    RecordKind::Assessment,
    RecordKind::Snapshot,
    RecordKind::Blob,
];

/// Stored records walked per compaction step (one step every 100 ms).
const COMPACT_BATCH: usize = 2000;

/// One application's engine and its store.
pub struct Dgp<A: App> {
    engine: Mutex<Engine<A>>,
    store: Arc<Store>,
    limit: usize,
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
    /// Opens the engine over the store's records (seeding a new store) and starts retention.
    pub async fn open(
        app: A,
        config: EngineConfig,
        store: Arc<Store>,
    ) -> Result<Arc<Self>, String> {
        let kinds: Vec<&str> = RecordKind::ALL
            .iter()
            .filter(|k| !ON_DEMAND.contains(k))
            .map(|k| k.as_str())
            .collect();
        let mut records = Vec::new();
        for (kind, key, value) in store.load_kinds(NS, &kinds)? {
            let k = RecordKind::parse(&kind)
                .ok_or_else(|| format!("unknown record kind `{kind}` in the store"))?;
            records.push((k, key, value));
        }
        let Done {
            value: engine,
            writes,
        } = Engine::open(app, config, records).map_err(|e| e.to_string())?;
        store.write(puts(writes)).durable().await?;
        let limit = engine.config().max_message_bytes;
        let dgp = Arc::new(Dgp {
            engine: Mutex::new(engine),
            store,
            limit,
        });
        tokio::spawn(retention(Arc::downgrade(&dgp)));
        Ok(dgp)
    }

    /// Runs an engine call whose writes change state (a commit, a policy change): the answer
    /// waits until they are durable. Errors and replays wait for every earlier batch, so no
    /// answer is ahead of durable state.
    pub async fn call<T>(
        &self,
        f: impl FnOnce(&mut Engine<A>, u64) -> Result<Done<T>, FramesError>,
    ) -> Result<T, FramesError> {
        self.run(vec![], f).await
    }

    /// Creates a frame: answered once its record is durable (later requests name it).
    pub async fn frame<T>(
        &self,
        f: impl FnOnce(&mut Engine<A>, u64) -> Result<Done<T>, FramesError>,
    ) -> Result<T, FramesError> {
        self.run(vec![], f).await
    }

    /// Runs a call on a request body (an assessment, a commit): the frame and assessment it
    /// names are read back from the store first if they are not in memory; the answer waits
    /// until the call's writes are durable.
    pub async fn on_body<T>(
        &self,
        body: &[u8],
        f: impl FnOnce(&mut Engine<A>, u64) -> Result<Done<T>, FramesError>,
    ) -> Result<T, FramesError> {
        self.run(Engine::<A>::named_records(body), f).await
    }

    /// Runs a read-only engine call, answering after every earlier batch is durable.
    pub async fn read<T>(
        &self,
        f: impl FnOnce(&Engine<A>) -> Result<T, FramesError>,
    ) -> Result<T, FramesError> {
        self.read_named(vec![], f).await
    }

    /// [`Dgp::read`] of a call that names a stored frame or assessment.
    pub async fn read_named<T>(
        &self,
        names: Vec<(RecordKind, String)>,
        f: impl FnOnce(&Engine<A>) -> Result<T, FramesError>,
    ) -> Result<T, FramesError> {
        self.run(names, |e, _| {
            f(e).map(|value| Done {
                value,
                writes: vec![],
            })
        })
        .await
    }

    /// Reads the named records the engine lacks from the store (a frame may need its snapshot
    /// first). Point reads by primary key, under the engine lock.
    fn prefetch(
        &self,
        engine: &mut Engine<A>,
        now: u64,
        mut stack: Vec<(RecordKind, String)>,
    ) -> Result<(), FramesError> {
        let mut steps = 0;
        while let Some((kind, key)) = stack.pop() {
            steps += 1;
            if steps > 8 || !engine.needs(kind, &key) {
                continue;
            }
            let Some(bytes) = self.store.get(NS, kind.as_str(), &key).map_err(storage)? else {
                continue;
            };
            if let Some(dep) = engine.admit(now, kind, &key, &bytes)? {
                stack.push((kind, key));
                stack.push(dep);
            }
        }
        Ok(())
    }

    async fn run<T>(
        &self,
        names: Vec<(RecordKind, String)>,
        f: impl FnOnce(&mut Engine<A>, u64) -> Result<Done<T>, FramesError>,
    ) -> Result<T, FramesError> {
        if let Some(e) = self.store.failure() {
            return Err(storage(e));
        }
        let (result, ticket) = {
            let mut engine = self.engine.lock().expect("engine lock");
            let now = now_ms();
            let fetched = self.prefetch(&mut engine, now, names);
            let (result, writes) = match fetched.and_then(|()| f(&mut engine, now)) {
                Ok(Done { value, writes }) => (Ok(value), writes),
                Err(e) => (Err(e), vec![]),
            };
            // Submitted under the lock, so batches reach the store in the order they were made.
            let ticket = if writes.is_empty() {
                self.store.barrier()
            } else {
                self.store.write(puts(writes))
            };
            (result, ticket)
        };
        ticket.durable().await.map_err(storage)?;
        result
    }

    /// What the engine holds in memory and has released.
    pub fn stats(&self) -> weft_core::frames::EngineStats {
        self.engine.lock().expect("engine lock").stats()
    }

    /// The store.
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }
}

/// Retention while running: the engine's sweep every second, and a walk over the stored frame
/// and assessment records (one batch every 100 ms) deleting those past retention.
async fn retention<A: App + Send + 'static>(dgp: Weak<Dgp<A>>)
where
    A::State: Send,
{
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let kinds = [RecordKind::Frame, RecordKind::Assessment];
    let (mut which, mut cursor, mut n) = (0usize, String::new(), 0u64);
    loop {
        tick.tick().await;
        let Some(d) = dgp.upgrade() else { return };
        if d.store.failure().is_some() {
            return;
        }
        n += 1;
        if n % 10 == 0 {
            let mut e = d.engine.lock().expect("engine lock");
            let done = e.sweep(now_ms(), 50_000);
            if !done.writes.is_empty() {
                d.store.background(puts(done.writes));
            }
        }
        let kind = kinds[which];
        let (store, after) = (d.store.clone(), cursor.clone());
        let rows = tokio::task::spawn_blocking(move || {
            store.scan(NS, kind.as_str(), &after, COMPACT_BATCH)
        })
        .await
        .ok()
        .and_then(Result::ok)
        .unwrap_or_default();
        if rows.len() < COMPACT_BATCH {
            which = (which + 1) % kinds.len();
            cursor.clear();
        } else if let Some((k, _)) = rows.last() {
            cursor = k.clone();
        }
        if !rows.is_empty() {
            let e = d.engine.lock().expect("engine lock");
            let deletes = e.compact(now_ms(), kind, &rows);
            if !deletes.is_empty() {
                d.store.background(puts(deletes));
            }
        }
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
        .route("/dgp/surfaces/{id}/logs/{log}", get(log_page::<A>))
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
            .frame(|e, now| e.frame_json(now, &id, d.as_deref(), h.as_deref()))
            .await
            .map(json_response),
    )
}

async fn log_page<A: App + Send + 'static>(
    State(c): State<Ctx<A>>,
    Path((id, log)): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Reply
where
    A::State: Send,
{
    authed!(c, headers);
    let (before, limit) = (q.get("before").cloned(), q.get("limit").cloned());
    Reply(
        c.dgp
            .read(|e| {
                e.log_page(&id, &log, before.as_deref(), limit.as_deref())
                    .map(|v| to_json(&v))
            })
            .await,
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
            .read_named(vec![(RecordKind::Frame, id.clone())], |e| {
                e.stored_frame(&id).map(|f| to_json(&f))
            })
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
            .read_named(vec![(RecordKind::Assessment, id.clone())], |e| {
                e.assessment(&id).map(|a| to_json(&*a))
            })
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
            .on_body(&body, |e, now| e.assess_bytes(now, &p, &body))
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
            .on_body(&body, |e, now| {
                e.commit_bytes(now, &p, key.as_deref(), &body)
            })
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
