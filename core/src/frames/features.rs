//! Feature identifiers (§1.3): what this engine implements, and the check that refuses a
//! request needing anything else.

use super::FramesError;

/// Discovery, frames, text/JSON evidence, choice/input, assessments, commits, receipts.
pub const CORE: &str = "core@0.1";
/// Static templates and horizon/full disclosure.
pub const GRAPH_PREVIEW: &str = "graph-preview@0.1";
/// Speculative assessments that can never be committed.
pub const SPECULATIVE: &str = "speculative-assessment@0.1";
/// Named services that fulfil input nodes.
pub const SERVICE_INPUT: &str = "service-input@0.1";
/// SHA-256-addressed image blobs.
pub const IMAGE: &str = "image-evidence@0.1";
/// Score and probability judgments.
pub const RUBRICS: &str = "judgment-rubrics@0.1";

/// Every feature this engine honours, as advertised in the manifest.
pub const SUPPORTED: &[&str] = &[
    CORE,
    GRAPH_PREVIEW,
    SPECULATIVE,
    SERVICE_INPUT,
    IMAGE,
    RUBRICS,
];

/// `CAPABILITY_REQUIRED` unless every feature in `required` is supported.
pub fn require(required: &[String]) -> Result<(), FramesError> {
    match required.iter().find(|f| !SUPPORTED.contains(&f.as_str())) {
        Some(f) => Err(FramesError::CapabilityRequired(format!(
            "feature `{f}` is not supported by this server"
        ))),
        None => Ok(()),
    }
}

/// The features of `required` that a client supporting `supported` lacks.
pub fn missing<'a>(required: &'a [String], supported: &[&str]) -> Vec<&'a str> {
    required
        .iter()
        .map(String::as_str)
        .filter(|f| !supported.contains(f))
        .collect()
}
