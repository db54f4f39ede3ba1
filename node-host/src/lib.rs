//! weft-host: the native Tokio host of weft. It drives weft-core with real processes, files,
//! sockets and clocks; it holds no rule of its own.

pub mod actors;
pub mod agent;
pub mod agent_host;
pub mod agent_jobs;
pub mod agents;
pub mod chat;
pub mod desk;
pub mod jobs_host;
pub mod model;
pub mod run;
pub mod serve;
