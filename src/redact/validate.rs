//! Checks a candidate must pass before it counts: checksums and number ranges that separate a
//! real card number, IBAN or SSN from any other run of digits, and Shannon entropy.

/// A card number: 13 to 19 digits (spaces and dashes allowed), a known network prefix, Luhn.
pub(super) fn credit_card(s: &str) -> bool {
    let digits: Vec<u32> = s.chars().filter_map(|c| c.to_digit(10)).collect();
    if !(13..=19).contains(&digits.len()) {
        return false;
    }
    let prefix = |n: usize| digits.iter().take(n).fold(0u32, |acc, d| acc * 10 + d);
    // Issuer ranges (IIN) by brand: Visa; Mastercard (51–55, 2221–2720); Mir (2200–2204);
    // American Express (34, 37); Diners Club (300–305, 309, 36, 38, 39); JCB (3528–3589);
    // Maestro (50, 56–58, 6x); Discover (6011, 644–649, 65); UnionPay (62); RuPay (60, 65).
    let known = matches!(prefix(1), 4)
        || matches!(prefix(2), 34 | 36..=39 | 50..=58 | 60..=69)
        || (2221..=2720).contains(&prefix(4))
        || (2200..=2204).contains(&prefix(4))
        || matches!(prefix(3), 300..=305 | 309)
        || (3528..=3589).contains(&prefix(4));
    known && luhn(&digits)
}

/// Digits (spaces and dashes allowed, at least 2) that pass the Luhn check: a custom
/// detector's `luhn` validator.
pub(super) fn luhn_digits(s: &str) -> bool {
    let digits: Vec<u32> = s.chars().filter_map(|c| c.to_digit(10)).collect();
    let clean = s
        .chars()
        .all(|c| c.is_ascii_digit() || c == ' ' || c == '-');
    clean && digits.len() >= 2 && luhn(&digits)
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
    // `$NAME`, `${NAME}`, `$(cmd)`; `$umm!7thy#13` is a password that starts with `$`.
    let shell = s.strip_prefix('$').is_some_and(|rest| {
        rest.starts_with(['{', '(', '_'])
            || rest.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
    });
    !(shell
        || s.starts_with("%") && s.ends_with('%')
        || s.starts_with('<') && s.ends_with('>')
        || s.starts_with('[') && s.ends_with(']')
        || s.starts_with("{{")
        || s.starts_with('{') && s.ends_with('}')
        || s.starts_with("#{")
        || s.starts_with("%(")
        || format_field(s)
        // A YAML tag (`!vault`, `!secret name`, `!Ref`, `!!null`, `!Base64`): a word after
        // `!` or `!!`. `!5l4nds7%18` and `!Qa2;wS3eD4r` are passwords.
        || yaml_tag(s)
        || names_a_credential(s))
}

/// Not a template's field (`%(password)s`, `{{ password }}`, `${DB_PASSWORD}`) that a
/// statement is built from; `!~J@7nXU` is a value.
pub(super) fn not_a_template(s: &str) -> bool {
    !(format_field(s) || s.starts_with("{{") || s.starts_with("${"))
}

/// Holds a format string's field (`ALTER USER %(user)s IDENTIFIED BY "%(password)s"`).
fn format_field(s: &str) -> bool {
    s.contains("%(") && s.contains(")s")
}

/// A YAML tag: `!` or `!!`, then a letter and up to 15 more letters, digits or `:._-/`.
fn yaml_tag(s: &str) -> bool {
    let rest = s.strip_prefix("!!").or_else(|| s.strip_prefix('!'));
    rest.is_some_and(|r| {
        r.len() <= 16
            && r.bytes().next().is_some_and(|b| b.is_ascii_alphabetic())
            && r.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b':' | b'.' | b'_' | b'-' | b'/'))
    })
}

/// Not an all-caps word (`NOTPROVIDED`, `COLLATE`): `token == "COLLATE"` compares with a
/// constant, not with a credential.
pub(super) fn not_a_constant(s: &str) -> bool {
    not_a_reference(s) && !(s.len() >= 3 && s.bytes().all(|b| b.is_ascii_uppercase() || b == b'_'))
}

/// Not code that reads the value from elsewhere: a call or an index (`getpass(`,
/// `config[`), or a dotted name (`settings.SECRET_KEY`, `request.form`,
/// `data.aws_secretsmanager_secret_version.db.secret_string`).
fn not_code(s: &str) -> bool {
    if s.ends_with('(') || s.ends_with('[') || s.ends_with(':') {
        return false;
    }
    // The next pair's key (`name=`), a PowerShell cmdlet (`Read-Host`), an all-caps
    // metavariable (`CLIENT_SECRET`), a CamelCase name of three words or more
    // (`TestTokenRefresh`).
    let b = s.as_bytes();
    let key_of_next = s.len() > 1
        && s.ends_with(['=', ':'])
        && b.iter()
            .rev()
            .skip(1)
            .all(|c| c.is_ascii_lowercase() || *c == b'-' || *c == b'_');
    let cmdlet = s.split_once('-').is_some_and(|(v, n)| {
        let word = |w: &str| {
            w.len() >= 2
                && w.bytes().next().is_some_and(|c| c.is_ascii_uppercase())
                && w.bytes().skip(1).all(|c| c.is_ascii_lowercase())
        };
        word(v) && word(n)
    });
    let metavar =
        s.len() >= 4 && b.iter().all(|c| c.is_ascii_uppercase() || *c == b'_') && s.contains('_');
    let camel = b.iter().all(u8::is_ascii_alphabetic)
        && b.first().is_some_and(u8::is_ascii_uppercase)
        && b.iter().filter(|c| c.is_ascii_uppercase()).count() >= 3
        && !b.windows(2).any(|w| w.iter().all(u8::is_ascii_uppercase));
    if key_of_next || cmdlet || metavar || camel {
        return false;
    }
    let mut parts = s.split('.');
    let first = parts.next().unwrap_or("");
    let ident = |p: &str| {
        p.bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
            && p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
    };
    let dotted = s.contains('.')
        && first.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
        && !first.is_empty()
        && s.split('.').all(ident);
    !dotted
}

/// A value assigned to a secret's name (`password = X`, `'db_pass' => 'X'`): not a type, a
/// reference, code or a file path.
pub(super) fn assignment_value(s: &str) -> bool {
    not_a_type(s)
        && not_a_reference(s)
        && not_code(s)
        && !file_path(s)
        && !s.contains("://")
        && !short_phrase(s)
}

/// The value of a positional pair (`getenv("DB_PASSWORD", "X")`): an [`assignment_value`]
/// that is not one plain word in one case (`"Permission"`, `"credit_card"`, `"filters"`):
/// `get_model("auth", "Permission")` and `("token", "filters")` name things.
pub(super) fn pair_value(s: &str) -> bool {
    assignment_value(s) && !wordy_only(s)
}

/// A name that says what it holds (`raw_password`, `auth.token`, `_password_reset_token`,
/// `password`): code passing a credential along, not the credential.
fn names_a_credential(s: &str) -> bool {
    const WORDS: [&str; 13] = [
        "password",
        "passwd",
        "pass",
        "pwd",
        "secret",
        "secrets",
        "token",
        "key",
        "apikey",
        "credential",
        "credentials",
        "auth",
        "passphrase",
    ];
    let s = s.trim_end_matches(['}', ')', ',']);
    // Letters and separators only, and short: most values fail on their first digit.
    s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphabetic() || b == b'_' || b == b'.' || b == b'-')
        && s.split(['_', '.', '-'])
            .any(|p| WORDS.iter().any(|w| p.eq_ignore_ascii_case(w)))
}

/// A few short lowercase words (`is not`, `with spaces`): an operator or a label in code. A
/// passphrase has four words or more.
fn short_phrase(s: &str) -> bool {
    s.contains(' ')
        && s.split(' ').count() <= 3
        && s.bytes().all(|b| b.is_ascii_lowercase() || b == b' ')
}

/// A dotted name of two dots or more (`argon2.low_level.ARGON2_VERSION`,
/// `os.path.join`): code, however random its letters look.
pub(super) fn dotted_name(s: &str) -> bool {
    s.split('.').nth(2).is_some()
        && s.split('.').all(|p| {
            (1..=24).contains(&p.len())
                && p.bytes()
                    .next()
                    .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
                && p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        })
}

/// URL-encoded somewhere (`…%3D…`): how a bearer token of twenty `A`s is written, where a
/// run of `A`s in base64 data is not.
pub(super) fn has_percent(s: &str) -> bool {
    s.contains('%')
}

/// A path after a webhook host: long and varied, not a placeholder (`Txxxxxxxx/Bxxxxxxxx/…`).
pub(super) fn webhook_path(s: &str) -> bool {
    let mut seen = [false; 128];
    for b in s.bytes() {
        if let Some(slot) = seen.get_mut(usize::from(b & 0x7f)) {
            *slot = true;
        }
    }
    seen.iter().filter(|x| **x).count() >= 12 && !placeholder(s)
}

/// The value of a short flag (`-pSECRET`, `-p 'X'`, `-N X`): a possible password, not a port,
/// a port mapping, an address or a path.
pub(super) fn short_flag_value(s: &str) -> bool {
    cli_value(s) && not_code(s) && not_a_locator(s) && !s.contains('/') && s.len() >= 4
}

/// A relative or absolute file path (`./password.txt`, `src/auth/token.test.ts`).
fn file_path(s: &str) -> bool {
    let rooted =
        s.starts_with("./") || s.starts_with("../") || s.starts_with('/') || s.starts_with("~/");
    let named = s.contains('/')
        && s.rsplit_once('.').is_some_and(|(_, e)| {
            (1..=5).contains(&e.len()) && e.bytes().all(|b| b.is_ascii_lowercase())
        });
    (rooted && s.contains('.')) || named
}

/// A command-line value that can be a secret: not a reference, and not a plain lowercase
/// word (`--password option` in prose is not a password; `hunter2` and `S3cret` are).
pub(super) fn cli_value(s: &str) -> bool {
    not_a_type(s)
        && not_a_reference(s)
        && (s.bytes().any(|b| !b.is_ascii_lowercase()) || random_letters(s))
        && not_code(s)
}

/// Lowercase letters that do not read as a word (`rcxqhqko`, `lublyevygz`): six or more,
/// under a quarter of them vowels.
fn random_letters(s: &str) -> bool {
    let vowels = s.bytes().filter(|b| b"aeiouy".contains(b)).count();
    s.len() >= 6 && vowels * 4 < s.len()
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
    not_a_type(s)
        && not_a_reference(s)
        && not_code(s)
        && !file_path(s)
        && s.bytes().any(|b| b.is_ascii_alphabetic())
        && !lower_snake(s)
}

/// Lowercase words joined by `_` (`test_login`, `mqtt_password`): a name, not a password.
fn lower_snake(s: &str) -> bool {
    s.contains('_')
        && s.split('_')
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_lowercase()))
}

/// Not a path, a URL, a version, a date or a dotted name: values a label can point at that
/// are not credentials (`key: /etc/app/key.pem`, `token: https://…`, `key: v1.2.3`).
fn not_a_locator(s: &str) -> bool {
    let path = s.starts_with('/')
        || s.starts_with("./")
        || s.starts_with("../")
        || s.starts_with("~/")
        || s.get(1..3) == Some(":\\")
        || s.contains("://")
        // A store path (`secret/prod/db`, `kv/data/app-1`): lowercase segments.
        || s.matches('/').count() >= 2
            && s.bytes().all(|b| {
                b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'/' | b'-' | b'_')
            });
    let file = [
        ".pem", ".key", ".json", ".yaml", ".yml", ".txt", ".p12", ".env", ".crt",
    ]
    .iter()
    .any(|e| ends_with_ignore_case(s, e));
    // Digits and separators only, with at most two letters (`2024-01-01T10:00:00Z`, `v1.2.3`).
    let letters = s.bytes().filter(u8::is_ascii_alphabetic).count();
    let numeric = letters <= 2
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':' | b'+' | b'_'));
    !(path || file || numeric)
}

/// A value after a label such as `API key:` or `client secret =`: a possible password or key,
/// not a plain lowercase word, a type, a reference or a locator.
pub(super) fn credential_value(s: &str) -> bool {
    label_value(s) && cli_value(s) && not_a_locator(s) && !wordy_only(s)
}

/// An unquoted plain lowercase word that a sentence goes on after (`password: same as
/// staging`, `secret: stored in the vault`): prose about the credential, not the credential.
/// `password: hunter2 is it` and `password: "same" as before` keep their values.
pub(super) fn prose_after(text: &[u8], start: usize, end: usize) -> bool {
    let quoted = start
        .checked_sub(1)
        .and_then(|i| text.get(i))
        .is_some_and(|b| matches!(b, b'"' | b'\'' | b'`'));
    let value = text.get(start..end).unwrap_or_default();
    !quoted
        && !value.is_empty()
        && value.iter().all(u8::is_ascii_lowercase)
        && text.get(end) == Some(&b' ')
        && text.get(end + 1).is_some_and(u8::is_ascii_lowercase)
}

/// Letters only, all one case, or words joined by `-`/`_` (`Enabled`, `see-the-vault`).
fn wordy_only(s: &str) -> bool {
    // Three or more words of four letters or more (`zenith-zephyr-copper`): a passphrase.
    if s.split(['-', '.', '_']).nth(2).is_some() && s.split(['-', '.', '_']).all(|w| w.len() >= 4) {
        return false;
    }
    // Lowercase letters that read as no word (`bkxzmcqm`): a password.
    if random_letters(s) && s.bytes().all(|b| b.is_ascii_lowercase()) {
        return false;
    }
    s.bytes()
        .all(|b| b.is_ascii_alphabetic() || b == b'-' || b == b'_' || b == b'.')
        && (s.bytes().all(|b| !b.is_ascii_uppercase())
            || s.bytes().all(|b| !b.is_ascii_lowercase())
            || wordy(s))
}

/// A public key or certificate in base64 DER, without PEM armour: a SubjectPublicKeyInfo
/// (`MIIBIjANBgkqhkiG9w0BAQEFAAOC…` for RSA, `MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE…` for
/// P-256, `MCowBQYDK2VwAyEA…` for Ed25519) or an X.509 certificate (`MII…CCA…`). A private
/// key's DER body has its own detector, which runs first.
pub(super) fn public_der(s: &str) -> bool {
    const SPKI: [&str; 4] = [
        "MFkwEwYHKoZIzj0CAQYI",
        "MHYwEAYHKoZIzj0CAQYF",
        "MCowBQYDK2Vw",
        "MIGfMA0GCSqGSIb3DQEBAQUAA4GN",
    ];
    let rsa_spki = s.starts_with("MII") && s.get(5..27) == Some("jANBgkqhkiG9w0BAQEFAAO");
    let certificate = s.starts_with("MII") && s.get(6..9) == Some("CCA");
    rsa_spki || certificate || SPKI.iter().any(|p| s.starts_with(p))
}

/// A random-looking value ([`random_value`]) that is not public key material (DER in base64,
/// an SSH public key): what a stored entry named `…Key` must hold to be a secret.
pub(super) fn private_key_value(s: &str) -> bool {
    random_value(s) && !public_der(s) && !s.starts_with("ssh-") && !s.starts_with("AAAA")
}

/// A value after a weak label (`token:`, `key=`, `nonce`, `salt`): random-looking, with
/// digits or mixed case, not mostly words, with some entropy.
pub(super) fn random_value(s: &str) -> bool {
    let has = |f: fn(&u8) -> bool| s.as_bytes().iter().any(f);
    let mixed = has(u8::is_ascii_digit) as u8
        + has(u8::is_ascii_uppercase) as u8
        + has(u8::is_ascii_lowercase) as u8;
    label_value(s)
        && not_a_locator(s)
        && mixed >= 2
        && !wordy(s)
        && entropy(s) >= 3.0
        && !snake_identifier(s)
}

/// A code identifier (`user_id_2`, `SOME_CONSTANT_NAME`, `getUserById`): words and digits
/// joined by `_`, `.` or case changes, each part at least three letters.
fn snake_identifier(s: &str) -> bool {
    s.split(['_', '.', '-']).nth(1).is_some()
        && s.split(['_', '.', '-']).all(|p| {
            p.bytes().all(|b| b.is_ascii_alphanumeric())
                && (p.bytes().all(|b| b.is_ascii_digit()) || p.len() >= 3 && wordy_any_case(p))
        })
}

/// [`wordy`] for words in either case (`USER`, `Name`).
fn wordy_any_case(s: &str) -> bool {
    words_fill_half(s, u8::is_ascii_alphabetic)
}

/// Whether `s` ends with `suffix`, ASCII case ignored.
fn ends_with_ignore_case(s: &str, suffix: &str) -> bool {
    s.len() >= suffix.len()
        && s.as_bytes()
            .get(s.len() - suffix.len()..)
            .is_some_and(|t| t.eq_ignore_ascii_case(suffix.as_bytes()))
}

/// A URL query value that can be a secret: not a reference or placeholder, with a digit or
/// an upper-case letter or a `%` escape (`sig=…%3D`), not a plain word.
pub(super) fn url_value(s: &str) -> bool {
    not_a_reference(s)
        && s.bytes()
            .any(|b| b.is_ascii_digit() || b.is_ascii_uppercase() || b == b'%')
        && !wordy(s)
        && !s.starts_with("http")
}

/// A file path or a dotted name rather than a token: `/usr/lib/x86_64-linux-gnu/libQt5Core.so`,
/// `node_modules/@babel/core/lib/index.js`, `C:/Users/…`, `org.apache.commons.Lang3Utils`:
/// rooted, or three segments or more, or ending in a file extension, and mostly lowercase
/// (random base64 is about half upper case, names and paths are not).
pub(super) fn path_like(t: &str) -> bool {
    let slashes = t.matches('/').count();
    let dots = t.matches('.').count();
    if slashes == 0 && dots < 2 {
        return false;
    }
    let sep = if slashes > 0 { '/' } else { '.' };
    let segments = t.split(sep).filter(|s| !s.is_empty()).count();
    let rooted = t.starts_with('/') || t.starts_with("~/") || t.starts_with("./");
    let extension = t.rsplit_once('.').is_some_and(|(_, e)| {
        (1..=5).contains(&e.len()) && e.bytes().all(|b| b.is_ascii_lowercase())
    });
    let letters = t.bytes().filter(u8::is_ascii_alphabetic).count();
    let upper = t.bytes().filter(u8::is_ascii_uppercase).count();
    // A URL without its scheme (`docs.google.com/document/d/…`).
    let host = t.split('/').next().is_some_and(|h| {
        slashes > 0
            && h.contains('.')
            && h.rsplit('.').next().is_some_and(|tld| {
                (2..=6).contains(&tld.len()) && tld.bytes().all(|b| b.is_ascii_lowercase())
            })
            && h.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-')
    });
    if host {
        return true;
    }
    // A file name at the end of a path (`…/OjQ89QnwSfDRpH38eXN2J/_buildManifest.js`) is a
    // path whatever its directories look like.
    (slashes > 0 && extension) || ((rooted || extension || segments >= 3) && upper * 4 <= letters)
}

/// A table header that names a secret column (`Password`, `pwd`, `API key`, `Token`).
pub(super) fn secret_header(h: &str) -> bool {
    let norm: String = h
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '/')
        .flat_map(|c| c.to_lowercase())
        .collect();
    matches!(
        norm.as_str(),
        "password"
            | "passwd"
            | "pwd"
            | "pw"
            | "p/w"
            | "pass"
            | "passphrase"
            | "passcode"
            | "secret"
            | "token"
            | "apikey"
            | "apitoken"
            | "secretkey"
            | "accesskey"
            | "accesstoken"
            | "clientsecret"
            | "pin"
    )
}

/// A US SSN: area not 000, 666 or 9xx; group not 00; serial not 0000.
pub(super) fn ssn(s: &str) -> bool {
    // Nine digits, in groups of 3, 2 and 4 when separated (spaces or dashes).
    let parts: Vec<&str> = s.split([' ', '-']).filter(|p| !p.is_empty()).collect();
    let digits: String = match parts.as_slice() {
        [all] if all.len() == 9 => (*all).to_owned(),
        [a, g, n] if a.len() == 3 && g.len() == 2 && n.len() == 4 => format!("{a}{g}{n}"),
        _ => return false,
    };
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return false;
    }
    let number = |from: usize, to: usize| {
        digits
            .get(from..to)
            .and_then(|d| d.parse::<u32>().ok())
            .unwrap_or(0)
    };
    let (area, group, serial) = (number(0, 3), number(3, 5), number(5, 9));
    area != 0 && area != 666 && area < 900 && group != 0 && serial != 0
}

/// A telephone number in E.164 form (`+` and country code): 8 to 15 digits when written
/// in groups, 10 to 15 when written without separators (a bare `+` and 8 digits is as often
/// a count), not all one digit after the country code.
pub(super) fn e164(s: &str) -> bool {
    let digits: Vec<u8> = s.bytes().filter(u8::is_ascii_digit).collect();
    let grouped = s.bytes().any(|b| matches!(b, b' ' | b'.' | b'-' | b'('));
    let range = if grouped { 8..=15 } else { 10..=15 };
    range.contains(&digits.len())
        && digits
            .get(3..)
            .is_some_and(|rest| rest.iter().any(|d| Some(d) != rest.first()))
}

/// Whether the number starting at `start` continues an account number written in groups
/// (`DE89 3704 0044 …`, `GB82-WEST-1234-…`): a chain of four-character groups of upper-case
/// letters and digits, joined by single spaces or dashes, that begins with a country code and
/// two check digits, the number's own first group one of them. Such a number is part of an
/// IBAN (valid or not), never a phone or card number of its own; a phone number after a code
/// (`LH12 020 7946 0958`) starts with a group of another length.
pub(super) fn inside_iban(text: &str, start: usize) -> bool {
    let b = text.as_bytes();
    let group_byte = |i: usize| {
        b.get(i)
            .is_some_and(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
    };
    let own = (start..).take_while(|&i| group_byte(i)).count();
    if own != 4 {
        return false;
    }
    let mut end = start;
    for _ in 0..8 {
        let Some(sep) = end.checked_sub(1) else {
            return false;
        };
        if !matches!(b.get(sep), Some(b' ' | b'-')) {
            return false;
        }
        let mut s = sep;
        while s > 0 && group_byte(s - 1) {
            s -= 1;
        }
        let Some(token) = b.get(s..sep).filter(|t| t.len() == 4) else {
            return false;
        };
        let head = token.iter().take(2).all(u8::is_ascii_uppercase)
            && token.iter().skip(2).take(2).all(u8::is_ascii_digit);
        let alone = s == 0 || b.get(s - 1).is_some_and(|c| !c.is_ascii_alphanumeric());
        if head && alone {
            return true;
        }
        end = s;
    }
    false
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
/// One unit of two to four characters, repeated to fill the whole value at least four times
/// (`asdfasdfasdf…`, `abababab`, `12341234123412341234`): typed, not drawn.
fn periodic(s: &str) -> bool {
    let b = s.as_bytes();
    (2..=4).any(|p| {
        b.len() >= 4 * p
            && b.len().is_multiple_of(p)
            && b.iter().zip(b.iter().skip(p)).all(|(x, y)| x == y)
    })
}

pub(super) fn placeholder(s: &str) -> bool {
    if s.len() > 256 {
        return false;
    }
    // Lowercased on the stack: this runs for every candidate secret.
    let mut buf = [0u8; 256];
    let Some(low) = buf.get_mut(..s.len()) else {
        return false;
    };
    low.copy_from_slice(s.as_bytes());
    low.make_ascii_lowercase();
    let Ok(lower) = std::str::from_utf8(low) else {
        return false;
    };
    // Fillers inside an otherwise valid format, up to 256 characters (not a key block):
    // `…EXAMPLE…`, `…tokenexample`, `xxxx`. A counting run must fill more than half the value (`abcdef12345`) or be eight long in a
    // token (`ghp_1234567890abcdef…`): `Welcome123456` is a weak password, not a filler.
    let run = counting_run(lower);
    // Byte windows, not `str::contains`: building its searcher twice per value was a sixth
    // of this check's cost on text dense with secrets.
    let holds = |w: &[u8]| low.windows(w.len()).any(|x| x == w);
    if holds(b"example")
        || holds(b"xxxx")
        || run * 2 > s.len() && run >= 6
        || s.len() >= 16 && (run >= 8 || repeat_run(lower) >= 8)
        || periodic(lower)
    {
        return true;
    }
    if s.len() > 48 {
        return false;
    }

    const BARE: [&str; 16] = [
        "todo",
        "tbd",
        "change-this",
        "changethis",
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
    if markers(lower) || BARE.contains(&lower) {
        return true;
    }
    if s.starts_with('<') || s.starts_with("${") || s.starts_with("{{") {
        return true;
    }
    // Mostly one repeated character (`XXXXXXXX`, `********`, `••••••••`) after any known
    // prefix.
    let mut counts = [0u8; 128];
    let mut wide: Vec<(char, u8)> = Vec::new();
    let (mut n, mut top) = (0usize, 0u8);
    for c in s.chars() {
        n += 1;
        let slot = match u8::try_from(c) {
            Ok(b) if b.is_ascii() => counts.get_mut(usize::from(b)),
            _ => {
                if !wide.iter().any(|(w, _)| *w == c) {
                    wide.push((c, 0));
                }
                wide.iter_mut().find(|(w, _)| *w == c).map(|(_, k)| k)
            }
        };
        if let Some(k) = slot {
            *k = k.saturating_add(1);
            top = top.max(*k);
        }
    }
    let top = usize::from(top);
    (n >= 8 && top * 10 >= n * 7) || (n >= 4 && top == n)
}

/// The longest run of one repeated character (`T00000000`, `XXXXXXXX`).
fn repeat_run(s: &str) -> usize {
    let (mut best, mut run, mut last) = (0usize, 0usize, None);
    for b in s.bytes() {
        run = if Some(b) == last { run + 1 } else { 1 };
        last = Some(b);
        best = best.max(run);
    }
    best
}

/// A public identifier with a random-looking body: Stripe's publishable keys (`pk_live_…`)
/// and object ids (`pi_…`, `evt_…`, `cus_…`).
pub(super) fn public_id(s: &str) -> bool {
    const PREFIXES: [&str; 16] = [
        "pk_live_", "pk_test_", "pi_", "evt_", "cus_", "ch_", "txn_", "acct_", "price_", "prod_",
        "sub_", "in_", "seti_", "src_", "pm_", "req_",
    ];
    // Stripe's shape: the prefix, then 14 or more letters and digits, nothing else.
    PREFIXES.iter().any(|p| {
        s.strip_prefix(p)
            .is_some_and(|rest| rest.len() >= 14 && rest.bytes().all(|b| b.is_ascii_alphanumeric()))
    })
}

/// Base64 of text (prose, MIME headers): decoded, it is printable with spaces between words.
/// A key decodes to binary. (`user:password` has no spaces and stays a finding.)
pub(super) fn encoded_text(s: &str) -> bool {
    use base64::Engine as _;
    let body = s.trim_start_matches(['+', '-']);
    for skip in 0..4 {
        let Some(part) = body.get(skip..) else {
            break;
        };
        let usable = part.len() / 4 * 4;
        let Some(part) = part.get(..usable) else {
            continue;
        };
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(part)
            .or_else(|_| base64::engine::general_purpose::URL_SAFE.decode(part));
        if let Ok(bytes) = decoded
            && bytes.len() >= 12
        {
            let printable = bytes
                .iter()
                .filter(|b| b.is_ascii_graphic() || b.is_ascii_whitespace())
                .count();
            let spaces = bytes.iter().filter(|b| b.is_ascii_whitespace()).count();
            if printable * 100 >= bytes.len() * 97 && spaces * 12 >= bytes.len() {
                return true;
            }
        }
    }
    false
}

/// Ciphertext made to be committed, not a secret: Vault transit (`vault:v1:…`), SOPS
/// (`ENC[AES256_GCM,…]`), Ansible Vault, SealedSecrets (`AgB…`, hundreds of characters).
pub(super) fn ciphertext(s: &str) -> bool {
    s.starts_with("vault:v")
        || s.starts_with("ENC[")
        || s.starts_with("$ANSIBLE_VAULT")
        || (s.len() >= 100
            && s.starts_with("Ag")
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'=')))
}

const MARKERS: [&str; 29] = [
    "example",
    "fake",
    "sample",
    "changeit",
    "mysecret",
    "for-testing",
    "for_testing",
    "not-a-real",
    "not_a_real",
    "insert-",
    "insert_",
    "your-",
    "your_",
    "-here",
    "_here",
    "placeholder",
    "changeme",
    "change-me",
    "change_me",
    "please-change",
    "replace-me",
    "replace_me",
    "replaceme",
    "set-me",
    "foobar",
    "dummy",
    "...",
    "***",
    "\u{2022}\u{2022}\u{2022}",
];

/// Whether a lowercased value holds a placeholder marker (one automaton pass).
fn markers(lower: &str) -> bool {
    static AC: std::sync::OnceLock<Option<aho_corasick::AhoCorasick>> = std::sync::OnceLock::new();
    AC.get_or_init(|| aho_corasick::AhoCorasick::new(MARKERS).ok())
        .as_ref()
        .map_or_else(
            || MARKERS.iter().any(|w| lower.contains(w)),
            |ac| ac.is_match(lower),
        )
}

/// The longest run of characters that count up or down by one (`12345`, `fedcba`).
fn counting_run(s: &str) -> usize {
    let b = s.as_bytes();
    let (mut best, mut up, mut down) = (1usize, 1usize, 1usize);
    let mut prev: Option<u8> = None;
    for &y in b {
        if let Some(x) = prev {
            let same_class = x.is_ascii_digit() == y.is_ascii_digit()
                && x.is_ascii_alphanumeric()
                && y.is_ascii_alphanumeric();
            up = if same_class && y == x.wrapping_add(1) {
                up + 1
            } else {
                1
            };
            down = if same_class && x == y.wrapping_add(1) {
                down + 1
            } else {
                1
            };
            best = best.max(up).max(down);
        }
        prev = Some(y);
    }
    best
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

/// Whether `s` reads as a name made of words: runs of four or more letters, each a capital
/// and lowercase letters or only lowercase ones (`Identifier`, `Version`, `name`), fill 60%
/// of it (`MyVeryLongIdentifierName2Version3`). A random token of any alphabet almost never
/// holds such runs.
pub(super) fn identifier_like(s: &str) -> bool {
    let b = s.as_bytes();
    let (mut in_words, mut run) = (0usize, 0usize);
    for (i, c) in b.iter().enumerate() {
        if c.is_ascii_lowercase() {
            run += 1;
            continue;
        }
        if run >= 4 {
            in_words += run;
        }
        let capital = c.is_ascii_uppercase() && b.get(i + 1).is_some_and(u8::is_ascii_lowercase);
        run = usize::from(capital);
    }
    if run >= 4 {
        in_words += run;
    }
    in_words * 5 >= s.len() * 3
}

/// Whether at least half of `s` is runs of four or more lowercase letters (words).
pub(super) fn wordy(s: &str) -> bool {
    words_fill_half(s, u8::is_ascii_lowercase)
}

/// Whether runs of four or more letters (`letter` says which count) make up half of `s`.
fn words_fill_half(s: &str, letter: fn(&u8) -> bool) -> bool {
    let (mut in_words, mut run) = (0usize, 0usize);
    for b in s.bytes().chain(std::iter::once(b' ')) {
        if letter(&b) {
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
        assert!(identifier_like("MyVeryLongIdentifierName2Version3"));
        assert!(dotted_name("argon2.low_level.ARGON2_VERSION"));
        assert!(placeholder("asdfasdfasdfasdfasdfasdf") && placeholder("abababab"));
        assert!(public_der(
            "MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAu1SU1LfVLPHCozMxH2Mo"
        ));
        assert!(public_der(
            "MIIDdzCCAl+gAwIBAgIEAgAAuTANBgkqhkiG9w0BAQUFADBaMQswCQYDVQQGEwJJ"
        ));
        assert!(!public_der(
            "MIIEvgIBADANBgkqhkiG9w0BAQEFAASCBKgwggSkAgEAAoIBAQCIQ5QJt9D"
        ));
        assert!(yaml_tag("!vault") && yaml_tag("!!binary") && yaml_tag("!GetAtt"));
        assert!(!yaml_tag("!5l4nds7%18") && !yaml_tag("!Qa2;wS3eD4r") && !yaml_tag("!~J@7nXU"));
        assert!(!placeholder("asdfasdfasdfasdfasdfasdX") && !placeholder("Zx9kZx9k"));
        assert!(!dotted_name(
            "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N"
        ));
        assert!(names_a_credential("raw_password") && names_a_credential("password}"));
        assert!(!names_a_credential("Passw0rd_2024") && !names_a_credential("hunter2"));
        assert!(!pair_value("Permission") && !pair_value("credit_card") && pair_value("hunter2"));
        assert!(!not_a_constant("NOTPROVIDED") && not_a_constant("Zx9kL2mQ"));
        assert!(!not_a_template("%(password)s") && not_a_template("!~J@7nXU"));
        assert!(webhook_path("T0A1B2C3D/B4E5F6G7H/q6si0pcrqpqs52abyv4koxcy"));
        assert!(!webhook_path(
            "Txxxxxxxx/Bxxxxxxxx/xxxxxxxxxxxxxxxxxxxxxxxx"
        ));
        assert!(identifier_like("AbstractSingletonProxyFactoryBean2Impl"));
        assert!(
            !identifier_like("q8Zt2mWv9LkP4xRn7Yb3") && !identifier_like("wJalrXUtnFEMI/K7MDENG")
        );
        assert!(ssn("123456789") && ssn("123 45 6789") && !ssn("12345678") && !ssn("12-345-6789"));
        assert!(iban("GB82-WEST-1234-5698-7654-32"));
        assert!(e164("+14155552671") && e164("+33 1 42 68 53 00") && e164("+81-3-1234-5678"));
        assert!(!e164("+12345678") && !e164("+1 555") && !e164("+1 000 000 0000"));
        assert!(inside_iban("DE89 3704 0044", 5) && inside_iban("GB82-WEST-1234", 10));
        assert!(!inside_iban("call 020 7946", 5) && !inside_iban("XDE89 3704", 6));
        assert!(!inside_iban("LH12 020 7946 0958", 5) && !inside_iban("LH12 bob@x.io", 5));
        assert!(ipv6("2001:db8::8a2e:370:7334") && !ipv6("12:30:45"));
        assert!(entropy("aaaa") < 0.1 && entropy("abcd") > 1.9);
        for p in [
            "AKIAIOSFODNN7EXAMPLE",
            "your-api-key-here",
            "********",
            "sk_test_XXXXXXXXXXXXXXXXXXXXXXXX",
            "<token>",
            "password",
            "fake-password",
            "fake_token_for_testing_only",
            "changeit",
            "sample-password",
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
