//! The streamed answer of one step, decoded incrementally: OpenAI Chat Completions chunks
//! (`data: {...}` lines, `tool_calls` deltas keyed by `index`, `data: [DONE]`) and Anthropic
//! Messages events (`message_start`, `content_block_start/delta/stop`, `message_delta`,
//! `message_stop`, `ping`, `error`).
//!
//! The hot shapes (a chunk with a content delta, a `content_block_delta`) are read into
//! borrowed typed structs: unknown members are skipped, strings without escapes are not
//! copied, and no `serde_json::Value` is built per token.

use std::borrow::Cow;
use std::collections::VecDeque;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::sse::SseParser;
use super::status::classify_stream_error;
use super::{ModelError, Provider, Usage};
use crate::tools::{ModelResponse, ToolCall};

/// What the decoder learned from the bytes fed so far, in stream order.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum StreamEvent {
    /// Text the model produced.
    TextDelta { text: String },
    /// The model began a tool call (`index` is its position in the step's calls).
    ToolCallStart {
        index: usize,
        id: String,
        name: String,
    },
    /// More of a call's argument text.
    ToolCallDelta { index: usize, arguments: String },
    /// A call's arguments are complete.
    ToolCallEnd { index: usize },
    /// Token counts (the latest report; Anthropic reports output tokens as they grow).
    Usage {
        #[serde(flatten)]
        usage: Usage,
    },
    /// Why the model stopped (`stop`, `tool_calls`, `length`, `end_turn`, `tool_use`, `max_tokens`, ...).
    Finish { reason: String },
}

// ----- wire shapes ------------------------------------------------------------------------

type Text<'a> = Option<Cow<'a, str>>;

#[derive(Deserialize)]
struct OaChunk<'a> {
    #[serde(default, borrow)]
    choices: FirstChoice<'a>,
    #[serde(default)]
    usage: Option<OaUsage>,
    #[serde(default)]
    error: Option<Value>,
}

/// The choice with index 0 of a chunk's `choices` (weft asks for one), read without
/// collecting the list.
#[derive(Default)]
struct FirstChoice<'a>(Option<OaChoice<'a>>);

impl<'de: 'a, 'a> Deserialize<'de> for FirstChoice<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for V<'a> {
            type Value = FirstChoice<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a list of choices")
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
                Ok(FirstChoice(None))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Self::Value, A::Error> {
                let mut first = None;
                while let Some(c) = seq.next_element::<OaChoice<'a>>()? {
                    if first.is_none() && c.index.unwrap_or(0) == 0 {
                        first = Some(c);
                    }
                }
                Ok(FirstChoice(first))
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

#[derive(Deserialize)]
struct OaChoice<'a> {
    #[serde(default)]
    index: Option<u64>,
    #[serde(default, borrow)]
    delta: Option<OaDelta<'a>>,
    #[serde(default, borrow)]
    finish_reason: Text<'a>,
}

#[derive(Deserialize)]
struct OaDelta<'a> {
    #[serde(default, borrow)]
    content: Text<'a>,
    #[serde(default, borrow)]
    tool_calls: Option<Vec<OaToolCall<'a>>>,
}

#[derive(Deserialize)]
struct OaToolCall<'a> {
    #[serde(default)]
    index: Option<u64>,
    #[serde(default, borrow)]
    id: Text<'a>,
    #[serde(default, borrow)]
    function: Option<OaFunction<'a>>,
}

#[derive(Deserialize)]
struct OaFunction<'a> {
    #[serde(default, borrow)]
    name: Text<'a>,
    #[serde(default, borrow)]
    arguments: Text<'a>,
}

#[derive(Deserialize)]
struct OaUsage {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct AnEvent<'a> {
    #[serde(rename = "type", default, borrow)]
    kind: Text<'a>,
    #[serde(default)]
    index: Option<u64>,
    #[serde(default, borrow)]
    delta: Option<AnDelta<'a>>,
    #[serde(default)]
    content_block: Option<Value>,
    #[serde(default)]
    message: Option<AnMessage>,
    #[serde(default)]
    usage: Option<AnUsage>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct AnDelta<'a> {
    #[serde(rename = "type", default, borrow)]
    kind: Text<'a>,
    #[serde(default, borrow)]
    text: Text<'a>,
    #[serde(default, borrow)]
    partial_json: Text<'a>,
    #[serde(default, borrow)]
    stop_reason: Text<'a>,
}

#[derive(Deserialize)]
struct AnMessage {
    #[serde(default)]
    usage: Option<AnUsage>,
}

#[derive(Deserialize)]
struct AnUsage {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
}

// ----- the decoder ------------------------------------------------------------------------

#[derive(Debug, Default)]
struct CallAcc {
    id: String,
    name: String,
    arguments: String,
    /// Anthropic's `input` of `content_block_start`, used when no argument delta arrives.
    initial: Option<Value>,
    started: bool,
    ended: bool,
}

/// Everything but the SSE framing (so that the parser can call into it without a copy).
#[derive(Debug)]
struct State {
    provider: Provider,
    events: VecDeque<StreamEvent>,
    text: String,
    calls: Vec<CallAcc>,
    /// Anthropic content block index → call position.
    blocks: Vec<(u64, usize)>,
    usage: Option<Usage>,
    finish: Option<String>,
    done: bool,
}

/// An incremental decoder of one step's stream. Feed bytes as they arrive, drain events after
/// each feed, call [`StreamDecoder::finish`] at end of stream.
#[derive(Debug)]
pub struct StreamDecoder {
    sse: SseParser,
    st: State,
    failed: Option<ModelError>,
}

fn bad(msg: impl Into<String>) -> ModelError {
    ModelError::BadResponse(msg.into())
}

/// The most tool calls one step may select.
const MAX_CALLS: usize = 128;

impl StreamDecoder {
    /// A decoder for `provider`'s stream format.
    pub fn new(provider: Provider) -> Self {
        StreamDecoder {
            sse: SseParser::new(),
            st: State {
                provider,
                events: VecDeque::new(),
                text: String::new(),
                calls: Vec::new(),
                blocks: Vec::new(),
                usage: None,
                finish: None,
                done: false,
            },
            failed: None,
        }
    }

    /// Feeds the next bytes of the body. An error is final: the stream is malformed or the
    /// provider reported an error in it; later feeds return it again.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<(), ModelError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let st = &mut self.st;
        let r = self.sse.feed_with(bytes, |event, data| {
            if st.done {
                // Anything after the end marker is ignored (servers may send comments).
                return Ok(());
            }
            match st.provider {
                Provider::OpenAi => st.openai(data),
                Provider::Anthropic => st.anthropic(event, data),
            }
        });
        if let Err(e) = &r {
            self.failed = Some(e.clone());
        }
        r
    }

    /// The next event, in stream order.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<StreamEvent> {
        self.st.events.pop_front()
    }

    /// Whether the stream's end marker arrived (`[DONE]` or `message_stop`).
    pub fn is_done(&self) -> bool {
        self.st.done
    }

    /// The text so far.
    pub fn text(&self) -> &str {
        &self.st.text
    }

    /// The end of the body: the assembled answer, or why there is none. A stream cut off
    /// before its end marker is `MODEL_BAD_RESPONSE`, and none of its calls is returned.
    pub fn finish(&mut self) -> Result<ModelResponse, ModelError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let st = &mut self.st;
        // OpenAI-compatible servers that omit `[DONE]` still end with a finish reason.
        let complete = st.done || (st.provider == Provider::OpenAi && st.finish.is_some());
        if !complete {
            let e = bad(if self.sse.has_partial() {
                "the stream ended in the middle of an event"
            } else {
                "the stream ended before the model finished"
            });
            self.failed = Some(e.clone());
            return Err(e);
        }
        let truncated = matches!(st.finish.as_deref(), Some("length" | "max_tokens"));
        let n = st.calls.len();
        let provider = st.provider;
        let calls = std::mem::take(&mut st.calls)
            .into_iter()
            .enumerate()
            .map(|(i, c)| {
                let text = if c.arguments.is_empty() {
                    match c.initial {
                        Some(v @ Value::Object(_)) => v.to_string(),
                        _ => "{}".to_owned(),
                    }
                } else {
                    c.arguments
                };
                let mut call = ToolCall::from_text(c.id, c.name, &text);
                let cut = match provider {
                    Provider::Anthropic => !c.ended,
                    Provider::OpenAi => truncated && i + 1 == n,
                };
                if cut && call.malformed.is_none() {
                    call.malformed = Some(
                        "the model reached its output limit before finishing this call".into(),
                    );
                    call.arguments = Value::String(text);
                }
                call
            })
            .collect();
        let text = std::mem::take(&mut st.text);
        Ok(ModelResponse {
            text: (!text.is_empty()).then_some(text),
            calls,
            usage: st.usage,
        })
    }
}

impl State {
    fn set_usage(&mut self, input: Option<u64>, output: Option<u64>) {
        let mut u = self.usage.unwrap_or_default();
        if let Some(i) = input {
            u.input_tokens = i;
        }
        if let Some(o) = output {
            u.output_tokens = o;
        }
        self.usage = Some(u);
        self.events.push_back(StreamEvent::Usage { usage: u });
    }

    fn text_delta(&mut self, t: &str) {
        if t.is_empty() {
            return;
        }
        self.text.push_str(t);
        self.events
            .push_back(StreamEvent::TextDelta { text: t.to_owned() });
    }

    fn finish_reason(&mut self, r: &str) {
        self.finish = Some(r.to_owned());
        self.events.push_back(StreamEvent::Finish {
            reason: r.to_owned(),
        });
    }

    fn openai(&mut self, data: &str) -> Result<(), ModelError> {
        let data = data.trim();
        if data == "[DONE]" {
            self.done = true;
            for (i, c) in self.calls.iter_mut().enumerate() {
                if !c.ended {
                    c.ended = true;
                    self.events.push_back(StreamEvent::ToolCallEnd { index: i });
                }
            }
            return Ok(());
        }
        if data.is_empty() {
            return Ok(());
        }
        let chunk: OaChunk<'_> = serde_json::from_str(data).map_err(|e| {
            bad(if e.is_data() {
                format!("a stream chunk is not in the Chat Completions shape ({e})")
            } else {
                format!("a stream chunk is not JSON ({e})")
            })
        })?;
        if let Some(e) = chunk.error.filter(Value::is_object) {
            return Err(classify_stream_error(&e));
        }
        if let Some(u) = chunk.usage {
            self.set_usage(u.prompt_tokens, u.completion_tokens);
        }
        if let Some(ch) = chunk.choices.0 {
            if let Some(delta) = ch.delta {
                if let Some(t) = &delta.content {
                    self.text_delta(t);
                }
                for tc in delta.tool_calls.into_iter().flatten() {
                    self.openai_call(tc)?;
                }
            }
            if let Some(r) = &ch.finish_reason {
                self.finish_reason(r);
            }
        }
        Ok(())
    }

    fn openai_call(&mut self, tc: OaToolCall<'_>) -> Result<(), ModelError> {
        let index = match tc.index {
            Some(i) if (i as usize) < MAX_CALLS => i as usize,
            Some(_) => return Err(bad(format!("a tool call index of {MAX_CALLS} or more"))),
            None if self.calls.is_empty() => 0,
            None => self.calls.len() - 1,
        };
        if index > self.calls.len() {
            return Err(bad(format!(
                "tool call {index} arrived before call {}",
                self.calls.len()
            )));
        }
        if index == self.calls.len() {
            self.calls.push(CallAcc::default());
        }
        let c = &mut self.calls[index];
        if let Some(id) = &tc.id
            && c.id.is_empty()
        {
            c.id = id.to_string();
        }
        let (name, arguments) = match tc.function {
            Some(f) => (f.name, f.arguments),
            None => (None, None),
        };
        if let Some(name) = &name
            && c.name != *name
        {
            c.name.push_str(name);
        }
        if !c.started && !c.name.is_empty() {
            c.started = true;
            self.events.push_back(StreamEvent::ToolCallStart {
                index,
                id: c.id.clone(),
                name: c.name.clone(),
            });
        }
        if let Some(a) = arguments.filter(|a| !a.is_empty()) {
            c.arguments.push_str(&a);
            self.events.push_back(StreamEvent::ToolCallDelta {
                index,
                arguments: a.into_owned(),
            });
        }
        Ok(())
    }

    fn block(&self, index: Option<u64>) -> Result<Option<usize>, ModelError> {
        let idx = index.ok_or_else(|| bad("a content block event without an index"))?;
        Ok(self.blocks.iter().find(|(b, _)| *b == idx).map(|(_, c)| *c))
    }

    fn anthropic(&mut self, event: Option<&str>, data: &str) -> Result<(), ModelError> {
        let v: AnEvent<'_> = serde_json::from_str(data).map_err(|e| {
            bad(if e.is_data() {
                format!("a stream event is not in the Messages shape ({e})")
            } else {
                format!("a stream event is not JSON ({e})")
            })
        })?;
        let kind = v
            .kind
            .as_deref()
            .or(event)
            .ok_or_else(|| bad("a stream event without a type"))?;
        match kind {
            "content_block_delta" => {
                let d = v
                    .delta
                    .ok_or_else(|| bad("a content_block_delta without a delta"))?;
                match d.kind.as_deref() {
                    Some("text_delta") => {
                        let t = d.text.ok_or_else(|| bad("a text_delta without text"))?;
                        self.text_delta(&t);
                    }
                    Some("input_json_delta") => {
                        let part = d
                            .partial_json
                            .ok_or_else(|| bad("an input_json_delta without partial_json"))?;
                        let index = self.block(v.index)?.ok_or_else(|| {
                            bad("input_json_delta for a block that is not a tool call")
                        })?;
                        if !part.is_empty() {
                            self.calls[index].arguments.push_str(&part);
                            self.events.push_back(StreamEvent::ToolCallDelta {
                                index,
                                arguments: part.into_owned(),
                            });
                        }
                    }
                    // Thinking, signatures and new delta kinds are not part of the answer.
                    _ => {}
                }
            }
            "message_start" => {
                if let Some(u) = v.message.and_then(|m| m.usage) {
                    self.set_usage(u.input_tokens, u.output_tokens);
                }
            }
            "content_block_start" => {
                let idx = v
                    .index
                    .ok_or_else(|| bad("content_block_start without an index"))?;
                let b = v.content_block.unwrap_or(Value::Null);
                match b["type"].as_str() {
                    Some("text") => {
                        if let Some(t) = b["text"].as_str() {
                            self.text_delta(t);
                        }
                    }
                    Some("tool_use") => {
                        let id = b["id"].as_str().unwrap_or("").to_owned();
                        let name = b["name"]
                            .as_str()
                            .ok_or_else(|| bad("a tool_use block without a name"))?
                            .to_owned();
                        if self.calls.len() >= MAX_CALLS {
                            return Err(bad(format!(
                                "more than {MAX_CALLS} tool calls in one step"
                            )));
                        }
                        let index = self.calls.len();
                        self.calls.push(CallAcc {
                            id: id.clone(),
                            name: name.clone(),
                            arguments: String::new(),
                            initial: Some(b["input"].clone()),
                            started: true,
                            ended: false,
                        });
                        self.blocks.push((idx, index));
                        self.events
                            .push_back(StreamEvent::ToolCallStart { index, id, name });
                    }
                    // Thinking and other block kinds are not part of the answer.
                    _ => {}
                }
            }
            "content_block_stop" => {
                if let Some(index) = self.block(v.index)? {
                    self.calls[index].ended = true;
                    self.events.push_back(StreamEvent::ToolCallEnd { index });
                }
            }
            "message_delta" => {
                if let Some(r) = v.delta.as_ref().and_then(|d| d.stop_reason.as_deref()) {
                    self.finish_reason(r);
                }
                if let Some(u) = v.usage {
                    self.set_usage(u.input_tokens, u.output_tokens);
                }
            }
            "message_stop" => self.done = true,
            "ping" => {}
            "error" => return Err(classify_stream_error(&v.error.unwrap_or(Value::Null))),
            // New event kinds are ignored, as the provider's versioning policy asks.
            _ => {}
        }
        Ok(())
    }
}
