//! A throwaway PostgreSQL cluster owned by the calling process (the PostgreSQL tests of
//! `weft-host` and `dgp-load --store postgres`): the binaries of `WEFT_PG_BIN` (else the highest
//! `/usr/lib/postgresql/*/bin`, Debian's `postgresql` package, which tests/setup.sh installs),
//! a template data directory initialised once (`initdb` takes seconds; concurrent processes
//! serialise on a lock file) and copied per cluster, served on a Unix socket in a temporary
//! directory. The server runs under a shell that stops it when the owner's end of its stdin
//! closes (the process exits, however it ends, or [`Cluster::stop`]), then removes the copy.
//!
//! Run as root (CI, the sandbox), `initdb` runs as the `postgres` user through `runuser` and
//! the server through `setpriv` (PostgreSQL refuses to run as root); otherwise both run as the
//! current user.

use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The user the server runs as when the caller runs as root.
const PG_USER: &str = "postgres";

/// How a cluster runs.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// PostgreSQL's durability defaults (`fsync=on`, `full_page_writes=on`). Tests turn them
    /// off (they kill weft, never PostgreSQL); a benchmark keeps them.
    pub durable: bool,
}

/// A running cluster: its socket directory and the shell whose stdin keeps it alive.
pub struct Cluster {
    bin: PathBuf,
    /// The directory of the server's Unix socket (and of the data copy).
    pub dir: PathBuf,
    /// The server's major version (`postgres --version`).
    pub major: String,
    keep: Mutex<Option<(Child, ChildStdin)>>,
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

/// Where the template lives: cargo's `target/` (the first ancestor of the running binary that
/// holds `CACHEDIR.TAG`), or as root the system's temporary directory, which the `postgres`
/// user can reach even when the checkout sits in a private directory (a fresh clone under
/// `mktemp -d` is mode 0700, so `postgres` cannot enter `target/` there).
fn template_root() -> PathBuf {
    if as_root() {
        return std::env::temp_dir();
    }
    std::env::current_exe()
        .ok()
        .and_then(|exe| {
            exe.ancestors()
                .find(|a| a.join("CACHEDIR.TAG").is_file())
                .map(Path::to_path_buf)
        })
        .unwrap_or_else(std::env::temp_dir)
}

fn chown_to_pg(path: &Path) -> Result<(), String> {
    if !as_root() {
        return Ok(());
    }
    let name = std::ffi::CString::new(PG_USER).expect("no NUL");
    // SAFETY: getpwnam with a valid C string; the result is read at once.
    let pw = unsafe { libc::getpwnam(name.as_ptr()) };
    if pw.is_null() {
        return Err(format!(
            "running as root, PostgreSQL needs the `{PG_USER}` user (tests/setup.sh installs Debian's postgresql, which creates it)"
        ));
    }
    // SAFETY: pw is non-null and points at getpwnam's static record.
    let (uid, gid) = unsafe { ((*pw).pw_uid, (*pw).pw_gid) };
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| format!("{}: a NUL in the path", path.display()))?;
    // SAFETY: a valid path string.
    if unsafe { libc::chown(c.as_ptr(), uid, gid) } != 0 {
        return Err(format!(
            "chown {}: {}",
            path.display(),
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
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
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    out.split_whitespace()
        .find(|w| w.chars().next().is_some_and(|c| c.is_ascii_digit()))
        .and_then(|w| w.split('.').next())
        .unwrap_or("x")
        .to_owned()
}

/// The template data directory, initialised once (under a lock) and reused.
fn template(bin: &Path, major: &str) -> Result<PathBuf, String> {
    let root = template_root();
    let dir = root.join(format!("weft-pg-template-{major}"));
    if dir.join("PG_VERSION").is_file() {
        return Ok(dir);
    }
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(root.join("weft-pg-template.lock"))
        .map_err(|e| format!("the template lock file: {e}"))?;
    lock.lock().map_err(|e| format!("the template lock: {e}"))?;
    if dir.join("PG_VERSION").is_file() {
        return Ok(dir);
    }
    let tmp = root.join(format!("weft-pg-template.tmp-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).map_err(|e| format!("{}: {e}", tmp.display()))?;
    chown_to_pg(&tmp)?;
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
        // The caller's working directory may be one `postgres` cannot enter.
        .current_dir("/")
        .output()
        .map_err(|e| format!("initdb: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "initdb failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    std::fs::rename(&tmp, &dir).map_err(|e| format!("the template moves into place: {e}"))?;
    Ok(dir)
}

/// Starts a cluster on a copy of the template and waits until it answers. `Err` says why not
/// (missing binaries, initdb, start-up), in words.
pub fn start(opts: Options) -> Result<Cluster, String> {
    let bin = bin_dir().ok_or(
        "PostgreSQL binaries not found (no initdb in WEFT_PG_BIN or /usr/lib/postgresql/*/bin): run tests/setup.sh",
    )?;
    let major = major(&bin);
    let template = template(&bin, &major)?;
    let n = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let dir = std::env::temp_dir().join(format!("weft-pg-{}-{n:x}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    chown_to_pg(&dir)?;
    let cp = Command::new("cp")
        .arg("-a")
        .arg(&template)
        .arg(dir.join("data"))
        .status()
        .map_err(|e| format!("cp: {e}"))?;
    if !cp.success() {
        return Err("cp -a of the template failed".into());
    }
    let drop_to = if as_root() {
        format!("setpriv --reuid={PG_USER} --regid={PG_USER} --init-groups -- ")
    } else {
        String::new()
    };
    let fast = if opts.durable {
        ""
    } else {
        "-c fsync=off -c full_page_writes=off -c shared_buffers=32MB "
    };
    // The shell stops the server when our end of its stdin closes, then removes the copy.
    let script = format!(
        "{drop_to}\"$0\" -D \"$1/data\" -k \"$1\" -c listen_addresses= {fast}-c max_connections=200 \
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
        .map_err(|e| format!("the PostgreSQL shell: {e}"))?;
    let stdin = child.stdin.take().expect("a piped stdin");
    let c = Cluster {
        bin,
        dir,
        major,
        keep: Mutex::new(Some((child, stdin))),
    };
    let t0 = Instant::now();
    while c.psql("postgres", "SELECT 1").map(|o| o.trim().to_owned()) != Ok("1".into()) {
        if t0.elapsed() > Duration::from_secs(30) {
            let log = std::fs::read_to_string(c.dir.join("postgres.log")).unwrap_or_default();
            c.stop();
            return Err(format!("PostgreSQL did not start: {log}"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(c)
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

    /// Creates database `name` (`[a-z0-9_]`) and returns its connection string
    /// (`host=<socket dir> user=weft dbname=<name>`).
    pub fn create_database(&self, name: &str) -> Result<String, String> {
        if !name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        {
            return Err(format!("database name {name:?}: only [a-z0-9_]"));
        }
        self.psql("postgres", &format!("CREATE DATABASE {name}"))
            .map_err(|e| format!("CREATE DATABASE {name}: {e}"))?;
        Ok(self.url(name))
    }

    /// The connection string of database `name` on this cluster.
    pub fn url(&self, name: &str) -> String {
        format!("host={} user=weft dbname={name}", self.dir.display())
    }

    /// Stops the server and removes its copy (closes the shell's stdin and reaps the shell).
    pub fn stop(&self) {
        let keep = self.keep.lock().map(|mut k| k.take()).unwrap_or(None);
        if let Some((mut child, stdin)) = keep {
            drop(stdin);
            let _ = child.wait();
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop();
    }
}
