//! What a conversation's tool output held, as the gates found it: the memory behind
//! `context.conversation` (kinds found, outputs with an injection finding and when the last
//! one came). Kept per conversation beside provenance's tokens, with the same bounds.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// The category name that marks an injection finding.
const INJECTION: &str = "injection";

/// What the gates found in a conversation's tool output, as remembered.
#[derive(Debug, Default, Clone)]
pub(super) struct Found {
    outputs: u64,
    kinds: BTreeSet<String>,
    injections: u64,
    injection_kinds: BTreeSet<String>,
    last_injection: Option<Instant>,
    /// Some outputs may be missing (read back after an unclean stop).
    partial: bool,
}

/// [`Found`] as kept across a restart ([`super::keep`]): times as Unix milliseconds.
#[derive(Debug, Default, Clone, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub(super) struct KeptFound {
    outputs: u64,
    kinds: BTreeSet<String>,
    injections: u64,
    injection_kinds: BTreeSet<String>,
    last_injection_ms: Option<u64>,
    partial: bool,
}

/// `context.conversation`: what the gates found in the tool output of a call's conversation
/// (results, runs, MCP results, the context and output gates), whatever each gate then did
/// with it. Fixtures and explanations spell it as JSON.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Seen {
    /// Toolgate holds all of this conversation: the call named one (`conv_id`), it is neither
    /// expired nor forgotten to make room, and none of its outputs can be missing (as they can
    /// be after an unclean stop). When false the counts are what toolgate holds (0 when
    /// nothing), so a policy that trusts a clean conversation must also require `known`.
    pub known: bool,
    /// Tool outputs screened in the conversation.
    pub outputs: u64,
    /// Every detector kind and category found in them.
    pub kinds: BTreeSet<String>,
    /// Outputs with at least one injection finding.
    pub injections: u64,
    /// The injection kinds found (`instruction-override`, `addressed-instruction`, …).
    pub injection_kinds: BTreeSet<String>,
    /// Whole seconds since the last output with an injection finding; absent when none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seconds_since_injection: Option<u64>,
}

impl Seen {
    /// Whether toolgate holds nothing of the conversation.
    pub fn is_unknown(&self) -> bool {
        *self == Seen::default()
    }
}

impl Found {
    /// Adds what a gate found in one output (each finding's kind and category name).
    pub(super) fn add(&mut self, found: &[(&'static str, &'static str)], now: Instant) {
        self.outputs += 1;
        for name in found.iter().flat_map(|(kind, category)| [*kind, *category]) {
            if !self.kinds.contains(name) {
                self.kinds.insert(name.to_owned());
            }
        }
        let injected = found.iter().filter(|(_, c)| *c == INJECTION);
        if injected.clone().next().is_some() {
            self.injections += 1;
            self.last_injection = Some(now);
            for (kind, _) in injected {
                if !self.injection_kinds.contains(*kind) {
                    self.injection_kinds.insert((*kind).to_owned());
                }
            }
        }
    }

    /// Marks it incomplete: outputs may be missing.
    pub(super) fn mark_incomplete(&mut self) {
        self.partial = true;
    }

    /// As kept: `now` is `wall` (Unix ms).
    pub(super) fn kept(&self, now: Instant, wall: u64) -> KeptFound {
        KeptFound {
            outputs: self.outputs,
            kinds: self.kinds.clone(),
            injections: self.injections,
            injection_kinds: self.injection_kinds.clone(),
            last_injection_ms: self.last_injection.map(|t| {
                let ago =
                    u64::try_from(now.saturating_duration_since(t).as_millis()).unwrap_or(u64::MAX);
                wall.saturating_sub(ago)
            }),
            partial: self.partial,
        }
    }

    /// Read back from `kept`: `now` is `wall` (Unix ms).
    pub(super) fn restored(kept: KeptFound, now: Instant, wall: u64) -> Found {
        Found {
            outputs: kept.outputs,
            kinds: kept.kinds,
            injections: kept.injections,
            injection_kinds: kept.injection_kinds,
            last_injection: kept.last_injection_ms.map(|ms| {
                now.checked_sub(Duration::from_millis(wall.saturating_sub(ms)))
                    .unwrap_or(now)
            }),
            partial: kept.partial,
        }
    }

    /// What policies see of it, `now`.
    pub(super) fn seen(&self, now: Instant) -> Seen {
        Seen {
            known: !self.partial,
            outputs: self.outputs,
            kinds: self.kinds.clone(),
            injections: self.injections,
            injection_kinds: self.injection_kinds.clone(),
            seconds_since_injection: self
                .last_injection
                .map(|t| now.saturating_duration_since(t).as_secs()),
        }
    }
}
