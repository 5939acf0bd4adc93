//! `[redaction]` and `[gates.<gate>]` → the detectors' settings and each gate's rules. Names in
//! the rule lists are checked against the detectors when `serve` builds them.

use serde::Deserialize;

use crate::redact::{
    CustomDetector, Gate, GateRules, KnownSecrets, MAX_DETECTORS, MAX_KNOWN_SECRET,
    MIN_KNOWN_SECRET, PreviewLimits, RawDetector, RedactConfig, normalize_key,
};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRedaction {
    ip_addresses: Option<bool>,
    entropy: Option<bool>,
    entropy_min_length: Option<usize>,
    entropy_bits: Option<f64>,
    known_secrets_env: Option<Vec<String>>,
    pub(super) known_secrets_files: Option<Vec<std::path::PathBuf>>,
    sensitive_keys: Option<Vec<String>>,
    sensitive_key_suffixes: Option<Vec<String>>,
    preview_bytes: Option<usize>,
    preview_string_chars: Option<usize>,
    detectors: Option<Vec<RawDetector>>,
}

/// The configured detectors, each checked, names unique and apart from the built-in kinds.
fn detectors(raw: &RawRedaction) -> Result<Vec<CustomDetector>, (String, &'static str)> {
    let list = raw.detectors.as_deref().unwrap_or_default();
    if list.len() > MAX_DETECTORS {
        return Err((
            format!(
                "`redaction.detectors` has {} entries; at most {MAX_DETECTORS}",
                list.len()
            ),
            "merge detectors of one vendor into one regex with alternatives",
        ));
    }
    let mut taken: std::collections::BTreeSet<String> = crate::redact::known_names()
        .into_iter()
        .map(str::to_owned)
        .collect();
    let mut out = Vec::with_capacity(list.len());
    for (i, d) in list.iter().enumerate() {
        let parsed = CustomDetector::parse(d.clone(), i, &taken)?;
        taken.insert(parsed.name.to_owned());
        out.push(parsed);
    }
    Ok(out)
}

/// A list of JSON key names or endings, normalized; an entry that normalizes to nothing is
/// an error.
fn keys(list: Option<&Vec<String>>, what: &str) -> Result<Vec<String>, (String, &'static str)> {
    list.into_iter()
        .flatten()
        .map(|k| {
            let n = normalize_key(k);
            if n.is_empty() {
                Err((
                    format!("`redaction.{what}` has the entry `{k}`, which is empty once `_`, `-`, `.` and spaces are dropped"),
                    "keys match case- and separator-insensitively: `member_number` also matches `MemberNumber`",
                ))
            } else {
                Ok(n)
            }
        })
        .collect()
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawGates {
    input: Option<RawGate>,
    context: Option<RawGate>,
    tool_call: Option<RawGate>,
    output: Option<RawGate>,
    stream: Option<RawGate>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGate {
    block: Option<Vec<String>>,
    mask: Option<Vec<String>>,
    warn: Option<Vec<String>>,
    apply_mask: Option<bool>,
}

/// The values of the environment variables and files listed as known secrets. Each must be
/// set (or readable) and at least 8 bytes long; messages name the variable or file, never a
/// value.
fn known_secrets(
    raw: &RawRedaction,
    base: &std::path::Path,
) -> Result<KnownSecrets, (String, &'static str)> {
    let mut known = KnownSecrets::default();
    let short = |what: String, len: usize| {
        (
            format!(
                "{what} is {len} bytes; known secrets must be {MIN_KNOWN_SECRET} to {MAX_KNOWN_SECRET} bytes"
            ),
            "shorter values would match ordinary text, longer ones are not single secrets; remove it from the list",
        )
    };
    for name in raw.known_secrets_env.iter().flatten() {
        let value = std::env::var(name).map_err(|_| {
            (
                format!("`redaction.known_secrets_env` lists `{name}`, which is not set (or not UTF-8) in the sidecar's environment"),
                "set the variable where the sidecar runs, or remove it from the list",
            )
        })?;
        known
            .add(&value)
            .map_err(|len| short(format!("the value of `{name}`"), len))?;
    }
    for file in raw.known_secrets_files.iter().flatten() {
        let path = base.join(file);
        let value = std::fs::read_to_string(&path).map_err(|e| {
            (
                format!(
                    "`redaction.known_secrets_files`: cannot read {}: {e}",
                    path.display()
                ),
                "list files the sidecar can read (UTF-8 text); relative paths resolve against the config file",
            )
        })?;
        known
            .add(&value)
            .map_err(|len| short(format!("the content of {}", path.display()), len))?;
    }
    Ok(known)
}

/// The detectors' settings, every one checked.
pub(super) fn redaction(
    raw: &RawRedaction,
    base: &std::path::Path,
) -> Result<RedactConfig, (String, &'static str)> {
    let d = RedactConfig::default();
    let (min_len, bits) = d.entropy.unwrap_or((24, 4.0));
    let min_len = raw.entropy_min_length.unwrap_or(min_len);
    let bits = raw.entropy_bits.unwrap_or(bits);
    if !(8..=1024).contains(&min_len) {
        return Err((
            format!("`redaction.entropy_min_length` = {min_len} must be 8 to 1024"),
            "24 suits API keys; shorter lengths flag ordinary identifiers",
        ));
    }
    if !(bits.is_finite() && (1.0..=8.0).contains(&bits)) {
        return Err((
            format!("`redaction.entropy_bits` = {bits} must be 1.0 to 8.0 (bits per character)"),
            "4.0 suits random base64-like tokens",
        ));
    }
    let preview = PreviewLimits {
        bytes: raw.preview_bytes.unwrap_or(d.preview.bytes),
        string_chars: raw.preview_string_chars.unwrap_or(d.preview.string_chars),
    };
    if !(64..=65536).contains(&preview.bytes) {
        return Err((
            format!(
                "`redaction.preview_bytes` = {} must be 64 to 65536",
                preview.bytes
            ),
            "the preview is stored in every decision's audit record; 512 is the default",
        ));
    }
    if !(8..=preview.bytes).contains(&preview.string_chars) {
        return Err((
            format!(
                "`redaction.preview_string_chars` = {} must be 8 to `preview_bytes` ({})",
                preview.string_chars, preview.bytes
            ),
            "200 is the default",
        ));
    }
    let config = RedactConfig {
        ip_addresses: raw.ip_addresses.unwrap_or(d.ip_addresses),
        entropy: (raw.entropy != Some(false)).then_some((min_len, bits)),
        known: known_secrets(raw, base)?,
        detectors: detectors(raw)?,
        sensitive_keys: keys(raw.sensitive_keys.as_ref(), "sensitive_keys")?,
        sensitive_key_suffixes: keys(
            raw.sensitive_key_suffixes.as_ref(),
            "sensitive_key_suffixes",
        )?,
        preview,
    };
    // Built once here as `serve` will: detectors that compile one by one may still be too
    // many together.
    if !config.detectors.is_empty() {
        crate::redact::Redactor::new(&config).map_err(|e| {
            (
                format!("`redaction.detectors`: {e}"),
                "fewer or simpler detectors: merge one vendor's formats into one regex",
            )
        })?;
    }
    Ok(config)
}

/// Each gate's rules: a list left out keeps the gate's default list.
pub(super) fn gate_rules(raw: RawGates) -> Result<Vec<(Gate, GateRules)>, (String, &'static str)> {
    let all = [
        (Gate::Input, raw.input),
        (Gate::Context, raw.context),
        (Gate::ToolCall, raw.tool_call),
        (Gate::Output, raw.output),
        (Gate::Stream, raw.stream),
    ];
    all.into_iter()
        .map(|(gate, raw)| {
            let d = GateRules::default_for(gate);
            let raw = raw.unwrap_or_default();
            if raw.apply_mask.is_some() && gate != Gate::ToolCall {
                return Err((
                    format!(
                        "`gates.{}.apply_mask` is not a setting of this gate",
                        gate.as_str()
                    ),
                    "only `[gates.tool_call]` has `apply_mask` (run calls with masked arguments)",
                ));
            }
            let rules = GateRules {
                block: raw.block.unwrap_or(d.block),
                mask: raw.mask.unwrap_or(d.mask),
                warn: raw.warn.unwrap_or(d.warn),
                apply_mask: raw.apply_mask.unwrap_or(d.apply_mask),
            };
            Ok((gate, rules))
        })
        .collect()
}
