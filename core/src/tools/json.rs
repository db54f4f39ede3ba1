//! The JSON forms of session types, written straight to a serializer (hosts serialize outputs
//! and transcripts on the hot path; no intermediate `serde_json::Value` is built). The
//! `to_json` methods of the types return the same forms as values.

use serde::ser::{Serialize, SerializeMap, Serializer};

use super::types::*;
use crate::value::Payload;

impl Serialize for TurnCause {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        match self {
            TurnCause::Task(t) => m.serialize_entry("task", &t.0)?,
            TurnCause::JobWake(j) => {
                m.serialize_entry("wake", "job")?;
                m.serialize_entry("job", &j.0)?;
            }
            TurnCause::AppWake(r) => {
                m.serialize_entry("wake", "app")?;
                m.serialize_entry("reason", r)?;
            }
        }
        m.end()
    }
}

fn end_entries<M: SerializeMap>(end: &TurnEnd, m: &mut M) -> Result<(), M::Error> {
    m.serialize_entry("end", end.as_str())?;
    match end {
        TurnEnd::Completed => Ok(()),
        TurnEnd::Interrupted { reason } => m.serialize_entry("reason", reason),
        TurnEnd::ModelFailed { message } => m.serialize_entry("message", message),
        TurnEnd::StepLimit { steps } => m.serialize_entry("steps", steps),
    }
}

impl Serialize for TurnEnd {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        end_entries(self, &mut m)?;
        m.end()
    }
}

impl Serialize for ToolCall {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("id", &self.id)?;
        m.serialize_entry("name", &self.name)?;
        m.serialize_entry("arguments", &self.arguments)?;
        if let Some(x) = &self.malformed {
            m.serialize_entry("malformed", x)?;
        }
        m.end()
    }
}

/// A payload, serialized through its JSON form.
struct P<'a, V>(&'a V);

impl<V: Payload> Serialize for P<'_, V> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.to_json().serialize(s)
    }
}

fn outcome_entries<V: Payload, M: SerializeMap>(
    o: &CallOutcome<V>,
    m: &mut M,
) -> Result<(), M::Error> {
    m.serialize_entry("status", o.status())?;
    m.serialize_entry("started", &o.started())?;
    match o {
        CallOutcome::Succeeded { value } => m.serialize_entry("value", &P(value)),
        CallOutcome::Failed { message, code } => {
            m.serialize_entry("message", message)?;
            if let Some(c) = code {
                m.serialize_entry("code", c)?;
            }
            Ok(())
        }
        CallOutcome::Rejected { code, message } => {
            m.serialize_entry("code", code)?;
            m.serialize_entry("message", message)
        }
        CallOutcome::NotStarted { reason } => {
            m.serialize_entry("reason", reason)?;
            m.serialize_entry("safeToRetry", &true)
        }
        CallOutcome::Uncertain { reason, evidence } => {
            m.serialize_entry("reason", reason)?;
            m.serialize_entry("evidence", evidence.as_str())?;
            match evidence {
                Evidence::AbortAcknowledged { after_ms } => m.serialize_entry("afterMs", after_ms),
                Evidence::NoSettlement {
                    waited_ms,
                    abort_sent,
                } => {
                    m.serialize_entry("waitedMs", waited_ms)?;
                    m.serialize_entry("abortSent", abort_sent)?;
                    m.serialize_entry("mayStillBeRunning", &true)
                }
            }
        }
    }
}

impl<V: Payload> Serialize for CallOutcome<V> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        outcome_entries(self, &mut m)?;
        m.end()
    }
}

fn result_entries<V: Payload, M: SerializeMap>(
    r: &CallResult<V>,
    m: &mut M,
) -> Result<(), M::Error> {
    m.serialize_entry("invocation", &r.invocation.0)?;
    m.serialize_entry("callId", &r.call_id)?;
    m.serialize_entry("tool", &r.tool)?;
    outcome_entries(&r.outcome, m)?;
    if !r.jobs.is_empty() {
        let jobs: Vec<u64> = r.jobs.iter().map(|j| j.0).collect();
        m.serialize_entry("jobs", &jobs)?;
        m.serialize_entry("handedOver", &true)?;
    }
    Ok(())
}

impl<V: Payload> Serialize for CallResult<V> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        result_entries(self, &mut m)?;
        m.end()
    }
}

fn mail_entries<V: Payload, M: SerializeMap>(mail: &Mail<V>, m: &mut M) -> Result<(), M::Error> {
    m.serialize_entry("seq", &mail.seq)?;
    m.serialize_entry("at", &mail.at)?;
    m.serialize_entry("kind", mail.item.kind())?;
    match &mail.item {
        MailItem::Job(note) => m.serialize_entry("note", note),
        MailItem::Observation { source, value } => {
            m.serialize_entry("source", source)?;
            m.serialize_entry("value", &P(value))
        }
        MailItem::LateResult { turn, result } => {
            m.serialize_entry("turn", &turn.0)?;
            m.serialize_entry("result", result)
        }
        MailItem::LateJob {
            turn,
            invocation,
            call_id,
            job,
        } => {
            m.serialize_entry("turn", &turn.0)?;
            m.serialize_entry("invocation", &invocation.0)?;
            m.serialize_entry("callId", call_id)?;
            m.serialize_entry("job", &job.0)
        }
    }
}

impl<V: Payload> Serialize for Mail<V> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        mail_entries(self, &mut m)?;
        m.end()
    }
}

impl<V: Payload> Serialize for Message<V> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("role", self.role())?;
        match self {
            Message::TurnStart { turn, cause } => {
                m.serialize_entry("turn", &turn.0)?;
                m.serialize_entry("cause", cause)?;
            }
            Message::Admitted(mail) => mail_entries(mail, &mut m)?,
            Message::Standing { key, value } => {
                m.serialize_entry("key", key)?;
                m.serialize_entry("value", &P(value))?;
            }
            Message::Task { task, input } => {
                m.serialize_entry("task", &task.0)?;
                m.serialize_entry("input", &P(input))?;
            }
            Message::Steer { input } => m.serialize_entry("input", &P(input))?,
            Message::Assistant { step, text, calls } => {
                m.serialize_entry("step", &step.0)?;
                m.serialize_entry("text", text)?;
                m.serialize_entry("calls", calls)?;
            }
            Message::ToolResult { step, result } => {
                result_entries(result, &mut m)?;
                m.serialize_entry("step", &step.0)?;
            }
            Message::TurnEnd { turn, end } => {
                end_entries(end, &mut m)?;
                m.serialize_entry("turn", &turn.0)?;
            }
        }
        m.end()
    }
}

impl Serialize for Output {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        match self {
            Output::TurnStarted {
                turn,
                cause,
                admitted,
            } => {
                m.serialize_entry("output", "turn_started")?;
                m.serialize_entry("turn", &turn.0)?;
                m.serialize_entry("cause", cause)?;
                m.serialize_entry("admitted", admitted)?;
            }
            Output::ModelRequest { turn, step } => {
                m.serialize_entry("output", "model_request")?;
                m.serialize_entry("turn", &turn.0)?;
                m.serialize_entry("step", &step.0)?;
            }
            Output::AbortModel { step } => {
                m.serialize_entry("output", "abort_model")?;
                m.serialize_entry("step", &step.0)?;
            }
            Output::ModelUsage {
                turn,
                step,
                input_tokens,
                output_tokens,
            } => {
                m.serialize_entry("output", "model_usage")?;
                m.serialize_entry("turn", &turn.0)?;
                m.serialize_entry("step", &step.0)?;
                m.serialize_entry("inputTokens", input_tokens)?;
                m.serialize_entry("outputTokens", output_tokens)?;
            }
            Output::StartCall {
                invocation,
                step,
                handler,
                tool,
                call_id,
                arguments,
                cancellable,
            } => {
                m.serialize_entry("output", "start_call")?;
                m.serialize_entry("invocation", &invocation.0)?;
                m.serialize_entry("step", &step.0)?;
                m.serialize_entry("handler", &handler.0)?;
                m.serialize_entry("tool", tool)?;
                m.serialize_entry("callId", call_id)?;
                m.serialize_entry("arguments", arguments)?;
                m.serialize_entry("cancellable", cancellable)?;
            }
            Output::AbortCall {
                invocation,
                handler,
            } => {
                m.serialize_entry("output", "abort_call")?;
                m.serialize_entry("invocation", &invocation.0)?;
                m.serialize_entry("handler", &handler.0)?;
            }
            Output::CallFinished { invocation, status } => {
                m.serialize_entry("output", "call_finished")?;
                m.serialize_entry("invocation", &invocation.0)?;
                m.serialize_entry("status", status)?;
            }
            Output::MailQueued { seq, kind } => {
                m.serialize_entry("output", "mail_queued")?;
                m.serialize_entry("seq", seq)?;
                m.serialize_entry("kind", kind)?;
            }
            Output::TurnEnded { turn, end } => {
                end_entries(end, &mut m)?;
                m.serialize_entry("output", "turn_ended")?;
                m.serialize_entry("turn", &turn.0)?;
            }
            Output::HandlerReleased { handler } => {
                m.serialize_entry("output", "handler_released")?;
                m.serialize_entry("handler", &handler.0)?;
            }
        }
        m.end()
    }
}
