// The filesystem backend of the actor store, in Node: the real `$CHAT_ROOT` layout the native
// store writes (`graph.json`, `orchestrator/meta.jsonl`, `nodes/<id>/meta.json`, `chat.jsonl`,
// `jobs.jsonl`, …), so `weft actors` opens a root written here and the other way round. Loaded
// on the first `openActorStore({ root })` by the Node entries only (`node.js`,
// `entry-actors-node.js` register it with `setFsBackend`): the browser entries never name this
// module, so a browser bundle never pulls `node:fs`.
//
// Durability matches `node-host/src/actors/fs_store.rs`, stage by stage (a stage starts only
// when the previous one is durable):
// * `createNode`: the node is built under `.weft/.tmp-<id>-<batch>/` (its files, its
//   subdirectories and the directory fsynced), then renamed to `nodes/<id>` whole, and
//   `nodes/` and `.weft/` fsynced in the same stage: `nodes/` holds whole nodes only;
// * `put`: write `<path>.weft-tmp-<batch>-<stage>-<op>`, fsync it, rename it over the record,
//   fsync the directory;
// * `append`: one write of whole lines, fsync (a new log also fsyncs its directory);
// * `patch` (a spawn growing `graph.json` or a parent's record): the record's first `at` bytes
//   and the patch text written as a `put` (the native store writes in place under the readers'
//   lock, which Node cannot take);
// * `truncate` / `rename`: fsync the file / the directories.
// A stage's fsyncs are issued together, in two rounds (new files and directories before their
// rename, then appends and the directories that changed).
//
// Walls: every path is relative to the root and checked like the core's `check_path`; every
// directory on the way is `lstat`ed and every file opened with `O_NOFOLLOW` (and `O_NONBLOCK`,
// then refused unless regular), so a symbolic link where the store reads or writes is refused
// with `SYMLINK_REFUSED` and nothing past it is opened. (Node has no `openat`: the walls are
// per path component, checked right before each open, not directory handles as natively.)
// A file opened for writing that has a second name (a hard link, perhaps to a file outside the
// root) is never written through, as natively: the lock file is refused with
// `HARD_LINK_REFUSED` (nothing truncated); a record or a log first gets a copy of its own in
// its place (the other name keeps its bytes). Such a file is still read.
//
// One writer per root: the store holds an exclusive `flock` on `$CHAT_ROOT/.weft-lock`, the
// lock the native writer takes, so a native and a JS writer exclude each other both ways, and
// the kernel releases it when the process dies (`kill -9` leaves no stale lock). Node cannot
// call `flock(2)` itself: `flock(1)` (util-linux) is run once on the store's own open file
// description of the lock file, which keeps the lock after that process exits. Opening as a
// writer then does what the native writer's open does: whole staged nodes a crashed native
// writer left in `.weft/` are renamed into place, every other temporary is removed.
import { constants as C } from 'node:fs';
import * as fsp from 'node:fs/promises';
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { join } from 'node:path';
import { WeftError } from './error.js';

const LOCK_FILE = '.weft-lock';
const STAGING_DIR = '.weft';
const TMP_SUFFIX = '.weft-tmp';
const NODE_TMP_PREFIX = '.tmp-';
const NODE_NEW_PREFIX = '.new,';
const LOCK_HELD = 75;

const dec = new TextDecoder();

const refused = (rel) => new WeftError('SYMLINK_REFUSED', `${rel || '.'} is a symbolic link: the store follows no links inside its root`);
const hardLinked = (rel) => new WeftError('HARD_LINK_REFUSED', `${rel || '.'} has another name (a hard link): the store writes no file that has one`);
const WRITE_FLAGS = C.O_WRONLY | C.O_RDWR;

/**
 * Whether a file opened for writing has a second name (a hard link, perhaps to a file
 * outside the root), checked on the open handle before any write, as the native walls do.
 */
async function hasOtherName(fh, rel, flags) {
  const st = await fh.stat();
  if (!st.isFile()) throw new WeftError('STORE_IO', `${rel} is not a regular file`);
  return (flags & WRITE_FLAGS) !== 0 && st.nlink !== 1;
}

/** An I/O error on `rel` (a path under the root) as the core's codes. */
function ioError(what, rel, e) {
  if (e instanceof WeftError) return e;
  if (e?.code === 'ELOOP') return refused(rel);
  return new WeftError('STORE_IO', `${what} ${rel || '.'}: ${e?.message ?? e}`, { cause: e });
}

/** The core's `check_path`: relative, `/`-separated, no empty, `.`, `..`, `\` or control component. */
function checkPath(path) {
  if (typeof path !== 'string' || path === '' || path.startsWith('/')) throw new WeftError('INVALID_ARGUMENT', `store path ${JSON.stringify(path)} is not relative`);
  for (const c of path.split('/')) {
    // eslint-disable-next-line no-control-regex
    if (c === '' || c === '.' || c === '..' || c.includes('\\') || /[\u0000-\u001f\u007f-\u009f]/.test(c)) {
      throw new WeftError('INVALID_ARGUMENT', `store path ${JSON.stringify(path)} has a bad component ${JSON.stringify(c)}`);
    }
  }
}

/** A node id as a directory entry (the core validated it; this keeps it one entry). */
function checkId(id) {
  if (typeof id !== 'string' || id === '' || id.includes('/') || id.startsWith('.')) throw new WeftError('INVALID_ARGUMENT', `node id ${JSON.stringify(id)} is not one directory entry`);
  checkPath(id);
}

const split = (rel) => {
  const i = rel.lastIndexOf('/');
  return i < 0 ? ['', rel] : [rel.slice(0, i), rel.slice(i + 1)];
};
const joinRel = (dir, name) => (dir ? `${dir}/${name}` : name);

/** The core's `is_snapshot_path`: the files the core reads on open. */
function isSnapshotPath(path) {
  const p = path.split('/');
  if (p.length === 1) return p[0] === 'graph.json';
  if (p.length === 2) {
    if (p[0] === 'orchestrator') return p[1] === 'meta.jsonl' || p[1] === 'index.json';
    if (p[0] === 'timeline') return p[1] === 'bookmarks.jsonl';
    if (p[0] === 'views') return p[1].startsWith('epoch-') && p[1].endsWith('.json');
    return false;
  }
  if (p[0] !== 'nodes' || p[1].startsWith('.')) return false;
  if (p.length === 3) return p[2] === 'meta.json' || p[2] === 'chat.jsonl';
  return p.length === 4 && p[2] === 'summaries' && p[3].endsWith('.json');
}

/** The directories the store reads or writes (a link there is refused, not skipped). */
function isStoreDir(rel) {
  const p = rel.split('/');
  if (p.length === 1) return ['nodes', 'orchestrator', 'timeline', 'views', STAGING_DIR].includes(p[0]);
  if (p.length === 2) return p[0] === 'nodes';
  return p.length === 3 && p[0] === 'nodes' && !p[1].startsWith('.') && p[2] === 'summaries';
}

const shortHash = (bytes) => createHash('sha256').update(bytes).digest().subarray(0, 8).toString('hex');

/**
 * A node directory a native writer builds as `.weft/.new,<batch>,<manifest>,<id>` (its name
 * lists each file with its length and a hash of its content): `{id, files: [[name, len,
 * hash]]}`, or null when the name is not one.
 */
function parsePending(name) {
  if (!name.startsWith(NODE_NEW_PREFIX)) return null;
  const rest = name.slice(NODE_NEW_PREFIX.length);
  const a = rest.indexOf(',');
  const b = a < 0 ? -1 : rest.indexOf(',', a + 1);
  if (b < 0 || !/^\d+$/.test(rest.slice(0, a))) return null;
  const id = rest.slice(b + 1);
  try {
    checkId(id);
  } catch {
    return null;
  }
  const files = [];
  for (const e of rest.slice(a + 1, b).split('+')) {
    const f = e.split('=');
    if (f.length !== 3 || !/^\d+$/.test(f[1])) return null;
    try {
      checkPath(f[0]);
    } catch {
      return null;
    }
    files.push([f[0], Number(f[1]), f[2]]);
  }
  return { id, files };
}

/** Runs `flock(1)` on the open lock file `fh` (its fd 3); resolves with its exit code. */
function runFlock(fh, waitMs) {
  const args = ['-x', '-E', String(LOCK_HELD), ...(waitMs > 0 ? ['-w', String(waitMs / 1000)] : ['-n']), '3'];
  return new Promise((resolve, reject) => {
    const child = spawn('flock', args, { stdio: ['ignore', 'ignore', 'pipe', fh.fd] });
    let err = '';
    child.stderr.on('data', (d) => (err += d));
    child.on('error', (e) =>
      reject(
        e.code === 'ENOENT'
          ? new WeftError('STORE_IO', 'the filesystem actor store locks its root with flock(1) (util-linux), which is not installed', { cause: e })
          : ioError('lock', LOCK_FILE, e),
      ),
    );
    // 'close': the process has exited and been reaped, its output read.
    child.on('close', (code, signal) => resolve({ code: code ?? -1, signal, err: err.trim() }));
  });
}

/** The files of a `$CHAT_ROOT` directory: the `fs` backend of `openActorStore`. */
export class FsBackend {
  #root;
  #lock;

  constructor(root, lock) {
    this.#root = root;
    this.#lock = lock;
    /** The address node records carry: the root's real path (as the native store's). */
    this.address = root;
  }

  /**
   * Opens `root` as its one writer (created if needed; a link as the root itself is the
   * caller's choice and resolved once). Waits up to `lockTimeoutMs` for another writer (native
   * or JS) to release it, then rejects with STORE_LOCKED; then recovers what a crashed writer
   * left in `.weft/` and beside records.
   */
  static async open(root, { lockTimeoutMs = 0 } = {}) {
    let real;
    try {
      await fsp.mkdir(root, { recursive: true });
      real = await fsp.realpath(root);
    } catch (e) {
      throw new WeftError('STORE_IO', `create ${root}: ${e.message}`, { cause: e });
    }
    let fh;
    try {
      fh = await fsp.open(join(real, LOCK_FILE), C.O_RDWR | C.O_CREAT | C.O_NOFOLLOW | C.O_NONBLOCK, 0o666);
      if (await hasOtherName(fh, LOCK_FILE, C.O_RDWR)) throw hardLinked(LOCK_FILE);
    } catch (e) {
      await fh?.close();
      throw ioError('open', LOCK_FILE, e);
    }
    const b = new FsBackend(real, fh);
    try {
      const r = await runFlock(fh, lockTimeoutMs);
      if (r.code === LOCK_HELD) {
        const holder = (await fh.readFile({ encoding: 'utf8' })).trim();
        throw new WeftError('STORE_LOCKED', `the store is locked by another writer: ${real} is held by ${holder || 'another process'}`);
      }
      if (r.code !== 0) throw new WeftError('STORE_IO', `lock ${LOCK_FILE}: flock(1) exited with ${r.signal ?? r.code}${r.err ? `: ${r.err}` : ''}`);
      // Who holds it, for the message of a writer that finds it locked (the native format).
      const me = `pid ${process.pid} (${process.argv.slice(0, 3).join(' ')})`;
      await fh.truncate(0);
      await fh.write(me, 0);
      await b.#cleanStaging();
      await b.#sweepTemporaries();
    } catch (e) {
      await fh.close();
      throw ioError('open', '.', e);
    }
    return b;
  }

  /** The absolute path of `rel`. */
  #abs(rel) {
    return rel ? join(this.#root, ...rel.split('/')) : this.#root;
  }

  /**
   * The directory `rel` (`''`: the root), checked one component at a time (a link on the way
   * is SYMLINK_REFUSED); null when it does not exist. With `dirty`, missing directories are
   * created and noted (with their parents) for fsync.
   */
  async #dir(rel, dirty) {
    if (!rel) return this.#root;
    let at = '';
    for (const c of rel.split('/')) {
      const parent = at;
      at = joinRel(at, c);
      let st = null;
      try {
        st = await fsp.lstat(this.#abs(at));
      } catch (e) {
        if (e.code !== 'ENOENT') throw ioError('stat', at, e);
      }
      if (!st) {
        if (!dirty) return null;
        try {
          await fsp.mkdir(this.#abs(at), 0o777);
          dirty.add(parent);
          dirty.add(at);
        } catch (e) {
          if (e.code !== 'EEXIST') throw ioError('create', at, e);
        }
        st = await fsp.lstat(this.#abs(at)).catch((e) => Promise.reject(ioError('stat', at, e)));
      }
      if (st.isSymbolicLink()) throw refused(at);
      if (!st.isDirectory()) throw new WeftError('STORE_IO', `${at} is not a directory`);
    }
    return this.#abs(rel);
  }

  /** What entry `rel` is: 'dir', 'file', 'symlink', 'other' or null (links are not resolved). */
  async #kind(rel) {
    try {
      const st = await fsp.lstat(this.#abs(rel));
      return st.isSymbolicLink() ? 'symlink' : st.isDirectory() ? 'dir' : st.isFile() ? 'file' : 'other';
    } catch (e) {
      if (e.code === 'ENOENT') return null;
      throw ioError('stat', rel, e);
    }
  }

  /** Opens file `rel` (its directory checked, the file itself never through a link; regular files only). */
  async #open(rel, flags, dirty) {
    const [parent, name] = split(rel);
    const d = await this.#dir(parent, dirty);
    if (d === null) return null;
    let fh;
    try {
      // O_TRUNC waits for the checks: a file with a second name is refused untouched.
      fh = await fsp.open(join(d, name), (flags & ~C.O_TRUNC) | C.O_NOFOLLOW | C.O_NONBLOCK, 0o666);
      if (await hasOtherName(fh, rel, flags)) {
        // A record or log with a second name gets a copy of its own in its place (durable
        // before it is written); the other name keeps its bytes, as natively.
        await fh.close();
        fh = undefined;
        await this.#ownCopy(d, parent, name, rel);
        fh = await fsp.open(join(d, name), (flags & ~C.O_TRUNC) | C.O_NOFOLLOW | C.O_NONBLOCK, 0o666);
        if (await hasOtherName(fh, rel, flags)) throw hardLinked(rel);
      }
      if (flags & C.O_TRUNC) await fh.truncate(0);
      return fh;
    } catch (e) {
      await fh?.close();
      if (e.code === 'ENOENT' && !(flags & C.O_CREAT)) return null;
      throw ioError('open', rel, e);
    }
  }

  /**
   * Replaces the entry `name` of directory `d` (absolute, checked; `parent` relative) by a copy of its bytes that
   * has no other name: written beside it as a temporary (removed by the next open after a
   * crash), fsynced, renamed over it, the directory fsynced.
   */
  async #ownCopy(d, parent, name, rel) {
    const tmp = join(d, `${name}${TMP_SUFFIX}-own`);
    let src;
    let out;
    try {
      src = await fsp.open(join(d, name), C.O_RDONLY | C.O_NOFOLLOW | C.O_NONBLOCK);
      const bytes = await src.readFile();
      await fsp.rm(tmp, { force: true });
      out = await fsp.open(tmp, C.O_WRONLY | C.O_CREAT | C.O_EXCL | C.O_NOFOLLOW, 0o666);
      await out.writeFile(bytes);
      await out.sync();
      await fsp.rename(tmp, join(d, name));
      const dh = await this.#dirHandle(parent);
      try {
        await this.#sync([[parent || '.', dh]]);
      } finally {
        await dh.close();
      }
    } catch (e) {
      throw ioError('copy', rel, e);
    } finally {
      await src?.close();
      await out?.close();
    }
  }

  /** The bytes of file `rel`, or undefined when there is none. */
  async #read(rel) {
    const fh = await this.#open(rel, C.O_RDONLY);
    if (!fh) return undefined;
    try {
      return await fh.readFile();
    } catch (e) {
      throw ioError('read', rel, e);
    } finally {
      await fh.close();
    }
  }

  /** The entries of directory `rel` as `[name, kind]` (links not resolved), or null. */
  async #list(rel) {
    const d = await this.#dir(rel);
    if (d === null) return null;
    try {
      const entries = await fsp.readdir(d, { withFileTypes: true });
      return entries.map((e) => [e.name, e.isSymbolicLink() ? 'symlink' : e.isDirectory() ? 'dir' : e.isFile() ? 'file' : 'other']);
    } catch (e) {
      throw ioError('list', rel, e);
    }
  }

  /** A handle on directory `rel` to fsync (never through a link). */
  async #dirHandle(rel) {
    try {
      return await fsp.open(this.#abs(rel), C.O_RDONLY | C.O_DIRECTORY | C.O_NOFOLLOW);
    } catch (e) {
      if (e.code === 'ELOOP' || e.code === 'ENOTDIR') throw refused(rel);
      throw ioError('open', rel, e);
    }
  }

  /** One round: fsyncs every `[rel, handle]` together; resolves when all are durable. */
  async #sync(jobs) {
    const out = await Promise.allSettled(jobs.map(([rel, fh]) => fh.sync().catch((e) => Promise.reject(ioError('fsync', rel, e)))));
    const bad = out.find((r) => r.status === 'rejected');
    if (bad) throw bad.reason;
  }

  async #syncDirs(dirty, round) {
    for (const rel of dirty) round.push([rel || '.', await this.#dirHandle(rel)]);
  }

  /**
   * What a crashed writer left (as the native writer's open): nodes staged under `.weft/` (or,
   * in roots of earlier versions, `nodes/.new,…`) are renamed into place when every file of
   * their manifest is whole, removed otherwise; every other temporary there is removed.
   */
  async #cleanStaging() {
    const dirty = new Set();
    for (const area of [STAGING_DIR, 'nodes']) {
      const entries = await this.#list(area);
      if (!entries) continue;
      const staged = area === STAGING_DIR;
      for (const [name, kind] of entries) {
        if (!staged && !name.startsWith('.')) continue;
        const rel = joinRel(area, name);
        if (name.startsWith(NODE_NEW_PREFIX) && kind === 'dir') {
          await this.#dir('nodes', dirty);
          const p = parsePending(name);
          const whole = p && (await this.#complete(rel, p)) && (await this.#kind(`nodes/${p.id}`)) === null;
          try {
            if (whole) await fsp.rename(this.#abs(rel), this.#abs(`nodes/${p.id}`));
            else await fsp.rm(this.#abs(rel), { recursive: true, force: true });
          } catch (e) {
            throw ioError(whole ? 'rename' : 'remove', rel, e);
          }
          dirty.add('nodes');
          dirty.add(area);
        } else if (name.startsWith(NODE_TMP_PREFIX) || (staged && name.includes(TMP_SUFFIX))) {
          await fsp.rm(this.#abs(rel), { recursive: true, force: true }).catch((e) => Promise.reject(ioError('remove', rel, e)));
          dirty.add(area);
        }
      }
    }
    const round = [];
    try {
      await this.#syncDirs(dirty, round);
      await this.#sync(round);
    } finally {
      await Promise.all(round.map(([, fh]) => fh.close()));
    }
  }

  /** Whether every file of pending node `p` (at `rel`) holds at least its manifest's bytes. */
  async #complete(rel, p) {
    for (const [name, len, hash] of p.files) {
      let fh;
      try {
        fh = await this.#open(joinRel(rel, name), C.O_RDONLY);
        if (!fh) return false;
        const buf = Buffer.alloc(len);
        let got = 0;
        while (got < len) {
          const { bytesRead } = await fh.read(buf, got, len - got, got);
          if (bytesRead === 0) break;
          got += bytesRead;
        }
        if (got !== len || shortHash(buf) !== hash) return false;
      } catch {
        return false;
      } finally {
        await fh?.close();
      }
    }
    return true;
  }

  /** Removes every `*.weft-tmp*` file a crashed writer left beside records (links never followed). */
  async #sweepTemporaries() {
    const stack = [''];
    while (stack.length) {
      const rel = stack.pop();
      for (const [name, kind] of (await this.#list(rel)) ?? []) {
        const child = joinRel(rel, name);
        if (kind === 'dir') {
          const skip = (rel === '' && name === STAGING_DIR) || (rel === 'nodes' && (name.startsWith(NODE_TMP_PREFIX) || name.startsWith(NODE_NEW_PREFIX)));
          if (!skip) stack.push(child);
        } else if (kind === 'file' && name.includes(TMP_SUFFIX)) {
          await fsp.unlink(this.#abs(child)).catch((e) => Promise.reject(ioError('remove', child, e)));
        }
      }
    }
  }

  /** The files the core reads on open (`is_snapshot_path`), by relative path, as bytes. */
  async load() {
    const files = {};
    const add = async (rel) => {
      const b = await this.#read(rel);
      if (b !== undefined) files[rel] = b;
    };
    for (const rel of ['orchestrator/meta.jsonl', 'orchestrator/index.json', 'timeline/bookmarks.jsonl']) await add(rel);
    for (const [name, kind] of (await this.#list('views')) ?? []) {
      const rel = `views/${name}`;
      if (isSnapshotPath(rel) && (kind === 'file' || kind === 'symlink')) await add(rel);
    }
    for (const [name, kind] of await this.#list('')) {
      if (kind === 'symlink' && (isSnapshotPath(name) || isStoreDir(name))) throw refused(name);
    }
    await add('graph.json');
    for (const [name, kind] of (await this.#list('nodes')) ?? []) {
      if (name.startsWith('.')) continue;
      if (kind === 'symlink') throw refused(`nodes/${name}`);
      if (kind !== 'dir') continue;
      const at = `nodes/${name}`;
      await add(`${at}/meta.json`);
      await add(`${at}/chat.jsonl`);
      const summaries = await this.#list(`${at}/summaries`);
      if (!summaries) continue;
      const names = new Set(summaries.filter(([, k]) => k === 'file' || k === 'symlink').map(([n]) => n));
      names.add('latest.json');
      for (const f of [...names].sort()) {
        const rel = `${at}/summaries/${f}`;
        if (isSnapshotPath(rel)) await add(rel);
      }
    }
    return files;
  }

  /** The text of file `path` (relative to the root), or undefined. */
  async read(path) {
    checkPath(path);
    const b = await this.#read(path);
    return b === undefined ? undefined : dec.decode(b);
  }

  /** Performs a batch stage by stage; each stage is durable before the next one begins. */
  async apply(batch) {
    for (let si = 0; si < batch.stages.length; si++) {
      const handles = [];
      try {
        await this.#stage(batch, si, handles);
      } finally {
        await Promise.all(handles.map((fh) => fh.close().catch(() => {})));
      }
    }
  }

  /** Writes a new file `rel` (no link, never an existing entry) and returns its handle. */
  async #writeNew(rel, text, handles, exclusive = true) {
    const fh = await this.#open(rel, C.O_WRONLY | C.O_CREAT | (exclusive ? C.O_EXCL : C.O_TRUNC));
    handles.push(fh);
    await fh.writeFile(text).catch((e) => Promise.reject(ioError('write', rel, e)));
    return fh;
  }

  /**
   * One stage: write what it creates, puts and appends; fsync new files and directories; move
   * puts and new nodes into place; fsync the appends and every directory that changed.
   */
  async #stage(batch, si, handles) {
    const first = [];
    const second = [];
    const moves = [];
    const dirty = new Set();
    for (const [oi, op] of batch.stages[si].entries()) {
      switch (op.op) {
        case 'createNode': {
          checkId(op.id);
          await this.#dir('nodes', dirty);
          const dest = `nodes/${op.id}`;
          if ((await this.#kind(dest)) !== null) throw new WeftError('STORE_IO', `${dest} already exists`);
          await this.#dir(STAGING_DIR, dirty);
          const staged = `${STAGING_DIR}/${NODE_TMP_PREFIX}${op.id}-${batch.id}`;
          if ((await this.#kind(staged)) !== null) await fsp.rm(this.#abs(staged), { recursive: true, force: true });
          const made = new Set();
          await this.#dir(staged, made);
          for (const [name, text] of Object.entries(op.files)) {
            checkPath(name);
            const frel = `${staged}/${name}`;
            const sub = split(frel)[0];
            if (sub !== staged) {
              await this.#dir(sub, made);
            }
            first.push([frel, await this.#writeNew(frel, text, handles)]);
          }
          // The staged directory and its subdirectories (`.weft/` itself is fsynced after the rename).
          made.delete(STAGING_DIR);
          for (const rel of made) {
            const fh = await this.#dirHandle(rel);
            handles.push(fh);
            first.push([rel, fh]);
          }
          moves.push({ node: op.id, staged });
          dirty.add('nodes');
          dirty.add(STAGING_DIR);
          break;
        }
        case 'put': {
          checkPath(op.path);
          const [parent] = split(op.path);
          await this.#dir(parent, dirty);
          const tmp = `${op.path}${TMP_SUFFIX}-${batch.id}-${si}-${oi}`;
          first.push([tmp, await this.#writeNew(tmp, op.text, handles, false)]);
          dirty.add(parent);
          moves.push({ put: op.path, tmp });
          break;
        }
        case 'append': {
          checkPath(op.path);
          const [parent] = split(op.path);
          await this.#dir(parent, dirty);
          if ((await this.#kind(op.path)) === null) dirty.add(parent);
          const fh = await this.#open(op.path, C.O_WRONLY | C.O_APPEND | C.O_CREAT);
          handles.push(fh);
          // One write of whole lines (a short write is finished: the log is append-only).
          const bytes = Buffer.from(op.text);
          try {
            for (let n = 0; n < bytes.length; ) n += (await fh.write(bytes, n)).bytesWritten;
          } catch (e) {
            throw ioError('append', op.path, e);
          }
          second.push([op.path, fh]);
          break;
        }
        case 'patch': {
          // Node cannot take the readers' lock the native store patches under, so the record
          // is replaced whole (its first `at` bytes and the patch, as a put): readers see it
          // change atomically.
          checkPath(op.path);
          const [parent] = split(op.path);
          const cur = await this.#read(op.path);
          if (cur === undefined || cur.length !== op.size || op.at > op.size)
            throw new WeftError('STORE_IO', `${op.path} is not the ${op.size} bytes a patch at ${op.at} expects`);
          const tmp = `${op.path}${TMP_SUFFIX}-${batch.id}-${si}-${oi}`;
          const text = Buffer.concat([cur.subarray(0, op.at), Buffer.from(op.text)]);
          first.push([tmp, await this.#writeNew(tmp, text, handles, false)]);
          dirty.add(parent);
          moves.push({ put: op.path, tmp });
          break;
        }
        case 'truncate': {
          checkPath(op.path);
          const [parent] = split(op.path);
          if ((await this.#dir(parent)) === null) throw new WeftError('STORE_IO', `${parent} is missing`);
          const fh = await this.#open(op.path, C.O_WRONLY);
          if (!fh) throw new WeftError('STORE_IO', `open ${op.path}: no such file`);
          handles.push(fh);
          await fh.truncate(op.len).catch((e) => Promise.reject(ioError('truncate', op.path, e)));
          second.push([op.path, fh]);
          break;
        }
        case 'rename': {
          checkPath(op.path);
          checkPath(op.to);
          const [pa] = split(op.path);
          const exists = (await this.#dir(pa)) === null ? null : await this.#kind(op.path);
          if (exists === 'symlink') throw refused(op.path);
          if (exists !== null) {
            dirty.add(pa);
            dirty.add(split(op.to)[0]);
            moves.push({ from: op.path, to: op.to });
          }
          break;
        }
        default:
          throw new WeftError('STORE_IO', `unknown store op ${op.op}`);
      }
    }
    await this.#sync(first);
    for (const m of moves) {
      if (m.put !== undefined) {
        // A record that is a link is refused (the rename would replace the link).
        if ((await this.#kind(m.put)) === 'symlink') throw refused(m.put);
        await fsp.rename(this.#abs(m.tmp), this.#abs(m.put)).catch((e) => Promise.reject(ioError('rename', m.put, e)));
      } else if (m.node !== undefined) {
        const dest = `nodes/${m.node}`;
        if ((await this.#kind(dest)) !== null) throw new WeftError('STORE_IO', `${dest} already exists`);
        await fsp.rename(this.#abs(m.staged), this.#abs(dest)).catch((e) => Promise.reject(ioError('rename', dest, e)));
      } else {
        await this.#dir(split(m.to)[0], dirty);
        if ((await this.#kind(m.to)) === 'symlink') throw refused(m.to);
        await fsp.rename(this.#abs(m.from), this.#abs(m.to)).catch((e) => Promise.reject(ioError('rename', m.from, e)));
      }
    }
    for (const rel of dirty) {
      const fh = await this.#dirHandle(rel);
      handles.push(fh);
      second.push([rel || '.', fh]);
    }
    await this.#sync(second);
  }

  /** Releases the writer's lock (closing the lock file's description releases the `flock`). */
  async close() {
    const fh = this.#lock;
    this.#lock = null;
    await fh?.close();
  }
}
