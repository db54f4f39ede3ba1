//! Test support for the model hosts: the lead's scripted local model server
//! (`tests/model-server/server.mjs`, Node, loopback) as a child process.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A running scripted model server. Dropping it closes its stdin (it exits) and reaps it.
pub struct ModelServer {
    child: Child,
    stdin: Option<ChildStdin>,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    http: reqwest::Client,
}

impl ModelServer {
    /// Starts the server on a free port and reads its `{"url"}` line.
    pub fn start() -> ModelServer {
        let mut child = Command::new("node")
            .arg(repo().join("tests/model-server/server.mjs"))
            .args(["--port", "0", "--exit-on-stdin-close"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("node starts (tests need Node 20)");
        let stdin = child.stdin.take();
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("the server's first line");
        let v: Value = serde_json::from_str(&line).expect("the server prints {\"url\"}");
        ModelServer {
            child,
            stdin,
            url: v["url"].as_str().expect("url").to_owned(),
            http: reqwest::Client::new(),
        }
    }

    /// The base URL of a provider's routes (`{url}/v1` for OpenAI, `{url}` for Anthropic).
    pub fn base(&self, provider: &str) -> String {
        match provider {
            "openai" => format!("{}/v1", self.url),
            _ => self.url.clone(),
        }
    }

    /// Queues replies, one per model request.
    pub async fn script(&self, replies: Value) {
        let r = self
            .http
            .post(format!("{}/_script", self.url))
            .body(json!({ "replies": replies }).to_string())
            .send()
            .await
            .expect("script");
        assert!(r.status().is_success());
    }

    /// What the server received: `[{path, headers, body, closedByClient, completed}]`.
    pub async fn requests(&self) -> Vec<Value> {
        self.http
            .get(format!("{}/_requests", self.url))
            .send()
            .await
            .expect("requests")
            .text()
            .await
            .map(|t| serde_json::from_str(&t).expect("json"))
            .expect("body")
    }

    /// Clears the scripted replies and the recorded requests.
    pub async fn reset(&self) {
        let r = self
            .http
            .post(format!("{}/_reset", self.url))
            .send()
            .await
            .expect("reset");
        assert!(r.status().is_success());
    }

    /// Polls until request `i` was closed by the client (at most ~5 s).
    pub async fn wait_closed(&self, i: usize) -> Value {
        for _ in 0..250 {
            let r = self.requests().await;
            if r.get(i).is_some_and(|r| r["closedByClient"] == true) {
                return r[i].clone();
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("the server never saw request {i} closed by the client");
    }
}

impl Drop for ModelServer {
    fn drop(&mut self) {
        drop(self.stdin.take());
        for _ in 0..100 {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
