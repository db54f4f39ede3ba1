//! The native actor host: a `$CHAT_ROOT` on disk ([`fs_store::FsStore`]) driving the core's
//! [`ActorGraph`], and the `weft actors …` commands ([`cli`]).

pub mod cli;
pub mod fs_store;

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use weft_core::Millis;
use weft_core::actors::{ActorGraph, ActorStore, ActorsError, HarnessConfig, OpenReport, Snapshot};

pub use fs_store::FsStore;

/// Wall-clock milliseconds since the Unix epoch (actor timestamps are persisted).
pub fn wall_ms() -> Millis {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as Millis)
}

/// The harness variables from the environment (`ACTOR_*`, `GIT_CLOSEOUT`, deprecated
/// `PROJECT_INBOX*`), with deprecation notes.
pub fn config_from_env() -> Result<(HarnessConfig, Vec<String>), ActorsError> {
    HarnessConfig::from_vars(
        weft_core::actors::config::VARIABLES
            .iter()
            .filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v))),
    )
}

/// Performs and acknowledges every queued batch. On a store error the graph is told (it then
/// refuses writes until reopened) and the error is returned.
pub fn flush(
    g: &mut ActorGraph,
    store: &mut impl ActorStore<Error = ActorsError>,
) -> Result<usize, ActorsError> {
    let batches = g.take_batches();
    let n = batches.len();
    for b in batches {
        if let Err(e) = store.apply(&b) {
            g.fail(b.id, &e.to_string());
            return Err(e);
        }
        g.ack(b.id)?;
    }
    Ok(n)
}

/// A graph opened on a root, with its store.
pub struct Session {
    pub graph: ActorGraph,
    pub store: FsStore,
    pub report: OpenReport,
}

impl Session {
    /// Opens `root` as its writer: takes the lock (waiting up to `wait`), loads, recovers
    /// (the recovery batch is applied before anything else).
    pub fn writer(
        root: &Path,
        config: HarnessConfig,
        wait: Duration,
    ) -> Result<Session, ActorsError> {
        let mut store = FsStore::open_writer(root, wait)?;
        let snap = store.load()?;
        let (mut graph, report) = ActorGraph::open(config, &store.address(), &snap, wall_ms())?;
        flush(&mut graph, &mut store)?;
        Ok(Session {
            graph,
            store,
            report,
        })
    }

    /// Opens `root` read-only: no lock, repairs computed in memory but never written.
    pub fn reader(root: &Path, config: HarnessConfig) -> Result<Session, ActorsError> {
        let mut store = FsStore::open_reader(root)?;
        let snap = store.load()?;
        let (mut graph, report) = ActorGraph::open(config, &store.address(), &snap, wall_ms())?;
        graph.discard_batches();
        Ok(Session {
            graph,
            store,
            report,
        })
    }

    /// Creates a new graph in an empty (or absent) root.
    pub fn init(
        root: &Path,
        config: HarnessConfig,
        title: &str,
        wait: Duration,
    ) -> Result<Session, ActorsError> {
        let mut store = FsStore::open_writer(root, wait)?;
        let snap: Snapshot = store.load()?;
        let mut graph = ActorGraph::init(config, &store.address(), &snap, wall_ms(), title)?;
        flush(&mut graph, &mut store)?;
        Ok(Session {
            graph,
            store,
            report: OpenReport::default(),
        })
    }

    /// Performs the queued batches.
    pub fn flush(&mut self) -> Result<usize, ActorsError> {
        flush(&mut self.graph, &mut self.store)
    }
}
