//! `[provenance]`: the bounds of the per-conversation memory behind `context.provenance`,
//! checked once into [`crate::provenance::Settings`].

use serde::Deserialize;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawProvenance {
    ttl_secs: Option<u64>,
    max_conversations: Option<usize>,
    max_tokens: Option<usize>,
    max_total_tokens: Option<usize>,
    min_chars: Option<usize>,
    input: Option<String>,
    persist: Option<bool>,
}

/// `[provenance]` → the memory's bounds.
pub(super) fn settings(
    raw: &RawProvenance,
) -> Result<crate::provenance::Settings, Vec<(String, String)>> {
    let d = crate::provenance::Settings::default();
    let mut out = d;
    let mut found = Vec::new();
    let mut positive = |name: &str, v: Option<u64>, max: u64| -> Option<u64> {
        match v {
            Some(0) => {
                found.push((
                    format!("`provenance.{name}` must be at least 1"),
                    format!("omit it for the default, or give 1 to {max}"),
                ));
                None
            }
            Some(n) if n > max => {
                found.push((
                    format!("`provenance.{name}` is {n}, more than {max}"),
                    format!("give 1 to {max}"),
                ));
                None
            }
            other => other,
        }
    };
    let as_u64 = |v: Option<usize>| v.map(|n| u64::try_from(n).unwrap_or(u64::MAX));
    if let Some(t) = positive("ttl_secs", raw.ttl_secs, 7 * 86_400) {
        out.ttl = std::time::Duration::from_secs(t);
    }
    if let Some(n) = positive(
        "max_conversations",
        as_u64(raw.max_conversations),
        1_000_000,
    ) {
        out.max_conversations = usize::try_from(n).unwrap_or(d.max_conversations);
    }
    if let Some(n) = positive("max_tokens", as_u64(raw.max_tokens), 10_000_000) {
        out.max_tokens = usize::try_from(n).unwrap_or(d.max_tokens);
    }
    if let Some(n) = positive(
        "max_total_tokens",
        as_u64(raw.max_total_tokens),
        1_000_000_000,
    ) {
        out.max_total_tokens = usize::try_from(n).unwrap_or(d.max_total_tokens);
    }
    if let Some(n) = positive("min_chars", as_u64(raw.min_chars), 64) {
        out.min_chars = usize::try_from(n).unwrap_or(d.min_chars);
    }
    if let Some(p) = raw.persist {
        out.persist = p;
    }
    match raw.input.as_deref() {
        None | Some("as_said") => {}
        Some("as_screened") => out.input = crate::provenance::InputLearning::AsScreened,
        Some(other) => found.push((
            format!("`provenance.input` is `{other}`"),
            "give `as_said` (learn the user's words as said, the default) or `as_screened` (as the input gate answered them)".to_owned(),
        )),
    }
    if found.is_empty() {
        Ok(out)
    } else {
        Err(found)
    }
}
