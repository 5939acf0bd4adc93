//! Canonical forms of the identifiers found in text: e-mail addresses, URLs (and their hosts)
//! and IBANs, plus the distinctive tokens of a text. Manifest facts (`context.facts`) and
//! provenance matching both read text through this one module, so a value written two ways
//! (`Bob@Corp.example` and `bob@corp.example`, an IBAN with or without spaces, `HTTPS://X.io/`
//! and `https://x.io`) is one value.
//!
//! Scanners are hand-written and linear: no regular expression to compile, nothing that can
//! fail at run time.

/// The identifiers found in a text, canonical and in order of appearance (repeats kept out).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Found {
    /// E-mail addresses, lowercased.
    pub emails: Vec<String>,
    /// URLs (`http`, `https`, `ftp`, or starting `www.`): scheme and host lowercased, default
    /// port and a bare trailing `/` removed, trailing punctuation trimmed.
    pub urls: Vec<String>,
    /// The URLs' hosts, lowercased, without port or userinfo.
    pub hosts: Vec<String>,
    /// IBANs that pass the ISO 13616 mod-97 check, uppercase without spaces.
    pub ibans: Vec<String>,
}

impl Found {
    /// Adds what `text` holds.
    pub fn scan(&mut self, text: &str) {
        for e in emails(text) {
            push_new(&mut self.emails, e);
        }
        for u in urls(text) {
            if let Some(h) = host_of(&u) {
                push_new(&mut self.hosts, h);
            }
            push_new(&mut self.urls, u);
        }
        for i in ibans(text) {
            push_new(&mut self.ibans, i);
        }
    }

    /// The domains of the e-mail addresses.
    pub fn email_domains(&self) -> Vec<String> {
        let mut out = Vec::new();
        for e in &self.emails {
            if let Some((_, d)) = e.rsplit_once('@') {
                push_new(&mut out, d.to_owned());
            }
        }
        out
    }

    /// Whether nothing was found.
    pub fn is_empty(&self) -> bool {
        self.emails.is_empty() && self.urls.is_empty() && self.ibans.is_empty()
    }
}

fn push_new(list: &mut Vec<String>, item: String) {
    if !list.contains(&item) {
        list.push(item);
    }
}

/// Every string inside a JSON value (object keys excluded), depth first.
pub fn strings<'a>(value: &'a serde_json::Value, out: &mut Vec<&'a str>) {
    match value {
        serde_json::Value::String(s) => out.push(s),
        serde_json::Value::Array(items) => items.iter().for_each(|v| strings(v, out)),
        serde_json::Value::Object(map) => map.values().for_each(|v| strings(v, out)),
        _ => {}
    }
}

fn is_local_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "._%+-'".contains(c)
}

fn is_domain_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '.' || c == '-'
}

/// E-mail addresses in `text`, lowercased.
pub fn emails(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (at, _) in text.match_indices('@') {
        let before = &text[..at];
        let start = before
            .char_indices()
            .rev()
            .take_while(|(_, c)| is_local_char(*c))
            .last()
            .map_or(at, |(i, _)| i);
        let local = before[start..].trim_start_matches(['.', '\'']);
        let after = &text[at + 1..];
        let end = after
            .char_indices()
            .find(|(_, c)| !is_domain_char(*c))
            .map_or(after.len(), |(i, _)| i);
        let domain = after[..end].trim_end_matches(['.', '-']);
        let tld_ok = domain.rsplit_once('.').is_some_and(|(head, tld)| {
            !head.is_empty() && tld.len() >= 2 && tld.chars().all(|c| c.is_ascii_alphabetic())
        });
        if !local.is_empty() && tld_ok && !domain.contains("..") {
            let addr = format!("{local}@{domain}").to_ascii_lowercase();
            push_new(&mut out, addr);
        }
    }
    out
}

const URL_STOP: &[char] = &['<', '>', '"', '`', '\'', '|', '\\', '^', '{', '}'];

/// URLs in `text`, canonical.
pub fn urls(text: &str) -> Vec<String> {
    let lower = text.to_ascii_lowercase();
    let mut out = Vec::new();
    let mut from = 0;
    while from < lower.len() {
        let next = ["https://", "http://", "ftp://", "www."]
            .iter()
            .filter_map(|p| lower[from..].find(p).map(|i| from + i))
            .min();
        let Some(start) = next else { break };
        // `www.` only at a word start (not inside `xwww.` or a URL already taken).
        let boundary = lower[..start]
            .chars()
            .next_back()
            .is_none_or(|c| !c.is_ascii_alphanumeric() && c != '.' && c != '/');
        let rest = &text[start..];
        let len = rest
            .char_indices()
            .find(|(_, c)| c.is_whitespace() || URL_STOP.contains(c) || c.is_control())
            .map_or(rest.len(), |(i, _)| i);
        let raw = rest[..len].trim_end_matches(['.', ',', ';', ':', '!', '?', ')', ']', '}']);
        if boundary && let Some(u) = canonical_url(raw) {
            push_new(&mut out, u);
        }
        from = start + len.max(1);
    }
    out
}

/// The canonical form of one URL, or `None` when it has no host.
pub fn canonical_url(raw: &str) -> Option<String> {
    let (scheme, rest) = match raw.split_once("://") {
        Some((s, r)) => (s.to_ascii_lowercase(), r),
        None => ("http".to_owned(), raw),
    };
    let split = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(split);
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host_port = host_port.to_ascii_lowercase();
    let (host, port) = match host_port.rsplit_once(':') {
        Some((h, p)) if p.chars().all(|c| c.is_ascii_digit()) => (h.to_owned(), p.to_owned()),
        _ => (host_port.clone(), String::new()),
    };
    let host = host.trim_end_matches('.').to_owned();
    if host.is_empty()
        || !host
            .chars()
            .all(|c| is_domain_char(c) || c == '[' || c == ']' || c == ':')
    {
        return None;
    }
    let default = matches!(
        (scheme.as_str(), port.as_str()),
        ("http", "80") | ("https", "443") | ("ftp", "21") | (_, "")
    );
    let port = if default {
        String::new()
    } else {
        format!(":{port}")
    };
    let tail = if tail == "/" { "" } else { tail };
    Some(format!("{scheme}://{host}{port}{tail}"))
}

/// The host of a canonical URL.
pub fn host_of(url: &str) -> Option<String> {
    let rest = url.split_once("://")?.1;
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..end];
    let host = match authority.rsplit_once(':') {
        Some((h, p)) if p.chars().all(|c| c.is_ascii_digit()) => h,
        _ => authority,
    };
    (!host.is_empty()).then(|| host.to_owned())
}

/// IBANs in `text` (mod-97 checked), uppercase without spaces.
pub fn ibans(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    // Out of range reads as a space: a boundary.
    let at = |k: usize| chars.get(k).copied().unwrap_or(' ');
    let mut out = Vec::new();
    let mut i = 0;
    while i + 4 <= chars.len() {
        let starts = at(i).is_ascii_alphabetic()
            && at(i + 1).is_ascii_alphabetic()
            && at(i + 2).is_ascii_digit()
            && at(i + 3).is_ascii_digit()
            && (i == 0 || !at(i - 1).is_ascii_alphanumeric());
        if !starts {
            i += 1;
            continue;
        }
        // Alphanumerics, with single spaces between groups, up to 34 of them; each point
        // where a group ends is a candidate end.
        let mut compact = String::new();
        let mut ends = Vec::new();
        let mut j = i;
        while j < chars.len() && compact.len() < 34 {
            let c = at(j);
            if c.is_ascii_alphanumeric() {
                compact.push(c.to_ascii_uppercase());
                j += 1;
                if !at(j).is_ascii_alphanumeric() {
                    ends.push((compact.len(), j));
                }
            } else if c == ' ' && at(j + 1).is_ascii_alphanumeric() {
                j += 1;
            } else {
                break;
            }
        }
        let hit = ends
            .iter()
            .rev()
            .find(|(n, _)| *n >= 15 && compact.get(..*n).is_some_and(iban_checksum));
        match hit.and_then(|(n, end)| compact.get(..*n).map(|c| (c, *end))) {
            Some((iban, end)) => {
                push_new(&mut out, iban.to_owned());
                i = end;
            }
            None => i += 1,
        }
    }
    out
}

/// The ISO 13616 mod-97 check of an IBAN (spaces ignored; 15 to 34 characters).
pub fn iban_checksum(s: &str) -> bool {
    let compact: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    if !(15..=34).contains(&compact.len()) || !compact.is_ascii() {
        return false;
    }
    let (head, tail) = compact.split_at(4);
    let mut rem: u32 = 0;
    for c in tail.chars().chain(head.chars()) {
        let Some(v) = c.to_digit(36) else {
            return false;
        };
        // Letters are two digits (A = 10 … Z = 35).
        rem = if v >= 10 {
            (rem * 100 + v) % 97
        } else {
            (rem * 10 + v) % 97
        };
    }
    rem == 1
}

/// The distinctive tokens of `text` for provenance matching, each tagged with what it is:
/// `e:` e-mail addresses, `u:` URLs, `i:` IBANs (canonical), then `w:` words (runs of letters
/// and digits) and `c:` chunks (whitespace-separated, surrounding punctuation trimmed), both
/// lowercased and only when at least `min_chars` long. Identifiers come first, in
/// [`Tokens::ids`]; words and chunks in [`Tokens::words`].
#[derive(Debug, Default)]
pub struct Tokens {
    /// Tagged canonical identifiers.
    pub ids: Vec<String>,
    /// Tagged words and chunks.
    pub words: Vec<String>,
}

/// Tokenizes `text` (see [`Tokens`]).
pub fn tokens(text: &str, min_chars: usize) -> Tokens {
    let mut found = Found::default();
    found.scan(text);
    let mut t = Tokens::default();
    t.ids.extend(found.emails.iter().map(|e| format!("e:{e}")));
    t.ids
        .extend(found.urls.iter().map(|u| format!("u:{}", url_key(u))));
    t.ids.extend(found.ibans.iter().map(|i| format!("i:{i}")));
    // Repeats are kept: the memory's hash sets absorb them.
    let long = |s: &str| s.chars().count() >= min_chars;
    for word in text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| long(w))
    {
        t.words.push(format!("w:{}", word.to_lowercase()));
    }
    for chunk in text.split_whitespace() {
        let chunk = chunk.trim_matches(|c: char| !c.is_alphanumeric() && c != '/' && c != '~');
        if long(chunk) && chunk.contains(|c: char| !c.is_alphanumeric()) {
            t.words.push(format!("c:{}", chunk.to_lowercase()));
        }
    }
    t
}

/// What identifies a canonical URL for provenance: without its scheme, a leading `www.` or a
/// trailing `/`, so the `www.x.example/p` a user typed is the `https://x.example/p/` an agent
/// fetches.
pub fn url_key(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.strip_prefix("www.").unwrap_or(rest);
    rest.trim_end_matches('/')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_urls_and_ibans_are_found_in_canonical_form() {
        let mut f = Found::default();
        f.scan("Write to Bob.Smith+x@Corp.Example. or <eve@evil.io>; see HTTPS://Evil.IO:443/Login?a=B, www.shop.example/x).");
        assert_eq!(f.emails, ["bob.smith+x@corp.example", "eve@evil.io"]);
        assert_eq!(f.email_domains(), ["corp.example", "evil.io"]);
        assert_eq!(
            f.urls,
            ["https://evil.io/Login?a=B", "http://www.shop.example/x"]
        );
        assert_eq!(f.hosts, ["evil.io", "www.shop.example"]);
        f.scan("IBAN: de89 3704 0044 0532 0130 00, not DE89370400440532013001 nor DE12");
        assert_eq!(f.ibans, ["DE89370400440532013000"]);
        f.scan("GB82WEST12345698765432.");
        assert_eq!(f.ibans.len(), 2);
        assert!(emails("a@b, @x.io, x@y.c, me@host").is_empty());
        assert_eq!(
            canonical_url("http://a.io:8080/").as_deref(),
            Some("http://a.io:8080")
        );
        assert_eq!(
            canonical_url("https://user@A.io/").as_deref(),
            Some("https://a.io")
        );
    }

    #[test]
    fn tokens_keep_identifiers_and_long_words_only() {
        let t = tokens(
            "Pay the Landlord at DE89 3704 0044 0532 0130 00 (see reports/q3.pdf)",
            4,
        );
        assert_eq!(t.ids, ["i:DE89370400440532013000"]);
        assert!(t.words.contains(&"w:landlord".to_owned()));
        assert!(t.words.contains(&"c:reports/q3.pdf".to_owned()));
        assert!(!t.words.iter().any(|w| w == "w:the" || w == "w:pay"));
        let typed = tokens("post it to www.hooks.example/releases/ please", 4);
        let fetched = tokens("https://hooks.example/releases", 4);
        assert_eq!(typed.ids, fetched.ids);
        assert_eq!(typed.ids, ["u:hooks.example/releases"]);
    }
}
