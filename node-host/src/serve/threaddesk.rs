//! ThreadDesk's own routes beside the DGP binding: the browser UI (a thin client of the same
//! protocol operations), the local bulletin read view, and a human-only policy change.
//!
//! The bulletin is a domain read view, not a protocol execution path; the policy change is an
//! application operation that participates in the same revision boundary (it makes every
//! earlier frame stale).

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::json;
use weft_core::frames::{FramesError, Role};
use weft_threaddesk::{BULLETIN, ThreadDesk, web};

use super::dgp::Dgp;
use super::{Reply, Shared, json_response};

#[derive(Clone)]
struct Ctx {
    dgp: Arc<Dgp<ThreadDesk>>,
    shared: Shared,
}

/// The ThreadDesk UI and read views.
pub fn routes(dgp: Arc<Dgp<ThreadDesk>>, shared: Shared) -> Router {
    Router::new()
        .route(
            "/",
            get(|| async { asset(web::INDEX_HTML, "text/html; charset=utf-8") }),
        )
        .route(
            "/app.js",
            get(|| async { asset(web::APP_JS, "text/javascript; charset=utf-8") }),
        )
        .route(
            "/style.css",
            get(|| async { asset(web::STYLE_CSS, "text/css; charset=utf-8") }),
        )
        .route("/dgp/bulletin", get(bulletin))
        .route("/threaddesk/policy", post(bump_policy))
        .route("/threaddesk/events", get(events))
        .with_state(Ctx { dgp, shared })
}

fn asset(body: &'static str, ctype: &'static str) -> Response {
    let mut r = body.into_response();
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(ctype));
    r
}

async fn bulletin(State(c): State<Ctx>, headers: HeaderMap) -> Reply {
    if let Err(e) = c.shared.auth.principal(&headers) {
        return Reply(Err(e));
    }
    Reply(
        c.dgp
            .read(|e| {
                let entries: Vec<_> = e.entries(BULLETIN).iter().map(|x| x.to_json()).collect();
                Ok(json_response(
                    serde_json::to_vec(&json!({"dgp": "0.1", "entries": entries})).expect("json"),
                ))
            })
            .await,
    )
}

/// `GET /threaddesk/events` (token required): live changes as server-sent events, from this
/// instance and, on PostgreSQL, every other instance on the database: `surface` `{surface,
/// revision, receipt_id}` after a commit, `policy` `{revision}` after a policy change, `reset`
/// when this stream fell behind (re-fetch). Ends when the server stops.
async fn events(State(c): State<Ctx>, headers: HeaderMap) -> Response {
    use axum::response::sse::{Event, KeepAlive, Sse};
    if let Err(e) = c.shared.auth.principal(&headers) {
        return Reply(Err(e)).into_response();
    }
    let Some(rx) = c.dgp.subscribe() else {
        return Reply(Err(FramesError::NotFound("the server is stopping".into()))).into_response();
    };
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        let ev = match rx.recv().await {
            Ok((name, data)) => Event::default().event(name).data(data),
            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => Event::default()
                .event("reset")
                .data(json!({"reason": "this stream fell behind: re-fetch"}).to_string()),
            Err(tokio::sync::broadcast::error::RecvError::Closed) => return None,
        };
        Some((Ok::<Event, std::convert::Infallible>(ev), rx))
    });
    Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(std::time::Duration::from_secs(15)))
        .into_response()
}

async fn bump_policy(State(c): State<Ctx>, headers: HeaderMap) -> Reply {
    match c.shared.auth.principal(&headers) {
        Ok(p) if p.role == Role::Human => {}
        Ok(_) => {
            return Reply(Err(FramesError::Forbidden(
                "only a human may change the policy".into(),
            )));
        }
        Err(e) => return Reply(Err(e)),
    }
    Reply(c.dgp.bump_policy().await.map(|rev| {
        json_response(
            serde_json::to_vec(&json!({"policy_ref": format!("thread-policy@{rev}")}))
                .expect("json"),
        )
    }))
}
