//! Resolving a call's path arguments once, before the decision, through the jail execution
//! opens with: what `context.paths.<arg>` reports to policies (the path each argument leads
//! to, and whether execution would refuse it), and the check an MCP call's paths pass again
//! before they are forwarded.
//!
//! Owns: which open a tool's paths are resolved for (the writing file tools write; every
//! other tool reads, runs or forwards) and turning jail errors into refusals. Does not own
//! the checks themselves (`jail`) or how policies see the result (`tools::paths_to_cedar`).

use serde_json::Value;

use super::Gateway;
use crate::jail::{Intent, Jail, JailError};
use crate::tools::{Builtin, Resolution, Tool};

/// The open a tool's path arguments are checked for.
fn intent(tool: &Tool) -> Intent {
    match tool.builtin {
        Some(Builtin::WriteFile | Builtin::EditFile | Builtin::DeleteFile) => Intent::Write,
        _ => Intent::Read,
    }
}

/// Where each path argument of `args` leads, or why execution would refuse it; `None` when
/// the tool has no path arguments or the sidecar has no service root to resolve against.
/// A path that does not exist yet resolves through its directory; one whose directory does
/// not exist either resolves as asked (the tool answers that it is not there). Any other
/// file system error is a refusal: a decision never allows what could not be looked at.
pub(super) fn resolve(state: &Gateway, tool: &Tool, args: &Value) -> Option<Vec<Resolution>> {
    if tool.path_args.is_empty() {
        return None;
    }
    let jail = state.exec.as_ref()?.jail();
    let intent = intent(tool);
    Some(
        tool.path_args
            .iter()
            .filter_map(|arg| {
                let raw = args.get(arg.as_str())?.as_str()?;
                Some(resolution(jail, arg, raw, intent))
            })
            .collect(),
    )
}

fn resolution(jail: &Jail, arg: &str, raw: &str, intent: Intent) -> Resolution {
    let asked = crate::paths::normalize_path(raw).unwrap_or_else(|_| raw.to_owned());
    let outcome = match jail.resolve(raw, intent) {
        Ok(target) => Ok(target),
        // What the tool itself answers (not there, not a file, not a directory): the path
        // stays as asked, and nothing is refused for it.
        Err(JailError::NotFound | JailError::NotAFile | JailError::NotADirectory) => {
            Ok(asked.clone())
        }
        Err(e) => Err(e.to_string()),
    };
    Resolution {
        arg: arg.to_owned(),
        asked,
        outcome,
    }
}

/// `args` as an MCP upstream receives them: each path argument checked by the jail again (the
/// decision may be older than the file system: an approval waits) and sent normalized, the
/// form the decision judged (`link/..` is the root to the decision, but the link target's
/// parent to a kernel). The first refusal is `(argument, why)`.
pub(super) fn for_upstream(
    state: &Gateway,
    tool: &Tool,
    mut args: Value,
) -> Result<Value, (String, String)> {
    if let Some(found) = resolve(state, tool, &args) {
        if let Some(r) = found.iter().find(|r| r.outcome.is_err()) {
            let why = r.outcome.clone().err().unwrap_or_default();
            return Err((r.arg.clone(), why));
        }
        for r in found {
            if let Some(slot) = args.get_mut(r.arg.as_str()) {
                *slot = Value::String(r.asked);
            }
        }
    }
    Ok(args)
}
