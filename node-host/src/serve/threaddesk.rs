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
    Reply(c.dgp.call(|e, _| Ok(e.bump_policy())).await.map(|rev| {
        json_response(
            serde_json::to_vec(&json!({"policy_ref": format!("thread-policy@{rev}")}))
                .expect("json"),
        )
    }))
}
