//! The model seam: what a model step is asked and answers, and a deterministic scripted model.
//!
//! The core never calls a model itself. A host reads [`Session::model_request`] when the
//! session emits [`super::Output::ModelRequest`], asks its model (a network API, a local model, a
//! script) and reports the answer. [`ModelAdapter`] is that contract for synchronous models;
//! asynchronous hosts wrap the same request/response shapes in their own async trait.

use std::collections::VecDeque;

use super::ToolsError;
use super::session::{ModelRequest, Session};
use super::types::ModelResponse;
use crate::Mono;
use crate::value::Payload;

/// A model: given the transcript and the step's tool snapshot, answer with text and calls.
pub trait ModelAdapter<V> {
    /// Answers one step. An `Err` is reported to the session as a failed model step.
    fn respond(&mut self, request: &ModelRequest<'_, V>) -> Result<ModelResponse, String>;
}

/// What the scripted model saw in one step (for assertions about model input).
#[derive(Clone, Debug, PartialEq)]
pub struct SeenRequest {
    pub step: u64,
    pub messages: usize,
    pub tools: Vec<String>,
    pub tools_version: u64,
}

/// A deterministic model that answers with the responses of its script, in order. Once the
/// script is exhausted every step fails with `script exhausted`.
#[derive(Clone, Debug, Default)]
pub struct ScriptedModel {
    script: VecDeque<ModelResponse>,
    seen: Vec<SeenRequest>,
}

impl ScriptedModel {
    /// A model that answers with `script`, in order.
    pub fn new(script: impl IntoIterator<Item = ModelResponse>) -> Self {
        ScriptedModel {
            script: script.into_iter().collect(),
            seen: Vec::new(),
        }
    }

    /// Appends responses to the script.
    pub fn push(&mut self, response: ModelResponse) {
        self.script.push_back(response);
    }

    /// Responses not yet given.
    pub fn remaining(&self) -> usize {
        self.script.len()
    }

    /// Every request the model answered (or failed), in order.
    pub fn seen(&self) -> &[SeenRequest] {
        &self.seen
    }
}

impl<V> ModelAdapter<V> for ScriptedModel {
    fn respond(&mut self, request: &ModelRequest<'_, V>) -> Result<ModelResponse, String> {
        self.seen.push(SeenRequest {
            step: request.step.0,
            messages: request.messages.len(),
            tools: request
                .tools
                .tools()
                .iter()
                .map(|t| t.decl.name.clone())
                .collect(),
            tools_version: request.tools.version,
        });
        self.script
            .pop_front()
            .ok_or_else(|| "script exhausted".to_owned())
    }
}

impl<V: Payload> Session<V> {
    /// Answers the pending model request (if any) with a synchronous model and reports the
    /// answer. Returns whether a step was answered.
    pub fn step_with<M: ModelAdapter<V> + ?Sized>(
        &mut self,
        now: Mono,
        model: &mut M,
    ) -> Result<bool, ToolsError> {
        let Some(req) = self.model_request() else {
            return Ok(false);
        };
        let step = req.step;
        match model.respond(&req) {
            Ok(response) => self.on_model_response(now, step, response)?,
            Err(message) => self.on_model_error(now, step, message)?,
        }
        Ok(true)
    }
}
