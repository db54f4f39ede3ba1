//! `weft serve`: the HTTP host. Capabilities contribute axum routers that share one state
//! ([`Shared`]: credentials, the SQLite store, the clock); [`router`] merges them under one
//! boundary (Host/Origin checks, security headers, problem+json fallbacks).
//!
//! Today one capability is mounted: the DGP 0.1 binding ([`dgp`]) serving ThreadDesk, plus the
//! ThreadDesk browser UI and its read views ([`threaddesk`]).

pub mod auth;
pub mod dgp;
pub mod store;
pub mod threaddesk;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use weft_core::frames::FramesError;

use self::auth::Auth;
use self::store::Store;

/// Arguments of `weft serve`.
#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// Address to listen on (`127.0.0.1:0` picks a free port; the URL is printed).
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Directory of the embedded SQLite database (created if missing).
    #[arg(long, default_value = "weft-data")]
    pub data_dir: PathBuf,
    /// How long a frame may be committed against, in seconds.
    #[arg(long, default_value_t = 900)]
    pub frame_ttl_secs: u64,
    /// Seed this many extra synthetic ThreadDesk threads when the store is new (load tests).
    #[arg(long, default_value_t = 0)]
    pub extra_threads: u32,
    /// Also serve the actor desk (`/actors/`, `/api/actors/…`) over this `$CHAT_ROOT`
    /// (initialised when empty). The server holds the root's writer lock while it runs.
    #[arg(long)]
    pub chat_root: Option<PathBuf>,
}

/// State every capability shares.
#[derive(Clone)]
pub struct Shared {
    pub auth: Arc<Auth>,
    pub store: Arc<Store>,
    /// The bound address (for Host checks).
    pub addr: SocketAddr,
}

/// Wall-clock milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Random bytes from the operating system.
pub fn random_bytes<const N: usize>() -> [u8; N] {
    use std::io::Read;
    let mut b = [0u8; N];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .expect("/dev/urandom is readable");
    b
}

/// A problem+json response.
pub fn problem(e: &FramesError) -> Response {
    let body = serde_json::to_vec(&e.problem()).expect("problems serialize");
    let mut r = Response::new(Body::from(body));
    *r.status_mut() =
        StatusCode::from_u16(e.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    r
}

/// A JSON response.
pub fn json_response(bytes: Vec<u8>) -> Response {
    let mut r = Response::new(Body::from(bytes));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// Merges capability routers under the shared boundary.
pub fn router(shared: Shared, parts: Vec<Router>) -> Router {
    let mut app = Router::new();
    for p in parts {
        app = app.merge(p);
    }
    app.fallback(|| async { problem(&FramesError::NotFound("no such route".into())) })
        .method_not_allowed_fallback(|| async {
            problem(&FramesError::MethodNotAllowed(
                "this route does not accept that method".into(),
            ))
        })
        .layer(middleware::from_fn_with_state(shared, boundary))
}

fn host_allowed(addr: SocketAddr, host: &str) -> bool {
    if !addr.ip().is_loopback() {
        return true; // bound to a routable address: the operator chose the names
    }
    let port = addr.port();
    [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        format!("[::1]:{port}"),
    ]
    .iter()
    .any(|h| h == host)
}

/// DNS-rebinding and cross-origin protection, plus headers every response carries.
async fn boundary(State(shared): State<Shared>, req: Request, next: Next) -> Response {
    let headers: &HeaderMap = req.headers();
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("");
    let mut resp = if !host_allowed(shared.addr, host) {
        problem(&FramesError::UntrustedHost(format!(
            "unexpected Host header `{host}`"
        )))
    } else if let Some(origin) = headers.get(header::ORIGIN).and_then(|o| o.to_str().ok())
        && origin != format!("http://{host}")
        && origin != format!("https://{host}")
    {
        problem(&FramesError::UntrustedOrigin(
            "cross-origin access is not enabled".into(),
        ))
    } else {
        next.run(req).await
    };
    let h = resp.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' blob:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
        ),
    );
    resp
}

/// Runs `weft serve`.
pub async fn main(args: ServeArgs) -> ExitCode {
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("weft serve: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: ServeArgs) -> Result<(), String> {
    std::fs::create_dir_all(&args.data_dir)
        .map_err(|e| format!("{}: {e}", args.data_dir.display()))?;
    let db = args.data_dir.join("weft.sqlite3");
    let store = Store::open(&db)?;
    let (auth, generated) = Auth::from_env()?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let shared = Shared {
        auth: Arc::new(auth),
        store: store.clone(),
        addr,
    };
    let config = weft_core::frames::EngineConfig {
        frame_ttl_ms: args.frame_ttl_secs * 1000,
        id_seed: u64::from_be_bytes(random_bytes::<8>()),
        ..Default::default()
    };
    let desk = dgp::Dgp::open(
        weft_threaddesk::ThreadDesk::new().with_extra_threads(args.extra_threads),
        config,
        shared.store.clone(),
    )
    .await?;
    let mut parts = vec![
        dgp::routes(desk.clone(), shared.clone()),
        threaddesk::routes(desk, shared.clone()),
    ];
    if let Some(root) = &args.chat_root {
        parts.push(crate::desk::mount(root, addr).await?);
    }
    let app = router(shared.clone(), parts);
    println!("weft serve: ThreadDesk (DGP 0.1) on http://{addr}/");
    if let Some(root) = &args.chat_root {
        println!(
            "  actor desk:  http://{addr}/actors/ (root {})",
            root.display()
        );
    }
    println!("  data:        {} ({})", db.display(), store::DURABILITY);
    let note = |g: bool| {
        if g {
            " (generated)"
        } else {
            " (from the environment)"
        }
    };
    println!(
        "  human token: {}{}",
        shared.auth.human_token(),
        note(generated.0)
    );
    println!(
        "  agent token: {}{}",
        shared.auth.agent_token(),
        note(generated.1)
    );
    println!("  discovery:   http://{addr}/.well-known/dgp   (Ctrl-C stops)");
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
        .map_err(|e| e.to_string())?;
    store.close();
    Ok(())
}

/// `IntoResponse` for results of handlers.
pub struct Reply(pub Result<Response, FramesError>);

impl IntoResponse for Reply {
    fn into_response(self) -> Response {
        match self.0 {
            Ok(r) => r,
            Err(e) => problem(&e),
        }
    }
}
