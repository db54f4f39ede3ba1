//! `weft run <script> --payload <json>`.

use std::process::ExitCode;

/// Arguments of `weft run`.
#[derive(clap::Args)]
pub struct RunArgs {
    /// The worker script (DOM-style: `self.onmessage` / `self.postMessage`), started with node.
    pub script: std::path::PathBuf,
    /// The run payload, as JSON.
    #[arg(long, default_value = "null")]
    pub payload: String,
    /// Print the job's journal as JSON lines instead of a progress bar.
    #[arg(long)]
    pub json: bool,
}

/// Runs the command.
pub async fn main(_args: RunArgs) -> ExitCode {
    ExitCode::FAILURE
}
