//! The SQLite store behind `weft serve`: a durable `(namespace, kind, key) -> value` table
//! written by one thread with group commit.
//!
//! Capabilities hand it the write batches their core emits, in order, and wait until the batch
//! is durable before answering. Durability settings: WAL journal, `synchronous=FULL` (each
//! group-commit transaction is fsynced before any of its waiters is released), one writer
//! connection; blob reads use a second, read-only connection.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread;

use rusqlite::{Connection, OpenFlags, params};
use tokio::sync::watch;

/// One write: insert or replace `(ns, kind, key)`.
#[derive(Debug, Clone)]
pub struct Put {
    pub ns: &'static str,
    pub kind: &'static str,
    pub key: String,
    pub value: Vec<u8>,
}

/// Durability progress: the highest sequence number made durable, or the failure that stopped
/// the writer.
#[derive(Clone, Debug, PartialEq)]
enum Progress {
    Durable(u64),
    Failed(String),
}

/// The durable store.
pub struct Store {
    tx: Mutex<Option<mpsc::Sender<(u64, Vec<Put>)>>>,
    next_seq: AtomicU64,
    progress: watch::Receiver<Progress>,
    reader: Mutex<Connection>,
    writer: Mutex<Option<thread::JoinHandle<()>>>,
}

/// The pragmas every connection uses; reported by `weft serve` and the benchmark.
pub const DURABILITY: &str = "journal_mode=WAL, synchronous=FULL (every group commit is fsynced before its requests are answered)";

fn configure(c: &Connection) -> rusqlite::Result<()> {
    c.pragma_update(None, "journal_mode", "WAL")?;
    c.pragma_update(None, "synchronous", "FULL")?;
    c.busy_timeout(std::time::Duration::from_secs(5))?;
    Ok(())
}

impl Store {
    /// Opens (or creates) the database at `path`.
    pub fn open(path: &Path) -> Result<Arc<Store>, String> {
        let w = Connection::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
        configure(&w).map_err(|e| format!("{}: {e}", path.display()))?;
        w.execute_batch(
            "CREATE TABLE IF NOT EXISTS records(
                ns TEXT NOT NULL, kind TEXT NOT NULL, key TEXT NOT NULL, value BLOB NOT NULL,
                PRIMARY KEY(ns, kind, key));
             PRAGMA user_version = 1;",
        )
        .map_err(|e| e.to_string())?;
        let reader = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| e.to_string())?;
        reader
            .busy_timeout(std::time::Duration::from_secs(5))
            .map_err(|e| e.to_string())?;
        let (tx, rx) = mpsc::channel::<(u64, Vec<Put>)>();
        let (ptx, prx) = watch::channel(Progress::Durable(0));
        let handle = thread::Builder::new()
            .name("weft-store".into())
            .spawn(move || writer(w, rx, ptx))
            .map_err(|e| e.to_string())?;
        Ok(Arc::new(Store {
            tx: Mutex::new(Some(tx)),
            next_seq: AtomicU64::new(0),
            progress: prx,
            reader: Mutex::new(reader),
            writer: Mutex::new(Some(handle)),
        }))
    }

    /// Every record of a namespace, except the kinds in `skip` (e.g. large blobs).
    pub fn load(&self, ns: &str, skip: &[&str]) -> Result<Vec<(String, String, Vec<u8>)>, String> {
        let c = self.reader.lock().expect("reader lock");
        let mut st = c
            .prepare("SELECT kind, key, value FROM records WHERE ns = ?1")
            .map_err(|e| e.to_string())?;
        let rows = st
            .query_map(params![ns], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, Vec<u8>>(2)?,
                ))
            })
            .map_err(|e| e.to_string())?;
        let mut out = Vec::new();
        for row in rows {
            let row = row.map_err(|e| e.to_string())?;
            if !skip.contains(&row.0.as_str()) {
                out.push(row);
            }
        }
        Ok(out)
    }

    /// One record's value.
    pub fn get(&self, ns: &str, kind: &str, key: &str) -> Result<Option<Vec<u8>>, String> {
        let c = self.reader.lock().expect("reader lock");
        let mut st = c
            .prepare_cached("SELECT value FROM records WHERE ns = ?1 AND kind = ?2 AND key = ?3")
            .map_err(|e| e.to_string())?;
        let mut rows = st
            .query(params![ns, kind, key])
            .map_err(|e| e.to_string())?;
        match rows.next().map_err(|e| e.to_string())? {
            Some(r) => Ok(Some(r.get(0).map_err(|e| e.to_string())?)),
            None => Ok(None),
        }
    }

    /// Queues a batch and returns its sequence number. Call in the order the batches were
    /// produced (i.e. while holding the lock of the state that produced them). An empty batch
    /// returns the latest sequence, so waiting on it orders the answer after earlier writes.
    pub fn submit(&self, puts: Vec<Put>) -> u64 {
        if puts.is_empty() {
            return self.next_seq.load(Ordering::SeqCst);
        }
        let seq = self.next_seq.fetch_add(1, Ordering::SeqCst) + 1;
        if let Some(tx) = self.tx.lock().expect("store lock").as_ref() {
            // A send error means the writer stopped; `durable` reports its failure.
            let _ = tx.send((seq, puts));
        }
        seq
    }

    /// Waits until batch `seq` (and every earlier one) is durable.
    pub async fn durable(&self, seq: u64) -> Result<(), String> {
        let mut rx = self.progress.clone();
        let p = rx
            .wait_for(|p| match p {
                Progress::Durable(n) => *n >= seq,
                Progress::Failed(_) => true,
            })
            .await
            .map_err(|_| "the store writer stopped".to_owned())?
            .clone();
        match p {
            Progress::Durable(_) => Ok(()),
            Progress::Failed(e) => Err(e),
        }
    }

    /// Whether the writer has failed (the server must stop answering from memory).
    pub fn failure(&self) -> Option<String> {
        match &*self.progress.borrow() {
            Progress::Failed(e) => Some(e.clone()),
            Progress::Durable(_) => None,
        }
    }

    /// Flushes every queued batch and stops the writer.
    pub fn close(&self) {
        self.tx.lock().expect("store lock").take();
        if let Some(h) = self.writer.lock().expect("store lock").take() {
            let _ = h.join();
        }
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        self.close();
    }
}

fn writer(
    mut c: Connection,
    rx: mpsc::Receiver<(u64, Vec<Put>)>,
    progress: watch::Sender<Progress>,
) {
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        while batch.len() < 4096 {
            match rx.try_recv() {
                Ok(x) => batch.push(x),
                Err(_) => break,
            }
        }
        let last = batch.last().map_or(0, |b| b.0);
        let result = (|| -> rusqlite::Result<()> {
            let tx = c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            {
                let mut st = tx.prepare_cached(
                    "INSERT OR REPLACE INTO records(ns, kind, key, value) VALUES (?1, ?2, ?3, ?4)",
                )?;
                for (_, puts) in &batch {
                    for p in puts {
                        st.execute(params![p.ns, p.kind, p.key, p.value])?;
                    }
                }
            }
            tx.commit()
        })();
        match result {
            Ok(()) => {
                progress.send_replace(Progress::Durable(last));
            }
            Err(e) => {
                progress.send_replace(Progress::Failed(format!("storage failure: {e}")));
                eprintln!("weft serve: storage failure, refusing further work: {e}");
                return;
            }
        }
    }
    let _ = c.pragma_update(None, "wal_checkpoint", "TRUNCATE");
}
