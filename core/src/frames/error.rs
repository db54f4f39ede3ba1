//! The errors of the frames capability: every DGP 0.1 error code, each with its HTTP status.

use thiserror::Error;

use super::types::Problem;

/// Errors of the DGP engine and its bindings. Each has a stable code ([`FramesError::code`])
/// and the HTTP status the specification assigns to it ([`FramesError::http_status`]).
///
/// The first block is the specification's table (§12.1); the second holds the finer codes the
/// reference ThreadDesk server uses for the same situations, kept so that its clients see the
/// answers they were written against.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum FramesError {
    #[error("{0}")]
    Unauthenticated(String),
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    HumanApprovalRequired(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    CapabilityRequired(String),
    #[error("{0}")]
    StaleFrame(String),
    #[error("{0}")]
    FrameExpired(String),
    #[error("{0}")]
    IdempotencyKeyReused(String),
    #[error("{0}")]
    AssessmentIdReused(String),
    #[error("{0}")]
    SpeculativeOnly(String),
    #[error("{0}")]
    Abstained(String),
    #[error("{0}")]
    BudgetExhausted(String),
    #[error("{0}")]
    PayloadTooLarge(String),
    #[error("{0}")]
    UnsupportedMediaType(String),
    #[error("{0}")]
    InvalidMessage(String),
    #[error("{0}")]
    InvalidInput(String),
    #[error("{0}")]
    InvalidChoice(String),
    #[error("{0}")]
    UnsupportedModality(String),

    #[error("{0}")]
    InvalidJson(String),
    #[error("{0}")]
    IdempotencyKeyRequired(String),
    #[error("{0}")]
    AssessmentMismatch(String),
    #[error("{0}")]
    DecisionNotOffered(String),
    #[error("{0}")]
    DecisionNotAvailable(String),
    #[error("{0}")]
    InvalidDisclosure(String),
    #[error("{0}")]
    InvalidHorizon(String),
    #[error("{0}")]
    InvalidAnswer(String),
    #[error("{0}")]
    InvalidDistribution(String),
    #[error("{0}")]
    SchemaUnsupported(String),
    /// Image evidence that is not valid base64, is empty or over 256 KiB, or whose bytes are
    /// not the declared PNG / JPEG / WebP (the reference server's `INVALID_IMAGE`, 422).
    #[error("{0}")]
    InvalidImage(String),
    #[error("{0}")]
    UntrustedHost(String),
    #[error("{0}")]
    UntrustedOrigin(String),
    /// The route exists but not with this HTTP method.
    #[error("{0}")]
    MethodNotAllowed(String),
    /// The host could not make a write batch durable; the engine refuses further work.
    #[error("{0}")]
    StorageFailure(String),
    /// A commit on a shared database whose frame's read set was not locked by the deciding
    /// transaction (the frame left memory meanwhile); retryable: nothing was decided.
    #[error("{0}")]
    ScopesNotLocked(String),
    /// A stored record could not be read back (corrupt or from an incompatible version).
    #[error("{0}")]
    CorruptRecord(String),
    /// A request HTTP itself refuses: not exactly one `Host` header, a path or query that is
    /// not UTF-8 or not well formed (400).
    #[error("{0}")]
    InvalidRequest(String),
    /// A request body sent with `Transfer-Encoding` (the reference server's
    /// `INVALID_TRANSFER`, 400: bodies need a `Content-Length`).
    #[error("{0}")]
    InvalidTransfer(String),
    /// An unexpected failure of the server (the reference server's `INTERNAL_ERROR`, 500).
    #[error("{0}")]
    InternalError(String),
}

impl FramesError {
    /// The stable string code, as HTTP problem `code` and JS `Error.code`.
    pub fn code(&self) -> &'static str {
        use FramesError::*;
        match self {
            Unauthenticated(_) => "UNAUTHENTICATED",
            Forbidden(_) => "FORBIDDEN",
            HumanApprovalRequired(_) => "HUMAN_APPROVAL_REQUIRED",
            NotFound(_) => "NOT_FOUND",
            CapabilityRequired(_) => "CAPABILITY_REQUIRED",
            StaleFrame(_) => "STALE_FRAME",
            FrameExpired(_) => "FRAME_EXPIRED",
            IdempotencyKeyReused(_) => "IDEMPOTENCY_KEY_REUSED",
            AssessmentIdReused(_) => "ASSESSMENT_ID_REUSED",
            SpeculativeOnly(_) => "SPECULATIVE_ONLY",
            Abstained(_) => "ABSTAINED",
            BudgetExhausted(_) => "BUDGET_EXHAUSTED",
            PayloadTooLarge(_) => "PAYLOAD_TOO_LARGE",
            UnsupportedMediaType(_) => "UNSUPPORTED_MEDIA_TYPE",
            InvalidMessage(_) => "INVALID_MESSAGE",
            InvalidInput(_) => "INVALID_INPUT",
            InvalidChoice(_) => "INVALID_CHOICE",
            UnsupportedModality(_) => "UNSUPPORTED_MODALITY",
            InvalidJson(_) => "INVALID_JSON",
            IdempotencyKeyRequired(_) => "IDEMPOTENCY_KEY_REQUIRED",
            AssessmentMismatch(_) => "ASSESSMENT_MISMATCH",
            DecisionNotOffered(_) => "DECISION_NOT_OFFERED",
            DecisionNotAvailable(_) => "DECISION_NOT_AVAILABLE",
            InvalidDisclosure(_) => "INVALID_DISCLOSURE",
            InvalidHorizon(_) => "INVALID_HORIZON",
            InvalidAnswer(_) => "INVALID_ANSWER",
            InvalidDistribution(_) => "INVALID_DISTRIBUTION",
            SchemaUnsupported(_) => "SCHEMA_UNSUPPORTED",
            InvalidImage(_) => "INVALID_IMAGE",
            UntrustedHost(_) => "UNTRUSTED_HOST",
            UntrustedOrigin(_) => "UNTRUSTED_ORIGIN",
            MethodNotAllowed(_) => "METHOD_NOT_ALLOWED",
            StorageFailure(_) => "STORAGE_FAILURE",
            ScopesNotLocked(_) => "SCOPES_NOT_LOCKED",
            CorruptRecord(_) => "CORRUPT_RECORD",
            InvalidRequest(_) => "INVALID_REQUEST",
            InvalidTransfer(_) => "INVALID_TRANSFER",
            InternalError(_) => "INTERNAL_ERROR",
        }
    }

    /// The HTTP status of this error in the reference binding (SPECIFICATION.md §12.1).
    pub fn http_status(&self) -> u16 {
        use FramesError::*;
        match self {
            Unauthenticated(_) => 401,
            Forbidden(_) | HumanApprovalRequired(_) | UntrustedHost(_) | UntrustedOrigin(_) => 403,
            NotFound(_) => 404,
            MethodNotAllowed(_) => 405,
            CapabilityRequired(_) => 406,
            StaleFrame(_)
            | FrameExpired(_)
            | IdempotencyKeyReused(_)
            | AssessmentIdReused(_)
            | SpeculativeOnly(_)
            | Abstained(_)
            | BudgetExhausted(_)
            | DecisionNotAvailable(_) => 409,
            PayloadTooLarge(_) => 413,
            UnsupportedMediaType(_) => 415,
            InvalidMessage(_)
            | InvalidInput(_)
            | InvalidChoice(_)
            | UnsupportedModality(_)
            | AssessmentMismatch(_)
            | DecisionNotOffered(_)
            | InvalidDisclosure(_)
            | InvalidHorizon(_)
            | InvalidAnswer(_)
            | InvalidDistribution(_)
            | SchemaUnsupported(_)
            | InvalidImage(_) => 422,
            InvalidJson(_) | IdempotencyKeyRequired(_) | InvalidRequest(_) | InvalidTransfer(_) => {
                400
            }
            StorageFailure(_) | ScopesNotLocked(_) => 503,
            CorruptRecord(_) | InternalError(_) => 500,
        }
    }

    /// The `application/problem+json` record (RFC 9457 fields plus `code` and `dgp`).
    pub fn problem(&self) -> Problem {
        let code = self.code();
        Problem {
            kind: format!(
                "urn:dgp:problem:{}",
                code.to_ascii_lowercase().replace('_', "-")
            ),
            title: code.to_owned(),
            status: self.http_status(),
            detail: self.to_string(),
            code: code.to_owned(),
            dgp: super::types::Dgp,
            extensions: None,
        }
    }

    /// The error codes of the specification's table (§12.1); every one of them is produced by
    /// this engine or its HTTP binding.
    pub const SPEC_CODES: &'static [&'static str] = &[
        "UNAUTHENTICATED",
        "FORBIDDEN",
        "HUMAN_APPROVAL_REQUIRED",
        "NOT_FOUND",
        "CAPABILITY_REQUIRED",
        "STALE_FRAME",
        "FRAME_EXPIRED",
        "IDEMPOTENCY_KEY_REUSED",
        "ASSESSMENT_ID_REUSED",
        "SPECULATIVE_ONLY",
        "ABSTAINED",
        "BUDGET_EXHAUSTED",
        "PAYLOAD_TOO_LARGE",
        "UNSUPPORTED_MEDIA_TYPE",
        "INVALID_MESSAGE",
        "INVALID_INPUT",
        "INVALID_CHOICE",
        "UNSUPPORTED_MODALITY",
    ];
}

impl crate::ErrorCode for FramesError {
    fn code(&self) -> &'static str {
        FramesError::code(self)
    }
}

#[cfg(test)]
mod tests {
    use super::FramesError::*;
    use super::*;

    /// The specification's table (§12.1): every code, with its HTTP status.
    #[test]
    fn every_specified_code_has_its_status() {
        let table = [
            (Unauthenticated(String::new()), "UNAUTHENTICATED", 401),
            (Forbidden(String::new()), "FORBIDDEN", 403),
            (
                HumanApprovalRequired(String::new()),
                "HUMAN_APPROVAL_REQUIRED",
                403,
            ),
            (NotFound(String::new()), "NOT_FOUND", 404),
            (
                CapabilityRequired(String::new()),
                "CAPABILITY_REQUIRED",
                406,
            ),
            (StaleFrame(String::new()), "STALE_FRAME", 409),
            (FrameExpired(String::new()), "FRAME_EXPIRED", 409),
            (
                IdempotencyKeyReused(String::new()),
                "IDEMPOTENCY_KEY_REUSED",
                409,
            ),
            (
                AssessmentIdReused(String::new()),
                "ASSESSMENT_ID_REUSED",
                409,
            ),
            (SpeculativeOnly(String::new()), "SPECULATIVE_ONLY", 409),
            (Abstained(String::new()), "ABSTAINED", 409),
            (BudgetExhausted(String::new()), "BUDGET_EXHAUSTED", 409),
            (PayloadTooLarge(String::new()), "PAYLOAD_TOO_LARGE", 413),
            (
                UnsupportedMediaType(String::new()),
                "UNSUPPORTED_MEDIA_TYPE",
                415,
            ),
            (InvalidMessage(String::new()), "INVALID_MESSAGE", 422),
            (InvalidInput(String::new()), "INVALID_INPUT", 422),
            (InvalidChoice(String::new()), "INVALID_CHOICE", 422),
            (
                UnsupportedModality(String::new()),
                "UNSUPPORTED_MODALITY",
                422,
            ),
        ];
        assert_eq!(table.len(), FramesError::SPEC_CODES.len());
        for (e, code, status) in table {
            assert_eq!((e.code(), e.http_status()), (code, status));
            assert!(FramesError::SPEC_CODES.contains(&code));
            let p = e.problem();
            assert_eq!(
                (p.code.as_str(), p.status, p.title.as_str()),
                (code, status, code)
            );
            assert!(p.kind.starts_with("urn:dgp:problem:"));
        }
    }
}
