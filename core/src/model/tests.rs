//! Unit tests of the model codecs beyond the shared vectors (`tests/vectors/models.json`):
//! properties over every cut of a stream, and the session transcript mapping.

use crate::Mono;
use proptest::prelude::*;
use serde_json::json;

use super::*;
use crate::tools::{ModelResponse, Session, SessionConfig, ToolDecl};

const OPENAI_TWO_CALLS: &str = concat!(
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"h\u{e9}\u{1f600}\"}}]}\n\n",
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"add\",\"arguments\":\"{\\\"a\\\":\"}}]}}]}\n\n",
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":1,\"id\":\"c2\",\"type\":\"function\",\"function\":{\"name\":\"add\",\"arguments\":\"{\\\"a\\\":2}\"}}]}}]}\n\n",
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"1}\"}}]}}]}\n\n",
    "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n",
    "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":5}}\n\n",
    "data: [DONE]\n\n",
);

fn decode_cuts(
    provider: Provider,
    body: &[u8],
    cuts: &[usize],
) -> Result<ModelResponse, ModelError> {
    let mut d = StreamDecoder::new(provider);
    let mut last = 0;
    for &c in cuts.iter().chain(std::iter::once(&body.len())) {
        d.feed(&body[last..c])?;
        while d.poll_event().is_some() {}
        last = c;
    }
    d.finish()
}

#[test]
fn two_parallel_calls_assemble_with_usage() {
    let r = decode_cuts(Provider::OpenAi, OPENAI_TWO_CALLS.as_bytes(), &[]).unwrap();
    assert_eq!(r.text.as_deref(), Some("h\u{e9}\u{1f600}"));
    assert_eq!(r.calls.len(), 2);
    assert_eq!(r.calls[0].arguments, json!({"a": 1}));
    assert_eq!(r.calls[1].arguments, json!({"a": 2}));
    assert_eq!(
        r.usage,
        Some(Usage {
            input_tokens: 7,
            output_tokens: 5
        })
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(crate::test_cases(64)))]
    /// Any cut of the body into three chunks decodes to the same answer.
    #[test]
    fn any_cut_decodes_the_same(a in 0usize..2000, b in 0usize..2000) {
        let body = OPENAI_TWO_CALLS.as_bytes();
        let (a, b) = (a % body.len(), b % body.len());
        let mut cuts = vec![a.min(b), a.max(b)];
        cuts.dedup();
        let whole = decode_cuts(Provider::OpenAi, body, &[]).unwrap();
        prop_assert_eq!(decode_cuts(Provider::OpenAi, body, &cuts).unwrap(), whole);
    }

    /// A stream cut off anywhere before its end is an error, never a partial answer.
    #[test]
    fn truncation_anywhere_is_an_error(n in 0usize..2000) {
        let body = OPENAI_TWO_CALLS.as_bytes();
        // Up to the end of the finish-reason chunk the stream is incomplete.
        let finish = OPENAI_TWO_CALLS.find("\"finish_reason\":\"tool_calls\"").unwrap();
        let n = n % finish;
        let r = decode_cuts(Provider::OpenAi, &body[..n], &[]);
        prop_assert_eq!(r.map_err(|e| e.code()), Err("MODEL_BAD_RESPONSE"));
    }
}

#[test]
fn session_transcript_becomes_provider_messages() {
    let mut s: Session<serde_json::Value> = Session::new(SessionConfig::new("a"));
    s.register_tool(ToolDecl::new(
        "add",
        "adds",
        json!({"type": "object", "properties": {"a": {"type": "number"}}}),
    ))
    .unwrap();
    s.submit_task(Mono::from_ms(0), json!("add one"));
    let step = match s.drain_outputs().find_map(|o| match o {
        crate::tools::Output::ModelRequest { step, .. } => Some(step),
        _ => None,
    }) {
        Some(st) => st,
        None => panic!("no model request"),
    };
    let chat = ChatRequest::from_session(Some("be brief"), &s.model_request().unwrap());
    assert_eq!(chat.system.as_deref(), Some("be brief"));
    assert_eq!(chat.tools.len(), 1);
    assert_eq!(
        chat.messages,
        vec![ChatMessage::User(vec![UserPart::Text("add one".into())])]
    );
    let _ = step;
}

#[test]
fn keys_never_reach_debug_output() {
    let c = ModelConfig::resolve(&ModelChoice {
        openai_key: Some("sk-secret".into()),
        ..Default::default()
    })
    .unwrap()
    .unwrap();
    assert!(!format!("{c:?}").contains("sk-secret"));
    let http = encode_request(&c, &ChatRequest::default());
    assert!(!format!("{http:?}").contains("sk-secret"));
    assert!(
        http.headers
            .iter()
            .any(|(k, v)| k == "authorization" && v == "Bearer sk-secret")
    );
}

fn drain(c: &mut ModelCall) -> Vec<CallOutput> {
    std::iter::from_fn(|| c.poll_output()).collect()
}

fn local_config() -> ModelConfig {
    ModelConfig::resolve(&ModelChoice {
        model: Some("openai:m".into()),
        base_url: Some("http://127.0.0.1:9/v1".into()),
        ..Default::default()
    })
    .unwrap()
    .unwrap()
}

/// A step of the local config at time 0 whose first request was sent.
fn sent(timeouts: CallTimeouts) -> ModelCall {
    let mut c = ModelCall::new(
        Mono::from_ms(0),
        &local_config(),
        &ChatRequest::default(),
        RetryPolicy::default(),
        timeouts,
    );
    assert!(matches!(
        drain(&mut c)[..],
        [CallOutput::Send { attempt: 1, .. }]
    ));
    c
}

#[test]
fn call_retries_a_rate_limit_then_streams() {
    let mut c = sent(CallTimeouts::default());
    c.on_head(Mono::from_ms(10), 429, Some("1"));
    assert!(c.wants_error_body());
    c.on_error_body(
        Mono::from_ms(12),
        b"{\"error\":{\"message\":\"slow down\"}}",
    );
    assert!(drain(&mut c).is_empty(), "a retry waits for its delay");
    assert_eq!(c.poll_timeout(), Some(Mono::from_ms(1012)));
    c.handle_timeout(Mono::from_ms(1011));
    assert!(drain(&mut c).is_empty());
    c.handle_timeout(Mono::from_ms(1012));
    assert!(matches!(
        drain(&mut c)[..],
        [CallOutput::Send { attempt: 2, .. }]
    ));
    c.on_head(Mono::from_ms(1100), 200, None);
    c.on_body(
        Mono::from_ms(1101),
        b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n",
    );
    c.on_body(Mono::from_ms(1102), b"data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n");
    c.on_end(Mono::from_ms(1103));
    let out = drain(&mut c);
    assert!(matches!(&out[0], CallOutput::Event(StreamEvent::TextDelta { text }) if text == "hi"));
    match out.last() {
        Some(CallOutput::Done(Ok(r))) => assert_eq!(r.text.as_deref(), Some("hi")),
        other => panic!("expected a response, got {other:?}"),
    }
    assert_eq!(c.attempts(), 2);
}

#[test]
fn call_auth_failure_is_final_and_silence_times_out() {
    let mut c = sent(CallTimeouts::default());
    c.on_head(Mono::from_ms(1), 401, None);
    c.on_error_body(Mono::from_ms(2), b"");
    assert!(matches!(
        drain(&mut c)[..],
        [CallOutput::Done(Err(ModelError::Auth(_)))]
    ));

    let mut c = sent(CallTimeouts {
        head_ms: 100,
        idle_ms: 50,
    });
    c.on_head(Mono::from_ms(10), 200, None);
    c.on_body(
        Mono::from_ms(20),
        b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n",
    );
    let _ = drain(&mut c);
    assert_eq!(c.poll_timeout(), Some(Mono::from_ms(70)));
    c.handle_timeout(Mono::from_ms(70));
    assert!(matches!(
        drain(&mut c)[..],
        [CallOutput::Done(Err(ModelError::Timeout(_)))]
    ));
}

#[test]
fn an_aborted_call_returns_no_partial_tool_call() {
    let mut c = sent(CallTimeouts::default());
    c.on_head(Mono::from_ms(1), 200, None);
    c.on_body(Mono::from_ms(2), &OPENAI_TWO_CALLS.as_bytes()[..300]);
    let _ = drain(&mut c);
    c.abort("the turn was interrupted");
    assert!(matches!(
        drain(&mut c)[..],
        [CallOutput::Done(Err(ModelError::Aborted(_)))]
    ));
    c.on_body(Mono::from_ms(3), &OPENAI_TWO_CALLS.as_bytes()[300..]);
    c.on_end(Mono::from_ms(4));
    assert!(drain(&mut c).is_empty(), "nothing after Done");
}
