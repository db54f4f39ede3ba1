//! The test process's throwaway PostgreSQL cluster (`weft-pgcluster`, shared with the
//! benchmark `dgp-load`), with `fsync=off` (tests kill weft, never PostgreSQL), started on first
//! use and stopped when the test process ends. One database per test.
//!
//! Missing binaries fail the test loudly, unless `WEFT_PG_OPTIONAL=1` (then [`cluster`] is
//! `None` and the caller says it skipped).

use std::collections::HashSet;
use std::path::Path;
use std::sync::{Mutex, OnceLock};

pub use weft_pgcluster::Cluster;

static CLUSTER: OnceLock<Option<Cluster>> = OnceLock::new();
static CREATED: Mutex<Option<HashSet<String>>> = Mutex::new(None);

/// The test process's cluster, started on first use. `None` only when the binaries are
/// missing and `WEFT_PG_OPTIONAL=1`; missing binaries otherwise fail the test.
pub fn cluster() -> Option<&'static Cluster> {
    CLUSTER
        .get_or_init(|| {
            if weft_pgcluster::bin_dir().is_none()
                && std::env::var("WEFT_PG_OPTIONAL").as_deref() == Ok("1")
            {
                eprintln!("PostgreSQL binaries not found: skipping (WEFT_PG_OPTIONAL=1)");
                return None;
            }
            let opts = weft_pgcluster::Options { durable: false };
            Some(weft_pgcluster::start(opts).unwrap_or_else(|e| {
                panic!("{e} (set WEFT_PG_OPTIONAL=1 to skip when the binaries are missing)")
            }))
        })
        .as_ref()
}

/// [`cluster`], failing the test when there is none (`WEFT_PG_OPTIONAL=1` with no binaries).
pub fn required() -> &'static Cluster {
    cluster().expect("PostgreSQL binaries are missing (WEFT_PG_OPTIONAL=1)")
}

/// The tests' databases on a cluster: each created once per process.
pub trait Databases {
    /// Database `name` (`[a-z0-9_]`), created on first use: its connection string.
    fn database(&self, name: &str) -> String;
    /// A database for a test's data directory (the same one each time the directory is used,
    /// so a restarted server reopens it).
    fn database_for(&self, data: &Path) -> String;
}

impl Databases for Cluster {
    fn database(&self, name: &str) -> String {
        let mut created = CREATED.lock().unwrap();
        if created
            .get_or_insert_with(HashSet::new)
            .insert(name.to_owned())
        {
            return self.create_database(name).unwrap_or_else(|e| panic!("{e}"));
        }
        self.url(name)
    }

    fn database_for(&self, data: &Path) -> String {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        data.hash(&mut h);
        self.database(&format!("t_{:016x}", h.finish()))
    }
}
