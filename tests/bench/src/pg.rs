//! A throwaway PostgreSQL cluster owned by a benchmark process (`dgp-load --store postgres`).
//!
//! A minimal copy of the test suite's cluster helper, `node-host/tests/support/pg.rs`: the same
//! binaries (`WEFT_PG_BIN`, else the highest `/usr/lib/postgresql/*/bin`), the same template
//! data directory under `target/` (shared with the tests: initialised once under the same lock
//! file), copied per run and served on a Unix socket in a temporary directory under a shell that
//! stops the server when this process's end of its stdin closes. As root, `initdb` runs as the
//! `postgres` user through `runuser` and the server through `setpriv`. Two differences: the
//! template is found from a binary in `target/release/` (not `target/*/deps/`), and the server
//! keeps PostgreSQL's durability defaults (`fsync=on`, `synchronous_commit=on`) — the tests
//! turn fsync off, a benchmark must not. Without libc: root is asked of `id -u` and ownership
//! given with `chown`.

use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

/// The user the server runs as when the benchmark runs as root.
const PG_USER: &str = "postgres";

/// A running cluster: its socket directory and the shell whose stdin keeps it alive.
pub struct Cluster {
    bin: PathBuf,
    /// The directory of the server's Unix socket (and of the data copy).
    pub dir: PathBuf,
    /// The server's major version (`postgres --version`).
    pub major: String,
    keep: Option<(Child, ChildStdin)>,
}

fn as_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
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

/// `target/`: this binary runs as `target/release/<name>`.
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the benchmark's path");
    exe.ancestors()
        .nth(2)
        .map(Path::to_path_buf)
        .expect("a benchmark binary under target/")
}

fn chown_to_pg(path: &Path) -> Result<(), String> {
    if !as_root() {
        return Ok(());
    }
    let ok = Command::new("chown")
        .arg(format!("{PG_USER}:"))
        .arg(path)
        .status()
        .map_err(|e| format!("chown: {e}"))?
        .success();
    if ok {
        Ok(())
    } else {
        Err(format!(
            "chown {PG_USER}: {} failed (running as root, the `{PG_USER}` user is needed: tests/setup.sh installs Debian's postgresql, which creates it)",
            path.display()
        ))
    }
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

/// The template data directory, initialised once (under the tests' lock) and reused.
fn template(bin: &Path, major: &str) -> Result<PathBuf, String> {
    let target = target_dir();
    let dir = target.join(format!("weft-pg-template-{major}"));
    if dir.join("PG_VERSION").is_file() {
        return Ok(dir);
    }
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(target.join("weft-pg-template.lock"))
        .map_err(|e| format!("the template lock file: {e}"))?;
    lock.lock().map_err(|e| format!("the template lock: {e}"))?;
    if dir.join("PG_VERSION").is_file() {
        return Ok(dir);
    }
    let tmp = target.join(format!("weft-pg-template.tmp-{}", std::process::id()));
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

/// Starts a cluster on a copy of the template; waits until it answers.
pub fn start() -> Result<Cluster, String> {
    let bin = bin_dir().ok_or(
        "PostgreSQL binaries not found (no initdb in WEFT_PG_BIN or /usr/lib/postgresql/*/bin): run tests/setup.sh",
    )?;
    let major = major(&bin);
    let template = template(&bin, &major)?;
    let dir = std::env::temp_dir().join(format!("weft-bench-pg-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
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
    // The shell stops the server when our end of its stdin closes (this process exits, however
    // it ends, or [`Cluster::stop`]), then removes the copy.
    let script = format!(
        "{drop_to}\"$0\" -D \"$1/data\" -k \"$1\" -c listen_addresses= -c max_connections=200 \
         >\"$1/postgres.log\" 2>&1 & p=$!; read _; kill -INT $p; wait $p; rm -rf \"$1\""
    );
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg(bin.join("postgres"))
        .arg(&dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("the PostgreSQL shell: {e}"))?;
    let stdin = child.stdin.take().expect("a piped stdin");
    let mut c = Cluster {
        bin,
        dir,
        major,
        keep: Some((child, stdin)),
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
    pub fn database(&self, name: &str) -> Result<String, String> {
        assert!(
            name.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
            "{name}"
        );
        self.psql("postgres", &format!("CREATE DATABASE {name}"))
            .map_err(|e| format!("CREATE DATABASE {name}: {e}"))?;
        Ok(format!(
            "host={} user=weft dbname={name}",
            self.dir.display()
        ))
    }

    /// Stops the server and removes its copy (closes the shell's stdin and reaps the shell).
    pub fn stop(&mut self) {
        if let Some((mut child, stdin)) = self.keep.take() {
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
