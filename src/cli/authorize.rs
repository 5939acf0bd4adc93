//! `toolgate authorize`: one decision offline, for policy debugging. Runs the same loader and
//! decision function as the server; prints the decision as JSON.

use std::io::Read as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use serde_json::Value;

use super::{Common, load_or_report};
use crate::authz::{self, Principal, PrincipalKind};
use crate::gateway::RawCall;

/// Arguments of `toolgate authorize`.
#[derive(Debug, Args)]
pub struct AuthorizeArgs {
    #[command(flatten)]
    common: Common,
    /// The calling agent's entity id (offline, the principal is named here; the server takes it
    /// only from the credential).
    #[arg(long, required_unless_present = "approver")]
    agent: Option<String>,
    /// Roles as a verified token would assert them (comma-separated); default: the entities file.
    #[arg(long, value_delimiter = ',')]
    roles: Option<Vec<String>>,
    /// Instead of a call: may this human approve `--tool` for `--requester`?
    #[arg(long, requires_all = ["requester", "tool"])]
    approver: Option<String>,
    /// With `--approver`: the agent whose call is pending.
    #[arg(long)]
    requester: Option<String>,
    /// With `--approver`: the tool of the pending call.
    #[arg(long)]
    tool: Option<String>,
    /// The call as sent to `POST /v1/authorize` (`-` for stdin).
    #[arg(required_unless_present = "approver")]
    file: Option<PathBuf>,
}

/// Runs the subcommand.
pub fn run(args: &AuthorizeArgs) -> anyhow::Result<ExitCode> {
    let cfg = args.common.config()?;
    let Some(snap) = load_or_report(&cfg.sources) else {
        return Ok(ExitCode::from(1));
    };
    let verdict = if let (Some(approver), Some(requester), Some(tool)) =
        (&args.approver, &args.requester, &args.tool)
    {
        let approver = Principal::new(PrincipalKind::Human, approver.as_str());
        authz::may_approve(
            &snap,
            &approver,
            tool,
            &Principal::new(PrincipalKind::Agent, requester.as_str()),
        )
    } else {
        let agent = args.agent.as_deref().unwrap_or_default();
        let mut who = Principal::new(PrincipalKind::Agent, agent);
        if let Some(roles) = &args.roles {
            who = who.with_token_roles(roles.clone());
        }
        let text = read_input(args.file.as_ref())?;
        // The server's own body type and envelope checks.
        let raw: RawCall =
            serde_json::from_str(&text).map_err(|e| anyhow::anyhow!("invalid call file: {e}"))?;
        let (call, approval_id) = raw
            .into_call()
            .map_err(|e| anyhow::anyhow!("invalid call file: {e}"))?;
        if approval_id.is_some() {
            anyhow::bail!(
                "`approval_id` needs the running sidecar's approval store; send the call to POST /v1/authorize"
            );
        }
        authz::decide(&snap, &who, &call)
    };
    let mut out = serde_json::to_value(&verdict)?;
    if let Some(obj) = out.as_object_mut() {
        obj.insert(
            "policy_revision".to_owned(),
            Value::String(snap.revision.clone()),
        );
    }
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(ExitCode::SUCCESS)
}

pub(super) fn read_input(file: Option<&PathBuf>) -> anyhow::Result<String> {
    match file {
        Some(p) if p.as_os_str() != "-" => std::fs::read_to_string(p)
            .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", p.display())),
        _ => {
            let mut s = String::new();
            std::io::stdin().read_to_string(&mut s)?;
            Ok(s)
        }
    }
}
