//! The high-entropy backstop: runs of a token's own alphabet that no named detector claimed,
//! random enough to be a credential, and not one of the random-looking things that are not
//! (paths, URLs, placeholders, committed ciphertext, public key material, base64 of text).

use super::{Category, Finding, structure, validate};

/// Key-like bytes, by value: this test runs on every byte of every text.
#[allow(clippy::indexing_slicing, reason = "a u8 indexes a 256-entry table")]
static KEY: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0u8;
    loop {
        table[b as usize] = b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'_' | b'-');
        if b == u8::MAX {
            break table;
        }
        b += 1;
    }
};

/// Runs of key-like characters (`[A-Za-z0-9+/_-]`), joined across a `.` or `|` that another
/// key character follows, a `:` between two non-digits, and `%XX` escapes (a token's own alphabet: dotted
/// and URL-encoded tokens), at least 16 long, each with up to two `=` after it: the
/// candidates for high-entropy tokens. A byte loop: this pass ran at a third of a scan's cost
/// as a regex.
pub(super) fn tokens(bytes: &[u8]) -> impl Iterator<Item = (usize, usize)> + '_ {
    let key = |b: u8| KEY.get(usize::from(b)).copied().unwrap_or(false);
    let hex = |i: usize| bytes.get(i).is_some_and(u8::is_ascii_hexdigit);
    let mut i = 0;
    std::iter::from_fn(move || {
        while i < bytes.len() {
            while bytes.get(i).is_some_and(|&b| !key(b)) {
                i += 1;
            }
            let start = i;
            loop {
                while bytes.get(i).is_some_and(|&b| key(b)) {
                    i += 1;
                }
                match bytes.get(i) {
                    Some(b'.' | b'|') if bytes.get(i + 1).is_some_and(|&b| key(b)) => {
                        i += 1;
                    }
                    // Not `file.rs:12:` or `10:30`: a colon between two non-digits.
                    Some(b':')
                        if bytes
                            .get(i + 1)
                            .is_some_and(|&b| key(b) && !b.is_ascii_digit() && b != b'/')
                            && i > start
                            && bytes.get(i - 1).is_some_and(|b| !b.is_ascii_digit()) =>
                    {
                        i += 1;
                    }
                    Some(b'%') if i > start && hex(i + 1) && hex(i + 2) => i += 3,
                    _ => break,
                }
            }
            if i - start >= 16 {
                let mut end = i;
                while end - i < 2 && bytes.get(end) == Some(&b'=') {
                    end += 1;
                }
                i = end;
                return Some((start, end));
            }
        }
        None
    })
}

/// Adds high-entropy tokens that no finding covers.
pub(super) fn high_entropy(text: &str, min_len: usize, bits: f64, out: &mut Vec<Finding>) {
    let bytes = text.as_bytes();
    let mut extra = Vec::new();
    let mut next = 0;
    let public = structure::public_spans(text);
    for (start, end) in tokens(bytes) {
        let Some(token) = text.get(start..end) else {
            continue;
        };
        if token.len() < min_len || token.len() > 1024 {
            continue;
        }
        // Data URIs and integrity hashes (`sha512-…`, Go's `h1:…`) are not secrets.
        let before = text.get(start.saturating_sub(8)..start).unwrap_or("");
        let digest = [
            "sha512-", "sha384-", "sha256-", "sha1-", "h1:", "sha256:", "sha512:", "sha1:", "md5:",
        ]
        .iter()
        .any(|p| token.starts_with(p));
        if before.ends_with("base64,") || before.ends_with("h1:") || digest {
            continue;
        }
        let has = |f: fn(&u8) -> bool| token.as_bytes().iter().any(f);
        let digits = token.bytes().filter(u8::is_ascii_digit).count();
        let hex_only = token.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-');
        if hex_only || !has(u8::is_ascii_uppercase) || !has(u8::is_ascii_lowercase) || digits < 2 {
            continue;
        }
        // `out` is sorted and tokens come in order: skip the findings that end before
        // this token, then look at the next one only.
        while out.get(next).is_some_and(|f| f.end <= start) {
            next += 1;
        }
        if out.get(next).is_some_and(|f| f.start < end) {
            continue;
        }
        // Random tokens switch between upper, lower and digits about every other
        // character; identifiers (`AbstractProxyFactoryBean2`) do so once per word and are
        // mostly runs of lowercase letters, or words with a capital each
        // (`MyVeryLongName2Version3` switches often, but is still words).
        let h = validate::entropy(token);
        let shaped = (validate::class_switches(token) >= 0.42 || !validate::wordy(token))
            && !validate::identifier_like(token)
            && !validate::dotted_name(token);
        if h < bits || !shaped {
            continue;
        }
        // Checked last, for the few tokens that pass the cheap tests. Not secrets: URLs, file paths, placeholders, ciphertext made to be committed
        // (SOPS `ENC[…]`, Vault transit `vault:v1:…`, SealedSecrets' `AgB…`), public
        // identifiers (Stripe's publishable keys and object ids), base64 of text, public
        // keys and certificates in DER without their armour, and anything inside public key
        // material (certificates, public keys, signatures).
        let excluded = token.contains("://")
            || validate::path_like(token)
            || before.ends_with("data:")
            || validate::placeholder(token)
            || validate::ciphertext(token)
            || validate::public_id(token)
            || validate::public_der(token)
            || text
                .get(start.saturating_sub(12)..start)
                .is_some_and(|b| b.contains("vault:v"))
            || validate::encoded_text(token)
            || public
                .get(public.partition_point(|(_, b)| *b < end))
                .is_some_and(|(a, b)| *a <= start && end <= *b);
        if !excluded {
            extra.push(Finding {
                kind: "high-entropy",
                category: Category::Entropy,
                start,
                end,
            });
        }
    }
    if !extra.is_empty() {
        out.extend(extra);
        out.sort_by_key(|f| f.start);
    }
}
