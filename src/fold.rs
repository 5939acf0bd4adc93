//! Canonical text: what the detectors, manifest facts and provenance read, so that a value
//! cannot hide behind how it is written. Folding drops default-ignorable code points (zero-width
//! spaces and joiners, soft hyphens, bidi controls, tag characters, variation selectors),
//! applies compatibility decomposition (fullwidth `ＡＫＩＡ`, mathematical `𝐀`, ligatures),
//! drops the combining marks it leaves, and maps each remaining character that UTS 39 lists as
//! confusable with ASCII to that ASCII (Cyrillic `а`, Greek `Ο`).
//!
//! The folded text keeps, for each of its characters, the span of the original character it
//! came from, so a finding in the folded text masks the original span: an invisible character
//! inside a key is masked with the key.
//!
//! ASCII text is its own canonical form and costs one pass to recognise.

use std::borrow::Cow;

/// Default_Ignorable_Code_Point (Unicode DerivedCoreProperties), as inclusive ranges.
const IGNORABLE: [(u32, u32); 17] = [
    (0x00AD, 0x00AD),
    (0x034F, 0x034F),
    (0x061C, 0x061C),
    (0x115F, 0x1160),
    (0x17B4, 0x17B5),
    (0x180B, 0x180F),
    (0x200B, 0x200F),
    (0x202A, 0x202E),
    (0x2060, 0x206F),
    (0x3164, 0x3164),
    (0xFE00, 0xFE0F),
    (0xFEFF, 0xFEFF),
    (0xFFA0, 0xFFA0),
    (0xFFF0, 0xFFF8),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0000, 0xE0FFF),
];

/// Whether `c` is a default-ignorable code point (rendered as nothing).
pub fn ignorable(c: char) -> bool {
    let c = u32::from(c);
    IGNORABLE.iter().any(|&(lo, hi)| (lo..=hi).contains(&c))
}

/// Text folded to its canonical form, with where each of its characters came from.
#[derive(Debug)]
pub struct Folded {
    /// The canonical text.
    pub text: String,
    /// Per run of folded bytes that one original character became: `(folded start, original
    /// start, original end)`, in order.
    spans: Vec<(usize, usize, usize)>,
}

impl Folded {
    /// The original span of the folded span `start..end` (both on folded char boundaries): from
    /// the start of the original character the first folded one came from to the end of the
    /// one the last came from, so anything dropped in between is inside.
    pub fn original(&self, start: usize, end: usize) -> (usize, usize) {
        let at = |offset: usize| {
            let i = self.spans.partition_point(|&(f, _, _)| f <= offset);
            self.spans.get(i.saturating_sub(1)).copied()
        };
        let from = at(start).map_or(0, |(_, s, _)| s);
        let to = if end > start {
            at(end - 1).map_or(from, |(_, _, e)| e)
        } else {
            from
        };
        (from, to.max(from))
    }
}

/// `text` folded, or `None` when it is canonical already (nothing would change).
pub fn fold(text: &str) -> Option<Folded> {
    if text.is_ascii() {
        return None;
    }
    let mut out = String::with_capacity(text.len());
    let mut spans = Vec::new();
    let mut changed = false;
    for (at, c) in text.char_indices() {
        let end = at + c.len_utf8();
        let before = out.len();
        if c.is_ascii() {
            out.push(c);
        } else if ignorable(c) {
            changed = true;
            continue;
        } else {
            let mut emitted = false;
            unicode_normalization::char::decompose_compatible(c, |d| {
                if unicode_normalization::char::is_combining_mark(d) || ignorable(d) {
                    return;
                }
                emitted = true;
                push_confusable(d, &mut out);
            });
            if !emitted {
                // A combining mark on its own: nothing to match.
                changed = true;
                continue;
            }
            if out.get(before..) != Some(c.encode_utf8(&mut [0; 4])) {
                changed = true;
            }
        }
        spans.push((before, at, end));
    }
    changed.then_some(Folded { text: out, spans })
}

/// The text folded (or itself), without the spans: for what only reads text.
pub fn folded(text: &str) -> Cow<'_, str> {
    match fold(text) {
        Some(f) => Cow::Owned(f.text),
        None => Cow::Borrowed(text),
    }
}

/// Pushes `c`, or the ASCII it is confusable with (UTS 39 skeleton) when it is all ASCII.
fn push_confusable(c: char, out: &mut String) {
    if c.is_ascii() {
        out.push(c);
        return;
    }
    let mut buf = [0; 4];
    let one: &str = c.encode_utf8(&mut buf);
    let mut ascii = String::new();
    for p in unicode_security::skeleton(one) {
        if !p.is_ascii() {
            out.push(c);
            return;
        }
        ascii.push(p);
    }
    if ascii.is_empty() {
        out.push(c);
    } else {
        out.push_str(&ascii);
    }
}

#[cfg(test)]
mod tests {
    use super::{fold, folded};

    #[test]
    fn ascii_is_canonical_already() {
        assert!(fold("AKIAQWERTYUIOPASDFGH and more").is_none());
        assert!(fold("").is_none());
        // Text in other scripts with nothing to fold is left alone.
        assert!(fold("日本語のテキスト").is_none());
    }

    #[test]
    fn invisible_characters_go_and_their_span_is_kept() {
        let text = "key=AKIA\u{200B}QWERTYUIOP\u{00AD}ASDFGH end";
        let f = fold(text).unwrap();
        assert_eq!(f.text, "key=AKIAQWERTYUIOPASDFGH end");
        let start = f.text.find("AKIA").unwrap();
        let (s, e) = f.original(start, start + 20);
        assert_eq!(&text[s..e], "AKIA\u{200B}QWERTYUIOP\u{00AD}ASDFGH");
        // Tag characters and bidi controls too.
        assert_eq!(folded("a\u{E0041}b\u{202E}c"), "abc");
    }

    #[test]
    fn compatibility_forms_and_confusables_become_ascii() {
        // Fullwidth, mathematical bold, a ligature, Cyrillic and Greek look-alikes.
        assert_eq!(folded("ＡＫＩＡ"), "AKIA");
        assert_eq!(folded("𝐠𝐡𝐩_"), "ghp_");
        assert_eq!(folded("ﬁle"), "file");
        assert_eq!(folded("pаsswоrd"), "password");
        assert_eq!(folded("ΑΒΟ"), "ABO");
        // Accents go: what a detector reads is the letter.
        assert_eq!(folded("café"), "cafe");
        let text = "x ＡＫＩＡ y";
        let f = fold(text).unwrap();
        let start = f.text.find("AKIA").unwrap();
        let (s, e) = f.original(start, start + 4);
        assert_eq!(&text[s..e], "ＡＫＩＡ");
    }
}
