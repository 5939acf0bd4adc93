//! Canonical forms of the identifiers found in text: e-mail addresses, URLs (and their hosts)
//! and IBANs, plus the distinctive tokens of a text. Manifest facts (`context.facts`) and
//! provenance matching both read text through this one module, so a value written two ways
//! (`Bob@Corp.example` and `bob@corp.example`, an IBAN with or without spaces, `HTTPS://X.io/`
//! and `https://x.io`) is one value.
//!
//! Scanners are hand-written and linear in their input, also adversarial input (a web page
//! of `www. www. …`, thousands of `@`): no regular expression to compile, nothing that can
//! fail at run time.

use std::collections::HashSet;

/// `scheme://host[:port]` of `url`, all that logs and errors show of an endpoint (its path
/// and query may hold a key).
pub fn origin(url: &str) -> &str {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    let end = url
        .get(after_scheme..)
        .and_then(|rest| rest.find('/'))
        .map_or(url.len(), |i| after_scheme + i);
    url.get(..end).unwrap_or(url)
}

/// The identifiers found in a text, canonical and in order of appearance (repeats kept out).
#[derive(Debug, Clone, Default)]
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
    /// What each list holds already (tagged by list), so repeats cost a lookup, not a scan.
    seen: HashSet<(u8, String)>,
}

impl Found {
    /// Adds what `text` holds.
    pub fn scan(&mut self, text: &str) {
        for e in emails(text) {
            self.add(0, e);
        }
        for u in urls(text) {
            if let Some(h) = host_of(&u) {
                self.add(2, h);
            }
            self.add(1, u);
        }
        for i in ibans(text) {
            self.add(3, i);
        }
    }

    fn add(&mut self, list: u8, item: String) {
        if self.seen.contains(&(list, item.clone())) {
            return;
        }
        self.seen.insert((list, item.clone()));
        match list {
            0 => self.emails.push(item),
            1 => self.urls.push(item),
            2 => self.hosts.push(item),
            _ => self.ibans.push(item),
        }
    }

    /// The domains of the e-mail addresses.
    pub fn email_domains(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut seen = HashSet::new();
        for e in &self.emails {
            if let Some((_, d)) = e.rsplit_once('@')
                && seen.insert(d)
            {
                out.push(d.to_owned());
            }
        }
        out
    }

    /// Whether nothing was found.
    pub fn is_empty(&self) -> bool {
        self.emails.is_empty() && self.urls.is_empty() && self.ibans.is_empty()
    }
}

/// `items` without repeats, first occurrences in order.
fn unique(items: Vec<String>) -> Vec<String> {
    let mut seen = HashSet::with_capacity(items.len());
    items
        .into_iter()
        .filter(|i| seen.insert(i.clone()))
        .collect()
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

/// What ends an address's local part or domain, besides whitespace and control characters.
const ADDRESS_STOP: &[char] = &[
    '<', '>', '(', ')', '[', ']', '{', '}', ',', ';', ':', '"', '\'', '`', '|', '\\', '@', '/',
    '?', '#',
];

fn is_address_char(c: char) -> bool {
    !c.is_whitespace() && !c.is_control() && !ADDRESS_STOP.contains(&c)
}

/// E-mail addresses in `text`, lowercased. Read generously, so that nothing with an `@` and
/// a domain escapes the lists policies check: any run of address characters around an `@`
/// whose domain is not empty is one (`'@evil.example` is `@evil.example`, `a@b` is `a@b`).
pub fn emails(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (at, _) in text.match_indices('@') {
        let before = text.get(..at).unwrap_or("");
        let start = before
            .char_indices()
            .rev()
            .take_while(|(_, c)| is_address_char(*c))
            .last()
            .map_or(at, |(i, _)| i);
        let local = before.get(start..).unwrap_or("").trim_start_matches('.');
        let after = text.get(at + 1..).unwrap_or("");
        let end = after
            .char_indices()
            .find(|(_, c)| !is_address_char(*c))
            .map_or(after.len(), |(i, _)| i);
        let domain = after
            .get(..end)
            .unwrap_or("")
            .trim_end_matches(['.', '-'])
            .trim_start_matches('.');
        if !domain.is_empty() {
            out.push(format!("{local}@{domain}").to_lowercase());
        }
    }
    unique(out)
}

/// URLs in `text`, canonical.
pub fn urls(text: &str) -> Vec<String> {
    const STARTS: [&str; 4] = ["https://", "http://", "ftp://", "www."];
    let lower = text.to_ascii_lowercase();
    let mut out = Vec::new();
    // The next occurrence of each start at or after `from`, found again only once passed:
    // each is searched for over the text once in all.
    // `None`: not searched yet; `Some(None)`: not in the rest of the text.
    let mut next: [Option<Option<usize>>; 4] = [None; 4];
    let mut from = 0;
    while from < lower.len() {
        for (slot, p) in next.iter_mut().zip(STARTS) {
            let stale = match *slot {
                None => true,
                Some(Some(i)) => i < from,
                Some(None) => false,
            };
            if stale {
                *slot = Some(lower.get(from..).and_then(|r| r.find(p)).map(|i| from + i));
            }
        }
        let Some(start) = next.iter().flatten().flatten().copied().min() else {
            break;
        };
        // `www.` only at a word start (not inside `xwww.` or a URL already taken).
        let boundary = lower
            .get(..start)
            .and_then(|b| b.chars().next_back())
            .is_none_or(|c| !c.is_ascii_alphanumeric() && c != '.' && c != '/');
        let rest = text.get(start..).unwrap_or("");
        // A URL ends only at whitespace: `https://github.com'@evil.example/` and
        // `https://github.com"@evil.example/` go to `evil.example`, as browsers read them.
        let len = rest
            .char_indices()
            .find(|(_, c)| c.is_whitespace() || c.is_control())
            .map_or(rest.len(), |(i, _)| i);
        let raw = rest
            .get(..len)
            .unwrap_or("")
            .trim_end_matches(['.', ',', ';', ':', '!', '?', ')', ']', '}', '>', '"', '\'']);
        // A `www.` start needs a name after it: `www.` alone, or `www.x`, is not a URL.
        let www = lower.get(start..).is_some_and(|r| r.starts_with("www."));
        let named = !www
            || raw
                .get(4..)
                .and_then(|r| r.split(['/', '?', '#', ':']).next())
                .is_some_and(|h| h.contains('.') && !h.starts_with('.'));
        if boundary
            && named
            && let Some(u) = canonical_url(raw)
        {
            out.push(u);
        }
        from = start + len.max(1);
    }
    unique(out)
}

/// The canonical form of one URL, or `None` when it has no host. The host is what a browser
/// would reach: after the last `@` of the authority, which ends at `/`, `\\`, `?` or `#`;
/// percent-escapes decoded and lowercased (any characters kept, so an unusual host is still a
/// host: `x_y.evil.example`, `évil.example`).
pub fn canonical_url(raw: &str) -> Option<String> {
    let (scheme, rest) = match raw.split_once("://") {
        Some((s, r)) => (s.to_ascii_lowercase(), r),
        None => ("http".to_owned(), raw),
    };
    let split = rest.find(['/', '\\', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(split);
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host_port = percent_decoded(host_port).to_lowercase();
    let (host, port) = match host_port.rsplit_once(':') {
        Some((h, p)) if p.chars().all(|c| c.is_ascii_digit()) => (h.to_owned(), p.to_owned()),
        _ => (host_port.clone(), String::new()),
    };
    let host = host.trim_end_matches('.').to_owned();
    if host.is_empty() || host.chars().any(|c| c.is_whitespace() || c.is_control()) {
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
    let tail = tail.replace('\\', "/");
    let tail = if tail == "/" { "" } else { tail.as_str() };
    Some(format!("{scheme}://{host}{port}{tail}"))
}

/// `%XX` escapes decoded where they make valid UTF-8; the rest kept as written.
fn percent_decoded(s: &str) -> String {
    if !s.contains('%') {
        return s.to_owned();
    }
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |k: usize| bytes.get(k).and_then(|b| (*b as char).to_digit(16));
        match (bytes.get(i), hex(i + 1), hex(i + 2)) {
            (Some(b'%'), Some(h), Some(l)) => {
                out.push(u8::try_from(h * 16 + l).unwrap_or(b'?'));
                i += 3;
            }
            (Some(b), _, _) => {
                out.push(*b);
                i += 1;
            }
            (None, _, _) => break,
        }
    }
    String::from_utf8(out).unwrap_or_else(|_| s.to_owned())
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
                out.push(iban.to_owned());
                i = end;
            }
            None => i += 1,
        }
    }
    unique(out)
}

/// The ISO 13616 mod-97 check of an IBAN (spaces ignored; 15 to 34 characters).
pub fn iban_checksum(s: &str) -> bool {
    let compact: String = s
        .chars()
        .filter(|c| !c.is_whitespace() && *c != '-')
        .collect();
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

/// One identifier found in a text, as provenance matches it: its tagged tokens, and for a URL
/// the token that, said by the user, makes it the user's (its host).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identifier {
    /// `e:<address>` and `d:<domain>` for an e-mail address; `u:<url key>` and `h:<host>` for
    /// a URL; `i:<iban>` for an IBAN.
    pub tokens: Vec<String>,
    /// A URL's `h:<host>`: a URL on a host the user named is the user's.
    pub user_if: Option<String>,
}

/// The distinctive tokens of `text` for provenance matching: its identifiers (e-mail
/// addresses, URLs, IBANs, canonical), then `w:` words (runs of letters and digits) and `c:`
/// chunks (whitespace-separated, surrounding punctuation trimmed), both lowercased and only
/// when at least `min_chars` long.
#[derive(Debug, Default)]
pub struct Tokens {
    /// The identifiers.
    pub ids: Vec<Identifier>,
    /// Tagged words and chunks.
    pub words: Vec<String>,
}

impl Tokens {
    /// Every token, identifiers' first (what a memory records).
    pub fn all(&self) -> impl Iterator<Item = &String> {
        self.ids
            .iter()
            .flat_map(|i| i.tokens.iter())
            .chain(&self.words)
    }
}

/// Tokenizes `text` (see [`Tokens`]).
pub fn tokens(text: &str, min_chars: usize) -> Tokens {
    let mut found = Found::default();
    found.scan(text);
    let mut t = Tokens::default();
    for e in &found.emails {
        let mut tokens = vec![format!("e:{e}")];
        if let Some((_, d)) = e.rsplit_once('@') {
            tokens.push(format!("d:{d}"));
        }
        t.ids.push(Identifier {
            tokens,
            user_if: None,
        });
    }
    for u in &found.urls {
        let host = host_of(u).map(|h| format!("h:{}", h.strip_prefix("www.").unwrap_or(&h)));
        t.ids.push(Identifier {
            tokens: std::iter::once(format!("u:{}", url_key(u)))
                .chain(host.clone())
                .collect(),
            user_if: host,
        });
    }
    for i in &found.ibans {
        t.ids.push(Identifier {
            tokens: vec![format!("i:{i}")],
            user_if: None,
        });
    }
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
        // Read generously: whatever has an `@` and a domain is an address to check.
        assert_eq!(
            emails("a@b, '@evil.example, x@y.c, me@host, meet @ 5"),
            ["a@b", "@evil.example", "x@y.c", "me@host"]
        );
        // The host is the one a browser reaches, whatever it is made of.
        let mut f = Found::default();
        f.scan("https://github.com'@evil.example/c https://x_y.evil.example/l https://%65vil.example\\@good.example/");
        assert_eq!(f.hosts, ["evil.example", "x_y.evil.example"]);
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
    fn adversarial_text_is_read_in_linear_time() {
        let many_starts = "www. ".repeat(200_000);
        let many_ats = "a@b.io ".repeat(100_000);
        // Quadratic scanners would take minutes here; these finish in milliseconds.
        assert!(urls(&many_starts).is_empty());
        assert_eq!(emails(&many_ats), ["a@b.io"]);
        assert!(emails(&"@".repeat(200_000)).is_empty());
        assert!(tokens(&many_starts, 4).ids.is_empty());
    }

    #[test]
    fn tokens_keep_identifiers_and_long_words_only() {
        let t = tokens(
            "Pay the Landlord at DE89 3704 0044 0532 0130 00 (see reports/q3.pdf)",
            4,
        );
        assert_eq!(t.ids[0].tokens, ["i:DE89370400440532013000"]);
        assert!(t.words.contains(&"w:landlord".to_owned()));
        assert!(t.words.contains(&"c:reports/q3.pdf".to_owned()));
        assert!(!t.words.iter().any(|w| w == "w:the" || w == "w:pay"));
        let typed = tokens("post it to www.hooks.example/releases/ please", 4);
        let fetched = tokens("https://hooks.example/releases", 4);
        assert_eq!(typed.ids, fetched.ids);
        assert_eq!(
            typed.ids[0].tokens,
            ["u:hooks.example/releases", "h:hooks.example"]
        );
    }
}
