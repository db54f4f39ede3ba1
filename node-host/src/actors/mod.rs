//! The native actor host: a `$CHAT_ROOT` on disk ([`fs_store::FsStore`]) driving the core's
//! [`ActorGraph`], and the `weft actors …` commands ([`cli`]).

pub mod cli;
pub mod failpoint;
pub mod fs_store;
pub mod walls;

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use weft_core::Wall;
use weft_core::actors::{
    ActorGraph, ActorStore, ActorsError, HarnessConfig, LazyOpen, OpenReport, Snapshot,
};

pub use fs_store::{FsStore, LONG_LIVED_SPARE_NODES, SpareNodesStatus};

/// The host's wall clock: milliseconds since the Unix epoch (actor timestamps are persisted).
pub fn wall_ms() -> Wall {
    Wall::from_ms(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64),
    )
}

/// The process's monotonic origin: the first time any host part read its monotonic clock.
/// Agents and the job hosts share it, so a job note's `at` and an agent's `now` are on one
/// clock.
pub fn mono_origin() -> std::time::Instant {
    static ORIGIN: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    *ORIGIN.get_or_init(std::time::Instant::now)
}

/// The host's monotonic clock: milliseconds since [`mono_origin`].
pub fn mono_now() -> weft_core::Mono {
    weft_core::Mono::from_ms(mono_origin().elapsed().as_millis() as u64)
}

/// Both clocks, read together (what an agent's inputs take).
pub fn now() -> weft_core::time::Now {
    weft_core::time::Now::new(mono_now(), wall_ms())
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
        match store.perform(&b) {
            Ok(done) => g.ack(done)?,
            Err(e) => {
                g.fail(b.id, &e.to_string());
                return Err(e);
            }
        }
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

    /// Opens `root` as its writer for a one-shot command that touches only `targets` (see
    /// [`ActorGraph::open_lazy`]; `spawns`: the command spawns): reads `graph.json`, the
    /// metathread, the `nodes/` listing and the records of the nodes the core asks for — a
    /// number of files that does not grow with the number of nodes. When the core answers that
    /// the store needs a full open (recovery or a diagnostic is due), opens in full as
    /// [`writer`](Self::writer) does; `lazy_fallback` then says why.
    pub fn writer_lazy(
        root: &Path,
        config: HarnessConfig,
        wait: Duration,
        targets: &[&str],
        spawns: bool,
    ) -> Result<Session, ActorsError> {
        let mut store = FsStore::open_writer_unswept(root, wait)?;
        let head = store.load_head()?;
        let opened = ActorGraph::open_lazy(
            config.clone(),
            &store.address(),
            head,
            targets,
            spawns,
            |ask, head| store.read_nodes_into(ask, head),
        )?;
        match opened {
            LazyOpen::Ready(graph) => Ok(Session {
                graph: *graph,
                store,
                report: OpenReport::default(),
            }),
            LazyOpen::Full(why) => {
                store.sweep_temporaries()?;
                let snap = store.load()?;
                let (mut graph, mut report) =
                    ActorGraph::open(config, &store.address(), &snap, wall_ms())?;
                flush(&mut graph, &mut store)?;
                report.lazy_fallback = Some(why);
                Ok(Session {
                    graph,
                    store,
                    report,
                })
            }
        }
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

    /// Performs the queued batches. After a lazy open's first batches, keeps the marks it
    /// returned (`FsStore::keep_marks`), so a command that is refused writes nothing.
    pub fn flush(&mut self) -> Result<usize, ActorsError> {
        let n = flush(&mut self.graph, &mut self.store)?;
        if n > 0 && self.graph.is_lazy() {
            let trusted = self.graph.lazy_trusted();
            let records = self.graph.lazy_records();
            let chain = self.graph.opened_trusted();
            self.store
                .keep_marks(self.graph.lazy_marks(), trusted, &records, chain);
        }
        Ok(n)
    }
}
