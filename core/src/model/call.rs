//! One model step as a sans-IO machine: the request, its retries, the streamed answer and its
//! deadlines. Hosts (reqwest natively, `fetch` in JS) only move bytes and arm one timer.
//!
//! Call order (drain [`ModelCall::poll_output`] after every input, until it returns `None`;
//! re-arm one timer at [`ModelCall::poll_timeout`]):
//!
//! 1. [`ModelCall::new`] queues [`CallOutput::Send`] (the first attempt).
//! 2. The host sends it and reports the answer's head with [`ModelCall::on_head`]. A 2xx head
//!    starts the stream: feed body chunks with [`ModelCall::on_body`] and the end with
//!    [`ModelCall::on_end`]. Any other status: the host reads the (bounded) body and reports it
//!    with [`ModelCall::on_error_body`]. A connection that fails is [`ModelCall::on_transport_error`].
//! 3. Outputs: [`CallOutput::Event`] (text and tool-call deltas, usage, the finish reason, as
//!    they arrive), [`CallOutput::Send`] again after a retry delay (the machine asks for it
//!    once `handle_timeout` passes the delay), and exactly one [`CallOutput::Done`].
//! 4. [`ModelCall::handle_timeout`] at the deadline: a retry is due, or the model was silent
//!    too long (`MODEL_TIMEOUT`; the host drops the connection).
//! 5. [`ModelCall::abort`] when the step is interrupted: `Done(MODEL_ABORTED)`; the host drops
//!    the connection. No partial call is ever in a `Done`.

use std::collections::VecDeque;

use super::{
    ChatRequest, HttpRequest, ModelConfig, ModelError, RetryPolicy, StreamDecoder, StreamEvent,
    classify_status, encode_request,
};
use crate::Mono;
use crate::tools::ModelResponse;

/// Deadlines of a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallTimeouts {
    /// From sending a request to its head.
    pub head_ms: u64,
    /// Between two body chunks.
    pub idle_ms: u64,
}

impl Default for CallTimeouts {
    fn default() -> Self {
        CallTimeouts {
            head_ms: 60_000,
            idle_ms: 60_000,
        }
    }
}

/// Work for the host.
#[derive(Clone, Debug, PartialEq)]
#[must_use]
pub enum CallOutput {
    /// Send this request (attempt `attempt`, from 1); report with `on_head`.
    Send { attempt: u32, request: HttpRequest },
    /// Something the stream told.
    Event(StreamEvent),
    /// The step's answer, or why there is none. Drop the connection, if any.
    Done(Result<ModelResponse, ModelError>),
}

#[derive(Debug)]
enum State {
    /// Waiting for the head of attempt `attempts`.
    AwaitingHead,
    Streaming,
    /// Waiting for an error body of status `status`.
    ErrorBody {
        status: u16,
        retry_after: Option<String>,
    },
    /// Waiting to retry at the deadline.
    Backoff,
    Done,
}

/// The machine of one model step (see the module documentation for the call order).
#[derive(Debug)]
pub struct ModelCall {
    request: HttpRequest,
    provider: super::Provider,
    policy: RetryPolicy,
    timeouts: CallTimeouts,
    attempts: u32,
    state: State,
    decoder: Option<StreamDecoder>,
    deadline: Option<Mono>,
    outputs: VecDeque<CallOutput>,
}

impl ModelCall {
    /// A step asking `config`'s model `chat`; queues the first `Send`.
    pub fn new(
        now: Mono,
        config: &ModelConfig,
        chat: &ChatRequest,
        policy: RetryPolicy,
        timeouts: CallTimeouts,
    ) -> Self {
        let mut c = ModelCall {
            request: encode_request(config, chat),
            provider: config.provider,
            policy,
            timeouts,
            attempts: 0,
            state: State::AwaitingHead,
            decoder: None,
            deadline: None,
            outputs: VecDeque::new(),
        };
        c.send(now);
        c
    }

    fn send(&mut self, now: Mono) {
        self.attempts += 1;
        self.state = State::AwaitingHead;
        self.deadline = Some(now + self.timeouts.head_ms);
        self.outputs.push_back(CallOutput::Send {
            attempt: self.attempts,
            request: self.request.clone(),
        });
    }

    fn done(&mut self, r: Result<ModelResponse, ModelError>) {
        self.state = State::Done;
        self.deadline = None;
        self.decoder = None;
        self.outputs.push_back(CallOutput::Done(r));
    }

    /// An error before any of the stream was read: retried when the policy says so.
    fn fail_or_retry(&mut self, now: Mono, e: ModelError) {
        match self.policy.delay(self.attempts, &e) {
            Some(d) => {
                self.state = State::Backoff;
                self.deadline = Some(now + d);
            }
            None => self.done(Err(e)),
        }
    }

    /// The head of the answer: its status and `Retry-After` header.
    pub fn on_head(&mut self, now: Mono, status: u16, retry_after: Option<&str>) {
        if !matches!(self.state, State::AwaitingHead) {
            return;
        }
        if (200..300).contains(&status) {
            self.state = State::Streaming;
            self.decoder = Some(StreamDecoder::new(self.provider));
            self.deadline = Some(now + self.timeouts.idle_ms);
        } else {
            self.state = State::ErrorBody {
                status,
                retry_after: retry_after.map(str::to_owned),
            };
            self.deadline = Some(now + self.timeouts.idle_ms);
        }
    }

    /// Whether the host should read the body as an error body (bounded, whole) rather than
    /// stream it.
    pub fn wants_error_body(&self) -> bool {
        matches!(self.state, State::ErrorBody { .. })
    }

    /// The body of a non-2xx answer (hosts read at most [`MAX_ERROR_BODY`] bytes of it).
    pub fn on_error_body(&mut self, now: Mono, body: &[u8]) {
        let State::ErrorBody {
            status,
            retry_after,
        } = &self.state
        else {
            return;
        };
        let e = classify_status(*status, retry_after.as_deref(), body);
        self.fail_or_retry(now, e);
    }

    /// The next chunk of a streamed body.
    pub fn on_body(&mut self, now: Mono, bytes: &[u8]) {
        if !matches!(self.state, State::Streaming) {
            return;
        }
        let d = self
            .decoder
            .as_mut()
            .expect("a streaming call has its decoder");
        let r = d.feed(bytes);
        while let Some(e) = d.poll_event() {
            self.outputs.push_back(CallOutput::Event(e));
        }
        match r {
            Ok(()) => self.deadline = Some(now + self.timeouts.idle_ms),
            Err(e) => self.done(Err(e)),
        }
    }

    /// The body ended.
    pub fn on_end(&mut self, _now: Mono) {
        if !matches!(self.state, State::Streaming) {
            return;
        }
        let r = self
            .decoder
            .as_mut()
            .expect("a streaming call has its decoder")
            .finish();
        self.done(r);
    }

    /// The connection failed (before or during the answer).
    pub fn on_transport_error(&mut self, now: Mono, message: &str) {
        match self.state {
            State::AwaitingHead => self.fail_or_retry(now, ModelError::Connect(message.into())),
            State::Streaming | State::ErrorBody { .. } => self.done(Err(ModelError::BadResponse(
                format!("the connection failed mid-answer: {message}"),
            ))),
            State::Backoff | State::Done => {}
        }
    }

    /// The step was interrupted: `Done(MODEL_ABORTED)`.
    pub fn abort(&mut self, reason: &str) {
        if !matches!(self.state, State::Done) {
            self.done(Err(ModelError::Aborted(reason.into())));
        }
    }

    /// The next deadline: a retry, or the end of the model's allowed silence.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Mono> {
        self.deadline
    }

    /// Time passed: a retry is sent, or a silent model times out.
    pub fn handle_timeout(&mut self, now: Mono) {
        let Some(d) = self.deadline else { return };
        if now < d {
            return;
        }
        match self.state {
            State::Backoff => self.send(now),
            State::AwaitingHead => self.done(Err(ModelError::Timeout(format!(
                "no answer within {} ms",
                self.timeouts.head_ms
            )))),
            State::Streaming | State::ErrorBody { .. } => self.done(Err(ModelError::Timeout(
                format!("the model was silent for {} ms", self.timeouts.idle_ms),
            ))),
            State::Done => {}
        }
    }

    /// Work for the host, in order.
    #[must_use]
    pub fn poll_output(&mut self) -> Option<CallOutput> {
        self.outputs.pop_front()
    }

    /// Whether `Done` was emitted.
    pub fn is_done(&self) -> bool {
        matches!(self.state, State::Done)
    }

    /// Attempts sent so far.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }
}

/// The most of an error body hosts read before classifying it.
pub const MAX_ERROR_BODY: usize = 64 << 10;
