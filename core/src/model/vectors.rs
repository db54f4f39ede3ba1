//! The `models` conformance suite runner (`tests/vectors/models.json`), dispatched by
//! [`crate::conformance::run_suite`]; every host runs it (natively, as wasm under Node and in
//! headless Chromium).
//!
//! A vector has a `kind`:
//! * `stream` (the default): `provider`, `chunks` (strings; concatenated they are the body)
//!   and optionally `splitAt` (byte offsets to re-cut the body, e.g. inside a UTF-8
//!   character) and `everyByte` (also feed it one byte at a time). The runner decodes the body
//!   cut as `chunks`, whole, at `splitAt` and byte by byte, and requires the same events and
//!   result from every cut; then checks `events` (a subset, in order, when given) and
//!   `response` (subset of the assembled answer) or `expectError` (a code, or a subset of the
//!   error's JSON form).
//! * `request`: `config` (the JSON form of a [`ModelConfig`]), `system`, `messages` (session
//!   transcript JSON), `tools` (declaration JSON); checks `url`, `headers` (subset) and `body`
//!   (subset of the JSON body).
//! * `status`: `status`, `retryAfter`, `body` (text); checks `expectError`, and `retries`
//!   (`[[attempts, delayMs or null], ...]` under the default [`RetryPolicy`]).
//! * `resolve`: `choice` (`{model, baseUrl, openaiKey, anthropicKey}`); checks `expect`
//!   (`null` = no model configured, else a subset of `{provider, model, baseUrl, hasKey}`) or
//!   `expectError`.

use serde_json::{Value, json};

use super::*;
use crate::conformance::{VectorResult, subset};

/// Runs one vector.
pub fn run_vector(v: &Value) -> VectorResult {
    let name = v["name"].as_str().unwrap_or("(unnamed)").to_owned();
    let mut failures = Vec::new();
    let r = match v["kind"].as_str().unwrap_or("stream") {
        "stream" => stream(v, &mut failures),
        "request" => request(v, &mut failures),
        "status" => status(v, &mut failures),
        "resolve" => resolve(v, &mut failures),
        other => Err(format!("unknown vector kind `{other}`")),
    };
    if let Err(e) = r {
        failures.push(e);
    }
    VectorResult { name, failures }
}

fn check_error(ctx: &str, want: &Value, got: &ModelError, failures: &mut Vec<String>) {
    let got_json = got.to_json();
    let r = match want {
        Value::String(code) => subset(&json!({"code": code}), &got_json, ctx),
        other => subset(other, &got_json, ctx),
    };
    if let Err(e) = r {
        failures.push(e);
    }
}

type Decoded = (Vec<Value>, Result<Value, ModelError>);

fn decode(provider: Provider, cuts: &[&[u8]]) -> Decoded {
    let mut d = StreamDecoder::new(provider);
    let mut events = Vec::new();
    for c in cuts {
        let r = d.feed(c);
        while let Some(e) = d.poll_event() {
            events.push(serde_json::to_value(&e).expect("events serialize"));
        }
        if let Err(e) = r {
            return (events, Err(e));
        }
    }
    (events, d.finish().map(|r| r.to_json()))
}

fn stream(v: &Value, failures: &mut Vec<String>) -> Result<(), String> {
    let provider =
        Provider::parse(v["provider"].as_str().unwrap_or("")).map_err(|e| e.to_string())?;
    let chunks: Vec<String> = v["chunks"]
        .as_array()
        .ok_or("a stream vector needs `chunks`")?
        .iter()
        .map(|c| c.as_str().map(str::to_owned).ok_or("chunks are strings"))
        .collect::<Result<_, _>>()?;
    let body: Vec<u8> = chunks.concat().into_bytes();
    let as_given: Vec<&[u8]> = chunks.iter().map(|c| c.as_bytes()).collect();
    let reference = decode(provider, &as_given);
    let mut cuts: Vec<(String, Vec<&[u8]>)> = vec![("whole".into(), vec![&body[..]])];
    if let Some(at) = v["splitAt"].as_array() {
        let mut offs: Vec<usize> = at
            .iter()
            .filter_map(Value::as_u64)
            .map(|n| n as usize)
            .filter(|&n| n <= body.len())
            .collect();
        offs.sort_unstable();
        let mut parts = Vec::new();
        let mut last = 0;
        for o in offs {
            parts.push(&body[last..o]);
            last = o;
        }
        parts.push(&body[last..]);
        cuts.push(("splitAt".into(), parts));
    }
    if v["everyByte"].as_bool() == Some(true) {
        cuts.push(("everyByte".into(), body.chunks(1).collect()));
    }
    for (label, c) in &cuts {
        let got = decode(provider, c);
        if got != reference {
            failures.push(format!(
                "cut `{label}` decodes differently from the chunks as given:\n    chunks: {:?}\n    {label}: {:?}",
                reference, got
            ));
        }
    }
    let (events, result) = reference;
    if let Some(want) = v.get("events")
        && let Err(e) = subset(want, &Value::Array(events.clone()), "events")
    {
        failures.push(e);
    }
    match (&result, v.get("expectError")) {
        (Err(e), Some(want)) => check_error("error", want, e, failures),
        (Err(e), None) => failures.push(format!("unexpected error {}: {e}", e.code())),
        (Ok(r), Some(want)) => failures.push(format!("expected error {want}, got response {r}")),
        (Ok(r), None) => {
            if let Some(want) = v.get("response")
                && let Err(e) = subset(want, r, "response")
            {
                failures.push(e);
            }
        }
    }
    Ok(())
}

fn request(v: &Value, failures: &mut Vec<String>) -> Result<(), String> {
    let config = ModelConfig::from_json(&v["config"]).map_err(|e| e.to_string())?;
    let empty = Vec::new();
    let messages = v["messages"].as_array().unwrap_or(&empty);
    let tools = v["tools"].as_array().unwrap_or(&empty);
    let chat = ChatRequest::from_transcript(v["system"].as_str(), messages, tools);
    let http = encode_request(&config, &chat);
    if let Some(url) = v["url"].as_str()
        && url != http.url
    {
        failures.push(format!("url: expected {url}, got {}", http.url));
    }
    if let Some(want) = v.get("headers") {
        let got: serde_json::Map<String, Value> = http
            .headers
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect();
        if let Err(e) = subset(want, &Value::Object(got), "headers") {
            failures.push(e);
        }
    }
    let body: Value =
        serde_json::from_str(&http.body).map_err(|e| format!("body is not JSON: {e}"))?;
    if let Some(want) = v.get("body")
        && let Err(e) = subset(want, &body, "body")
    {
        failures.push(e);
    }
    Ok(())
}

fn status(v: &Value, failures: &mut Vec<String>) -> Result<(), String> {
    let code = v["status"]
        .as_u64()
        .ok_or("a status vector needs `status`")? as u16;
    let err = classify_status(
        code,
        v["retryAfter"].as_str(),
        v["body"].as_str().unwrap_or("").as_bytes(),
    );
    if let Some(want) = v.get("expectError") {
        check_error("error", want, &err, failures);
    }
    if let Some(retries) = v["retries"].as_array() {
        let policy = RetryPolicy::default();
        for r in retries {
            let attempts = r[0].as_u64().ok_or("retries are [attempts, delay]")? as u32;
            let got = policy.delay(attempts, &err);
            if got != r[1].as_u64() {
                failures.push(format!(
                    "retry after {attempts} attempts: expected {}, got {got:?}",
                    r[1]
                ));
            }
        }
    }
    Ok(())
}

fn resolve(v: &Value, failures: &mut Vec<String>) -> Result<(), String> {
    let choice = ModelChoice::from_json(&v["choice"]);
    let got = ModelConfig::resolve(&choice).map(|r| {
        r.map(|c| {
            json!({"provider": c.provider.as_str(), "model": c.model, "baseUrl": c.base_url,
                   "hasKey": c.api_key.is_some(), "maxTokens": c.max_tokens})
        })
        .unwrap_or(Value::Null)
    });
    match (&got, v.get("expectError")) {
        (Err(e), Some(want)) => check_error("error", want, e, failures),
        (Err(e), None) => failures.push(format!("unexpected error {}: {e}", e.code())),
        (Ok(g), Some(want)) => failures.push(format!("expected error {want}, got {g}")),
        (Ok(g), None) => {
            let want = v.get("expect").cloned().unwrap_or(Value::Null);
            if want.is_null() != g.is_null() {
                failures.push(format!("expected {want}, got {g}"));
            } else if let Err(e) = subset(&want, g, "expect") {
                failures.push(e);
            }
        }
    }
    Ok(())
}
