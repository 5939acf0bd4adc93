//! What a conversation's tool output held, as the gates found it: the memory behind
//! `context.conversation` (kinds found, outputs with an injection finding and when the last
//! one came). Kept per conversation beside provenance's tokens, with the same bounds.

use std::time::Instant;

/// The category name that marks an injection finding.
const INJECTION: &str = "injection";

/// What the gates found in a conversation's tool output, as remembered.
#[derive(Debug, Default, Clone)]
pub(super) struct Found {
    outputs: u64,
    kinds: std::collections::BTreeSet<&'static str>,
    injections: u64,
    injection_kinds: std::collections::BTreeSet<&'static str>,
    last_injection: Option<Instant>,
}

/// `context.conversation`: what the gates found in the tool output of a call's conversation
/// (results, runs, MCP results, the context and output gates), whatever each gate then did
/// with it. Fixtures and explanations spell it as JSON.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Seen {
    /// Toolgate holds this conversation: the call named one (`conv_id`) and it is neither
    /// expired, forgotten to make room, nor from before a restart. When false every count is
    /// 0, so a policy that trusts a clean conversation must also require `known`.
    pub known: bool,
    /// Tool outputs screened in the conversation.
    pub outputs: u64,
    /// Every detector kind and category found in them.
    pub kinds: std::collections::BTreeSet<String>,
    /// Outputs with at least one injection finding.
    pub injections: u64,
    /// The injection kinds found (`instruction-override`, `addressed-instruction`, …).
    pub injection_kinds: std::collections::BTreeSet<String>,
    /// Whole seconds since the last output with an injection finding; absent when none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seconds_since_injection: Option<u64>,
}

impl Seen {
    /// Whether toolgate holds nothing of the conversation.
    pub fn is_unknown(&self) -> bool {
        !self.known
    }
}

impl Found {
    /// Adds what a gate found in one output (each finding's kind and category name).
    pub(super) fn add(&mut self, found: &[(&'static str, &'static str)], now: Instant) {
        self.outputs += 1;
        self.kinds
            .extend(found.iter().flat_map(|(kind, category)| [*kind, *category]));
        let injected = found.iter().filter(|(_, c)| *c == INJECTION);
        if injected.clone().next().is_some() {
            self.injections += 1;
            self.last_injection = Some(now);
            self.injection_kinds.extend(injected.map(|(kind, _)| *kind));
        }
    }

    /// What policies see of it, `now`.
    pub(super) fn seen(&self, now: Instant) -> Seen {
        let own = |s: &std::collections::BTreeSet<&'static str>| {
            s.iter().map(|k| (*k).to_owned()).collect()
        };
        Seen {
            known: true,
            outputs: self.outputs,
            kinds: own(&self.kinds),
            injections: self.injections,
            injection_kinds: own(&self.injection_kinds),
            seconds_since_injection: self
                .last_injection
                .map(|t| now.saturating_duration_since(t).as_secs()),
        }
    }
}
