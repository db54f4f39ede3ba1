//! The built-in deterministic model: what hosts answer with when no model is configured. It
//! never pretends to be a model: every answer says that none is configured and how to
//! configure one, and repeats what it was asked. It selects no tools.

use super::NO_MODEL_CONFIGURED;
use crate::tools::{ModelAdapter, ModelRequest, ModelResponse};
use crate::value::Payload;

/// How to configure a real model, as hosts print it.
pub const HOW_TO_CONFIGURE: &str = "set OPENAI_API_KEY or ANTHROPIC_API_KEY, or pass \
--model PROVIDER:NAME with --base-url URL for an OpenAI-compatible server";

/// The deterministic stand-in for a model.
#[derive(Clone, Copy, Debug, Default)]
pub struct BuiltinModel;

impl BuiltinModel {
    /// The answer to a transcript whose last user input is `last_input`.
    pub fn answer(last_input: Option<&str>) -> String {
        let echo = match last_input.map(str::trim).filter(|s| !s.is_empty()) {
            Some(t) => {
                let t: String = t.chars().take(200).collect();
                format!(" You wrote: \u{201c}{t}\u{201d}.")
            }
            None => String::new(),
        };
        format!(
            "[weft built-in model: {NO_MODEL_CONFIGURED}] No model is configured, so this \
             deterministic answer stands in for one.{echo} To talk to a model, {HOW_TO_CONFIGURE}."
        )
    }
}

impl<V: Payload> ModelAdapter<V> for BuiltinModel {
    fn respond(&mut self, request: &ModelRequest<'_, V>) -> Result<ModelResponse, String> {
        let last = request.messages.iter().rev().find_map(|m| match m {
            crate::tools::Message::Task { input, .. } | crate::tools::Message::Steer { input } => {
                Some(
                    input
                        .as_text()
                        .unwrap_or_else(|| input.to_json().to_string()),
                )
            }
            _ => None,
        });
        Ok(ModelResponse::text(BuiltinModel::answer(last.as_deref())))
    }
}
