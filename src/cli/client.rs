//! A small HTTP client for the human subcommands (`toolgate approvals …`, `toolgate audit
//! query|tail`): they talk to a running sidecar through its API, with the caller's token, so
//! every action goes through the same authentication, Cedar checks and audit as the API.

use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use serde_json::Value;

/// How to reach the sidecar.
#[derive(Args, Clone)]
pub struct Remote {
    /// The sidecar's address.
    #[arg(long, env = "TOOLGATE_URL", default_value = "http://127.0.0.1:8181")]
    url: String,
    /// Bearer token of the human acting (better: the TOOLGATE_TOKEN environment variable,
    /// which does not show in the process list).
    #[arg(long, env = "TOOLGATE_TOKEN", hide_env_values = true)]
    token: Option<String>,
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Remote")
            .field("url", &self.url)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// A connection to one sidecar.
pub struct Client {
    agent: ureq::Agent,
    base: String,
    token: Option<String>,
}

impl Client {
    /// A client for `remote`; each call is bounded by `timeout`.
    pub fn new(remote: &Remote, timeout: Duration) -> Client {
        let agent = ureq::Agent::config_builder()
            .timeout_global(Some(timeout))
            .http_status_as_error(false)
            .build()
            .into();
        Client {
            agent,
            base: remote.url.trim_end_matches('/').to_owned(),
            token: remote.token.clone(),
        }
    }

    /// `GET path` (with its query string), returning the JSON body of a 2xx answer.
    pub fn get(&self, path_and_query: &str) -> anyhow::Result<Value> {
        let url = format!("{}{path_and_query}", self.base);
        let mut req = self.agent.get(&url);
        if let Some(t) = &self.token {
            req = req.header("Authorization", &format!("Bearer {t}"));
        }
        answer(&url, req.call())
    }

    /// `GET path` whose 2xx answer is text (JSON Lines); an error answer is reported as
    /// [`Client::get`] reports it.
    pub fn get_text(&self, path_and_query: &str) -> anyhow::Result<String> {
        let url = format!("{}{path_and_query}", self.base);
        let mut req = self.agent.get(&url);
        if let Some(t) = &self.token {
            req = req.header("Authorization", &format!("Bearer {t}"));
        }
        let mut resp = req
            .call()
            .with_context(|| format!("cannot reach {url}; is the sidecar running?"))?;
        let status = resp.status();
        let text = resp
            .body_mut()
            .with_config()
            .limit(1 << 30)
            .read_to_string()
            .with_context(|| format!("cannot read the answer from {url}"))?;
        if status.is_success() {
            return Ok(text);
        }
        failure(&url, status, &text)
    }

    /// `POST path` with a JSON body, returning the JSON body of a 2xx answer.
    pub fn post(&self, path: &str, body: &Value) -> anyhow::Result<Value> {
        let url = format!("{}{path}", self.base);
        let mut req = self
            .agent
            .post(&url)
            .header("Content-Type", "application/json");
        if let Some(t) = &self.token {
            req = req.header("Authorization", &format!("Bearer {t}"));
        }
        answer(&url, req.send(body.to_string().as_bytes()))
    }
}

/// The JSON of a 2xx answer, or an error quoting the sidecar's own code and message.
fn answer(
    url: &str,
    sent: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
) -> anyhow::Result<Value> {
    let mut resp = sent.with_context(|| format!("cannot reach {url}; is the sidecar running?"))?;
    let status = resp.status();
    let text = resp
        .body_mut()
        .read_to_string()
        .with_context(|| format!("cannot read the answer from {url}"))?;
    if !status.is_success() {
        return failure(url, status, &text);
    }
    serde_json::from_str(&text)
        .with_context(|| format!("{url} answered {status} with something that is not JSON"))
}

/// The error of a non-2xx answer, quoting the sidecar's own code and message.
fn failure<T>(url: &str, status: ureq::http::StatusCode, text: &str) -> anyhow::Result<T> {
    let body: Value = serde_json::from_str(text)
        .with_context(|| format!("{url} answered {status} with something that is not JSON"))?;
    {
        // Errors are `{error, message, suggestion}`; a refused credential is a deny decision.
        let first = field(field(&body, "errors"), 0);
        let code = field(&body, "error")
            .as_str()
            .or(field(first, "code").as_str());
        let message = field(&body, "message")
            .as_str()
            .or(field(first, "message").as_str());
        let hint = match (status.as_u16(), field(&body, "suggestion").as_str()) {
            (401, _) => " (set TOOLGATE_TOKEN to a valid token)".to_owned(),
            (_, Some(s)) => format!(" ({s})"),
            _ => String::new(),
        };
        bail!(
            "{status}: {}: {}{hint}",
            code.unwrap_or("error"),
            message.unwrap_or("")
        );
    }
}

/// Percent-encodes a query value or path segment.
pub fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `value[index]` without the panicking operator: `null` when absent.
pub fn field<I: serde_json::value::Index>(value: &Value, index: I) -> &Value {
    static NULL: Value = Value::Null;
    value.get(index).unwrap_or(&NULL)
}
