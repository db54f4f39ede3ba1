//! A throwaway PostgreSQL cluster owned by the test process: the binaries of `WEFT_PG_BIN`
//! (else the highest `/usr/lib/postgresql/*/bin`, Debian's `postgresql` package, which
//! tests/setup.sh installs), a template data directory initialised once under `target/` (as
//! root: the temporary directory; `initdb` takes seconds; concurrent test binaries serialise
//! on a lock file), copied per
//! test binary, served on a Unix socket in a temporary directory with `fsync=off` (tests kill
//! weft, never PostgreSQL). The server runs under a shell that stops it when the test
//! process's end closes its stdin, then removes the copy. One database per test.
//!
//! Missing binaries fail the test loudly, unless `WEFT_PG_OPTIONAL=1` (then [`cluster`] is
//! `None` and the caller says it skipped).
//!
//! Run as root (CI, the sandbox), `initdb` runs as the `postgres` user through `runuser` and
//! the server through `setpriv` (PostgreSQL refuses to run as root); otherwise both run as the
//! current user.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The user the servers run as when the tests run as root.
const PG_USER: &str = "postgres";

/// A running cluster: its socket directory and the shell whose stdin keeps it alive.
pub struct Cluster {
    bin: PathBuf,
    /// The directory of the server's Unix socket (and of the data copy).
    pub dir: PathBuf,
    _keep: Mutex<(Child, ChildStdin)>,
    created: Mutex<HashSet<String>>,
}

fn as_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// The PostgreSQL binaries: `WEFT_PG_BIN`, else the highest installed major version.
pub fn bin_dir() -> Option<PathBuf> {
    if let Some(b) = std::env::var_os("WEFT_PG_BIN") {
        return Some(PathBuf::from(b)).filter(|p| p.join("initdb").is_file());
    }
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .flatten()
        .filter_map(|e| {
            let major = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").is_file().then_some((major, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, b)| b)
}

fn target_dir() -> PathBuf {
    // target/debug/deps/<test binary>
    let exe = std::env::current_exe().expect("the test binary's path");
    exe.ancestors()
        .nth(3)
        .map(Path::to_path_buf)
        .expect("a test binary under target/")
}

fn chown_to_pg(path: &Path) {
    if !as_root() {
        return;
    }
    let name = std::ffi::CString::new(PG_USER).unwrap();
    // SAFETY: getpwnam with a valid C string; the result is read at once.
    let pw = unsafe { libc::getpwnam(name.as_ptr()) };
    assert!(
        !pw.is_null(),
        "running as root, the PostgreSQL tests need the `{PG_USER}` user (tests/setup.sh installs Debian's postgresql, which creates it)"
    );
    // SAFETY: pw is non-null and points at getpwnam's static record.
    let (uid, gid) = unsafe { ((*pw).pw_uid, (*pw).pw_gid) };
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid path string.
    let rc = unsafe { libc::chown(c.as_ptr(), uid, gid) };
    assert_eq!(rc, 0, "chown {}", path.display());
}

fn as_pg(cmd: &Path) -> Command {
    if as_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", PG_USER, "--"]).arg(cmd);
        c
    } else {
        Command::new(cmd)
    }
}

fn major(bin: &Path) -> String {
    let out = Command::new(bin.join("postgres"))
        .arg("--version")
        .output()
        .expect("postgres --version runs");
    let v = String::from_utf8_lossy(&out.stdout);
    v.split_whitespace()
        .find(|w| w.chars().next().is_some_and(|c| c.is_ascii_digit()))
        .and_then(|w| w.split('.').next())
        .unwrap_or("x")
        .to_owned()
}

/// Where the template lives: `target/`, or as root the system's temporary directory, which the
/// `postgres` user can reach even when the checkout sits in a private directory (a fresh clone
/// under `mktemp -d` is mode 0700, so `postgres` cannot enter `target/` there).
fn template_root() -> PathBuf {
    if as_root() {
        std::env::temp_dir()
    } else {
        target_dir()
    }
}

/// The template data directory, initialised once (under a lock) and reused.
fn template(bin: &Path) -> PathBuf {
    let target = template_root();
    let dir = target.join(format!("weft-pg-template-{}", major(bin)));
    if dir.join("PG_VERSION").is_file() {
        return dir;
    }
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(target.join("weft-pg-template.lock"))
        .expect("the template lock file");
    lock.lock().expect("the template lock");
    if dir.join("PG_VERSION").is_file() {
        return dir;
    }
    let tmp = target.join(format!("weft-pg-template.tmp-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).unwrap();
    chown_to_pg(&tmp);
    let out = as_pg(&bin.join("initdb"))
        .args([
            "-U",
            "weft",
            "--auth=trust",
            "--no-sync",
            "-E",
            "UTF8",
            "--locale=C.UTF-8",
            "-D",
        ])
        .arg(&tmp)
        // The test's working directory may be one `postgres` cannot enter.
        .current_dir("/")
        .output()
        .expect("initdb runs");
    assert!(
        out.status.success(),
        "initdb failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::rename(&tmp, &dir).expect("the template moves into place");
    dir
}

static CLUSTER: OnceLock<Option<Cluster>> = OnceLock::new();

/// The test process's cluster, started on first use. `None` only when the binaries are
/// missing and `WEFT_PG_OPTIONAL=1`; missing binaries otherwise fail the test.
pub fn cluster() -> Option<&'static Cluster> {
    CLUSTER.get_or_init(start).as_ref()
}

/// [`cluster`], failing the test when there is none (`WEFT_PG_OPTIONAL=1` with no binaries).
pub fn required() -> &'static Cluster {
    cluster().expect("PostgreSQL binaries are missing (WEFT_PG_OPTIONAL=1)")
}

fn start() -> Option<Cluster> {
    let Some(bin) = bin_dir() else {
        if std::env::var("WEFT_PG_OPTIONAL").as_deref() == Ok("1") {
            eprintln!("PostgreSQL binaries not found: skipping (WEFT_PG_OPTIONAL=1)");
            return None;
        }
        panic!(
            "PostgreSQL binaries not found (no initdb in WEFT_PG_BIN or /usr/lib/postgresql/*/bin): run tests/setup.sh, or set WEFT_PG_OPTIONAL=1 to skip"
        );
    };
    let template = template(&bin);
    let n = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let dir = std::env::temp_dir().join(format!("weft-pg-{}-{n:x}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    chown_to_pg(&dir);
    let data = dir.join("data");
    let cp = Command::new("cp")
        .arg("-a")
        .arg(&template)
        .arg(&data)
        .status()
        .expect("cp runs");
    assert!(cp.success(), "cp -a of the template failed");
    let log = dir.join("postgres.log");
    let drop_to = if as_root() {
        format!("setpriv --reuid={PG_USER} --regid={PG_USER} --init-groups -- ")
    } else {
        String::new()
    };
    // The shell stops the server when our end of its stdin closes (the test process exits,
    // however it ends), then removes the copy.
    let script = format!(
        "{drop_to}\"$0\" -D \"$1/data\" -k \"$1\" -c listen_addresses= -c fsync=off \
         -c full_page_writes=off -c max_connections=200 -c shared_buffers=32MB \
         >\"$1/postgres.log\" 2>&1 & p=$!; read _; kill -INT $p; wait $p; rm -rf \"$1\""
    );
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg(bin.join("postgres"))
        .arg(&dir)
        .current_dir("/")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the PostgreSQL shell starts");
    let stdin = child.stdin.take().unwrap();
    let c = Cluster {
        bin,
        dir,
        _keep: Mutex::new((child, stdin)),
        created: Mutex::new(HashSet::new()),
    };
    let t0 = Instant::now();
    loop {
        let ok = c
            .psql("postgres", "SELECT 1")
            .is_ok_and(|o| o.trim() == "1");
        if ok {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "PostgreSQL did not start: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    Some(c)
}

impl Cluster {
    /// Runs one SQL command with `psql` on `db`; its unaligned output, or its error text.
    pub fn psql(&self, db: &str, sql: &str) -> Result<String, String> {
        let out = Command::new(self.bin.join("psql"))
            .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h"])
            .arg(&self.dir)
            .args(["-U", "weft", "-d", db, "-c", sql])
            .output()
            .map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    /// Creates database `name` once per process (`[a-z0-9_]`) and returns its connection
    /// string (`host=<socket dir> user=weft dbname=<name>`).
    pub fn database(&self, name: &str) -> String {
        assert!(
            name.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
            "{name}"
        );
        let mut created = self.created.lock().unwrap();
        if created.insert(name.to_owned()) {
            self.psql("postgres", &format!("CREATE DATABASE {name}"))
                .unwrap_or_else(|e| panic!("CREATE DATABASE {name}: {e}"));
        }
        format!("host={} user=weft dbname={name}", self.dir.display())
    }

    /// A database for a test's data directory (the same one each time the directory is used,
    /// so a restarted server reopens it).
    pub fn database_for(&self, data: &Path) -> String {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        data.hash(&mut h);
        self.database(&format!("t_{:016x}", h.finish()))
    }
}
