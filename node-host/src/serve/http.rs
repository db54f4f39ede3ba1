//! The connection loop of `weft serve` and `weft actors desk`: hyper's HTTP/1.1 server with
//! bounded resources, and a graceful shutdown on SIGINT or SIGTERM.
//!
//! * At most [`Limits::max_connections`] connections are served at once; further clients wait
//!   in the listen backlog until one closes (no accept error is ever fatal).
//! * A client must send a complete request head within [`Limits::header_read_timeout`] of
//!   connecting or of the previous response (hyper's `header_read_timeout`, not reset by
//!   trickled bytes): slowloris connections and idle keep-alive connections are closed.
//! * A connection on which no byte moves either way for [`Limits::idle_timeout`] is closed
//!   (a stalled request body, a dead peer). Live streams send keep-alive comments well within it.
//! * On shutdown the listener closes, every connection finishes its request in flight and
//!   closes, long-lived streams end (they watch the same [`ShutdownSignal`]), and whatever is
//!   still open after [`Limits::shutdown_grace`] is dropped.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};

/// Resource bounds of one server.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Connections served at once.
    pub max_connections: usize,
    /// Time a client has to send a complete request head (also the longest idle keep-alive).
    pub header_read_timeout: Duration,
    /// Time a connection may move no byte in either direction.
    pub idle_timeout: Duration,
    /// Time open connections get to finish after shutdown starts.
    pub shutdown_grace: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: descriptor_budget().map_or(512, |b| b.min(512)),
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            shutdown_grace: Duration::from_secs(5),
        }
    }
}

/// The `weft serve` / `weft actors desk` flags for [`Limits`].
#[derive(clap::Args, Debug, Clone)]
pub struct LimitArgs {
    /// Most connections served at once; further clients wait until one closes.
    #[arg(long, default_value_t = 512)]
    pub max_connections: usize,
    /// Milliseconds a client has to send a complete request head after connecting or after
    /// the previous response (closes slowloris and idle keep-alive connections).
    #[arg(long, default_value_t = 10_000)]
    pub header_read_timeout_ms: u64,
    /// Milliseconds a connection may move no byte either way before it is closed.
    #[arg(long, default_value_t = 60_000)]
    pub idle_timeout_ms: u64,
    /// Milliseconds open connections get to finish on SIGINT / SIGTERM before the server exits.
    #[arg(long, default_value_t = 5_000)]
    pub shutdown_grace_ms: u64,
}

/// Descriptors kept free for the process itself (the database and its WAL, the chat root,
/// worker pipes) when the connection cap is derived from the descriptor limit.
const RESERVED_DESCRIPTORS: usize = 64;

/// The most connections the process's descriptor limit (`RLIMIT_NOFILE`) leaves room for, so
/// that sockets can never starve the store of descriptors.
fn descriptor_budget() -> Option<usize> {
    #[cfg(target_os = "linux")]
    {
        let mut r = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes the limits into `r`, a valid rlimit.
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } == 0
            && r.rlim_cur != libc::RLIM_INFINITY
        {
            let soft = usize::try_from(r.rlim_cur).unwrap_or(usize::MAX);
            return Some(soft.saturating_sub(RESERVED_DESCRIPTORS).max(8));
        }
        None
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

impl LimitArgs {
    /// The limits these flags describe (each at least 1; the connection cap also within what
    /// the descriptor limit leaves after a reserve for the process).
    pub fn limits(&self) -> Limits {
        let ms = |v: u64| Duration::from_millis(v.max(1));
        let cap = self.max_connections.max(1);
        Limits {
            max_connections: descriptor_budget().map_or(cap, |b| cap.min(b)),
            header_read_timeout: ms(self.header_read_timeout_ms),
            idle_timeout: ms(self.idle_timeout_ms),
            shutdown_grace: ms(self.shutdown_grace_ms),
        }
    }
}

/// Starts a shutdown: every [`ShutdownSignal`] subscribed from it fires.
pub struct Shutdown(watch::Sender<bool>);

/// Fires once shutdown has started (cheap to clone; hand one to every long-lived stream).
#[derive(Clone)]
pub struct ShutdownSignal(watch::Receiver<bool>);

impl Default for Shutdown {
    fn default() -> Self {
        Shutdown(watch::channel(false).0)
    }
}

impl Shutdown {
    /// A signal that fires when [`Shutdown::start`] is called.
    pub fn signal(&self) -> ShutdownSignal {
        ShutdownSignal(self.0.subscribe())
    }

    /// Starts the shutdown.
    pub fn start(&self) {
        self.0.send_replace(true);
    }
}

impl ShutdownSignal {
    /// Resolves once shutdown has started (at once if it already has).
    pub async fn fired(&mut self) {
        // An error means the sender is gone: nothing can start a shutdown any more, and the
        // server it belonged to is over, so that counts as started too.
        let _ = self.0.wait_for(|s| *s).await;
    }

    /// Whether shutdown has started.
    pub fn has_fired(&self) -> bool {
        *self.0.borrow()
    }
}

/// Installs the SIGINT (Ctrl-C) and SIGTERM handlers now (from here on neither signal kills
/// the process) and returns a future that resolves, with the signal's name, when one arrives.
/// Must be called inside the Tokio runtime.
pub fn stop_signal() -> impl std::future::Future<Output = &'static str> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
        let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
        async move {
            tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = int.recv() => "SIGINT",
            }
        }
    }
    #[cfg(not(unix))]
    {
        async {
            let _ = tokio::signal::ctrl_c().await;
            "Ctrl-C"
        }
    }
}

/// Serves `app` on `listener` within `limits` until `shutdown` fires, then drains: returns
/// once every connection closed or the grace period ended (the rest are dropped). Returns how
/// many connections were still open when the grace period ended.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    shutdown: ShutdownSignal,
) -> usize {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let (force_tx, force_rx) = watch::channel(false);
    let mut stop = shutdown.clone();
    loop {
        let permit = tokio::select! {
            p = slots.clone().acquire_owned() => p.expect("the semaphore is never closed"),
            _ = stop.fired() => break,
        };
        let tcp = tokio::select! {
            r = listener.accept() => match r {
                Ok((tcp, _)) => tcp,
                Err(_) => {
                    // Out of descriptors or a connection reset before accept: wait briefly
                    // (descriptors free up as connections time out) instead of spinning.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stop.fired() => break,
        };
        let _ = tcp.set_nodelay(true);
        let app = app.clone();
        let signal = shutdown.clone();
        let force = force_rx.clone();
        tokio::spawn(async move {
            connection(tcp, app, limits, signal, force).await;
            drop(permit);
        });
    }
    drop(listener);
    let all = u32::try_from(limits.max_connections).unwrap_or(u32::MAX);
    let drained = tokio::time::timeout(limits.shutdown_grace, slots.acquire_many(all)).await;
    if drained.is_ok() {
        return 0;
    }
    let open = limits.max_connections - slots.available_permits();
    force_tx.send_replace(true);
    // Dropped connections release their slots at once; wait for that so that whatever they
    // held (the routers' state, store handles) is released when this returns.
    let _ = tokio::time::timeout(Duration::from_secs(1), slots.acquire_many(all)).await;
    open
}

async fn connection(
    tcp: TcpStream,
    app: Router,
    limits: Limits,
    mut shutdown: ShutdownSignal,
    mut force: watch::Receiver<bool>,
) {
    let start = Instant::now();
    let last = Arc::new(AtomicU64::new(0));
    let io = Metered {
        inner: tcp,
        start,
        last: last.clone(),
    };
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .keep_alive(true);
    // Upgrades (the remote job endpoint's WebSocket) leave this loop: the upgraded socket is
    // the route's from then on, with its own cap and liveness, and this slot is freed.
    let conn = builder
        .serve_connection(TokioIo::new(io), TowerToHyperService::new(app))
        .with_upgrades();
    tokio::pin!(conn);
    let mut draining = shutdown.has_fired();
    if draining {
        conn.as_mut().graceful_shutdown();
    }
    let idle = idle_expired(start, last, limits.idle_timeout);
    tokio::pin!(idle);
    loop {
        tokio::select! {
            _ = conn.as_mut() => return,
            _ = shutdown.fired(), if !draining => {
                conn.as_mut().graceful_shutdown();
                draining = true;
            }
            _ = force.wait_for(|f| *f) => return,
            _ = &mut idle => return,
        }
    }
}

/// Resolves once no byte moved for `idle` (`last` holds the milliseconds since `start` of the
/// latest read or write).
async fn idle_expired(start: Instant, last: Arc<AtomicU64>, idle: Duration) {
    loop {
        let since = Duration::from_millis(last.load(Ordering::Relaxed));
        let quiet = start.elapsed().saturating_sub(since);
        if quiet >= idle {
            return;
        }
        tokio::time::sleep(idle - quiet).await;
    }
}

/// A TCP stream that records when bytes last moved.
struct Metered {
    inner: TcpStream,
    start: Instant,
    last: Arc<AtomicU64>,
}

impl Metered {
    fn touch(&self) {
        self.last
            .store(self.start.elapsed().as_millis() as u64, Ordering::Relaxed);
    }
}

impl AsyncRead for Metered {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.touch();
        }
        r
    }
}

impl AsyncWrite for Metered {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, data);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.touch();
        }
        r
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.touch();
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
