//! Checks a candidate must pass before it counts: checksums and number ranges that separate a
//! real card number, IBAN or SSN from any other run of digits, and Shannon entropy.

/// A card number: 13 to 19 digits (spaces and dashes allowed), a known network prefix, Luhn.
pub(super) fn credit_card(s: &str) -> bool {
    let digits: Vec<u32> = s.chars().filter_map(|c| c.to_digit(10)).collect();
    if !(13..=19).contains(&digits.len()) {
        return false;
    }
    let prefix = |n: usize| digits.iter().take(n).fold(0u32, |acc, d| acc * 10 + d);
    let known = matches!(prefix(1), 4)
        || (51..=55).contains(&prefix(2))
        || (2221..=2720).contains(&prefix(4))
        || matches!(prefix(2), 34 | 37 | 36 | 38 | 62 | 65)
        || matches!(prefix(4), 6011)
        || (3528..=3589).contains(&prefix(4));
    known && luhn(&digits)
}

fn luhn(digits: &[u32]) -> bool {
    let sum: u32 = digits
        .iter()
        .rev()
        .enumerate()
        .map(|(i, d)| {
            if i % 2 == 1 {
                let x = d * 2;
                if x > 9 { x - 9 } else { x }
            } else {
                *d
            }
        })
        .sum();
    sum.is_multiple_of(10)
}

/// An IBAN: country code, check digits, and the ISO 13616 mod-97 check.
pub(super) fn iban(s: &str) -> bool {
    crate::canon::iban_checksum(s)
}

/// Not a shell or template reference (`$PASS`, `${PASS}`, `%PASS%`, `<password>`, `{{pw}}`):
/// a command line that names a variable shows no secret.
pub(super) fn not_a_reference(s: &str) -> bool {
    !(s.starts_with('$')
        || s.starts_with("%") && s.ends_with('%')
        || s.starts_with('<') && s.ends_with('>')
        || s.starts_with("{{"))
}

/// A command-line value that can be a secret: not a reference, and not a plain lowercase
/// word (`--password option` in prose is not a password; `hunter2` and `S3cret` are).
pub(super) fn cli_value(s: &str) -> bool {
    not_a_reference(s) && s.bytes().any(|b| !b.is_ascii_lowercase())
}

/// Not a type name (`String`, `str`, `Optional[str]`, `SecretStr`): `password: String` declares
/// a field, it shows no value.
pub(super) fn not_a_type(s: &str) -> bool {
    let base = s
        .trim_end_matches(['?', ','])
        .split(['<', '[', '|'])
        .next()
        .unwrap_or(s)
        .to_ascii_lowercase();
    !matches!(
        base.as_str(),
        "string"
            | "str"
            | "int"
            | "integer"
            | "bool"
            | "boolean"
            | "number"
            | "any"
            | "object"
            | "bytes"
            | "char"
            | "secretstr"
            | "secretbytes"
            | "optional"
            | "option"
            | "text"
            | "varchar"
    )
}

/// A value after a short label (`pw:`, `pass=`) that can be a password: not a type, not a
/// reference, and with a letter (`pass: 100%` in a test report is not one).
pub(super) fn label_value(s: &str) -> bool {
    not_a_type(s) && not_a_reference(s) && s.bytes().any(|b| b.is_ascii_alphabetic())
}

/// A US SSN: area not 000, 666 or 9xx; group not 00; serial not 0000.
pub(super) fn ssn(s: &str) -> bool {
    let mut parts = s.split('-').map(|p| p.parse::<u32>().unwrap_or(0));
    let (Some(area), Some(group), Some(serial)) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    area != 0 && area != 666 && area < 900 && group != 0 && serial != 0
}

/// A phone number: 9 to 15 digits, not all the same digit.
pub(super) fn phone(s: &str) -> bool {
    let digits: Vec<char> = s.chars().filter(char::is_ascii_digit).collect();
    (9..=15).contains(&digits.len()) && digits.iter().any(|d| Some(d) != digits.first())
}

/// A full IPv6 address (not a clock time or a MAC-like fragment).
pub(super) fn ipv6(s: &str) -> bool {
    s.parse::<std::net::Ipv6Addr>().is_ok() && s.matches(':').count() >= 2
}

/// A documentation placeholder rather than a credential: `AKIAIOSFODNN7EXAMPLE`,
/// `your-api-key-here`, `********`, `sk_test_XXXXXXXX…`, `<token>`, `${TOKEN}`, or a bare word
/// such as `password` or `true`. Only short values qualify (a real key's random body may
/// contain any word), and only clear markers count: a real password such as `Yourname1985`
/// is not a placeholder.
pub(super) fn placeholder(s: &str) -> bool {
    if s.len() > 48 {
        return false;
    }
    let lower = s.to_ascii_lowercase();
    const MARKERS: [&str; 6] = ["example", "your-", "your_", "-here", "_here", "placeholder"];
    const BARE: [&str; 12] = [
        "password",
        "passwd",
        "secret",
        "token",
        "apikey",
        "api_key",
        "none",
        "null",
        "true",
        "false",
        "undefined",
        "redacted",
    ];
    if MARKERS.iter().any(|w| lower.contains(w)) || BARE.contains(&lower.as_str()) {
        return true;
    }
    if s.starts_with('<') || s.starts_with("${") || s.starts_with("{{") {
        return true;
    }
    // Mostly one repeated character (`XXXXXXXX`, `********`) after any known prefix.
    let mut counts = [0usize; 256];
    for b in s.bytes() {
        if let Some(c) = counts.get_mut(usize::from(b)) {
            *c += 1;
        }
    }
    let top = counts.iter().max().copied().unwrap_or(0);
    s.len() >= 8 && top * 10 >= s.len() * 7
}

/// The share of neighbouring characters that differ in class (upper, lower, digit, other).
pub(super) fn class_switches(s: &str) -> f64 {
    let class = |b: &u8| match b {
        b'A'..=b'Z' => 0u8,
        b'a'..=b'z' => 1,
        b'0'..=b'9' => 2,
        _ => 3,
    };
    let b = s.as_bytes();
    if b.len() < 2 {
        return 0.0;
    }
    let switches = b
        .windows(2)
        .filter(|w| w.first().map(class) != w.get(1).map(class))
        .count();
    switches as f64 / (b.len() - 1) as f64
}

/// Whether at least half of `s` is runs of four or more lowercase letters (words).
pub(super) fn wordy(s: &str) -> bool {
    let (mut in_words, mut run) = (0usize, 0usize);
    for b in s.bytes().chain(std::iter::once(b' ')) {
        if b.is_ascii_lowercase() {
            run += 1;
        } else {
            if run >= 4 {
                in_words += run;
            }
            run = 0;
        }
    }
    in_words * 2 >= s.len()
}

/// Shannon entropy in bits per character.
pub(super) fn entropy(s: &str) -> f64 {
    let mut counts = [0u32; 256];
    for b in s.bytes() {
        if let Some(c) = counts.get_mut(usize::from(b)) {
            *c += 1;
        }
    }
    let n = s.len() as f64;
    counts
        .iter()
        .filter(|c| **c > 0)
        .map(|c| {
            let p = f64::from(*c) / n;
            -p * p.log2()
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksums() {
        assert!(credit_card("4111 1111 1111 1111"));
        assert!(credit_card("5500-0000-0000-0004"));
        assert!(!credit_card("4111 1111 1111 1112"));
        assert!(!credit_card("1234567890123456"));
        assert!(iban("GB82 WEST 1234 5698 7654 32"));
        assert!(iban("DE89370400440532013000"));
        assert!(!iban("DE89370400440532013001"));
        assert!(ssn("123-45-6789"));
        assert!(!ssn("666-45-6789") && !ssn("123-00-6789") && !ssn("912-45-6789"));
        assert!(ipv6("2001:db8::8a2e:370:7334") && !ipv6("12:30:45"));
        assert!(entropy("aaaa") < 0.1 && entropy("abcd") > 1.9);
        for p in [
            "AKIAIOSFODNN7EXAMPLE",
            "your-api-key-here",
            "********",
            "sk_test_XXXXXXXXXXXXXXXXXXXXXXXX",
            "<token>",
            "password",
        ] {
            assert!(placeholder(p), "{p}");
        }
        for real in [
            "AKIAQWERTYUIOPASDFGH",
            "hunter22!",
            "Yourname1985",
            "MyExampl3!",
            "aaaaaa1",
        ] {
            assert!(!placeholder(real), "{real}");
        }
    }
}
