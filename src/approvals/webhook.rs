//! Approver notifications: events a human should act on or know of (`approval.pending`,
//! `approval.reminder`, `approval.decided`, `approval.expired`, `descriptor.changed`,
//! `policy.held`, `quarantine`, `kill_switch`) are POSTed as JSON, or as a Slack-compatible
//! message, to a configured URL by one background thread. Never on the decision path: events wait in a bounded queue (a full
//! queue drops the event and counts it), each delivery is bounded in time and retried a few
//! times with backoff, and the outcome is counted for `/metrics`.
//!
//! With a secret, each notice is signed: `X-Toolgate-Timestamp: <unix seconds>` and
//! `X-Toolgate-Signature: sha256=<hex HMAC-SHA-256 of "<timestamp>.<body>">`, so a receiver can
//! tell the sidecar's notices from forgeries and refuse old ones replayed.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::time::Duration;

use serde_json::Value;

/// Events that may wait for delivery.
const QUEUE: usize = 1024;

/// Where and how to deliver.
#[derive(Debug, Clone)]
pub struct WebhookConfig {
    /// `http://` or `https://` URL.
    pub url: String,
    /// HMAC key for the signature header.
    pub secret: Option<Vec<u8>>,
    /// Bound on each attempt.
    pub timeout: Duration,
    /// Attempts per event (at least 1).
    pub attempts: u32,
    /// Wait before the second attempt; doubled for each one after.
    pub backoff: Duration,
    /// The body's shape.
    pub format: Format,
    /// The console's address (`https://…/ui`), linked from each notice.
    pub console_url: Option<String>,
}

/// The shape of a notice's body.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// The event as JSON (`{"event": "approval.pending", …}`).
    #[default]
    Json,
    /// `{"text": "…"}` for Slack's (and compatible) incoming webhooks.
    Slack,
}

/// Delivery counters.
#[derive(Debug, Default)]
pub struct WebhookStats {
    /// Delivered (a 2xx answer).
    pub delivered: AtomicU64,
    /// Given up after every attempt.
    pub failed: AtomicU64,
    /// Dropped because the queue was full.
    pub dropped: AtomicU64,
}

/// The sending side: cheap, never blocks; clones share one queue.
#[derive(Debug, Clone)]
pub struct Webhook {
    tx: SyncSender<Value>,
    /// Delivery counters.
    pub stats: Arc<WebhookStats>,
}

impl Webhook {
    /// Starts the delivery thread.
    pub fn start(config: WebhookConfig) -> std::io::Result<Webhook> {
        let (tx, rx) = sync_channel(QUEUE);
        let stats = Arc::new(WebhookStats::default());
        let worker_stats = stats.clone();
        std::thread::Builder::new()
            .name("toolgate-webhook".to_owned())
            .spawn(move || deliver_all(&config, &rx, &worker_stats))?;
        Ok(Webhook { tx, stats })
    }

    /// Queues `event`; drops it (counted, logged) when the queue is full.
    pub fn send(&self, event: Value) {
        match self.tx.try_send(event) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                self.stats.dropped.fetch_add(1, Ordering::Relaxed);
                tracing::warn!("webhook queue full; notification dropped");
            }
            Err(TrySendError::Disconnected(_)) => {
                self.stats.dropped.fetch_add(1, Ordering::Relaxed);
                tracing::error!("webhook thread stopped; notification dropped");
            }
        }
    }
}

fn deliver_all(config: &WebhookConfig, rx: &Receiver<Value>, stats: &WebhookStats) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(config.timeout))
        .http_status_as_error(false)
        .max_redirects(0)
        .build()
        .into();
    while let Ok(event) = rx.recv() {
        let body = render(config, event);
        let mut wait = config.backoff;
        let mut delivered = false;
        for attempt in 1..=config.attempts.max(1) {
            match post(&agent, config, &body) {
                Ok(()) => {
                    delivered = true;
                    break;
                }
                Err(why) => {
                    tracing::warn!(attempt, to = %webhook_origin(&config.url), error = %why, "approver webhook not delivered");
                    if attempt < config.attempts {
                        std::thread::sleep(wait);
                        wait = wait.saturating_mul(2);
                    }
                }
            }
        }
        let counter = if delivered {
            &stats.delivered
        } else {
            &stats.failed
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

fn post(agent: &ureq::Agent, config: &WebhookConfig, body: &str) -> Result<(), String> {
    let mut req = agent
        .post(&config.url)
        .header("Content-Type", "application/json")
        .header(
            "User-Agent",
            concat!("toolgate/", env!("CARGO_PKG_VERSION")),
        );
    if let Some(key) = &config.secret {
        // The timestamp is signed with the body, so a captured notice cannot be replayed later.
        let ts = (crate::clock::now_ms() / 1000).to_string();
        req = req.header("X-Toolgate-Timestamp", &ts).header(
            "X-Toolgate-Signature",
            &format!("sha256={}", sign(key, &format!("{ts}.{body}"))),
        );
    }
    // Errors may quote the URL; only its origin is shown.
    let resp = req.send(body.as_bytes()).map_err(|e| {
        e.to_string()
            .replace(&config.url, webhook_origin(&config.url))
    })?;
    if resp.status().is_success() {
        Ok(())
    } else {
        Err(format!("answered {}", resp.status()))
    }
}

/// The body for `event`: JSON with a `console` link, or a Slack message.
fn render(config: &WebhookConfig, mut event: Value) -> String {
    let link = config.console_url.as_deref().map(|base| {
        let base = base.trim_end_matches('/');
        match event.pointer("/approval/id").and_then(Value::as_str) {
            Some(id) => format!("{base}#queue/{id}"),
            None => format!("{base}#operations"),
        }
    });
    match config.format {
        Format::Json => {
            if let (Some(link), Some(obj)) = (&link, event.as_object_mut()) {
                obj.insert("console".to_owned(), Value::String(link.clone()));
            }
            event.to_string()
        }
        Format::Slack => {
            let mut text = slack_text(&event);
            if let Some(link) = link {
                text.push_str(&format!(" <{}|Open the console>", slack_escape(&link)));
            }
            serde_json::json!({ "text": text }).to_string()
        }
    }
}

/// Slack's three control characters escaped, and what would format or notify defused
/// (values here come from agents and humans): a zero-width space after `@` keeps
/// `@channel`, `@here` and `@all` from pinging (Mattermost and Rocket.Chat act on them as
/// plain text), and backticks become quotes.
fn slack_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('@', "@\u{200b}")
        .replace('`', "'")
}

/// One line saying what happened. Never an argument value: only names, ids and reasons.
fn slack_text(event: &Value) -> String {
    let s = |v: &Value| slack_escape(v.as_str().unwrap_or("?"));
    // `: <reason>` when one was given.
    let reason = |v: &Value| {
        v.as_str()
            .map(|r| format!(": {}", slack_escape(r)))
            .unwrap_or_default()
    };
    let a = &event["approval"];
    let mins = |ms: &Value| {
        let left = ms
            .as_u64()
            .unwrap_or(0)
            .saturating_sub(crate::clock::now_ms());
        format!("{} min", left.div_ceil(60_000))
    };
    let waiting = |a: &Value| {
        a["waiting_on"]
            .as_array()
            .map(|w| w.iter().map(s).collect::<Vec<_>>().join(", "))
            .filter(|w| !w.is_empty())
            .map(|w| format!(" Waiting on: {w}."))
            .unwrap_or_default()
    };
    match event["event"].as_str().unwrap_or("") {
        "approval.pending" => format!(
            ":hourglass: toolgate: {} wants to run `{}` (risk {}) and needs an approval.{} Expires in {}.",
            s(&a["principal"]),
            s(&a["tool"]),
            s(&a["risk"]),
            waiting(a),
            mins(&a["expires_ms"])
        ),
        "approval.reminder" => format!(
            ":alarm_clock: toolgate reminder: {}'s call of `{}` is still waiting for an approval.{} Expires in {}.",
            s(&a["principal"]),
            s(&a["tool"]),
            waiting(a),
            mins(&a["expires_ms"])
        ),
        "approval.decided" => format!(
            ":white_check_mark: toolgate: {}'s call of `{}` was {} by {}{}.",
            s(&a["principal"]),
            s(&a["tool"]),
            s(&a["status"]),
            s(&a["decided_by"]),
            reason(&a["reason"])
        ),
        "approval.expired" if a["decided_by"].is_string() => format!(
            ":x: toolgate: {}'s call of `{}` was approved by {} but not made before the approval expired.",
            s(&a["principal"]),
            s(&a["tool"]),
            s(&a["decided_by"])
        ),
        "approval.expired" => format!(
            ":x: toolgate: {}'s call of `{}` expired without a decision.",
            s(&a["principal"]),
            s(&a["tool"])
        ),
        "descriptor.changed" => format!(
            ":warning: toolgate: the MCP tool `{}` changed its descriptor; it is hidden and refused until a human approves the new one.",
            s(&event["tool"])
        ),
        "policy.held" => format!(
            ":lock: toolgate: a policy change (revision {}) is held for approval; revision {} stays in force.",
            s(&event["revision"]),
            s(&event["from"])
        ),
        "quarantine" => format!(
            ":rotating_light: toolgate: {} was {}{}.",
            s(&event["agent"]),
            if event["on"].as_bool() == Some(true) {
                "quarantined"
            } else {
                "released from quarantine"
            },
            reason(&event["reason"])
        ),
        "kill_switch" => format!(
            ":octagonal_sign: toolgate: the kill switch is {}{}.",
            if event["on"].as_bool() == Some(true) {
                "ON: every tool call is denied"
            } else {
                "off"
            },
            reason(&event["reason"])
        ),
        other => format!("toolgate: {}", slack_escape(other)),
    }
}

/// Hex HMAC-SHA-256 of `body` under `key`.
pub fn sign(key: &[u8], body: &str) -> String {
    crate::digest::hmac_sha256_hex(key, &[body.as_bytes()])
}

/// The scheme and host of a webhook URL, for logs: webhook paths often carry a secret (Slack's do).
pub use crate::canon::origin as webhook_origin;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slack_text_cannot_ping_or_format() {
        let escaped = slack_escape("<!channel> @here `x` & <https://e.example|click>");
        assert!(
            !escaped.contains('<') && !escaped.contains('`'),
            "{escaped}"
        );
        assert!(!escaped.contains("@here"), "{escaped}");
        assert!(escaped.contains("&lt;!channel&gt;"), "{escaped}");
    }

    #[test]
    fn logs_show_only_the_origin_of_a_webhook() {
        assert_eq!(
            webhook_origin("https://hooks.slack.com/services/T0/B0/secret"),
            "https://hooks.slack.com"
        );
        assert_eq!(webhook_origin("http://127.0.0.1:9/"), "http://127.0.0.1:9");
        assert_eq!(webhook_origin("http://h"), "http://h");
    }
}
