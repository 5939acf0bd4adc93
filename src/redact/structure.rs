//! Passes that read a text's structure rather than one pattern: a Markdown table's secret
//! columns, PEM blocks paired with their END lines, and the spans of public key material and
//! committed ciphertext.

use regex::bytes::Regex;

use super::{Finding, builder, validate};

/// The cells of a Markdown table's secret columns (a header named `password`, `pwd`, `pass`,
/// `secret`, `token`, `api key`, …): runbooks and wikis keep credentials in tables, where no
/// label sits next to the value.
pub(super) fn table_secrets(text: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    if !text.contains('|') {
        return out;
    }
    // The secret columns of the table being read (`None`: not in a table).
    let mut columns: Option<Vec<usize>> = None;
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let line_start = offset;
        offset += line.len();
        let row = line.trim_end_matches(['\n', '\r']);
        let lead = row.len() - row.trim_start().len();
        if !row.trim_start().starts_with('|') {
            columns = None;
            continue;
        }
        // Cells between the pipes, with their byte ranges in the line.
        let mut cells: Vec<(usize, usize)> = Vec::new();
        let mut at = lead + 1;
        while let Some(next) = row.get(at..).and_then(|r| r.find('|')) {
            cells.push((at, at + next));
            at += next + 1;
        }
        let cell = |(a, b): (usize, usize)| row.get(a..b).unwrap_or("").trim();
        if cells
            .iter()
            .all(|c| cell(*c).bytes().all(|b| matches!(b, b'-' | b':' | b' ')))
        {
            continue;
        }
        match &columns {
            None => {
                let secret: Vec<usize> = cells
                    .iter()
                    .enumerate()
                    .filter(|(_, c)| validate::secret_header(cell(**c)))
                    .map(|(i, _)| i)
                    .collect();
                columns = Some(secret);
            }
            Some(secret) => {
                for &i in secret {
                    let Some(&(a, b)) = cells.get(i) else {
                        continue;
                    };
                    let raw = row.get(a..b).unwrap_or("");
                    let value = raw.trim();
                    let Some(rel) = raw.find(value) else {
                        continue;
                    };
                    let value = value.trim_matches('`');
                    if value.is_empty()
                        || !validate::label_value(value)
                        || validate::placeholder(value)
                    {
                        continue;
                    }
                    let start = line_start
                        + a
                        + rel
                        + raw.get(rel..).map_or(0, |r| r.find(value).unwrap_or(0));
                    out.push((start, start + value.len()));
                }
            }
        }
    }
    out
}

/// Spans of public key material and committed ciphertext, where high-entropy tokens are not
/// secrets: certificates, public keys, PGP public blocks, signatures and messages, SSH public
/// keys, SOPS values and Ansible Vault blocks. Found only when a marker is in the text.
pub(super) fn public_spans(text: &str) -> Vec<(usize, usize)> {
    static PUBLIC: std::sync::OnceLock<Option<Regex>> = std::sync::OnceLock::new();
    let markers = ["-----BEGIN ", "ssh-", "ecdsa-", "ENC[", "$ANSIBLE_VAULT"];
    if !markers.iter().any(|m| text.contains(m)) {
        return Vec::new();
    }
    let Some(re) = PUBLIC.get_or_init(|| {
        builder(
            r"-----BEGIN (?:CERTIFICATE|TRUSTED CERTIFICATE|PUBLIC KEY|RSA PUBLIC KEY|PGP PUBLIC KEY BLOCK|PGP SIGNATURE|PGP MESSAGE|SIGNED MESSAGE|CERTIFICATE REQUEST|NEW CERTIFICATE REQUEST|X509 CRL|SSH2 PUBLIC KEY)-----[A-Za-z0-9+/=\s\\:,\-]*|\b(?:ssh-(?:rsa|dss|ed25519)|ecdsa-sha2-nistp[0-9]{3}|sk-ssh-ed25519@openssh\.com|sk-ecdsa-sha2-nistp256@openssh\.com)\s+AAAA[A-Za-z0-9+/]+=*|ENC\[[A-Z0-9_]+,data:[^\]\n]*\]|\$ANSIBLE_VAULT;[^\n]*(?:\n[ \t>|+\-]*[0-9a-f]+)+",
        )
        .build()
        .ok()
    }) else {
        return Vec::new();
    };
    let markers = Markers::new(text);
    re.find_iter(text.as_bytes())
        .map(|m| {
            let end = if m.as_bytes().starts_with(b"-----BEGIN ") {
                markers.block_end(text, m.start()).unwrap_or(m.end())
            } else {
                m.end()
            };
            (m.start(), end)
        })
        .collect()
}

/// Most bytes between a PEM header and its END line for the two to make one block.
const MAX_BLOCK: usize = 64 * 1024;

/// Where every `-----BEGIN ` and `-----END ` is in a text (one pass each), to pair a PEM
/// header with its END line by binary search: linear in the text however many headers it
/// holds (a pattern searching ahead for the END line would rescan the rest of the text from
/// every header).
struct Markers {
    begins: Vec<usize>,
    ends: Vec<usize>,
}

impl Markers {
    fn new(text: &str) -> Markers {
        Markers {
            begins: text.match_indices("-----BEGIN ").map(|(i, _)| i).collect(),
            ends: text.match_indices("-----END ").map(|(i, _)| i).collect(),
        }
    }

    /// The end (past its closing `-----`) of the END line of the block whose header starts at
    /// `begin`: the first END after it, within [`MAX_BLOCK`] bytes, with no other header
    /// between.
    fn block_end(&self, text: &str, begin: usize) -> Option<usize> {
        let after = begin + 1;
        let end = *self.ends.get(self.ends.partition_point(|&e| e < after))?;
        let next_begin = self.begins.get(self.begins.partition_point(|&b| b < after));
        if end - begin > MAX_BLOCK || next_begin.is_some_and(|&b| b < end) {
            return None;
        }
        let label = end + "-----END ".len();
        let tail = text.as_bytes().get(label..)?;
        let close = tail
            .get(..80.min(tail.len()))?
            .windows(5)
            .position(|w| w == b"-----")?;
        Some(label + close + "-----".len())
    }
}

/// Private-key findings widened to their block's END line, whatever sits between the lines:
/// code string concatenation (`"…\n" +`), log prefixes on every line, quotes.
pub(super) fn extend_key_blocks(text: &str, found: &mut [(usize, Finding)]) {
    let is_block =
        |f: &Finding| f.kind.starts_with("private-key") && f.kind != "private-key-base64";
    if !found.iter().any(|(_, f)| is_block(f)) {
        return;
    }
    let markers = Markers::new(text);
    for (_, f) in found.iter_mut().filter(|(_, f)| is_block(f)) {
        if let Some(end) = markers.block_end(text, f.start) {
            f.end = f.end.max(end);
        }
    }
}

/// The end of a labelled value that its pattern cut short at code punctuation, which a
/// password may hold (`p@ss;word`, `Zx9(kL2)mQ7`, `'Zx9"kL2'`): a quoted value runs to its
/// closing quote on the same line (an escaped quote, `\"`, does not close it); an unquoted
/// one that stopped at `,;()[]{}` or a backslash runs on to the next whitespace, quote or
/// `<>`, but not over a `,` or `;` that ends it (followed by whitespace or the end) nor a
/// closing bracket it did not open. At most 256 bytes; `text` has escaped whitespace (`\n`)
/// as spaces.
pub(super) fn widen_value(text: &[u8], start: usize, end: usize) -> usize {
    const MAX: usize = 256;
    let at = |i: usize| text.get(i).copied();
    let before = start.checked_sub(1).and_then(at);
    let escaped_open = start.checked_sub(2).and_then(at) == Some(b'\\');
    let mut e = end;
    match before {
        Some(q @ (b'"' | b'\'')) => {
            while let Some(c) = at(e) {
                if c == b'\n' || c == b'\r' || e - start > MAX {
                    return end;
                }
                if c == b'\\' && at(e + 1) == Some(q) {
                    if escaped_open {
                        break;
                    }
                    e += 2;
                    continue;
                }
                // The value's pattern stopped inside an escaped quote (`Zx9\` + `"`).
                if c == q && e > start && at(e - 1) == Some(b'\\') && !escaped_open {
                    e += 1;
                    continue;
                }
                if c == q {
                    break;
                }
                e += 1;
            }
            if at(e) == Some(q) || at(e) == Some(b'\\') {
                e
            } else {
                end
            }
        }
        // Only where the pattern stopped at punctuation a value may hold: anything else (the
        // `@` after a URL's password) is where the pattern meant the value to end.
        _ if !matches!(
            at(end),
            Some(b',' | b';' | b'(' | b')' | b'[' | b']' | b'{' | b'}' | b'\\')
        ) =>
        {
            end
        }
        _ => {
            let mut depth = 0usize;
            while let Some(c) = at(e) {
                let next_ends = at(e + 1).is_none_or(|n| n.is_ascii_whitespace());
                match c {
                    _ if c.is_ascii_whitespace() => break,
                    b'"' | b'\'' | b'<' | b'>' => break,
                    b',' | b';' if next_ends => break,
                    b'\\' if matches!(at(e + 1), Some(b'"' | b'\'')) => break,
                    b'(' | b'[' | b'{' => depth += 1,
                    b')' | b']' | b'}' => match depth.checked_sub(1) {
                        Some(d) => depth = d,
                        None => break,
                    },
                    _ => {}
                }
                if e - start >= MAX {
                    return end;
                }
                e += 1;
            }
            e
        }
    }
}
