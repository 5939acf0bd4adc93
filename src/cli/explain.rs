//! `toolgate explain FILE`: how the policies decide one call, policy by policy, and who may
//! approve it. FILE is the `POST /v1/explain` body (`-` for stdin). By default it asks the
//! running sidecar (as the human of `TOOLGATE_TOKEN`; Cedar decides who may ask); `--offline`
//! evaluates the policy files here instead (who can read the files can evaluate them).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use serde_json::Value;

use super::authorize::read_input;
use super::client::{Client, Remote, field};
use super::{Common, load_or_report};
use crate::authz;
use crate::gateway::RawExplain;

/// Arguments of `toolgate explain`.
#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// The call to explain, as sent to `POST /v1/explain`: `{"agent", "tool", "args"}` and
    /// optionally `roles`, `usage`, `anomaly` (`-` for stdin).
    file: PathBuf,
    /// Evaluate the policy files here instead of asking the sidecar.
    #[arg(long)]
    offline: bool,
    /// Print the explanation as JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    common: Common,
    #[command(flatten)]
    remote: Remote,
}

/// Runs the subcommand.
pub fn run(args: &ExplainArgs) -> anyhow::Result<ExitCode> {
    let text = read_input(Some(&args.file))?;
    let explanation = if args.offline {
        let cfg = args.common.config()?;
        let Some(snap) = load_or_report(&cfg.sources) else {
            return Ok(ExitCode::from(1));
        };
        let raw: RawExplain =
            serde_json::from_str(&text).map_err(|e| anyhow::anyhow!("invalid call file: {e}"))?;
        let (agent, call, signals) = raw
            .into_parts()
            .map_err(|e| anyhow::anyhow!("invalid call file: {e}"))?;
        serde_json::to_value(authz::explain(&snap, &agent, &call, &signals))?
    } else {
        let body: Value =
            serde_json::from_str(&text).map_err(|e| anyhow::anyhow!("invalid call file: {e}"))?;
        Client::new(&args.remote, Duration::from_secs(30)).post("/v1/explain", &body)?
    };
    if args.json {
        println!("{explanation:#}");
    } else {
        print!("{}", render(&explanation));
    }
    Ok(ExitCode::SUCCESS)
}

/// The explanation as text: the verdict, one line per policy, then who may approve.
fn render(e: &Value) -> String {
    // What the server sent is shown, minus control characters (no terminal escapes).
    let s = |v: &Value| -> String {
        v.as_str()
            .unwrap_or("-")
            .chars()
            .filter(|c| !c.is_control())
            .collect()
    };
    let list = |v: &Value| {
        let items: Vec<String> = v
            .as_array()
            .map(|a| a.iter().map(s).collect())
            .unwrap_or_default();
        if items.is_empty() {
            "none".to_owned()
        } else {
            items.join(", ")
        }
    };
    let mut out = format!(
        "{} calling `{}`: {} (stage {}) under {}\n",
        s(field(e, "agent")),
        s(field(e, "tool")),
        s(field(e, "decision")),
        s(field(e, "stage")),
        s(field(e, "policy_revision")),
    );
    out.push_str(&format!(
        "  deciding policies: {}\n",
        list(field(e, "reasons"))
    ));
    for advice in field(e, "errors").as_array().into_iter().flatten() {
        out.push_str(&format!(
            "  {}: {}\n",
            s(field(advice, "code")),
            s(field(advice, "message"))
        ));
    }
    let policies = field(e, "policies").as_array().cloned().unwrap_or_default();
    if policies.is_empty() {
        out.push_str("  no policy was evaluated: the call was decided before Cedar\n");
    } else {
        out.push_str(&format!(
            "policies of this tool's action ({}), as sent | if approved:\n",
            policies.len()
        ));
        for p in &policies {
            let effect = if field(p, "permit").as_bool() == Some(true) {
                "permit"
            } else {
                "forbid"
            };
            let (now, then) = (s(field(p, "as_is")), s(field(p, "if_approved")));
            let mark = if now == then {
                ""
            } else {
                "   <- approval changes this"
            };
            out.push_str(&format!(
                "  {effect} {:<40} {:<14} {:<14} {}{mark}\n",
                s(field(p, "id")),
                now,
                then,
                s(field(p, "file")),
            ));
            for err in field(p, "errors").as_array().into_iter().flatten() {
                out.push_str(&format!("      error: {}\n", s(err)));
            }
        }
    }
    let approval = field(e, "approval");
    if !approval.is_null() {
        out.push_str(&format!(
            "pending because of: {}\nmay approve: roles {}; humans {}\n",
            list(field(approval, "because")),
            list(field(approval, "roles")),
            list(field(approval, "humans")),
        ));
    }
    out
}
