//! `toolgate approvals list|show|approve|deny`: the approval queue for humans, through a
//! running sidecar's API (the sidecar authenticates the token and asks Cedar whether this
//! human may decide).

use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use serde_json::{Value, json};

use super::client::{Client, Remote, encode, field};
use crate::clock::now_ms;

/// Arguments of `toolgate approvals`.
#[derive(Debug, Args)]
pub struct ApprovalsArgs {
    #[command(subcommand)]
    command: ApprovalsCommand,
    #[command(flatten)]
    remote: Remote,
}

#[derive(Debug, Subcommand)]
enum ApprovalsCommand {
    /// Approvals, newest first (pending by default).
    List {
        /// pending, approved, denied, expired, used or all.
        #[arg(long, default_value = "pending")]
        status: String,
        /// Most to show.
        #[arg(long, default_value_t = 100)]
        limit: usize,
        /// One JSON object per line instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// One approval, as JSON.
    Show {
        /// Approval id.
        id: String,
        /// Wait up to this long (`30s`, `500ms`) for it to be decided.
        #[arg(long)]
        wait: Option<String>,
    },
    /// Approve a pending call: the agent may then make exactly that call once.
    Approve {
        /// Approval id.
        id: String,
        /// Why (recorded in the audit log).
        #[arg(long)]
        reason: Option<String>,
    },
    /// Deny a pending call.
    Deny {
        /// Approval id.
        id: String,
        /// Why (recorded in the audit log).
        #[arg(long)]
        reason: Option<String>,
    },
}

/// Runs the subcommand.
pub fn run(args: &ApprovalsArgs) -> anyhow::Result<ExitCode> {
    // A long-poll may take up to the server's limit (60 s).
    let client = Client::new(&args.remote, Duration::from_secs(75));
    match &args.command {
        ApprovalsCommand::List {
            status,
            limit,
            json,
        } => {
            let body = client.get(&format!(
                "/v1/approvals?status={}&limit={limit}",
                encode(status)
            ))?;
            let empty = Vec::new();
            let list = field(&body, "approvals").as_array().unwrap_or(&empty);
            if *json {
                for a in list {
                    println!("{a}");
                }
            } else {
                print_table(list);
            }
        }
        ApprovalsCommand::Show { id, wait } => {
            let mut path = format!("/v1/approvals/{}", encode(id));
            if let Some(w) = wait {
                path.push_str(&format!("?wait={}", encode(w)));
            }
            println!("{:#}", client.get(&path)?);
        }
        ApprovalsCommand::Approve { id, reason } | ApprovalsCommand::Deny { id, reason } => {
            let verb = match args.command {
                ApprovalsCommand::Approve { .. } => "approve",
                _ => "deny",
            };
            let body = client.post(
                &format!("/v1/approvals/{}/{verb}", encode(id)),
                &json!({ "reason": reason }),
            )?;
            println!(
                "{}: {}",
                field(&body, "id").as_str().unwrap_or(id),
                field(&body, "status").as_str().unwrap_or("?")
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn print_table(list: &[Value]) {
    if list.is_empty() {
        println!("no approvals");
        return;
    }
    println!(
        "{:<38} {:<10} {:<24} {:<16} {:<8} EXPIRES",
        "ID", "STATUS", "PRINCIPAL", "TOOL", "RISK"
    );
    for a in list {
        let text = |k: &str| a[k].as_str().unwrap_or("-").to_owned();
        let left = field(a, "expires_ms").as_u64().map_or_else(
            || "-".to_owned(),
            |at| format!("{}s", at.saturating_sub(now_ms()) / 1000),
        );
        println!(
            "{:<38} {:<10} {:<24} {:<16} {:<8} {left}",
            text("id"),
            text("status"),
            text("principal"),
            text("tool"),
            text("risk"),
        );
    }
}
