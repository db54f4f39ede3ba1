//! Overhead of the model codec and the native host per streamed token.
//!
//! 1. Tokens/s parsed natively by the core's `StreamDecoder` for a 10k-token reply (one SSE
//!    event per token, as providers stream), in OpenAI and Anthropic format, fed in 1400-byte
//!    chunks; best of five runs. Target: ≥ 1 M tokens/s.
//! 2. Added latency of the first delta through the reqwest host (`ReqwestModel::ask`: request
//!    encoding, `ModelCall`, decoding) against a tiny in-process loopback server, compared with
//!    a bare reqwest request reading the first body chunk from the same server; medians of 200.
//!
//! Prints figures; asserts nothing. Run: `cargo run --release -p weft-bench --bin model_stream`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use weft_core::model::{
    ChatMessage, ChatRequest, ModelChoice, ModelConfig, Provider, StreamDecoder, StreamEvent,
    UserPart,
};
use weft_host::model::{ReqwestModel, http_client};

const TOKENS: usize = 10_000;

fn token(i: usize) -> String {
    format!(" tok{}", i % 1000)
}

fn openai_stream(n: usize) -> Vec<u8> {
    let mut s = String::new();
    let chunk = |delta: serde_json::Value, finish: serde_json::Value| {
        format!(
            "data: {}\n\n",
            json!({"id": "chatcmpl-b", "object": "chat.completion.chunk", "model": "m",
                   "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        )
    };
    s.push_str(&chunk(
        json!({"role": "assistant", "content": ""}),
        json!(null),
    ));
    for i in 0..n {
        s.push_str(&chunk(json!({"content": token(i)}), json!(null)));
    }
    s.push_str(&chunk(json!({}), json!("stop")));
    s.push_str(&format!(
        "data: {}\n\n",
        json!({"id": "chatcmpl-b", "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": n}})
    ));
    s.push_str("data: [DONE]\n\n");
    s.into_bytes()
}

fn anthropic_stream(n: usize) -> Vec<u8> {
    let mut s = String::new();
    let ev =
        |v: serde_json::Value| format!("event: {}\ndata: {v}\n\n", v["type"].as_str().unwrap());
    s.push_str(&ev(json!({"type": "message_start", "message": {"id": "msg_b", "type": "message",
        "role": "assistant", "content": [], "model": "m", "usage": {"input_tokens": 5, "output_tokens": 1}}})));
    s.push_str(&ev(
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
    ));
    for i in 0..n {
        s.push_str(&ev(json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "text_delta", "text": token(i)}})));
    }
    s.push_str(&ev(json!({"type": "content_block_stop", "index": 0})));
    s.push_str(&ev(
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"},
        "usage": {"output_tokens": n}}),
    ));
    s.push_str(&ev(json!({"type": "message_stop"})));
    s.into_bytes()
}

/// Decodes `bytes` in 1400-byte chunks; returns the text deltas seen.
fn decode(provider: Provider, bytes: &[u8]) -> usize {
    let mut d = StreamDecoder::new(provider);
    let mut deltas = 0;
    for c in bytes.chunks(1400) {
        d.feed(c).expect("a valid stream");
        while let Some(e) = d.poll_event() {
            if matches!(e, StreamEvent::TextDelta { .. }) {
                deltas += 1;
            }
            black_box(e);
        }
    }
    black_box(d.finish().expect("a complete stream"));
    deltas
}

fn parse_rate(provider: Provider, bytes: &[u8]) -> f64 {
    let mut best = Duration::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        let n = decode(provider, bytes);
        best = best.min(t.elapsed());
        assert_eq!(n, TOKENS);
    }
    TOKENS as f64 / best.as_secs_f64()
}

/// The floor under any decoder that parses each event into a `serde_json::Value`: only that
/// parse, per `data:` payload of `bytes`; tokens/s.
fn json_floor(bytes: &[u8]) -> f64 {
    let text = std::str::from_utf8(bytes).unwrap();
    let payloads: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| d.starts_with('{'))
        .collect();
    let mut best = Duration::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        for p in &payloads {
            black_box(serde_json::from_str::<serde_json::Value>(p).unwrap());
        }
        best = best.min(t.elapsed());
    }
    TOKENS as f64 / best.as_secs_f64()
}

/// A loopback server answering every request with `body` (HTTP/1.1, close-delimited),
/// writing its first event at once and the rest right after.
async fn serve(body: Vec<u8>) -> String {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                return;
            };
            let body = body.clone();
            tokio::spawn(async move {
                // Read the head and the content-length body.
                let mut buf = Vec::new();
                let mut tmp = [0u8; 4096];
                loop {
                    let n = s.read(&mut tmp).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&tmp[..n]);
                    if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&buf[..p]).to_ascii_lowercase();
                        let len = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .and_then(|v| v.trim().parse::<usize>().ok())
                            .unwrap_or(0);
                        if buf.len() >= p + 4 + len {
                            break;
                        }
                    }
                }
                let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
                let first = body
                    .windows(2)
                    .position(|w| w == b"\n\n")
                    .map_or(body.len(), |p| p + 2);
                let _ = s.write_all(head.as_bytes()).await;
                let _ = s.write_all(&body[..first]).await;
                let _ = s.flush().await;
                let _ = s.write_all(&body[first..]).await;
                let _ = s.shutdown().await;
            });
        }
    });
    format!("http://{addr}")
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

async fn first_delta_latency(provider: Provider) -> (Duration, Duration) {
    // A short reply whose first event already carries text.
    let body = match provider {
        Provider::OpenAi => {
            let mut b = openai_stream(20);
            // Drop the role-only first chunk so the first event is a text delta.
            let p = b.windows(2).position(|w| w == b"\n\n").unwrap() + 2;
            b.drain(..p);
            b
        }
        Provider::Anthropic => {
            let mut b = Vec::new();
            b.extend_from_slice(
                format!(
                    "event: content_block_delta\ndata: {}\n\n",
                    json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "hi"}})
                )
                .as_bytes(),
            );
            let rest = anthropic_stream(20);
            b.extend_from_slice(&rest);
            b
        }
    };
    let url = serve(body).await;
    let base = match provider {
        Provider::OpenAi => format!("{url}/v1"),
        Provider::Anthropic => url.clone(),
    };
    let mut choice = ModelChoice {
        model: Some(format!("{}:bench", provider.as_str())),
        base_url: Some(base),
        ..ModelChoice::default()
    };
    choice.anthropic_key = Some("k".into());
    choice.openai_key = Some("k".into());
    let config = ModelConfig::resolve(&choice).unwrap().unwrap();
    let model = ReqwestModel::new(config.clone()).unwrap();
    let chat = ChatRequest {
        system: Some("bench".into()),
        messages: vec![ChatMessage::User(vec![UserPart::Text("hello".into())])],
        tools: vec![],
    };
    let encoded = weft_core::model::encode_request(&config, &chat);
    let bare = http_client().unwrap();

    let mut host = Vec::new();
    let mut raw = Vec::new();
    for i in 0..220 {
        // Through the host: send, head, first chunk decoded into the first text delta.
        let t = Instant::now();
        let mut first = None;
        let mut on = |e: StreamEvent| {
            if first.is_none() && matches!(e, StreamEvent::TextDelta { .. }) {
                first = Some(t.elapsed());
            }
        };
        // The stream may be cut at the server's close; only the first delta is timed.
        let _ = model.ask(&chat, &mut on).await;
        // Bare reqwest: the same request, the first body chunk.
        let t2 = Instant::now();
        let mut b = bare.post(&encoded.url);
        for (k, v) in &encoded.headers {
            b = b.header(k, v);
        }
        let mut r = b.body(encoded.body.clone()).send().await.unwrap();
        let _ = r.chunk().await.unwrap();
        let bare_t = t2.elapsed();
        while let Ok(Some(_)) = r.chunk().await {}
        if i >= 20 {
            host.push(first.expect("a first delta"));
            raw.push(bare_t);
        }
    }
    (median(host), median(raw))
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    println!("model stream decoding, native ({TOKENS}-token reply, 1400-byte chunks, best of 5):");
    for (p, bytes) in [
        (Provider::OpenAi, openai_stream(TOKENS)),
        (Provider::Anthropic, anthropic_stream(TOKENS)),
    ] {
        let rate = parse_rate(p, &bytes);
        let floor = json_floor(&bytes);
        println!(
            "  {:<9} {:>7.2} M tokens/s  ({:.1} MB/s, {} bytes)   target >= 1 M tokens/s   \
             (serde_json::Value parse of the events alone: {:.2} M/s)",
            p.as_str(),
            rate / 1e6,
            rate * bytes.len() as f64 / TOKENS as f64 / 1e6,
            bytes.len(),
            floor / 1e6
        );
    }
    println!("first delta through the reqwest host, loopback (median of 200):");
    for p in [Provider::OpenAi, Provider::Anthropic] {
        let (host, raw) = first_delta_latency(p).await;
        println!(
            "  {:<9} host {:>7.1} µs   bare reqwest first chunk {:>7.1} µs   added {:>6.1} µs",
            p.as_str(),
            host.as_secs_f64() * 1e6,
            raw.as_secs_f64() * 1e6,
            (host.as_secs_f64() - raw.as_secs_f64()) * 1e6
        );
    }
}
