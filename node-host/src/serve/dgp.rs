//! The DGP 0.1 HTTP binding (SPECIFICATION.md §12) over the core's frames engine.
//!
//! Every rule is in `weft_core::frames`; this module only carries requests in (principal from
//! the bearer token, time from the clock, raw bodies, stored records the engine asks for) and
//! results out (JSON or problem+json), and makes each write batch durable before it answers:
//! a frame, an assessment and a commit are answered only once fsynced (group commit). The
//! engine sits behind one mutex, so commits are serialized; freshness is still per resource, so
//! unrelated surfaces do not invalidate each other.
//!
//! On PostgreSQL (several instances on one database) the engine is a cache and the database
//! decides: a commit is one transaction under row locks on its read set ([`Dgp::commit`]),
//! memory changes after COMMIT, frame reads refresh a surface another instance moved, and a
//! `LISTEN` task refreshes every other instance's commits. Live changes of every instance go
//! to `GET /threaddesk/events` ([`Dgp::subscribe`]).
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
use weft_core::frames::types::Receipt;
use weft_core::frames::{
    App, COMMIT_LOCK_ATTEMPTS, Done, Engine, EngineConfig, FramesError, Principal, RecordKind,
    Refreshed, Write,
};

use super::pg::{self, PgStore, Pooled};
use super::store::{Put, Store};
use super::{Reply, Shared, json_response, now_ms};
use weft_core::Wall;

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
    /// Live changes for `GET /threaddesk/events`: `(event, JSON data)`, this instance's and
    /// (on PostgreSQL) every other instance's. `None` once the server stops.
    changes: Mutex<Option<tokio::sync::broadcast::Sender<Change>>>,
}

/// A live change: the SSE event name and its JSON data.
pub type Change = (&'static str, String);

/// Live changes buffered per subscriber before it must re-fetch (`event: reset`).
const CHANGES_BUFFER: usize = 256;

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
        mut config: EngineConfig,
        store: Arc<Store>,
    ) -> Result<Arc<Self>, String> {
        // Several instances on one database: ids carry this process's instance number.
        if let Some(pg) = store.postgres() {
            config.instance = Some(pg.instance);
        }
        let kinds: Vec<&str> = RecordKind::ALL
            .iter()
            .filter(|k| !ON_DEMAND.contains(k))
            .map(|k| k.as_str())
            .collect();
        let mut records = Vec::new();
        for (kind, key, value) in store.load_kinds(NS, &kinds).await? {
            let k = RecordKind::parse(&kind)
                .ok_or_else(|| format!("unknown record kind `{kind}` in the store"))?;
            records.push((k, key, value));
        }
        let (mut persist, engine) = Engine::open(app, config, records)
            .map_err(|e| e.to_string())?
            .split();
        // The seed is durable before the engine serves anything.
        store.write(puts(persist.take_writes())).durable().await?;
        let engine = engine.release(persist.ack());
        let limit = engine.config().max_message_bytes;
        let dgp = Arc::new(Dgp {
            engine: Mutex::new(engine),
            store,
            limit,
            changes: Mutex::new(Some(tokio::sync::broadcast::channel(CHANGES_BUFFER).0)),
        });
        tokio::spawn(retention(Arc::downgrade(&dgp)));
        if dgp.store.postgres().is_some() {
            tokio::spawn(listen(Arc::downgrade(&dgp)));
        }
        Ok(dgp)
    }

    /// Live changes from now on (`None` once the server stops).
    pub fn subscribe(&self) -> Option<tokio::sync::broadcast::Receiver<Change>> {
        self.changes
            .lock()
            .expect("changes lock")
            .as_ref()
            .map(|t| t.subscribe())
    }

    /// Ends every live stream (the server is stopping).
    pub fn close_changes(&self) {
        self.changes.lock().expect("changes lock").take();
    }

    fn publish(&self, event: &'static str, data: serde_json::Value) {
        if let Some(t) = self.changes.lock().expect("changes lock").as_ref() {
            let _ = t.send((event, data.to_string()));
        }
    }

    fn publish_commit(&self, surface: &str, revision: u64, receipt_id: &str) {
        self.publish(
            "surface",
            serde_json::json!({"surface": surface, "revision": revision, "receipt_id": receipt_id}),
        );
    }

    /// `POST /dgp/commits`. SQLite: the engine decides in memory ([`Dgp::on_body`]).
    /// PostgreSQL: the database decides ([`Dgp::commit_pg`]), in a task of its own so a
    /// dropped request (client gone, idle timeout, shutdown) cannot cancel it between COMMIT
    /// and `apply_commit`. Either way the change is published to live streams (SQLite: a
    /// replay publishes its receipt again).
    pub async fn commit(
        self: &Arc<Self>,
        principal: &Principal,
        key: Option<&str>,
        body: &[u8],
    ) -> Result<Arc<Receipt>, FramesError> {
        match self.store.postgres() {
            None => {
                let r = self
                    .on_body(body, |e, now| e.commit_bytes(now, principal, key, body))
                    .await?;
                let surface = r
                    .next_frame_href
                    .strip_prefix("/dgp/surfaces/")
                    .and_then(|s| s.strip_suffix("/frame"))
                    .and_then(super::decoded_path);
                if let Some(s) = surface {
                    self.publish_commit(&s, r.state_revision, &r.receipt_id);
                }
                Ok(r)
            }
            Some(pg) => {
                let (me, pg) = (Arc::clone(self), Arc::clone(pg));
                let (p, k, b) = (principal.clone(), key.map(str::to_owned), body.to_vec());
                tokio::spawn(async move { me.commit_pg(&pg, &p, k.as_deref(), &b).await })
                    .await
                    .map_err(|e| {
                        FramesError::InternalError(format!("the commit task failed: {e}"))
                    })?
            }
        }
    }

    /// A commit on PostgreSQL: one READ COMMITTED transaction that locks the idempotency key
    /// (advisory transaction lock), then the read set's rows in the engine's order (surfaces
    /// `FOR UPDATE`, the policy `FOR SHARE`), refreshes memory from them, decides
    /// (`prepare_commit_locked_bytes`: refused unless those rows are locked), writes the
    /// records and the notice, and COMMITs; memory changes (`apply_commit`) only after
    /// COMMIT. A failed COMMIT leaves nothing to undo. A read set that could not be locked
    /// (the frame left memory meanwhile) is retried from the prefetch, as the core bounds it.
    async fn commit_pg(
        &self,
        pg: &Arc<PgStore>,
        principal: &Principal,
        key: Option<&str>,
        body: &[u8],
    ) -> Result<Arc<Receipt>, FramesError> {
        if let Some(e) = self.store.failure() {
            return Err(storage(e));
        }
        let names = Engine::<A>::named_records(body);
        let mut attempt = 0;
        // The decision, its records COMMITted and acknowledged (`Prepared::split` → `ack`).
        let committed = loop {
            self.prefetch(names.clone()).await?;
            let mut c = pg.pool().get().await.map_err(storage)?;
            // Until COMMIT or ROLLBACK (from before BEGIN is sent), a dropped future must not
            // hand an open transaction back to the pool: a poisoned connection is closed
            // instead, and PostgreSQL rolls it back.
            c.poisoned = true;
            c.client
                .batch_execute(BEGIN_LOCKING)
                .await
                .map_err(|e| storage(pg::err(e)))?;
            match self
                .decide_pg(pg, &mut c, principal, key, body, attempt)
                .await
            {
                Ok(p) => {
                    c.poisoned = false;
                    break p;
                }
                Err(e) => {
                    c.poisoned = c.client.batch_execute("ROLLBACK").await.is_err();
                    attempt += 1;
                    if matches!(e, FramesError::ScopesNotLocked(_))
                        && attempt < COMMIT_LOCK_ATTEMPTS
                    {
                        continue;
                    }
                    return Err(e);
                }
            }
        };
        let change = committed
            .replay
            .is_none()
            .then(|| (committed.surface_id.clone(), committed.revision));
        let done = {
            let mut engine = self.engine.lock().expect("engine lock");
            engine.apply_commit(committed)
        };
        // The commit's own records were COMMITted; what follows are retention deletions,
        // written in the background (the receipt does not wait for them).
        let (persist, pending) = done.split();
        let (writes, handed) = persist.hand_off();
        if !writes.is_empty() {
            self.store.background(puts(writes));
        }
        let receipt = pending.release(handed);
        if let Some((surface, revision)) = change {
            self.publish_commit(&surface, revision, &receipt.receipt_id);
        }
        Ok(receipt)
    }

    /// The transaction of [`Dgp::commit_pg`] up to and including COMMIT (the caller rolls
    /// back on an error).
    async fn decide_pg(
        &self,
        pg: &Arc<PgStore>,
        c: &mut Pooled,
        principal: &Principal,
        key: Option<&str>,
        body: &[u8],
        attempt: u32,
    ) -> Result<weft_core::frames::Committed<A::State>, FramesError> {
        let db = |e: tokio_postgres::Error| storage(pg::err(e));
        // 1. The idempotency key: one decision per key across instances.
        if let Some(k) = Engine::<A>::usable_idempotency_key(key) {
            let lock = format!("weft-idem:{}:{k}", principal.id);
            c.client
                .execute(
                    "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
                    &[&lock],
                )
                .await
                .map_err(db)?;
            let ik = Engine::<A>::idempotency_key(&principal.id, k);
            if let Some(v) = get_in(c, RecordKind::Idempotency, &ik).await? {
                let rid = {
                    let mut e = self.engine.lock().expect("engine lock");
                    e.refresh(RecordKind::Idempotency, &ik, &v)?;
                    e.idempotent_receipt(&principal.id, k)
                        .filter(|rid| e.needs(RecordKind::Receipt, rid))
                        .map(str::to_owned)
                };
                if let Some(rid) = rid
                    && let Some(v) = get_in(c, RecordKind::Receipt, &rid).await?
                {
                    let mut e = self.engine.lock().expect("engine lock");
                    e.refresh(RecordKind::Receipt, &rid, &v)?;
                }
            }
        }
        // 2. The read set's rows, locked in the engine's order.
        let frame = Engine::<A>::named_records(body)
            .into_iter()
            .find(|(k, _)| *k == RecordKind::Frame)
            .map(|(_, id)| id)
            .unwrap_or_default();
        let scopes = self.engine.lock().expect("engine lock").scopes(&frame);
        let mut rows = Vec::new();
        for (kind, key) in &scopes {
            let sql = if *kind == RecordKind::Surface {
                LOCK_SURFACE
            } else {
                LOCK_POLICY
            };
            let st = c.stmt(sql).await.map_err(storage)?;
            let row = c
                .client
                .query_opt(&st, &[&NS, &kind.as_str(), key])
                .await
                .map_err(db)?;
            if let Some(r) = row {
                rows.push((*kind, key.clone(), r.get::<_, Vec<u8>>(0)));
            }
        }
        // 3. Memory catches up with the rows (log items before their surface), then decides.
        let moved = self.moved_surfaces(&rows);
        let mut items = Vec::new();
        for sid in &moved {
            let held = self.engine.lock().expect("engine lock").log_lens(sid);
            items.extend(log_items_in::<A>(c, sid, held).await?);
        }
        let prepared = {
            let mut e = self.engine.lock().expect("engine lock");
            refresh_all(&mut e, items, rows)?;
            e.prepare_commit_locked_bytes(
                Wall::from_ms(now_ms()),
                principal,
                key,
                body,
                &scopes,
                attempt,
            )?
        };
        if prepared.replay.is_some() {
            c.client.batch_execute("COMMIT").await.map_err(db)?;
            let (persist, pending) = prepared.split();
            return Ok(pending.release(persist.ack()));
        }
        // 4. The records, the notice, COMMIT; the decision is released only after COMMIT.
        let notice = notice(
            pg.instance,
            &prepared.surface_id,
            prepared.revision,
            prepared.writes(),
        );
        let (persist, pending) = prepared.split();
        pg::write_in(c, puts(persist.writes().to_vec()))
            .await
            .map_err(storage)?;
        c.client
            .execute("SELECT pg_notify($1, $2)", &[&pg::CHANNEL, &notice])
            .await
            .map_err(db)?;
        c.client.batch_execute("COMMIT").await.map_err(db)?;
        Ok(pending.release(persist.ack()))
    }

    /// The surfaces among `rows` whose stored revision is newer than memory's.
    fn moved_surfaces(&self, rows: &[(RecordKind, String, Vec<u8>)]) -> Vec<String> {
        let e = self.engine.lock().expect("engine lock");
        rows.iter()
            .filter(|(k, _, _)| *k == RecordKind::Surface)
            .filter(|(_, sid, v)| {
                let stored = serde_json::from_slice::<serde_json::Value>(v)
                    .ok()
                    .and_then(|v| v["revision"].as_u64())
                    .unwrap_or(0);
                stored > e.surface_state(sid).map_or(0, |s| s.1)
            })
            .map(|(_, sid, _)| sid.clone())
            .collect()
    }

    /// Before a frame is built on PostgreSQL: one point read of the surface and policy rows,
    /// and a refresh when another instance moved them, so reads are monotonic across
    /// instances (a client never sees an older revision after a newer one elsewhere).
    async fn sync_surface(&self, surface: &str) -> Result<(), FramesError> {
        let Some(pg) = self.store.postgres() else {
            return Ok(());
        };
        let mut c = pg.pool().get().await.map_err(storage)?;
        let wanted = [
            (RecordKind::Surface, surface.to_owned()),
            (RecordKind::Meta, "policy_revision".to_owned()),
        ];
        let rows = get_many_in(&mut c, &wanted).await?;
        let mut items = Vec::new();
        for sid in self.moved_surfaces(&rows) {
            let held = self.engine.lock().expect("engine lock").log_lens(&sid);
            items.extend(log_items_in::<A>(&mut c, &sid, held).await?);
        }
        drop(c);
        let mut e = self.engine.lock().expect("engine lock");
        refresh_all(&mut e, items, rows)
    }

    /// The human-only policy change: on PostgreSQL under the policy row's lock (`FOR
    /// UPDATE`, so no commit decides against the old revision meanwhile), with its notice.
    pub async fn bump_policy(&self) -> Result<u64, FramesError> {
        let Some(pg) = self.store.postgres() else {
            let rev = self.call(|e, _| Ok(e.bump_policy())).await?;
            self.publish("policy", serde_json::json!({"revision": rev}));
            return Ok(rev);
        };
        if let Some(e) = self.store.failure() {
            return Err(storage(e));
        }
        let db = |e: tokio_postgres::Error| storage(pg::err(e));
        let mut c = pg.pool().get().await.map_err(storage)?;
        // As in a commit: never back to the pool inside the transaction (set before BEGIN).
        c.poisoned = true;
        c.client.batch_execute(BEGIN_LOCKING).await.map_err(db)?;
        // Memory changes only after COMMIT: the bump is decided on the locked row
        // (`prepare_bump_policy`) and taken in by refreshing its own write afterwards.
        let decided = async {
            let st = c.stmt(LOCK_POLICY_UPDATE).await.map_err(storage)?;
            let row = c
                .client
                .query_opt(&st, &[&NS, &"meta", &"policy_revision"])
                .await
                .map_err(db)?
                .map(|r| r.get::<_, Vec<u8>>(0));
            let done = {
                let mut e = self.engine.lock().expect("engine lock");
                if let Some(v) = &row {
                    e.refresh(RecordKind::Meta, "policy_revision", v)?;
                }
                e.prepare_bump_policy().split()
            };
            // The revision the bump decides goes into the notice of the same transaction; it
            // is answered only after COMMIT.
            let notice =
                serde_json::json!({"i": format!("{:016x}", pg.instance), "p": done.1.peek()})
                    .to_string();
            pg::write_in(&mut c, puts(done.0.writes().to_vec()))
                .await
                .map_err(storage)?;
            c.client
                .execute("SELECT pg_notify($1, $2)", &[&pg::CHANNEL, &notice])
                .await
                .map_err(db)?;
            c.client.batch_execute("COMMIT").await.map_err(db)?;
            Ok::<_, FramesError>(done)
        }
        .await;
        let (persist, pending) = match decided {
            Ok(d) => d,
            Err(e) => {
                c.poisoned = c.client.batch_execute("ROLLBACK").await.is_err();
                return Err(e);
            }
        };
        c.poisoned = false;
        drop(c);
        {
            let mut e = self.engine.lock().expect("engine lock");
            for w in persist.writes() {
                e.refresh(w.kind, &w.key, &w.value)?;
            }
        }
        // COMMITted and taken in: the revision may be answered.
        let revision = pending.release(persist.ack());
        self.publish("policy", serde_json::json!({"revision": revision}));
        Ok(revision)
    }

    /// Takes another instance's notice into memory: the records it names (or, for a notice
    /// too large to list them, the surface and its log), then the surface and policy rows.
    async fn absorb_notice(&self, pg: &Arc<PgStore>, payload: &str) -> Result<(), FramesError> {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(payload) else {
            return Ok(());
        };
        if v["i"].as_str() == Some(&format!("{:016x}", pg.instance)) {
            return Ok(()); // our own commit, applied after its COMMIT
        }
        if v["s"].is_string() && v["w"].is_null() {
            // Too large to list its records (entries are not otherwise findable).
            return self.absorb_all(pg).await;
        }
        let mut wanted = vec![(RecordKind::Meta, "policy_revision".to_owned())];
        let mut surfaces = Vec::new();
        if let Some(sid) = v["s"].as_str() {
            wanted.push((RecordKind::Surface, sid.to_owned()));
            surfaces.push(sid.to_owned());
        }
        for w in v["w"].as_array().into_iter().flatten() {
            if let (Some(kind), Some(key)) =
                (w[0].as_str().and_then(RecordKind::parse), w[1].as_str())
            {
                wanted.push((kind, key.to_owned()));
            }
        }
        let mut c = pg.pool().get().await.map_err(storage)?;
        let rows = get_many_in(&mut c, &wanted).await?;
        let mut items = Vec::new();
        for sid in self.moved_surfaces(&rows) {
            let held = self.engine.lock().expect("engine lock").log_lens(&sid);
            items.extend(log_items_in::<A>(&mut c, &sid, held).await?);
        }
        drop(c);
        refresh_all(&mut self.engine.lock().expect("engine lock"), items, rows)?;
        if let Some(rev) = v["p"].as_u64() {
            self.publish("policy", serde_json::json!({"revision": rev}));
        }
        if let (Some(s), Some(r)) = (v["s"].as_str(), v["r"].as_u64()) {
            self.publish_commit(s, r, v["rc"].as_str().unwrap_or(""));
        }
        Ok(())
    }

    /// Everything another instance may have changed while the listener was away: every
    /// surface, log, entry and blob's metadata, and the policy.
    async fn absorb_all(&self, pg: &Arc<PgStore>) -> Result<(), FramesError> {
        let kinds = [
            RecordKind::LogItem,
            RecordKind::Entry,
            RecordKind::BlobMeta,
            RecordKind::Surface,
            RecordKind::Meta,
        ]
        .map(RecordKind::as_str);
        let all = pg.load_kinds(NS, &kinds).await.map_err(storage)?;
        let mut items = Vec::new();
        let mut rows = Vec::new();
        for (kind, key, value) in all {
            match RecordKind::parse(&kind) {
                Some(RecordKind::LogItem) => items.push((key, value)),
                Some(k) => rows.push((k, key, value)),
                None => {}
            }
        }
        let mut e = self.engine.lock().expect("engine lock");
        refresh_all(&mut e, items, rows)
    }

    /// Runs an engine call whose writes change state (a commit, a policy change): the answer
    /// waits until they are durable. Errors and replays wait for every earlier batch, so no
    /// answer is ahead of durable state.
    pub async fn call<T>(
        &self,
        f: impl FnOnce(&mut Engine<A>, Wall) -> Result<Done<T>, FramesError>,
    ) -> Result<T, FramesError> {
        self.run(vec![], f).await
    }

    /// Creates a frame: answered once its record is durable (later requests name it).
    pub async fn frame<T>(
        &self,
        f: impl FnOnce(&mut Engine<A>, Wall) -> Result<Done<T>, FramesError>,
    ) -> Result<T, FramesError> {
        self.run(vec![], f).await
    }

    /// Runs a call on a request body (an assessment, a commit): the frame and assessment it
    /// names are read back from the store first if they are not in memory; the answer waits
    /// until the call's writes are durable.
    pub async fn on_body<T>(
        &self,
        body: &[u8],
        f: impl FnOnce(&mut Engine<A>, Wall) -> Result<Done<T>, FramesError>,
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
        self.run(names, |e, _| f(e).map(Done::clean)).await
    }

    /// Reads the named records the engine lacks from the store (a frame may need its snapshot
    /// first): point reads by primary key, without the engine lock (these records are
    /// immutable), each admitted under a brief lock.
    async fn prefetch(&self, mut stack: Vec<(RecordKind, String)>) -> Result<(), FramesError> {
        let mut steps = 0;
        while let Some((kind, key)) = stack.pop() {
            steps += 1;
            if steps > 8 || !self.engine.lock().expect("engine lock").needs(kind, &key) {
                continue;
            }
            let Some(bytes) = self
                .store
                .get(NS, kind.as_str(), &key)
                .await
                .map_err(storage)?
            else {
                continue;
            };
            let mut engine = self.engine.lock().expect("engine lock");
            if let Some(dep) = engine.admit(Wall::from_ms(now_ms()), kind, &key, &bytes)? {
                stack.push((kind, key));
                stack.push(dep);
            }
        }
        Ok(())
    }

    async fn run<T>(
        &self,
        names: Vec<(RecordKind, String)>,
        f: impl FnOnce(&mut Engine<A>, Wall) -> Result<Done<T>, FramesError>,
    ) -> Result<T, FramesError> {
        if let Some(e) = self.store.failure() {
            return Err(storage(e));
        }
        let fetched = self.prefetch(names).await;
        let (result, ticket) = {
            let mut engine = self.engine.lock().expect("engine lock");
            let now = Wall::from_ms(now_ms());
            let (result, ticket) = match fetched.and_then(|()| f(&mut engine, now)) {
                Ok(done) => {
                    let (mut persist, pending) = done.split();
                    // Submitted under the lock, so batches reach the store in the order they
                    // were made.
                    let ticket = if persist.is_empty() {
                        self.store.barrier()
                    } else {
                        self.store.write(puts(persist.take_writes()))
                    };
                    (Ok((persist, pending)), ticket)
                }
                Err(e) => (Err(e), self.store.barrier()),
            };
            (result, ticket)
        };
        ticket.durable().await.map_err(storage)?;
        // Durable (fsync, or every earlier batch for an error): the value may be answered.
        result.map(|(persist, pending)| pending.release(persist.ack()))
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
            // Retention deletions: written in the background.
            let (persist, pending) = e.sweep(Wall::from_ms(now_ms()), 50_000).split();
            let (writes, handed) = persist.hand_off();
            if !writes.is_empty() {
                d.store.background(puts(writes));
            }
            let _swept = pending.release(handed);
        }
        let kind = kinds[which];
        // Several instances on one database: only the holder of the retention lock walks.
        if let Some(pg) = d.store.postgres() {
            let held = if n % 10 == 1 {
                pg.retention_holder().await
            } else {
                pg.holds_retention().await
            };
            if !held {
                continue;
            }
        }
        let rows = d
            .store
            .scan(NS, kind.as_str(), cursor.clone(), COMPACT_BATCH)
            .await
            .unwrap_or_default();
        if rows.len() < COMPACT_BATCH {
            which = (which + 1) % kinds.len();
            cursor.clear();
        } else if let Some((k, _)) = rows.last() {
            cursor = k.clone();
        }
        if !rows.is_empty() {
            let e = d.engine.lock().expect("engine lock");
            let deletes = e.compact(Wall::from_ms(now_ms()), kind, &rows);
            if !deletes.is_empty() {
                d.store.background(puts(deletes));
            }
        }
    }
}

/// A deciding transaction (commit, policy change): a row lock waited for past 5 s fails it
/// (SQLSTATE 55P03), answered as the retryable `STORAGE_FAILURE`, instead of queueing forever.
const BEGIN_LOCKING: &str = "BEGIN; SET LOCAL lock_timeout = '5s'";

const LOCK_SURFACE: &str =
    "SELECT value FROM weft_records WHERE ns = $1 AND kind = $2 AND key = $3 FOR UPDATE";
const LOCK_POLICY: &str =
    "SELECT value FROM weft_records WHERE ns = $1 AND kind = $2 AND key = $3 FOR SHARE";
const LOCK_POLICY_UPDATE: &str = LOCK_SURFACE;

/// Notices buffered between the LISTEN connection and the refresh; past it they are
/// dropped and the receiver refreshes everything once.
const NOTICES_BUFFER: usize = 1024;

/// The largest notice payload sent (PostgreSQL's limit is 8000 bytes); past it the notice
/// names only the surface, and receivers read its rows and log.
const NOTICE_LIMIT: usize = 7000;

/// A commit's notice: the instance, surface, revision and the records other instances
/// refresh (entries are not otherwise findable).
fn notice(instance: u64, surface: &str, revision: u64, writes: &[Write]) -> String {
    let held = [
        RecordKind::LogItem,
        RecordKind::Entry,
        RecordKind::BlobMeta,
        RecordKind::Receipt,
        RecordKind::Idempotency,
    ];
    let w: Vec<[&str; 2]> = writes
        .iter()
        .filter(|w| held.contains(&w.kind) && !w.is_delete())
        .map(|w| [w.kind.as_str(), w.key.as_str()])
        .collect();
    let i = format!("{instance:016x}");
    let rc = writes
        .iter()
        .find(|w| w.kind == RecordKind::Receipt)
        .map_or("", |w| w.key.as_str());
    let full =
        serde_json::json!({"i": i, "s": surface, "r": revision, "rc": rc, "w": w}).to_string();
    if full.len() <= NOTICE_LIMIT {
        full
    } else {
        serde_json::json!({"i": i, "s": surface, "r": revision, "rc": rc}).to_string()
    }
}

/// One record, read on a connection (inside its transaction, if one is open).
async fn get_in(
    c: &mut Pooled,
    kind: RecordKind,
    key: &str,
) -> Result<Option<Vec<u8>>, FramesError> {
    let st = c.stmt(pg::GET).await.map_err(storage)?;
    Ok(c.client
        .query_opt(&st, &[&NS, &kind.as_str(), &key])
        .await
        .map_err(|e| storage(pg::err(e)))?
        .map(|r| r.get(0)))
}

/// The stored ones of these records.
async fn get_many_in(
    c: &mut Pooled,
    wanted: &[(RecordKind, String)],
) -> Result<Vec<(RecordKind, String, Vec<u8>)>, FramesError> {
    let st = c.stmt(pg::GET_MANY).await.map_err(storage)?;
    let kinds: Vec<&str> = wanted.iter().map(|(k, _)| k.as_str()).collect();
    let keys: Vec<&str> = wanted.iter().map(|(_, k)| k.as_str()).collect();
    Ok(c.client
        .query(&st, &[&NS, &kinds, &keys])
        .await
        .map_err(|e| storage(pg::err(e)))?
        .into_iter()
        .filter_map(|r| {
            let kind = RecordKind::parse(r.get::<_, &str>(0))?;
            Some((kind, r.get(1), r.get(2)))
        })
        .collect())
}

/// The stored log items of a surface that memory does not hold yet (`held`: its logs and
/// their lengths), as `(key, value)`.
async fn log_items_in<A: App>(
    c: &mut Pooled,
    surface: &str,
    held: Vec<(String, u64)>,
) -> Result<Vec<(String, Vec<u8>)>, FramesError> {
    let (from, to) = Engine::<A>::log_key_range(surface);
    let logs: Vec<&str> = held.iter().map(|(l, _)| l.as_str()).collect();
    let lens: Vec<i64> = held.iter().map(|(_, n)| *n as i64).collect();
    let st = c.stmt(pg::NEW_LOG_ITEMS).await.map_err(storage)?;
    Ok(c.client
        .query(
            &st,
            &[&NS, &RecordKind::LogItem.as_str(), &from, &to, &logs, &lens],
        )
        .await
        .map_err(|e| storage(pg::err(e)))?
        .into_iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect())
}

/// Refreshes memory from records another instance wrote, in the engine's order: log items
/// by (surface, log, index), entries, blob metadata, receipts, idempotency records, then
/// surfaces and the policy.
fn refresh_all<A: App>(
    e: &mut Engine<A>,
    items: Vec<(String, Vec<u8>)>,
    rows: Vec<(RecordKind, String, Vec<u8>)>,
) -> Result<(), FramesError> {
    // ((surface, log, index), key, value)
    type Item = ((String, String, u64), String, Vec<u8>);
    let mut items: Vec<Item> = items
        .into_iter()
        .filter_map(|(k, v)| Some((serde_json::from_str(&k).ok()?, k, v)))
        .collect();
    items.sort_by(|a, b| a.0.cmp(&b.0));
    let mut behind = std::collections::HashSet::new();
    for ((sid, _, _), key, value) in items {
        if behind.contains(&sid) {
            continue;
        }
        if e.refresh(RecordKind::LogItem, &key, &value)? == Refreshed::Gap {
            behind.insert(sid); // a log not contiguous in the store: its surface stays behind
        }
    }
    let rank = |k: RecordKind| match k {
        RecordKind::LogItem => 0,
        RecordKind::Entry => 1,
        RecordKind::BlobMeta => 2,
        RecordKind::Receipt => 3,
        RecordKind::Idempotency => 4,
        RecordKind::Surface => 5,
        _ => 6,
    };
    let mut rows = rows;
    rows.sort_by_key(|(k, _, _)| rank(*k));
    for (kind, key, value) in rows {
        if kind == RecordKind::Surface && behind.contains(&key) {
            continue;
        }
        e.refresh(kind, &key, &value)?;
    }
    Ok(())
}

/// Another instance's commits and policy changes, as PostgreSQL notices them (`LISTEN`, one
/// connection of its own): each is refreshed into memory. After a lost connection it
/// reconnects and refreshes everything it may have missed.
async fn listen<A: App + Send + 'static>(dgp: Weak<Dgp<A>>)
where
    A::State: Send,
{
    use futures_util::future::poll_fn;
    use tokio_postgres::AsyncMessage;
    loop {
        let Some(pg) = dgp.upgrade().and_then(|d| d.store.postgres().cloned()) else {
            return;
        };
        let connected = pg.config().connect(tokio_postgres::NoTls).await;
        let Ok((client, mut conn)) = connected else {
            drop(pg);
            tokio::time::sleep(Duration::from_millis(500)).await;
            continue;
        };
        let (tx, mut rx) = tokio::sync::mpsc::channel::<String>(NOTICES_BUFFER);
        // Set when a notice was dropped (the buffer was full): the receiver refreshes all.
        let missed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = Arc::clone(&missed);
        let driver = tokio::spawn(async move {
            use tokio::sync::mpsc::error::TrySendError;
            while let Some(m) = poll_fn(|cx| conn.poll_message(cx)).await {
                match m {
                    Ok(AsyncMessage::Notification(n)) => {
                        match tx.try_send(n.payload().to_owned()) {
                            Ok(()) => {}
                            Err(TrySendError::Full(_)) => {
                                // The receiver has a full buffer to read, then sees the flag.
                                flag.store(true, std::sync::atomic::Ordering::SeqCst);
                            }
                            Err(TrySendError::Closed(_)) => return,
                        }
                    }
                    Ok(_) => {}
                    Err(_) => return,
                }
            }
        });
        if client
            .batch_execute(&format!("LISTEN {}", pg::CHANNEL))
            .await
            .is_err()
        {
            driver.abort();
            continue;
        }
        // What was committed before LISTEN took effect (at start, or while reconnecting).
        if let Some(d) = dgp.upgrade() {
            let _ = d.absorb_all(&pg).await;
        }
        drop(pg);
        while let Some(payload) = rx.recv().await {
            let Some(d) = dgp.upgrade() else {
                driver.abort();
                return;
            };
            let Some(pg) = d.store.postgres().cloned() else {
                return;
            };
            let dropped = missed.swap(false, std::sync::atomic::Ordering::SeqCst);
            let absorbed = if dropped {
                Ok(())
            } else {
                d.absorb_notice(&pg, &payload).await
            };
            if dropped || absorbed.is_err() {
                if let Err(e) = &absorbed {
                    eprintln!("weft serve: a notice from another instance: {e}; refreshing all");
                }
                if let Err(e) = d.absorb_all(&pg).await {
                    eprintln!("weft serve: refreshing after a lost notice: {e}");
                }
            }
        }
        drop(client);
        tokio::time::sleep(Duration::from_millis(200)).await;
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
    if let Err(e) = c.dgp.sync_surface(&id).await {
        return Reply(Err(e));
    }
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
    // Read through: another instance's receipt may not be in memory yet.
    Reply(
        c.dgp
            .read_named(vec![(RecordKind::Receipt, id.clone())], |e| {
                e.receipt(&id).map(|r| to_json(&*r))
            })
            .await,
    )
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
            .commit(&p, key.as_deref(), &body)
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
    let bytes = match c.dgp.store().as_ref() {
        Store::Sqlite(s) => {
            let s = s.clone();
            tokio::task::spawn_blocking(move || s.get(NS, RecordKind::Blob.as_str(), &key))
                .await
                .map_err(|e| e.to_string())
                .and_then(|r| r)
        }
        pg => pg.get(NS, RecordKind::Blob.as_str(), &key).await,
    };
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
