//! The request of one model step: a provider-neutral [`ChatRequest`] built from a session's
//! transcript, and its encoding in each provider's wire format.
//!
//! The transcript is read in its JSON form (what `Message::to_json` and the JS agent's
//! `request.messages` give), so the native host and the JS package build byte-identical
//! requests through this one rule.

use serde_json::{Map, Value, json};

use super::{ModelConfig, ModelError, Provider};
use crate::tools::ToolCall;
use crate::value::Payload;

/// A tool the step advertises: its name, description and JSON Schema of the arguments.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    pub parameters: Value,
}

/// One message of the provider-neutral conversation.
#[derive(Clone, Debug, PartialEq)]
pub enum ChatMessage {
    /// Input to the model: text, or the result of one of its calls.
    User(Vec<UserPart>),
    /// The model's earlier answer: text and the calls it selected.
    Assistant {
        text: Option<String>,
        calls: Vec<ToolCall>,
    },
}

/// A part of a user message.
#[derive(Clone, Debug, PartialEq)]
pub enum UserPart {
    Text(String),
    ToolResult {
        call_id: String,
        content: String,
        is_error: bool,
    },
}

/// What one model step asks, independent of the provider.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ChatRequest {
    /// System text (instructions, the host's addenda), if any.
    pub system: Option<String>,
    pub messages: Vec<ChatMessage>,
    pub tools: Vec<ToolSpec>,
}

/// An HTTP request for the host to send: always `POST` with a JSON body.
#[derive(Clone, PartialEq, Eq)]
pub struct HttpRequest {
    pub url: String,
    /// Header names in lower case; the key is among them when one is configured.
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl std::fmt::Debug for HttpRequest {
    // Credentials never reach a log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let headers: Vec<(&str, &str)> = self
            .headers
            .iter()
            .map(|(k, v)| match k.as_str() {
                "authorization" | "x-api-key" => (k.as_str(), "<redacted>"),
                _ => (k.as_str(), v.as_str()),
            })
            .collect();
        f.debug_struct("HttpRequest")
            .field("url", &self.url)
            .field("headers", &headers)
            .field("body", &self.body)
            .finish()
    }
}

fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The mail item of an admitted message, as the model reads it.
fn mail_text(m: &Value) -> String {
    match m["kind"].as_str().unwrap_or("") {
        "job" => {
            let n = &m["note"];
            format!(
                "[job note] job {} {}: {}",
                n["job"],
                n["outcome"].as_str().unwrap_or("finished"),
                n["summary"].as_str().unwrap_or("")
            )
        }
        "observation" => format!(
            "[observation from {}] {}",
            m["source"].as_str().unwrap_or("?"),
            text_of(&m["value"])
        ),
        "late_result" => format!("[late result of an earlier turn] {}", m["result"]),
        "late_job" => format!(
            "[late job of an earlier turn] call {} started job {}",
            m["callId"].as_str().unwrap_or("?"),
            m["job"]
        ),
        other => format!("[mail: {other}] {m}"),
    }
}

/// What the model reads as the result of a call.
fn result_content(r: &Value) -> (String, bool) {
    match r["status"].as_str() {
        Some("succeeded") => (text_of(&r["value"]), false),
        _ => {
            let mut o = Map::new();
            for k in [
                "status",
                "code",
                "message",
                "reason",
                "evidence",
                "safeToRetry",
                "mayStillBeRunning",
            ] {
                if !r[k].is_null() {
                    o.insert(k.to_owned(), r[k].clone());
                }
            }
            (Value::Object(o).to_string(), true)
        }
    }
}

impl ChatRequest {
    /// Builds the request of a session step: the transcript in its JSON form (`messages`, as
    /// `Message::to_json` writes them) and the step's tool declarations (`ToolDecl::to_json`).
    ///
    /// Transcript entries map to: tasks, steering, standing values, admitted mail and the end
    /// of an unfinished turn → user text; assistant answers → assistant messages; call results
    /// → tool results (a failed, refused, not-started or uncertain call is an error result that
    /// says so). Turn starts and completed turn ends add nothing. A call without a recorded
    /// result gets one that says so, since both providers require a result for every call.
    pub fn from_transcript(system: Option<&str>, messages: &[Value], tools: &[Value]) -> Self {
        let mut out: Vec<ChatMessage> = Vec::new();
        let mut open_calls: Vec<String> = Vec::new();
        let push_user = |out: &mut Vec<ChatMessage>, part: UserPart| match out.last_mut() {
            Some(ChatMessage::User(parts)) => parts.push(part),
            _ => out.push(ChatMessage::User(vec![part])),
        };
        let close_calls = |out: &mut Vec<ChatMessage>, open: &mut Vec<String>| {
            for id in open.drain(..) {
                push_user(
                    out,
                    UserPart::ToolResult {
                        call_id: id,
                        content: "no result was recorded for this call".into(),
                        is_error: true,
                    },
                );
            }
        };
        for m in messages {
            let role = m["role"].as_str().unwrap_or("");
            if role != "tool_result" {
                close_calls(&mut out, &mut open_calls);
            }
            match role {
                "task" => push_user(&mut out, UserPart::Text(text_of(&m["input"]))),
                "steer" => push_user(
                    &mut out,
                    UserPart::Text(format!("[steering] {}", text_of(&m["input"]))),
                ),
                "standing" => push_user(
                    &mut out,
                    UserPart::Text(format!(
                        "[standing {}] {}",
                        m["key"].as_str().unwrap_or("?"),
                        text_of(&m["value"])
                    )),
                ),
                "mail" => push_user(&mut out, UserPart::Text(mail_text(m))),
                "user" => push_user(&mut out, UserPart::Text(text_of(&m["text"]))),
                "assistant" => {
                    let text = m["text"]
                        .as_str()
                        .filter(|t| !t.is_empty())
                        .map(str::to_owned);
                    let calls: Vec<ToolCall> = m["calls"]
                        .as_array()
                        .map(|a| {
                            a.iter()
                                .filter_map(|c| ToolCall::from_json(c).ok())
                                .collect()
                        })
                        .unwrap_or_default();
                    open_calls = calls.iter().map(|c| c.id.clone()).collect();
                    out.push(ChatMessage::Assistant { text, calls });
                }
                "tool_result" => {
                    let id = m["callId"].as_str().unwrap_or("").to_owned();
                    let (content, is_error) = result_content(m);
                    if let Some(i) = open_calls.iter().position(|c| *c == id) {
                        open_calls.remove(i);
                        push_user(
                            &mut out,
                            UserPart::ToolResult {
                                call_id: id,
                                content,
                                is_error,
                            },
                        );
                    } else {
                        push_user(
                            &mut out,
                            UserPart::Text(format!("[result of call {id}] {content}")),
                        );
                    }
                }
                "turn_end" => {
                    let end = m["end"].as_str().unwrap_or("");
                    if end != "completed" {
                        let why = m["reason"]
                            .as_str()
                            .or(m["message"].as_str())
                            .map(|s| format!(": {s}"))
                            .unwrap_or_default();
                        push_user(
                            &mut out,
                            UserPart::Text(format!("[the previous turn ended {end}{why}]")),
                        );
                    }
                }
                _ => {}
            }
        }
        close_calls(&mut out, &mut open_calls);
        if !matches!(out.first(), Some(ChatMessage::User(_))) {
            out.insert(0, ChatMessage::User(vec![UserPart::Text("(start)".into())]));
        }
        let tools = tools
            .iter()
            .filter_map(|t| {
                Some(ToolSpec {
                    name: t["name"].as_str()?.to_owned(),
                    description: t["description"].as_str().unwrap_or("").to_owned(),
                    parameters: match &t["parameters"] {
                        Value::Null => json!({"type": "object"}),
                        p => p.clone(),
                    },
                })
            })
            .collect();
        ChatRequest {
            system: system.filter(|s| !s.is_empty()).map(str::to_owned),
            messages: out,
            tools,
        }
    }

    /// Builds the request of a pending session step (see [`ChatRequest::from_transcript`]).
    pub fn from_session<V: Payload>(
        system: Option<&str>,
        request: &crate::tools::ModelRequest<'_, V>,
    ) -> Self {
        let messages: Vec<Value> = request.messages.iter().map(|m| m.to_json()).collect();
        let tools: Vec<Value> = request
            .tools
            .tools()
            .iter()
            .map(|t| t.decl.to_json())
            .collect();
        ChatRequest::from_transcript(system, &messages, &tools)
    }

    /// The body in the provider's format (see [`encode_request`]).
    pub fn body(&self, config: &ModelConfig) -> Value {
        match config.provider {
            Provider::OpenAi => openai_body(self, config),
            Provider::Anthropic => anthropic_body(self, config),
        }
    }
}

fn openai_body(r: &ChatRequest, c: &ModelConfig) -> Value {
    let mut messages = Vec::new();
    if let Some(s) = &r.system {
        messages.push(json!({"role": "system", "content": s}));
    }
    for m in &r.messages {
        match m {
            ChatMessage::User(parts) => {
                let mut text: Vec<&str> = Vec::new();
                let flush = |text: &mut Vec<&str>, messages: &mut Vec<Value>| {
                    if !text.is_empty() {
                        messages.push(json!({"role": "user", "content": text.join("\n\n")}));
                        text.clear();
                    }
                };
                for p in parts {
                    match p {
                        UserPart::Text(t) => text.push(t),
                        UserPart::ToolResult {
                            call_id, content, ..
                        } => {
                            flush(&mut text, &mut messages);
                            messages.push(
                                json!({"role": "tool", "tool_call_id": call_id, "content": content}),
                            );
                        }
                    }
                }
                flush(&mut text, &mut messages);
            }
            ChatMessage::Assistant { text, calls } => {
                let mut a = json!({"role": "assistant", "content": text});
                if !calls.is_empty() {
                    a["tool_calls"] = calls
                        .iter()
                        .map(|c| {
                            json!({"id": c.id, "type": "function", "function": {
                                "name": c.name, "arguments": arguments_text(c)}})
                        })
                        .collect();
                }
                messages.push(a);
            }
        }
    }
    let mut body = json!({
        "model": c.model,
        "stream": true,
        "stream_options": {"include_usage": true},
        "messages": messages,
    });
    if !r.tools.is_empty() {
        body["tools"] = r
            .tools
            .iter()
            .map(|t| {
                json!({"type": "function", "function": {
                    "name": t.name, "description": t.description, "parameters": t.parameters}})
            })
            .collect();
        body["parallel_tool_calls"] = c.parallel_tool_calls.into();
    }
    body
}

/// A call's arguments as the model wrote them (malformed text is sent back as it was).
fn arguments_text(c: &ToolCall) -> String {
    match (&c.malformed, &c.arguments) {
        (Some(_), Value::String(s)) => s.clone(),
        (_, v) => v.to_string(),
    }
}

fn anthropic_body(r: &ChatRequest, c: &ModelConfig) -> Value {
    let messages: Vec<Value> = r
        .messages
        .iter()
        .map(|m| match m {
            ChatMessage::User(parts) => {
                // Tool results first: Anthropic wants them at the start of the user message.
                let mut content: Vec<Value> = parts
                    .iter()
                    .filter_map(|p| match p {
                        UserPart::ToolResult {
                            call_id,
                            content,
                            is_error,
                        } => Some(json!({"type": "tool_result", "tool_use_id": call_id,
                            "content": content, "is_error": is_error})),
                        UserPart::Text(_) => None,
                    })
                    .collect();
                content.extend(parts.iter().filter_map(|p| match p {
                    UserPart::Text(t) => Some(json!({"type": "text", "text": t})),
                    UserPart::ToolResult { .. } => None,
                }));
                json!({"role": "user", "content": content})
            }
            ChatMessage::Assistant { text, calls } => {
                let mut content = Vec::new();
                if let Some(t) = text {
                    content.push(json!({"type": "text", "text": t}));
                }
                for call in calls {
                    let input = match (&call.malformed, &call.arguments) {
                        (None, v @ Value::Object(_)) => v.clone(),
                        _ => json!({}),
                    };
                    content.push(
                        json!({"type": "tool_use", "id": call.id, "name": call.name, "input": input}),
                    );
                }
                if content.is_empty() {
                    content.push(json!({"type": "text", "text": "(no answer)"}));
                }
                json!({"role": "assistant", "content": content})
            }
        })
        .collect();
    let mut body = json!({
        "model": c.model,
        "max_tokens": c.max_tokens,
        "stream": true,
        "messages": messages,
    });
    if let Some(s) = &r.system {
        body["system"] = s.clone().into();
    }
    if !r.tools.is_empty() {
        body["tools"] = r
            .tools
            .iter()
            .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.parameters}))
            .collect();
        body["tool_choice"] =
            json!({"type": "auto", "disable_parallel_tool_use": !c.parallel_tool_calls});
    }
    body
}

/// The HTTP request of one step: URL, headers (with the key) and the JSON body.
pub fn encode_request(config: &ModelConfig, request: &ChatRequest) -> HttpRequest {
    let mut headers = vec![
        ("content-type".to_owned(), "application/json".to_owned()),
        ("accept".to_owned(), "text/event-stream".to_owned()),
    ];
    let url = match config.provider {
        Provider::OpenAi => {
            if let Some(k) = &config.api_key {
                headers.push(("authorization".into(), format!("Bearer {k}")));
            }
            format!("{}/chat/completions", config.base_url)
        }
        Provider::Anthropic => {
            if let Some(k) = &config.api_key {
                headers.push(("x-api-key".into(), k.clone()));
            }
            headers.push(("anthropic-version".into(), "2023-06-01".into()));
            if config.direct_browser_access {
                headers.push((
                    "anthropic-dangerous-direct-browser-access".into(),
                    "true".into(),
                ));
            }
            format!("{}/v1/messages", config.base_url)
        }
    };
    HttpRequest {
        url,
        headers,
        body: request.body(config).to_string(),
    }
}

impl ModelConfig {
    /// Parses the JSON form hosts pass across a boundary: `{"provider", "model", "baseUrl"?,
    /// "apiKey"?, "maxTokens"?, "parallelToolCalls"?, "directBrowserAccess"?}`.
    pub fn from_json(v: &Value) -> Result<ModelConfig, ModelError> {
        let provider = Provider::parse(v["provider"].as_str().unwrap_or(""))?;
        let model = v["model"]
            .as_str()
            .filter(|m| !m.is_empty())
            .ok_or_else(|| ModelError::InvalidConfig("`model` must name the model".into()))?
            .to_owned();
        let base_url = match v["baseUrl"].as_str() {
            Some(b) if b.starts_with("http://") || b.starts_with("https://") => {
                b.trim_end_matches('/').to_owned()
            }
            Some(b) => {
                return Err(ModelError::InvalidConfig(format!(
                    "the base URL `{b}` must start with http:// or https://"
                )));
            }
            None => provider.default_base_url().to_owned(),
        };
        let max_tokens = match &v["maxTokens"] {
            Value::Null => super::DEFAULT_MAX_TOKENS,
            n => n
                .as_u64()
                .filter(|n| (1..=u32::MAX as u64).contains(n))
                .ok_or_else(|| {
                    ModelError::InvalidConfig("`maxTokens` must be a positive integer".into())
                })? as u32,
        };
        Ok(ModelConfig {
            provider,
            model,
            base_url,
            api_key: v["apiKey"]
                .as_str()
                .filter(|k| !k.is_empty())
                .map(str::to_owned),
            max_tokens,
            parallel_tool_calls: v["parallelToolCalls"].as_bool().unwrap_or(true),
            direct_browser_access: v["directBrowserAccess"].as_bool().unwrap_or(false),
        })
    }
}
