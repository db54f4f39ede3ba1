//! Raw disk probes: the physical limits the actor benchmarks compare the store against (moved
//! out of the native store, which ships; these are benchmark-only).

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::time::Instant;

/// Measures the raw rate of this disk: `n` appends of `bytes` bytes, each followed by an
/// fsync (`sync_all`, the call the store makes), in a file under `dir`. Returns writes per
/// second (the physical limit benchmarks compare against).
pub fn raw_fsync_rate(dir: &Path, n: usize, bytes: usize) -> std::io::Result<f64> {
    let p = dir.join(".weft-fsync-probe");
    let mut f = OpenOptions::new().create(true).append(true).open(&p)?;
    let line = vec![b'x'; bytes];
    let start = Instant::now();
    for _ in 0..n {
        f.write_all(&line)?;
        f.sync_all()?;
    }
    let rate = n as f64 / start.elapsed().as_secs_f64();
    drop(f);
    fs::remove_file(&p)?;
    Ok(rate)
}

/// Measures how fast this disk makes new small files durable: `n` times create a file under
/// `dir`, write `bytes` bytes, fsync it. (A new inode costs the file system a metadata commit,
/// which an append to an existing file does not.) Returns files per second.
pub fn raw_create_rate(dir: &Path, n: usize, bytes: usize) -> std::io::Result<f64> {
    let probe = dir.join(".weft-create-probe");
    fs::create_dir_all(&probe)?;
    let data = vec![b'x'; bytes];
    let start = Instant::now();
    for i in 0..n {
        let mut f = File::create(probe.join(i.to_string()))?;
        f.write_all(&data)?;
        f.sync_all()?;
    }
    let rate = n as f64 / start.elapsed().as_secs_f64();
    fs::remove_dir_all(&probe)?;
    Ok(rate)
}
