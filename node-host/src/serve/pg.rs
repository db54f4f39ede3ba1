//! The PostgreSQL store of `weft serve --store postgres://…`: the same `(ns, kind, key) ->
//! value` table as SQLite (`weft_records`, keys in byte order: `COLLATE "C"`), shared by
//! several instances. Each instance's engine is a cache; the database decides.
//!
//! - Writes that are not commits (frames, assessments, snapshots, seeds, retention deletions)
//!   go through one writer task with group commit: one transaction per batch of queued
//!   writes, one `unnest` upsert; an answer waits for its batch (another instance may be asked
//!   about the frame next).
//! - A commit is one READ COMMITTED transaction under row locks on its read set
//!   ([`super::dgp::Dgp::commit`]): an advisory transaction lock on the idempotency key, then
//!   `FOR UPDATE` on the surface row and `FOR SHARE` on the policy row, in that fixed order
//!   (no deadlocks, no global lock: unrelated surfaces commit in parallel). The notice of a
//!   commit (`pg_notify`) is sent inside its transaction, so it goes out exactly when the
//!   commit is durable.
//! - A new database is created and seeded under a session advisory lock; the compaction walk
//!   of retention runs only on the instance holding the retention lock (taken over when that
//!   instance dies, since PostgreSQL releases a dead session's locks).
//!
//! Connections come from a small pool (a semaphore and a list of idle clients with their
//! prepared statements); a closed client is dropped and replaced on the next checkout.

use std::collections::{BTreeMap, HashMap};
use std::ops::{Deref, DerefMut};
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot};
use tokio_postgres::{Client, Config, NoTls, Statement};

use super::store::{Put, Ticket};

/// The durability settings, as `weft serve` reports them.
pub const DURABILITY: &str = "PostgreSQL, synchronous_commit as the server sets it (on by default): frames, assessments and commits are answered once committed; commits decided under row locks, so several instances may share the database";

/// The schema version in `weft_schema`.
const SCHEMA_VERSION: i32 = 1;

/// Session advisory lock keys (arbitrary constants, "weft" + a number).
const SEED_LOCK: i64 = 0x7765_6674_0000_0001;
const RETENTION_LOCK: i64 = 0x7765_6674_0000_0002;

/// The notification channel of commits and policy changes.
pub const CHANNEL: &str = "weft_dgp";

const SCHEMA: &str = r#"
CREATE TABLE IF NOT EXISTS weft_records(
    ns text NOT NULL, kind text NOT NULL, key text COLLATE "C" NOT NULL, value bytea NOT NULL,
    PRIMARY KEY(ns, kind, key));
CREATE TABLE IF NOT EXISTS weft_schema(version integer NOT NULL);
"#;

pub(super) const UPSERT: &str = "INSERT INTO weft_records(ns, kind, key, value) \
     SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bytea[]) \
     ON CONFLICT (ns, kind, key) DO UPDATE SET value = EXCLUDED.value";
pub(super) const DELETE: &str = "DELETE FROM weft_records r \
     USING unnest($1::text[], $2::text[], $3::text[]) AS d(ns, kind, key) \
     WHERE r.ns = d.ns AND r.kind = d.kind AND r.key = d.key";
pub(super) const GET: &str =
    "SELECT value FROM weft_records WHERE ns = $1 AND kind = $2 AND key = $3";
const LOAD: &str = "SELECT key, value FROM weft_records WHERE ns = $1 AND kind = $2";
const SCAN: &str = "SELECT key, value FROM weft_records \
     WHERE ns = $1 AND kind = $2 AND key > $3 ORDER BY key LIMIT $4";
/// Records by `(kind, key)` pairs.
pub(super) const GET_MANY: &str = "SELECT r.kind, r.key, r.value FROM weft_records r \
     JOIN unnest($2::text[], $3::text[]) AS d(kind, key) ON r.kind = d.kind AND r.key = d.key \
     WHERE r.ns = $1";
/// The log items of a surface (keys in `[from, to)`) past what memory holds: `$5`/`$6` are
/// the held logs and their lengths (a log item's key is `["surface","log",index]`).
pub(super) const NEW_LOG_ITEMS: &str = "SELECT key, value FROM weft_records r \
     WHERE ns = $1 AND kind = $2 AND key >= $3 AND key < $4 \
     AND NOT EXISTS (SELECT 1 FROM unnest($5::text[], $6::int8[]) AS h(log, n) \
         WHERE h.log = (r.key::jsonb)->>1 AND ((r.key::jsonb)->>2)::int8 < h.n)";

fn pg_err(e: tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(d) => format!("PostgreSQL: {}: {}", d.code().code(), d.message()),
        None => match std::error::Error::source(&e) {
            Some(cause) => format!("PostgreSQL: {e}: {cause}"),
            None => format!("PostgreSQL: {e}"),
        },
    }
}

/// Formats a PostgreSQL error.
pub(super) fn err(e: tokio_postgres::Error) -> String {
    pg_err(e)
}

/// One connection with its prepared statements.
pub struct PgConn {
    pub client: Client,
    stmts: HashMap<&'static str, Statement>,
}

impl PgConn {
    /// The prepared statement of `sql` (prepared once per connection).
    pub async fn stmt(&mut self, sql: &'static str) -> Result<Statement, String> {
        if let Some(s) = self.stmts.get(sql) {
            return Ok(s.clone());
        }
        let s = self.client.prepare(sql).await.map_err(pg_err)?;
        self.stmts.insert(sql, s.clone());
        Ok(s)
    }
}

/// A small connection pool: at most `size` connections checked out at once.
pub struct Pool {
    config: Config,
    permits: Arc<Semaphore>,
    /// The configured number of connections (the banner's "pool of N").
    size: usize,
    idle: Mutex<Vec<PgConn>>,
}

/// A checked-out connection; back to the pool on drop unless it closed (or was poisoned).
pub struct Pooled {
    pool: Arc<Pool>,
    conn: Option<PgConn>,
    /// Set while a session-level state (a lock) would leak to the next user.
    pub poisoned: bool,
    _permit: OwnedSemaphorePermit,
}

impl Deref for Pooled {
    type Target = PgConn;
    fn deref(&self) -> &PgConn {
        self.conn.as_ref().expect("a pooled connection")
    }
}

impl DerefMut for Pooled {
    fn deref_mut(&mut self) -> &mut PgConn {
        self.conn.as_mut().expect("a pooled connection")
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        if let Some(c) = self.conn.take()
            && !self.poisoned
            && !c.client.is_closed()
        {
            self.pool.idle.lock().expect("pool lock").push(c);
        }
    }
}

/// Opens one connection and drives it on a task.
pub async fn connect(config: &Config) -> Result<Client, String> {
    let (client, conn) = config.connect(NoTls).await.map_err(pg_err)?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(client)
}

impl Pool {
    fn new(config: Config, size: usize) -> Arc<Pool> {
        Arc::new(Pool {
            config,
            permits: Arc::new(Semaphore::new(size.max(1))),
            size: size.max(1),
            idle: Mutex::new(Vec::new()),
        })
    }

    /// A connection: an idle one, or a new one.
    pub async fn get(self: &Arc<Self>) -> Result<Pooled, String> {
        let permit = self
            .permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| "the pool is closed".to_owned())?;
        let idle = loop {
            let c = self.idle.lock().expect("pool lock").pop();
            match c {
                Some(c) if c.client.is_closed() => continue,
                other => break other,
            }
        };
        let conn = match idle {
            Some(c) => c,
            None => PgConn {
                client: connect(&self.config).await?,
                stmts: HashMap::new(),
            },
        };
        Ok(Pooled {
            pool: self.clone(),
            conn: Some(conn),
            poisoned: false,
            _permit: permit,
        })
    }
}

type Reply = oneshot::Sender<Result<(), String>>;

enum Job {
    Write { puts: Vec<Put>, done: Option<Reply> },
    Barrier(Reply),
}

/// The PostgreSQL store.
pub struct PgStore {
    pool: Arc<Pool>,
    config: Config,
    tx: Mutex<Option<mpsc::UnboundedSender<Job>>>,
    writer: tokio::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
    failed: Arc<Mutex<Option<String>>>,
    /// Batches queued and not yet committed (a read waits only when there are some).
    pending: Arc<AtomicU64>,
    /// This process's instance number (random): ids it mints and notices it sends carry it.
    pub instance: u64,
    /// The connection that asks for the retention lock (kept between polls) and whether it
    /// holds it.
    retention: tokio::sync::Mutex<Option<(Client, bool)>>,
}

/// The batch's final value of each record (a batch may write one record twice), split into
/// upserts and deletions.
fn last_writes(puts: impl IntoIterator<Item = Put>) -> (Vec<Put>, Vec<Put>) {
    let mut last: BTreeMap<(&'static str, &'static str, String), Vec<u8>> = BTreeMap::new();
    for p in puts {
        last.insert((p.ns, p.kind, p.key), p.value);
    }
    let (mut up, mut del) = (Vec::new(), Vec::new());
    for ((ns, kind, key), value) in last {
        let p = Put {
            ns,
            kind,
            key,
            value,
        };
        if p.value.is_empty() {
            del.push(p)
        } else {
            up.push(p)
        }
    }
    (up, del)
}

/// Writes a batch inside the open transaction of `c` (an upsert and a deletion, each one
/// statement).
pub(super) async fn write_in(
    c: &mut PgConn,
    puts: impl IntoIterator<Item = Put>,
) -> Result<(), String> {
    let (up, del) = last_writes(puts);
    if !up.is_empty() {
        let st = c.stmt(UPSERT).await?;
        let ns: Vec<&str> = up.iter().map(|p| p.ns).collect();
        let kind: Vec<&str> = up.iter().map(|p| p.kind).collect();
        let key: Vec<&str> = up.iter().map(|p| p.key.as_str()).collect();
        let value: Vec<&[u8]> = up.iter().map(|p| p.value.as_slice()).collect();
        c.client
            .execute(&st, &[&ns, &kind, &key, &value])
            .await
            .map_err(pg_err)?;
    }
    if !del.is_empty() {
        let st = c.stmt(DELETE).await?;
        let ns: Vec<&str> = del.iter().map(|p| p.ns).collect();
        let kind: Vec<&str> = del.iter().map(|p| p.kind).collect();
        let key: Vec<&str> = del.iter().map(|p| p.key.as_str()).collect();
        c.client
            .execute(&st, &[&ns, &kind, &key])
            .await
            .map_err(pg_err)?;
    }
    Ok(())
}

/// Holds the seeding lock of a database (one instance creates and seeds it at a time), on a
/// connection of its own (outside the pool, which the seeding itself uses; dropping it
/// closes the connection, which releases the lock).
pub struct SeedLock(Client);

impl SeedLock {
    /// Releases the lock and closes its connection.
    pub async fn release(self) -> Result<(), String> {
        self.0
            .execute("SELECT pg_advisory_unlock($1)", &[&SEED_LOCK])
            .await
            .map_err(pg_err)?;
        Ok(())
    }
}

impl PgStore {
    /// Connects to `conninfo` (a `postgres://` URL or `key=value` pairs) with a pool of
    /// `pool` connections and creates the schema if missing. Returns the store and the
    /// seeding lock, held until the caller has opened (and seeded) its engine.
    pub async fn open(conninfo: &str, pool: usize) -> Result<(Arc<PgStore>, SeedLock), String> {
        let config = Config::from_str(conninfo).map_err(|e| format!("--store: {}", pg_err(e)))?;
        let p = Pool::new(config.clone(), pool);
        let c = connect(&config).await?;
        c.execute("SELECT pg_advisory_lock($1)", &[&SEED_LOCK])
            .await
            .map_err(pg_err)?;
        c.batch_execute(SCHEMA).await.map_err(pg_err)?;
        let v: Option<i32> = c
            .query_opt("SELECT max(version) FROM weft_schema", &[])
            .await
            .map_err(pg_err)?
            .and_then(|r| r.get(0));
        match v {
            None => {
                c.execute(
                    "INSERT INTO weft_schema(version) VALUES ($1)",
                    &[&SCHEMA_VERSION],
                )
                .await
                .map_err(pg_err)?;
            }
            Some(SCHEMA_VERSION) => {}
            Some(other) => {
                return Err(format!(
                    "the database has weft schema version {other}; this weft knows version {SCHEMA_VERSION}"
                ));
            }
        }
        let failed = Arc::new(Mutex::new(None));
        let (tx, rx) = mpsc::unbounded_channel();
        let pending = Arc::new(AtomicU64::new(0));
        let writer = tokio::spawn(writer(p.clone(), rx, pending.clone()));
        let instance = u64::from_be_bytes(super::random_bytes::<8>());
        let store = Arc::new(PgStore {
            pool: p,
            config,
            tx: Mutex::new(Some(tx)),
            writer: tokio::sync::Mutex::new(Some(writer)),
            failed,
            pending,
            instance,
            retention: tokio::sync::Mutex::new(None),
        });
        Ok((store, SeedLock(c)))
    }

    /// Where the store is, for the banner (hosts, database, user, pool; never a password).
    pub fn describe(&self) -> String {
        let hosts: Vec<String> = self
            .config
            .get_hosts()
            .iter()
            .map(|h| match h {
                tokio_postgres::config::Host::Tcp(t) => t.clone(),
                tokio_postgres::config::Host::Unix(p) => p.display().to_string(),
            })
            .collect();
        format!(
            "{}, database {}, user {} (instance {:016x}, pool of {})",
            hosts.join(","),
            self.config.get_dbname().unwrap_or("(default)"),
            self.config.get_user().unwrap_or("(default)"),
            self.instance,
            self.pool.size,
        )
    }

    /// The pool.
    pub fn pool(&self) -> &Arc<Pool> {
        &self.pool
    }

    /// The connection settings (the listener opens its own connection).
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Every record of these kinds of a namespace.
    pub async fn load_kinds(
        &self,
        ns: &str,
        kinds: &[&str],
    ) -> Result<Vec<(String, String, Vec<u8>)>, String> {
        let mut c = self.pool.get().await?;
        let st = c.stmt(LOAD).await?;
        let mut out = Vec::new();
        for kind in kinds {
            for r in c.client.query(&st, &[&ns, kind]).await.map_err(pg_err)? {
                out.push(((*kind).to_owned(), r.get(0), r.get(1)));
            }
        }
        Ok(out)
    }

    /// One record's value.
    pub async fn get(&self, ns: &str, kind: &str, key: &str) -> Result<Option<Vec<u8>>, String> {
        let mut c = self.pool.get().await?;
        let st = c.stmt(GET).await?;
        Ok(c.client
            .query_opt(&st, &[&ns, &kind, &key])
            .await
            .map_err(pg_err)?
            .map(|r| r.get(0)))
    }

    /// Up to `limit` records of `(ns, kind)` with keys after `after`, in byte order.
    pub async fn scan(
        &self,
        ns: &str,
        kind: &str,
        after: &str,
        limit: usize,
    ) -> Result<Vec<(String, Vec<u8>)>, String> {
        let mut c = self.pool.get().await?;
        let st = c.stmt(SCAN).await?;
        Ok(c.client
            .query(&st, &[&ns, &kind, &after, &(limit as i64)])
            .await
            .map_err(pg_err)?
            .into_iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect())
    }

    fn send(&self, job: Job) -> Result<(), String> {
        match self.tx.lock().expect("store lock").as_ref() {
            Some(tx) if tx.send(job).is_ok() => Ok(()),
            _ => Err("the store is closed".into()),
        }
    }

    /// Queues a batch; its ticket resolves once it is committed.
    pub fn write(&self, puts: Vec<Put>) -> Ticket {
        if let Some(e) = self.failure() {
            return Ticket::new(Err(e));
        }
        if puts.is_empty() && self.pending.load(Ordering::SeqCst) == 0 {
            return Ticket::new(Ok(None));
        }
        let (done, rx) = oneshot::channel();
        let job = if puts.is_empty() {
            Job::Barrier(done)
        } else {
            Job::Write {
                puts,
                done: Some(done),
            }
        };
        self.pending.fetch_add(1, Ordering::SeqCst);
        Ticket::new(self.send(job).map(|()| Some(rx)))
    }

    /// A ticket for "every batch queued so far is committed".
    pub fn barrier(&self) -> Ticket {
        self.write(vec![])
    }

    /// Queues a batch nobody waits for.
    pub fn background(&self, puts: Vec<Put>) {
        if !puts.is_empty() && self.failure().is_none() {
            self.pending.fetch_add(1, Ordering::SeqCst);
            let _ = self.send(Job::Write { puts, done: None });
        }
    }

    /// Refuses further work from now on (memory is ahead of the database).
    pub fn fail(&self, e: String) {
        eprintln!("weft serve: {e}; refusing further work");
        *self.failed.lock().expect("store lock") = Some(e);
    }

    /// The failure that stopped the writer, if any.
    pub fn failure(&self) -> Option<String> {
        self.failed.lock().expect("store lock").clone()
    }

    /// Commits what is queued and stops the writer.
    pub async fn close(&self) {
        self.tx.lock().expect("store lock").take();
        if let Some(h) = self.writer.lock().await.take() {
            let _ = h.await;
        }
        self.retention.lock().await.take();
    }

    /// Whether this instance holds the retention lock (without trying to take it).
    pub async fn holds_retention(&self) -> bool {
        self.retention
            .lock()
            .await
            .as_ref()
            .is_some_and(|(c, held)| *held && !c.is_closed())
    }

    /// Whether this instance runs the compaction walk: it holds the retention lock, or takes
    /// it now (a session lock on a connection of its own, released when the instance dies).
    pub async fn retention_holder(&self) -> bool {
        let mut slot = self.retention.lock().await;
        match slot.as_ref() {
            Some((c, true)) if !c.is_closed() => return true,
            Some((c, _)) if c.is_closed() => *slot = None,
            _ => {}
        }
        if slot.is_none() {
            let Ok(c) = connect(&self.config).await else {
                return false;
            };
            *slot = Some((c, false));
        }
        let Some((c, held)) = slot.as_mut() else {
            return false;
        };
        *held = match c
            .query_one("SELECT pg_try_advisory_lock($1)", &[&RETENTION_LOCK])
            .await
        {
            Ok(r) => r.get(0),
            Err(_) => false,
        };
        *held
    }
}

/// The writer's pause after a failed batch (doubling up to [`WRITER_BACKOFF_MAX`]).
const WRITER_BACKOFF_MIN: std::time::Duration = std::time::Duration::from_millis(50);
const WRITER_BACKOFF_MAX: std::time::Duration = std::time::Duration::from_secs(5);

/// The group-commit writer: every batch queued meanwhile in one transaction.
async fn writer(pool: Arc<Pool>, mut rx: mpsc::UnboundedReceiver<Job>, pending: Arc<AtomicU64>) {
    let mut backoff = WRITER_BACKOFF_MIN;
    while let Some(first) = rx.recv().await {
        let mut jobs = vec![first];
        while jobs.len() < 4096 {
            match rx.try_recv() {
                Ok(j) => jobs.push(j),
                Err(_) => break,
            }
        }
        let mut puts = Vec::new();
        let mut replies = Vec::new();
        let n = jobs.len() as u64;
        for j in jobs {
            match j {
                Job::Write { puts: p, done } => {
                    puts.extend(p);
                    replies.extend(done);
                }
                Job::Barrier(done) => replies.push(done),
            }
        }
        let result = if puts.is_empty() {
            Ok(())
        } else {
            async {
                let mut c = pool.get().await?;
                c.poisoned = true; // closed, not pooled, if this task stops mid-transaction
                c.client.batch_execute("BEGIN").await.map_err(pg_err)?;
                let r = write_in(&mut c, puts).await;
                let r = match r {
                    Ok(()) => c.client.batch_execute("COMMIT").await.map_err(pg_err),
                    Err(e) => {
                        let _ = c.client.batch_execute("ROLLBACK").await;
                        Err(e)
                    }
                };
                c.poisoned = r.is_err();
                r
            }
            .await
            .map_err(|e| format!("storage failure: {e}"))
        };
        // A PostgreSQL error fails this batch only (its requests answer STORAGE_FAILURE);
        // the writer backs off and goes on with the next batch.
        if let Err(e) = &result {
            eprintln!("weft serve: {e}; this batch failed, retrying in {backoff:?}");
        }
        pending.fetch_sub(n, Ordering::SeqCst);
        for r in replies {
            let _ = r.send(result.clone());
        }
        if result.is_err() {
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(WRITER_BACKOFF_MAX);
        } else {
            backoff = WRITER_BACKOFF_MIN;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(key: &str, value: &str) -> Put {
        Put {
            ns: "t",
            kind: "frame",
            key: key.into(),
            value: value.as_bytes().to_vec(),
        }
    }

    #[test]
    fn a_batch_keeps_each_records_last_write_and_splits_deletions() {
        // One upsert statement may not touch a row twice: the batch's last value wins.
        let (up, del) = last_writes([put("a", "1"), put("b", "1"), put("a", "2"), put("b", "")]);
        let up: Vec<(&str, &[u8])> = up.iter().map(|p| (p.key.as_str(), &p.value[..])).collect();
        assert_eq!(up, [("a", &b"2"[..])]);
        assert_eq!(del.len(), 1);
        assert_eq!(del[0].key, "b");
    }
}
