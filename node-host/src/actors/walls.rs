//! Directory handles for the filesystem store: every file operation names one entry of a
//! directory it holds open (`openat`, `mkdirat`, `renameat`, `unlinkat`, `fstatat` on the
//! handle), never a path, and never follows a symbolic link (`O_NOFOLLOW`,
//! `AT_SYMLINK_NOFOLLOW`). A path inside the root is reached one component at a time from the
//! root's handle, so a link anywhere on the way is met — and refused — before anything past it
//! is opened. A regular file opened for writing must be the file's only name (`nlink == 1`):
//! a hard link planted in the root (perhaps to a file outside it) is refused before anything
//! is written through it — nothing is truncated at the open (`Create` truncates after the
//! check).
//!
//! Built on `libc` (already a dependency) rather than `cap-std`: the store needs
//! `renameat2(RENAME_EXCHANGE)` and `flock` on its handles, which `cap-std` does not offer, and
//! a refusal of every link (not only of links leaving the root) is a flag here, not a policy
//! to configure.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The marker error for a link met where the store reads or writes: a symbolic link anywhere,
/// or a second name (a hard link) of a file it would write.
#[derive(Debug, thiserror::Error)]
pub enum LinkFound {
    #[error("is a symbolic link")]
    Symbolic,
    #[error("has another name (a hard link)")]
    Hard,
}

fn link_found(e: &io::Error) -> Option<&LinkFound> {
    e.get_ref().and_then(|x| x.downcast_ref::<LinkFound>())
}

/// Whether `e` reports a symbolic link (see [`LinkFound`]).
pub fn is_symlink_error(e: &io::Error) -> bool {
    matches!(link_found(e), Some(LinkFound::Symbolic))
}

/// Whether `e` reports a hard link where the store would write (see [`LinkFound`]).
pub fn is_hard_link_error(e: &io::Error) -> bool {
    matches!(link_found(e), Some(LinkFound::Hard))
}

fn symlink() -> io::Error {
    io::Error::other(LinkFound::Symbolic)
}

/// What a directory entry is (links are never resolved).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    Dir,
    File,
    Symlink,
    Other,
}

fn cname(name: &str) -> io::Result<CString> {
    if name.is_empty() || name.contains('/') || name == "." || name == ".." {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{name:?} is not one directory entry"),
        ));
    }
    CString::new(name).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in a name"))
}

fn check(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// How [`Dir::open`] opens a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Read only.
    Read,
    /// Read and write, created when missing, never truncated (lock files).
    ReadWriteCreate,
    /// Write at the end, created when missing (logs).
    Append,
    /// Write, created when missing, truncated (new files).
    Create,
    /// Write an existing file.
    Write,
    /// Read and write an existing file (records grown in place).
    ReadWrite,
}

/// A stamp of a file or directory as `fstat` describes it: device, inode, size, modification
/// and change times (nanoseconds). Equal stamps mean the entry was not replaced or changed
/// since (the idea of git's index; a change within the file system's timestamp granularity
/// that keeps the size is the case it cannot see).
pub fn stamp(m: &std::fs::Metadata) -> String {
    use std::os::unix::fs::MetadataExt;
    format!(
        "{}:{}:{}:{}.{:09}:{}.{:09}",
        m.dev(),
        m.ino(),
        m.size(),
        m.mtime(),
        m.mtime_nsec(),
        m.ctime(),
        m.ctime_nsec()
    )
}

/// An open directory. Every method names one entry of it. Handles opened from one root share
/// a counter of the files and directories opened through them ([`Dir::opens`]).
#[derive(Debug)]
pub struct Dir {
    fd: File,
    opens: Arc<AtomicU64>,
}

impl Dir {
    /// Opens the directory at `path` (the root: the one path the store resolves, links
    /// included, since it is the caller's choice).
    pub fn open_path(path: &Path) -> io::Result<Dir> {
        use std::os::unix::ffi::OsStrExt;
        let c = CString::new(path.as_os_str().as_bytes())?;
        // SAFETY: `c` is NUL-terminated and outlives the call; the fd returned is owned below.
        let fd = check(unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        })?;
        // SAFETY: `fd` is a fresh descriptor nobody else owns.
        Ok(Dir {
            fd: File::from(unsafe { OwnedFd::from_raw_fd(fd) }),
            opens: Arc::new(AtomicU64::new(0)),
        })
    }

    /// How many files and directories were opened through this handle and every handle
    /// derived from the same root (listings count as one open each).
    pub fn opens(&self) -> u64 {
        self.opens.load(Ordering::Relaxed)
    }

    /// `fstatat(name, AT_SYMLINK_NOFOLLOW)`: the entry itself, never a link's target; `None`
    /// when there is no entry.
    fn lstat(&self, name: &str) -> io::Result<Option<libc::stat>> {
        let c = cname(name)?;
        // SAFETY: `st` is plain data the call fills; `c` outlives the call.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        let r = unsafe {
            libc::fstatat(
                self.fd.as_raw_fd(),
                c.as_ptr(),
                &mut st,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::NotFound {
                Ok(None)
            } else {
                Err(e)
            };
        }
        Ok(Some(st))
    }

    /// The kind of entry `name`, or `None` when there is none.
    pub fn kind(&self, name: &str) -> io::Result<Option<Kind>> {
        let Some(st) = self.lstat(name)? else {
            return Ok(None);
        };
        Ok(Some(match st.st_mode & libc::S_IFMT {
            libc::S_IFDIR => Kind::Dir,
            libc::S_IFREG => Kind::File,
            libc::S_IFLNK => Kind::Symlink,
            _ => Kind::Other,
        }))
    }

    /// The identity (device, inode) of entry `name` itself (a link is not followed), or `None`
    /// when there is none: two entries with one identity are one file or directory (after a
    /// power loss a file system without a journal can keep a moved directory under both names).
    // `dev_t` and `ino_t` are not `u64` on every target.
    #[allow(clippy::unnecessary_cast)]
    pub fn ident(&self, name: &str) -> io::Result<Option<(u64, u64)>> {
        Ok(self
            .lstat(name)?
            .map(|st| (st.st_dev as u64, st.st_ino as u64)))
    }

    /// The identity (device, inode) of this directory itself (`fstat` of the handle): compared
    /// with [`ident`](Self::ident) of its name, it says whether the name still leads here.
    #[allow(clippy::unnecessary_cast)]
    pub fn own_ident(&self) -> io::Result<(u64, u64)> {
        use std::os::unix::fs::MetadataExt;
        let m = self.fd.metadata()?;
        Ok((m.dev(), m.ino()))
    }

    /// The identity (device, inode) of the entry at `rel` (components separated by `/`)
    /// beneath this directory, resolved without following any link and without leaving it;
    /// `None` when there is no such entry or a link (or `..`) is on the way. One
    /// `openat2(O_PATH, RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)` and an `fstat` on Linux (no
    /// file is opened for reading or writing, so it does not count in [`opens`](Self::opens));
    /// where `openat2` is missing, a walk of [`dir`](Self::dir) per component and an
    /// [`ident`](Self::ident) of the last.
    pub fn ident_beneath(&self, rel: &str) -> io::Result<Option<(u64, u64)>> {
        // Each component one entry: `..`, `.` or an empty one is not a path of the store's.
        if rel
            .split('/')
            .any(|c| c.is_empty() || c == "." || c == "..")
        {
            return Ok(None);
        }
        #[cfg(target_os = "linux")]
        {
            use std::os::unix::fs::MetadataExt;
            let c = CString::new(rel)
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in a path"))?;
            // SAFETY: `open_how` is plain data; zeroed is its documented initial value.
            let mut how: libc::open_how = unsafe { std::mem::zeroed() };
            // No O_NOFOLLOW: with O_PATH it would open a link at the last component as the
            // link; without it, RESOLVE_NO_SYMLINKS refuses it (ELOOP).
            how.flags = (libc::O_PATH | libc::O_CLOEXEC) as u64;
            how.resolve = libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS;
            // SAFETY: `c` and `how` outlive the call, which only reads them; the fd returned
            // is owned below.
            let r = unsafe {
                libc::syscall(
                    libc::SYS_openat2,
                    self.fd.as_raw_fd(),
                    c.as_ptr(),
                    &how as *const libc::open_how,
                    std::mem::size_of::<libc::open_how>(),
                )
            };
            if r >= 0 {
                // SAFETY: `r` is a fresh descriptor nobody else owns.
                let f = File::from(unsafe { OwnedFd::from_raw_fd(r as libc::c_int) });
                let m = f.metadata()?;
                return Ok((!m.file_type().is_symlink()).then(|| (m.dev(), m.ino())));
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                // ENOSYS (older kernel), EPERM (a seccomp filter): the walk below.
                Some(libc::ENOSYS) | Some(libc::EPERM) => {}
                // A link on the way (ELOOP), a step out (EXDEV), no entry.
                Some(libc::ELOOP) | Some(libc::EXDEV) | Some(libc::ENOENT)
                | Some(libc::ENOTDIR) => return Ok(None),
                _ => return Err(e),
            }
        }
        self.ident_walk(rel)
    }

    /// [`ident_beneath`](Self::ident_beneath) without `openat2`: one [`dir`](Self::dir) per
    /// component, then an `fstatat` of the last.
    fn ident_walk(&self, rel: &str) -> io::Result<Option<(u64, u64)>> {
        let parts: Vec<&str> = rel.split('/').collect();
        let (last, dirs) = parts.split_last().expect("split yields one part");
        let mut d: Option<Dir> = None;
        for c in dirs {
            let next = match d.as_ref().unwrap_or(self).dir(c) {
                Ok(x) => x,
                Err(e) if e.kind() == io::ErrorKind::NotFound || is_symlink_error(&e) => {
                    return Ok(None);
                }
                Err(e) => return Err(e),
            };
            d = Some(next);
        }
        let d = d.as_ref().unwrap_or(self);
        if d.kind(last)? == Some(Kind::Symlink) {
            return Ok(None);
        }
        d.ident(last)
    }

    /// The [`stamp`] of regular file `name` (not following a link: a link or anything but a
    /// file is `None`, as is no entry), read with one `fstatat`, no open.
    pub fn stamp_of(&self, name: &str) -> io::Result<Option<String>> {
        let Some(st) = self.lstat(name)? else {
            return Ok(None);
        };
        if st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return Ok(None);
        }
        // The fields and format of `stamp`.
        Ok(Some(format!(
            "{}:{}:{}:{}.{:09}:{}.{:09}",
            st.st_dev,
            st.st_ino,
            st.st_size,
            st.st_mtime,
            st.st_mtime_nsec,
            st.st_ctime,
            st.st_ctime_nsec
        )))
    }

    /// Turns a failed open of `name` into [`LinkFound::Symbolic`] when `name` is a link.
    fn explain(&self, name: &str, e: io::Error) -> io::Error {
        match self.kind(name) {
            Ok(Some(Kind::Symlink)) => symlink(),
            _ => e,
        }
    }

    fn openat(&self, name: &str, flags: libc::c_int) -> io::Result<File> {
        let c = cname(name)?;
        self.opens.fetch_add(1, Ordering::Relaxed);
        // SAFETY: `c` outlives the call; the fd returned is owned below.
        let r = unsafe {
            libc::openat(
                self.fd.as_raw_fd(),
                c.as_ptr(),
                flags | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                0o666 as libc::c_uint,
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            return Err(self.explain(name, e));
        }
        // SAFETY: `r` is a fresh descriptor nobody else owns.
        Ok(File::from(unsafe { OwnedFd::from_raw_fd(r) }))
    }

    /// Opens the subdirectory `name` (a link is [`LinkFound::Symbolic`]).
    pub fn dir(&self, name: &str) -> io::Result<Dir> {
        Ok(Dir {
            fd: self.openat(name, libc::O_RDONLY | libc::O_DIRECTORY)?,
            opens: self.opens.clone(),
        })
    }

    /// Opens the subdirectory `name`, or `None` when there is none.
    pub fn dir_if_exists(&self, name: &str) -> io::Result<Option<Dir>> {
        match self.dir(name) {
            Ok(d) => Ok(Some(d)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Opens the file `name` (a link is [`LinkFound::Symbolic`]; anything but a regular file is
    /// refused; a file opened for writing that has another name is [`LinkFound::Hard`]).
    pub fn open(&self, name: &str, mode: Mode) -> io::Result<File> {
        let flags = match mode {
            Mode::Read => libc::O_RDONLY,
            Mode::ReadWriteCreate => libc::O_RDWR | libc::O_CREAT,
            Mode::Append => libc::O_WRONLY | libc::O_APPEND | libc::O_CREAT,
            // Truncated below, once the file is known to have no other name.
            Mode::Create => libc::O_WRONLY | libc::O_CREAT,
            Mode::Write => libc::O_WRONLY,
            Mode::ReadWrite => libc::O_RDWR,
        };
        // O_NONBLOCK: a FIFO planted in the root must not hang the store; it is then refused
        // below like any other non-regular file.
        let f = self.openat(name, flags | libc::O_NONBLOCK)?;
        let meta = f.metadata()?;
        if !meta.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{name} is not a regular file"),
            ));
        }
        if mode != Mode::Read {
            use std::os::unix::fs::MetadataExt;
            if meta.nlink() != 1 {
                return Err(io::Error::other(LinkFound::Hard));
            }
            if mode == Mode::Create && meta.len() > 0 {
                f.set_len(0)?;
            }
        }
        // SAFETY: plain fcntl on a descriptor we own: clear O_NONBLOCK again.
        unsafe {
            let fl = libc::fcntl(f.as_raw_fd(), libc::F_GETFL);
            if fl >= 0 {
                libc::fcntl(f.as_raw_fd(), libc::F_SETFL, fl & !libc::O_NONBLOCK);
            }
        }
        Ok(f)
    }

    /// Reads the whole file `name`, or `None` when there is none.
    pub fn read(&self, name: &str) -> io::Result<Option<Vec<u8>>> {
        use std::io::Read;
        match self.open(name, Mode::Read) {
            Ok(mut f) => {
                // Sized from the file (one read, no regrowing copies); it may still grow.
                let len = f.metadata().map_or(0, |m| m.len() as usize);
                let mut out = Vec::with_capacity(len + 1);
                f.read_to_end(&mut out)?;
                Ok(Some(out))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Creates the subdirectory `name`; `Ok(false)` when an entry of that name exists.
    pub fn mkdir(&self, name: &str) -> io::Result<bool> {
        let c = cname(name)?;
        // SAFETY: `c` outlives the call.
        let r = unsafe { libc::mkdirat(self.fd.as_raw_fd(), c.as_ptr(), 0o777) };
        if r < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::AlreadyExists {
                Ok(false)
            } else {
                Err(e)
            };
        }
        Ok(true)
    }

    /// Moves entry `from` of this directory to entry `to` of `dest` (which may be this one).
    pub fn rename(&self, from: &str, dest: &Dir, to: &str) -> io::Result<()> {
        let (a, b) = (cname(from)?, cname(to)?);
        // SAFETY: both names outlive the call.
        check(unsafe {
            libc::renameat(
                self.fd.as_raw_fd(),
                a.as_ptr(),
                dest.fd.as_raw_fd(),
                b.as_ptr(),
            )
        })
        .map(drop)
    }

    /// Atomically exchanges entries `a` and `b` of this directory
    /// (`renameat2(RENAME_EXCHANGE)`; Linux only, `Unsupported` elsewhere).
    pub fn exchange(&self, a: &str, b: &str) -> io::Result<()> {
        #[cfg(target_os = "linux")]
        {
            let (ca, cb) = (cname(a)?, cname(b)?);
            // SAFETY: both names outlive the call, which only reads them.
            check(unsafe {
                libc::renameat2(
                    self.fd.as_raw_fd(),
                    ca.as_ptr(),
                    self.fd.as_raw_fd(),
                    cb.as_ptr(),
                    libc::RENAME_EXCHANGE,
                )
            })
            .map(drop)
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = (a, b);
            Err(io::ErrorKind::Unsupported.into())
        }
    }

    /// Removes the file (or link) `name`; `Ok(false)` when there is none.
    pub fn remove_file(&self, name: &str) -> io::Result<bool> {
        self.unlink(name, 0)
    }

    fn unlink(&self, name: &str, flags: libc::c_int) -> io::Result<bool> {
        let c = cname(name)?;
        // SAFETY: `c` outlives the call.
        let r = unsafe { libc::unlinkat(self.fd.as_raw_fd(), c.as_ptr(), flags) };
        if r < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::NotFound {
                Ok(false)
            } else {
                Err(e)
            };
        }
        Ok(true)
    }

    /// Removes `name` and, when it is a directory, everything in it (links are removed, never
    /// followed).
    pub fn remove_tree(&self, name: &str) -> io::Result<()> {
        if self.kind(name)? == Some(Kind::Dir) {
            let sub = self.dir(name)?;
            for (n, k) in sub.list()? {
                if k == Kind::Dir {
                    sub.remove_tree(&n)?;
                } else {
                    sub.remove_file(&n)?;
                }
            }
            self.unlink(name, libc::AT_REMOVEDIR)?;
        } else {
            self.remove_file(name)?;
        }
        Ok(())
    }

    /// The entries of this directory (without `.` and `..`), with their kinds.
    pub fn list(&self) -> io::Result<Vec<(String, Kind)>> {
        self.opens.fetch_add(1, Ordering::Relaxed);
        // fdopendir takes ownership of its descriptor: give it a duplicate.
        // SAFETY: dup of a descriptor we own.
        let fd = check(unsafe { libc::fcntl(self.fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 0) })?;
        // SAFETY: `fd` is ours; on success the DIR owns it (closed by closedir).
        let d = unsafe { libc::fdopendir(fd) };
        if d.is_null() {
            let e = io::Error::last_os_error();
            // SAFETY: fdopendir failed, so `fd` is still ours to close.
            unsafe { libc::close(fd) };
            return Err(e);
        }
        // SAFETY: rewind: a duplicate shares the offset of earlier listings.
        unsafe { libc::rewinddir(d) };
        let mut out = Vec::new();
        loop {
            // SAFETY: `d` is a valid DIR until closedir; the entry is read before the next call.
            let e = unsafe { libc::readdir(d) };
            if e.is_null() {
                break;
            }
            // SAFETY: `d_name` is NUL-terminated within the entry.
            let name = unsafe { std::ffi::CStr::from_ptr((*e).d_name.as_ptr()) };
            let Ok(name) = name.to_str() else { continue };
            if name == "." || name == ".." {
                continue;
            }
            // SAFETY: reading a field of the valid entry.
            let t = unsafe { (*e).d_type };
            let kind = match t {
                libc::DT_DIR => Kind::Dir,
                libc::DT_REG => Kind::File,
                libc::DT_LNK => Kind::Symlink,
                libc::DT_UNKNOWN => match self.kind(name)? {
                    Some(k) => k,
                    None => continue,
                },
                _ => Kind::Other,
            };
            out.push((name.to_owned(), kind));
        }
        // SAFETY: `d` came from fdopendir and is closed once.
        unsafe { libc::closedir(d) };
        Ok(out)
    }

    /// A second handle on this directory (for an fsync on another thread).
    pub fn try_clone(&self) -> io::Result<Dir> {
        Ok(Dir {
            fd: self.fd.try_clone()?,
            opens: self.opens.clone(),
        })
    }

    /// Makes the directory's entries durable.
    pub fn sync(&self) -> io::Result<()> {
        self.fd.sync_all()
    }

    /// A stamp of the directory itself (see [`stamp`]).
    pub fn stamp(&self) -> io::Result<String> {
        Ok(stamp(&self.fd.metadata()?))
    }

    /// The handle as a file (for `fsync` by a worker).
    pub fn into_file(self) -> File {
        self.fd
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_are_refused_and_entries_listed_without_following() {
        let root = std::env::temp_dir().join(format!("weft-walls-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("sub")).unwrap();
        let outside = std::env::temp_dir().join(format!("weft-walls-out-{}", std::process::id()));
        std::fs::write(&outside, b"keep").unwrap();
        std::os::unix::fs::symlink(&outside, root.join("link")).unwrap();
        std::os::unix::fs::symlink(root.join("sub"), root.join("dirlink")).unwrap();
        let d = Dir::open_path(&root).unwrap();
        for m in [
            Mode::Read,
            Mode::Append,
            Mode::Create,
            Mode::ReadWriteCreate,
        ] {
            let e = d.open("link", m).unwrap_err();
            assert!(is_symlink_error(&e), "{m:?}: {e}");
        }
        assert!(is_symlink_error(&d.dir("dirlink").unwrap_err()));
        assert_eq!(std::fs::read(&outside).unwrap(), b"keep");
        let mut l = d.list().unwrap();
        l.sort();
        assert_eq!(
            l,
            [
                ("dirlink".to_owned(), Kind::Symlink),
                ("link".to_owned(), Kind::Symlink),
                ("sub".to_owned(), Kind::Dir)
            ]
        );
        assert!(d.mkdir("new").unwrap() && !d.mkdir("new").unwrap());
        d.dir("new").unwrap().open("f", Mode::Create).unwrap();
        d.remove_tree("new").unwrap();
        assert_eq!(d.kind("new").unwrap(), None);
        assert!(d.open("../x", Mode::Read).is_err());
        // A hard link to a file outside the root: readable, never opened for writing (and not
        // truncated by a `Create`).
        std::fs::hard_link(&outside, root.join("hard")).unwrap();
        assert!(d.open("hard", Mode::Read).is_ok());
        for m in [
            Mode::Append,
            Mode::Create,
            Mode::ReadWriteCreate,
            Mode::Write,
            Mode::ReadWrite,
        ] {
            let e = d.open("hard", m).unwrap_err();
            assert!(is_hard_link_error(&e), "{m:?}: {e}");
        }
        assert_eq!(std::fs::read(&outside).unwrap(), b"keep");
        // A `Create` of an existing file of one name still truncates it.
        std::fs::write(root.join("one"), b"old").unwrap();
        d.open("one", Mode::Create).unwrap();
        assert_eq!(std::fs::read(root.join("one")).unwrap(), b"");
        // A file's stamp without opening it is the stamp of its metadata; a link has none.
        let f = d.open("plain", Mode::Create).unwrap();
        assert_eq!(
            d.stamp_of("plain").unwrap(),
            Some(stamp(&f.metadata().unwrap()))
        );
        assert_eq!(d.stamp_of("link").unwrap(), None);
        assert_eq!(d.stamp_of("absent").unwrap(), None);
        // A path's identity beneath the root: the same with `openat2` and with the walk;
        // nothing through a link, nothing past the root.
        d.dir("sub").unwrap().open("f", Mode::Create).unwrap();
        let want = {
            use std::os::unix::fs::MetadataExt;
            let m = std::fs::symlink_metadata(root.join("sub/f")).unwrap();
            Some((m.dev(), m.ino()))
        };
        for rel in [
            "sub/f",
            "dirlink/f",
            "link",
            "sub/absent",
            "../x",
            "sub/../sub/f",
        ] {
            let (a, b) = (
                d.ident_beneath(rel).ok().flatten(),
                d.ident_walk(rel).ok().flatten(),
            );
            assert_eq!(a, b, "{rel}");
            assert_eq!(a.is_some(), rel == "sub/f", "{rel}: {a:?}");
        }
        assert_eq!(d.ident_beneath("sub/f").unwrap(), want);
        std::fs::remove_dir_all(&root).unwrap();
        std::fs::remove_file(&outside).unwrap();
    }
}
