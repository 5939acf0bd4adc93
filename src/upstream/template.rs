//! Whether a URI is one a resource template (RFC 6570) can expand to: how a `resources/read`
//! of a URI no upstream lists finds the upstream whose template it fits.
//!
//! Each expression matches what its operator can expand to: `{var}` one or more characters
//! that simple expansion leaves unencoded or percent-encoded (no `/`, `?`, `#`); `{+var}` and
//! `{#var}` reserved expansion (anything, `#` first for the fragment); `{/var}`, `{.var}`,
//! `{;var}`, `{?var}`, `{&var}` their prefixed forms. Literal text matches itself.

/// Longest template matched (anything longer matches nothing).
const MAX_TEMPLATE: usize = 2048;

/// Whether `uri` is an expansion of `template`.
pub fn template_matches(template: &str, uri: &str) -> bool {
    if template.len() > MAX_TEMPLATE {
        return false;
    }
    let Some(pattern) = pattern(template) else {
        return false;
    };
    regex::Regex::new(&pattern).is_ok_and(|re| re.is_match(uri))
}

/// The anchored regular expression for `template`, or `None` when it is not well formed.
fn pattern(template: &str) -> Option<String> {
    const SIMPLE: &str = "(?:[A-Za-z0-9\\-._~]|%[0-9A-Fa-f]{2}|,)+";
    let mut out = String::from("^");
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let (literal, after) = rest.split_at(open);
        if literal.contains('}') {
            return None;
        }
        out.push_str(&regex::escape(literal));
        let close = after.find('}')?;
        let expression = after.get(1..close)?;
        rest = after.get(close + 1..)?;
        let (op, vars) = match expression.chars().next()? {
            c @ ('+' | '#' | '.' | '/' | ';' | '?' | '&') => (Some(c), expression.get(1..)?),
            _ => (None, expression),
        };
        let named = !vars.is_empty()
            && vars.split(',').all(|v| {
                let v = v.trim_end_matches('*');
                let v = v.split(':').next().unwrap_or_default();
                !v.is_empty()
                    && v.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.' || b == b'%')
            });
        if !named {
            return None;
        }
        out.push_str(match op {
            None => SIMPLE,
            Some('+') => ".*",
            Some('#') => "(?:#.*)?",
            Some('.') => "(?:\\.[^/?#.]*)*",
            Some('/') => "(?:/[^/?#]*)*",
            Some(';') => "(?:;[^/?#;]*)*",
            Some('?') => "(?:\\?[^#]*)?",
            _ => "(?:&[^#]*)?",
        });
    }
    if rest.contains('}') {
        return None;
    }
    out.push_str(&regex::escape(rest));
    out.push('$');
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::template_matches;

    #[test]
    fn simple_expressions_match_one_segment() {
        assert!(template_matches(
            "test://template/{id}/data",
            "test://template/123/data"
        ));
        assert!(template_matches(
            "file:///logs/{day}.log",
            "file:///logs/2026-11-28.log"
        ));
        assert!(!template_matches(
            "test://template/{id}/data",
            "test://template/1/2/data"
        ));
        assert!(!template_matches(
            "test://template/{id}/data",
            "test://template//data"
        ));
        assert!(!template_matches(
            "test://template/{id}/data",
            "test://template/123/data/x"
        ));
        assert!(!template_matches(
            "test://template/{id}",
            "other://template/1"
        ));
    }

    #[test]
    fn operators_match_their_expansions() {
        assert!(template_matches("repo://{+path}", "repo://src/lib.rs"));
        assert!(template_matches(
            "db://{table}{?limit,offset}",
            "db://users?limit=1&offset=2"
        ));
        assert!(template_matches("db://{table}{?limit}", "db://users"));
        assert!(template_matches("x://a{/seg}", "x://a/b"));
        assert!(!template_matches("x://a{/seg}", "x://a?b"));
    }

    #[test]
    fn malformed_templates_match_nothing() {
        assert!(!template_matches("x://{id", "x://{id"));
        assert!(!template_matches("x://{}", "x://{}"));
        assert!(!template_matches("x://id}", "x://id}"));
        assert!(!template_matches("x://{a b}", "x://c"));
        // Regex syntax in the literal part is literal.
        assert!(!template_matches("x://a.c/{id}", "x://abc/1"));
    }
}
