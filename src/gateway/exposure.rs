//! Whether an MCP tool may be shown and called now: its upstream is up and lists it, and its
//! live descriptor still matches the reviewed pin (or a human approved the new one). The
//! decision path's `descriptor` stage and `tools/list` both ask here.

use super::Gateway;
use crate::authz::{Advice, Stage};
use crate::codes::Code;
use crate::tools::{McpBinding, Tool};
use crate::upstream::Live;

/// Whether an MCP tool can be shown and called now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exposure {
    /// Its live descriptor matches the reviewed one (or an approved new one).
    Ready,
    /// The upstream now offers another descriptor, not approved: hidden and denied.
    Changed {
        /// The live hash.
        offered: String,
    },
    /// The upstream is down, or no longer lists it.
    Unavailable(String),
}

/// Where `tool` (an MCP tool) stands now.
pub fn exposure(state: &Gateway, tool: &Tool, b: &McpBinding) -> Exposure {
    let Some(hub) = &state.upstreams else {
        return Exposure::Unavailable(format!(
            "this sidecar does not connect to the upstream `{}`",
            b.upstream
        ));
    };
    match hub.live(&b.upstream, &b.tool) {
        Live::Listed { pin } if pin == b.pin => Exposure::Ready,
        Live::Listed { pin } if state.admin.descriptors().approved(&tool.name, &b.pin, &pin) => {
            Exposure::Ready
        }
        Live::Listed { pin } => Exposure::Changed { offered: pin },
        Live::Missing => Exposure::Unavailable(format!(
            "the upstream `{}` no longer lists `{}`",
            b.upstream, b.tool
        )),
        Live::Unavailable(why) => Exposure::Unavailable(why),
        Live::Unknown => Exposure::Unavailable(format!(
            "no upstream `{}` is configured (`[[mcp.upstreams]]`)",
            b.upstream
        )),
    }
}

/// The deny of a call to a tool whose descriptor changed, if it did (the decision path's
/// `descriptor` stage).
pub(super) fn descriptor_stop(state: &Gateway, tool: Option<&Tool>) -> Option<(Stage, Advice)> {
    let tool = tool?;
    let b = tool.mcp.as_ref()?;
    match exposure(state, tool, b) {
        Exposure::Changed { offered } => Some((
            Stage::Descriptor,
            Advice::new(
                Code::DescriptorChanged,
                format!(
                    "the MCP upstream `{}` changed the descriptor of `{}` since it was reviewed ({} → {}); denied until a human approves it",
                    b.upstream,
                    b.tool,
                    short(&b.pin),
                    short(&offered)
                ),
                "do not retry; an operator reviews it (GET /v1/mcp/descriptors) and approves it, or runs `toolgate mcp sync`",
            ),
        )),
        _ => None,
    }
}

fn short(pin: &str) -> &str {
    pin.get(..19).unwrap_or(pin)
}
