//! Hiding the operator's values (settings and secrets) in text the server logs or shows, in
//! every spelling that text can hold them in.
//!
//! Route code's output, exception messages and tracebacks hold a value as route code wrote it:
//! raw (`str`, `print`), as Python's `repr` and `ascii` show it (in a traceback, a dict, an
//! f-string's `!r`), as JSON (`json.dumps`, with and without `ensure_ascii`), backslash-escaped
//! otherwise (Rust's `{:?}`, C's and JavaScript's `\"`, Python's bytes repr of its UTF-8),
//! percent-encoded (`urllib.parse.quote`, `quote_plus`, `urlencode`, `encodeURIComponent`;
//! either case of hex), base64-encoded (standard or URL-safe, with or without padding, alone
//! or inside a longer base64 text such as a Basic `Authorization` header's `user:password`),
//! HTML-escaped (Python's `html.escape`, markupsafe's, the error page's own), and one level
//! of escaping over another (the `repr` of a JSON text). [`Redactor`] computes these spellings
//! once per set of values and replaces any of them, in one pass over the text, with `[NAME]`.
//!
//! What it cannot catch, and the README says so: part of a value, a value split across
//! lines, outputs or calls, other encodings (hex, rot13, base32, compression, encryption,
//! doubly percent-encoded), and any value route code computed from a secret.
//!
//! Not for: where the values come from or which are given (`crate::environment`), or where the
//! text goes (the sandbox's output and errors, the error page).

use std::{borrow::Cow, fmt::Write};

use aho_corasick::{AhoCorasick, MatchKind};
use base64::Engine;
use unicode_properties::{GeneralCategory, UnicodeGeneralCategory};

/// Replaces the spellings of a fixed set of values. Built once (per project, per reload); its
/// `redact` is one scan of the text whatever the number of values and spellings.
#[derive(Default)]
pub struct Redactor {
    /// Every spelling of every value, longest match wins; `None` when there are none, or
    /// when the automaton could not be built (it should never fail: values are at most an
    /// env file's size), and then `fallback` is searched instead.
    matcher: Option<AhoCorasick>,
    /// The spellings, in the matcher's pattern order.
    patterns: Vec<String>,
    /// The replacement (`[NAME]`) of each pattern.
    replacements: Vec<String>,
    /// Pattern indexes, longest first, when there is no matcher.
    fallback: Vec<usize>,
}

impl Redactor {
    /// A redactor of `values` (`(name, value)`), skipping those shorter than `min_chars`
    /// characters (they would match ordinary text).
    pub fn new(values: &[(String, String)], min_chars: usize) -> Redactor {
        // Longest values first, so that where two values' spellings are the same text, the
        // longer value's name is shown.
        let mut sorted: Vec<&(String, String)> = values
            .iter()
            .filter(|(_, v)| v.chars().count() >= min_chars)
            .collect();
        sorted.sort_by_key(|(_, v)| std::cmp::Reverse(v.len()));
        let mut patterns = Vec::new();
        let mut replacements = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for (name, value) in sorted {
            for spelling in spellings(value) {
                if seen.insert(spelling.clone()) {
                    patterns.push(spelling);
                    replacements.push(format!("[{name}]"));
                }
            }
        }
        if patterns.is_empty() {
            return Redactor::default();
        }
        let matcher = AhoCorasick::builder()
            .match_kind(MatchKind::LeftmostLongest)
            .build(&patterns)
            .map_err(|e| tracing::warn!("redaction falls back to a slower search: {e}"))
            .ok();
        let mut fallback = Vec::new();
        if matcher.is_none() {
            fallback = (0..patterns.len()).collect();
            fallback.sort_by_key(|&i| std::cmp::Reverse(patterns[i].len()));
        }
        Redactor {
            matcher,
            patterns,
            replacements,
            fallback,
        }
    }

    /// `text` with every spelling of every value replaced by `[NAME]`.
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        if let Some(matcher) = &self.matcher {
            if !matcher.is_match(text) {
                return Cow::Borrowed(text);
            }
            return Cow::Owned(matcher.replace_all(text, &self.replacements));
        }
        let mut text = Cow::Borrowed(text);
        for &i in &self.fallback {
            let pattern = self.patterns[i].as_str();
            if text.contains(pattern) {
                text = Cow::Owned(text.replace(pattern, &self.replacements[i]));
            }
        }
        text
    }
}

/// Every spelling of `value` that [`Redactor`] looks for (the raw value first), without
/// duplicates. Quotes around quoted spellings are left out: the text between them is what
/// identifies the value, whichever quote surrounds it.
pub fn spellings(value: &str) -> Vec<String> {
    let mut out: Vec<String> = vec![value.to_string()];
    let add = |spelling: String, out: &mut Vec<String>| {
        if !spelling.is_empty() && !out.contains(&spelling) {
            out.push(spelling);
        }
    };

    // Backslash escapes: Python's repr/ascii with either quote (and none: the
    // `unicode_escape` codec), JSON, Rust's `{:?}`, the bytes repr of the UTF-8.
    let mut escaped: Vec<String> = Vec::new();
    for quote in [Some('\''), Some('"'), None] {
        for ascii in [false, true] {
            escaped.push(python_escape(value, quote, ascii));
        }
        escaped.push(python_bytes_escape(value.as_bytes(), quote));
    }
    for style in [
        JsonStyle::Ascii,
        JsonStyle::Unicode,
        JsonStyle::AsciiUpperHex,
        JsonStyle::HtmlSafe,
        JsonStyle::SlashEscaped,
    ] {
        escaped.push(json_escape(value, style));
    }
    let debug = format!("{value:?}");
    escaped.push(debug[1..debug.len() - 1].to_string());
    escaped.push(value.escape_default().to_string());
    escaped.push(value.escape_debug().to_string());
    // One level of escaping over another (the repr of a JSON text, JSON of a repr).
    let once: Vec<String> = escaped.iter().filter(|s| *s != value).cloned().collect();
    for spelling in &once {
        escaped.push(python_escape(spelling, Some('\''), false));
        escaped.push(json_escape(spelling, JsonStyle::Unicode));
    }
    for spelling in escaped {
        add(spelling, &mut out);
    }

    for safe in [
        PercentSafe::Unreserved,
        PercentSafe::UnreservedAndSlash,
        PercentSafe::UriComponent,
        PercentSafe::Form,
    ] {
        for plus in [false, true] {
            for upper in [true, false] {
                add(percent_encode(value, safe, plus, upper), &mut out);
            }
        }
    }

    for spelling in base64_spellings(value.as_bytes()) {
        add(spelling, &mut out);
    }

    for double in ["&quot;", "&#34;", "\""] {
        for single in ["&#x27;", "&#39;", "'"] {
            add(html_escape(value, double, single), &mut out);
        }
    }
    out
}

/// Whether Python's `str.isprintable` holds for `c` (`repr` leaves it as it is): not a
/// control, format, surrogate, private-use, unassigned or separator character, save the space.
/// (The table is this crate's Unicode version; a character assigned after the sandbox
/// Python's Unicode version is printable here but escaped by `repr`.)
fn python_printable(c: char) -> bool {
    if c == ' ' {
        return true;
    }
    !matches!(
        c.general_category(),
        GeneralCategory::Control
            | GeneralCategory::Format
            | GeneralCategory::Surrogate
            | GeneralCategory::PrivateUse
            | GeneralCategory::Unassigned
            | GeneralCategory::SpaceSeparator
            | GeneralCategory::LineSeparator
            | GeneralCategory::ParagraphSeparator
    )
}

/// The text between the quotes of Python's `repr(value)` (`ascii`: of `ascii(value)`) when
/// `quote` surrounds it; `quote` `None`: no quote escaped (the `unicode_escape` codec's
/// spelling, when `ascii`).
fn python_escape(value: &str, quote: Option<char>, ascii: bool) -> String {
    let mut out = String::with_capacity(value.len() + 8);
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if Some(c) == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x7f && python_printable(c) => out.push(c),
            c if !ascii && (c as u32) > 0x7f && python_printable(c) => out.push(c),
            c => {
                let code = c as u32;
                let _ = if code < 0x100 {
                    write!(out, "\\x{code:02x}")
                } else if code < 0x10000 {
                    write!(out, "\\u{code:04x}")
                } else {
                    write!(out, "\\U{code:08x}")
                };
            }
        }
    }
    out
}

/// The text between the quotes of Python's `repr(value.encode())`.
fn python_bytes_escape(bytes: &[u8], quote: Option<char>) -> String {
    let mut out = String::with_capacity(bytes.len() + 8);
    for &b in bytes {
        match b {
            b'\\' => out.push_str("\\\\"),
            b'\t' => out.push_str("\\t"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b if Some(b as char) == quote => {
                out.push('\\');
                out.push(b as char);
            }
            0x20..=0x7e => out.push(b as char),
            b => {
                let _ = write!(out, "\\x{b:02x}");
            }
        }
    }
    out
}

/// How a JSON encoder escapes a string.
#[derive(Clone, Copy, PartialEq)]
enum JsonStyle {
    /// Python's `json.dumps` default (`ensure_ascii=True`): everything outside printable
    /// ASCII as `\uxxxx` (surrogate pairs above the BMP).
    Ascii,
    /// The same in upper-case hex (Java's, .NET's encoders).
    AsciiUpperHex,
    /// `ensure_ascii=False`, serde_json, JavaScript's `JSON.stringify`: controls only.
    Unicode,
    /// Go's `encoding/json`: controls, and `<`, `>`, `&` as `\u003c` ...
    HtmlSafe,
    /// PHP's `json_encode`: `/` as `\/` too.
    SlashEscaped,
}

/// The text between the quotes of `value` as a JSON string in `style`.
fn json_escape(value: &str, style: JsonStyle) -> String {
    let mut out = String::with_capacity(value.len() + 8);
    let unit = |out: &mut String, unit: u16| {
        let _ = if style == JsonStyle::AsciiUpperHex {
            write!(out, "\\u{unit:04X}")
        } else {
            write!(out, "\\u{unit:04x}")
        };
    };
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '/' if style == JsonStyle::SlashEscaped => out.push_str("\\/"),
            '<' | '>' | '&' if style == JsonStyle::HtmlSafe => unit(&mut out, c as u16),
            c if (c as u32) < 0x20 => unit(&mut out, c as u16),
            c if matches!(style, JsonStyle::Ascii | JsonStyle::AsciiUpperHex)
                && (c as u32) > 0x7e =>
            {
                let mut units = [0u16; 2];
                for u in c.encode_utf16(&mut units) {
                    unit(&mut out, *u);
                }
            }
            c => out.push(c),
        }
    }
    out
}

/// Which bytes a percent-encoder leaves as they are (besides ASCII letters and digits).
#[derive(Clone, Copy)]
enum PercentSafe {
    /// `urllib.parse.quote(v, safe="")`, `quote_plus`, `urlencode`: `_.-~`.
    Unreserved,
    /// `urllib.parse.quote(v)`: `_.-~/`.
    UnreservedAndSlash,
    /// JavaScript's `encodeURIComponent`: `-_.!~*'()`.
    UriComponent,
    /// application/x-www-form-urlencoded as the WHATWG URL standard and the url crate: `*-._`.
    Form,
}

impl PercentSafe {
    fn keeps(self, b: u8) -> bool {
        b.is_ascii_alphanumeric()
            || match self {
                PercentSafe::Unreserved => b"_.-~".contains(&b),
                PercentSafe::UnreservedAndSlash => b"_.-~/".contains(&b),
                PercentSafe::UriComponent => b"-_.!~*'()".contains(&b),
                PercentSafe::Form => b"*-._".contains(&b),
            }
    }
}

/// `value`'s UTF-8 percent-encoded: bytes `safe` keeps as they are, a space as `+` when
/// `plus`, hex in upper case when `upper`.
fn percent_encode(value: &str, safe: PercentSafe, plus: bool, upper: bool) -> String {
    let mut out = String::with_capacity(value.len() * 3);
    for &b in value.as_bytes() {
        if safe.keeps(b) {
            out.push(b as char);
        } else if plus && b == b' ' {
            out.push('+');
        } else {
            let _ = if upper {
                write!(out, "%{b:02X}")
            } else {
                write!(out, "%{b:02x}")
            };
        }
    }
    out
}

/// Base64 spellings of `bytes`: the whole value (standard and URL-safe alphabets, with and
/// without padding), and, for the value inside a longer encoded text, the characters that
/// depend on the value's bytes alone at each of the three alignments it can start at.
fn base64_spellings(bytes: &[u8]) -> Vec<String> {
    use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
    let mut out = vec![
        STANDARD.encode(bytes),
        URL_SAFE.encode(bytes),
        STANDARD_NO_PAD.encode(bytes),
        URL_SAFE_NO_PAD.encode(bytes),
    ];
    for engine in [STANDARD_NO_PAD, URL_SAFE_NO_PAD] {
        for offset in 0..3usize {
            let mut shifted = vec![0u8; offset];
            shifted.extend_from_slice(bytes);
            let encoded = engine.encode(&shifted);
            // Character i holds bits 6i..6i+6 of the stream; the value's are 8*offset..
            let first = (8 * offset).div_ceil(6);
            let end = (8 * (offset + bytes.len())) / 6;
            if end > first
                && let Some(core) = encoded.get(first..end)
            {
                out.push(core.to_string());
            }
        }
    }
    out
}

/// `value` HTML-escaped: `&`, `<`, `>` always, `"` as `double` and `'` as `single` (each may
/// be itself: left alone).
fn html_escape(value: &str, double: &str, single: &str) -> String {
    let mut out = String::with_capacity(value.len() + 8);
    for c in value.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str(double),
            '\'' => out.push_str(single),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALUE: &str = "pw\\Backslash'Quote\"é\u{1}\u{1F600}/ +x";

    fn redactor() -> Redactor {
        Redactor::new(&[("TOKEN".to_string(), VALUE.to_string())], 6)
    }

    #[test]
    fn python_spellings_match_cpython() {
        // repr(VALUE) in CPython 3.14: 'pw\\Backslash\'Quote"é\x01😀/ +x'
        assert_eq!(
            python_escape(VALUE, Some('\''), false),
            "pw\\\\Backslash\\'Quote\"é\\x01\u{1F600}/ +x"
        );
        // ascii(VALUE): 'pw\\Backslash\'Quote"\xe9\x01\U0001f600/ +x'
        assert_eq!(
            python_escape(VALUE, Some('\''), true),
            "pw\\\\Backslash\\'Quote\"\\xe9\\x01\\U0001f600/ +x"
        );
        // json.dumps(VALUE): "pw\\Backslash'Quote\"\u00e9\u0001\ud83d\ude00/ +x"
        assert_eq!(
            json_escape(VALUE, JsonStyle::Ascii),
            "pw\\\\Backslash'Quote\\\"\\u00e9\\u0001\\ud83d\\ude00/ +x"
        );
        // quote_plus(VALUE)
        assert_eq!(
            percent_encode(VALUE, PercentSafe::Unreserved, true, true),
            "pw%5CBackslash%27Quote%22%C3%A9%01%F0%9F%98%80%2F+%2Bx"
        );
        // html.escape(VALUE)
        assert_eq!(
            html_escape(VALUE, "&quot;", "&#x27;"),
            "pw\\Backslash&#x27;Quote&quot;é\u{1}\u{1F600}/ +x"
        );
    }

    #[test]
    fn every_spelling_is_replaced_and_other_text_is_kept() {
        let redactor = redactor();
        for spelling in spellings(VALUE) {
            let text = format!("before {spelling} after");
            assert_eq!(redactor.redact(&text), "before [TOKEN] after", "{spelling}");
        }
        assert!(matches!(redactor.redact("nothing here"), Cow::Borrowed(_)));
    }

    #[test]
    fn base64_inside_a_longer_text_is_found_at_every_alignment() {
        use base64::engine::general_purpose::STANDARD;
        let redactor = redactor();
        for prefix in ["", "u:", "us:", "use:"] {
            let encoded = STANDARD.encode(format!("{prefix}{VALUE}!!"));
            let redacted = redactor.redact(&encoded);
            assert!(redacted.contains("[TOKEN]"), "{prefix}: {redacted}");
            // At most a character of mixed bits is left on each side of the value's.
            assert!(redacted.len() <= 4 + 1 + "[TOKEN]".len() + 4, "{redacted}");
        }
    }

    #[test]
    fn short_values_are_left_alone_and_longer_values_win() {
        let redactor = Redactor::new(
            &[
                ("SHORT".to_string(), "true".to_string()),
                ("PART".to_string(), "secret".to_string()),
                ("WHOLE".to_string(), "secret-and-more".to_string()),
            ],
            6,
        );
        assert_eq!(
            redactor.redact("true secret-and-more secret"),
            "true [WHOLE] [PART]"
        );
    }
}
