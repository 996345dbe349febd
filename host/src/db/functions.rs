//! SQL functions the host defines on route code's connections in place of SQLite's own.
//!
//! SQLite stops a statement between the steps of its program (the progress handler, see
//! [`super::sqlite`]), never inside one function call, and a few built-in functions can spend
//! minutes in one call: `instr` and `replace` compare the needle at every position (a 1 MB
//! needle in a 2 MB text is 10^12 comparisons), `trim` compares every character with every
//! character of its set, and `LIKE`/`GLOB` match patterns by recursion, one level of the C
//! stack per `%` (a 38 KB pattern aborted the whole process) and quadratic time. The
//! definitions here give the same answers (the same rules for text, blobs, numbers, invalid
//! UTF-8, `NUL`s, `ESCAPE`, `GLOB`'s `[...]` sets), but `instr`, `replace` and `trim` run in
//! linear time, `LIKE` and `GLOB` match without recursion, and each asks the running
//! statement's watch ([`super::sqlite::keep_going`]) as it goes, so a call stops at the
//! request's deadline and its CPU is charged to the request.
//!
//! `changes()` and `total_changes()` are redefined too, to count only what the current request
//! changed: a pooled connection must not tell one request what the previous one did.
//!
//! What differs: `LIKE` is never turned into an index range search (SQLite's "LIKE
//! optimization" works only with its own function); `PRAGMA case_sensitive_like`, which would
//! bring SQLite's function back, is refused by the guard (`GLOB` is the case-sensitive match).
//! Not here: which statements may run ([`super::guard`]).

use std::{
    collections::HashMap,
    ffi::{c_int, c_void},
    sync::{
        Arc,
        atomic::{AtomicI64, Ordering},
    },
};

use rusqlite::ffi;

use super::sqlite::keep_going;

/// How much work a function does between two questions to the watch.
const STEPS_PER_CHECK: usize = 1 << 16;

/// What a connection's `changes()` and `total_changes()` count from: the connection's total
/// when the current request took it.
#[derive(Default)]
pub struct Counters {
    baseline: AtomicI64,
}

impl Counters {
    /// A request takes the connection: nothing it did before counts.
    pub fn restart(&self, conn: &rusqlite::Connection) {
        // SAFETY: the handle is the open connection's; both calls only read or set counters.
        unsafe {
            let db = conn.handle();
            ffi::sqlite3_set_last_insert_rowid(db, 0);
            self.baseline
                .store(ffi::sqlite3_total_changes64(db), Ordering::Relaxed);
        }
    }
}

/// Define the functions on `conn`.
pub fn install(conn: &rusqlite::Connection, counters: &Arc<Counters>) -> rusqlite::Result<()> {
    let plain = std::ptr::null_mut::<c_void>();
    define(conn, "instr", 2, plain, instr, None)?;
    define(conn, "replace", 3, plain, replace, None)?;
    for (name, ends) in [("ltrim", LEFT), ("rtrim", RIGHT), ("trim", LEFT | RIGHT)] {
        let ends = ends as usize as *mut c_void;
        define(conn, name, 1, ends, trim, None)?;
        define(conn, name, 2, ends, trim, None)?;
    }
    define(conn, "like", 2, LIKE as usize as *mut c_void, like, None)?;
    define(conn, "like", 3, LIKE as usize as *mut c_void, like, None)?;
    define(conn, "glob", 2, GLOB as usize as *mut c_void, like, None)?;
    for (name, function) in [
        ("changes", changes as Function),
        ("total_changes", total_changes as Function),
    ] {
        let owned = Arc::into_raw(counters.clone()) as *mut c_void;
        define(conn, name, 0, owned, function, Some(release_counters))?;
    }
    Ok(())
}

type Function =
    unsafe extern "C" fn(*mut ffi::sqlite3_context, c_int, *mut *mut ffi::sqlite3_value);

fn define(
    conn: &rusqlite::Connection,
    name: &str,
    args: c_int,
    data: *mut c_void,
    function: Function,
    destroy: Option<unsafe extern "C" fn(*mut c_void)>,
) -> rusqlite::Result<()> {
    let name = std::ffi::CString::new(name).map_err(|_| rusqlite::Error::InvalidQuery)?;
    let mut flags = ffi::SQLITE_UTF8 | ffi::SQLITE_INNOCUOUS;
    if destroy.is_none() {
        flags |= ffi::SQLITE_DETERMINISTIC;
    }
    // SAFETY: the handle is the open connection's; `function` follows SQLite's calling
    // convention; `data` is either a plain number or an `Arc<Counters>` that `destroy` frees.
    let rc = unsafe {
        ffi::sqlite3_create_function_v2(
            conn.handle(),
            name.as_ptr(),
            args,
            flags,
            data,
            Some(function),
            None,
            None,
            destroy,
        )
    };
    if rc == ffi::SQLITE_OK {
        Ok(())
    } else {
        Err(rusqlite::Error::SqliteFailure(ffi::Error::new(rc), None))
    }
}

unsafe extern "C" fn release_counters(data: *mut c_void) {
    // SAFETY: `data` came from `Arc::into_raw` in `install`, once per definition.
    unsafe { drop(Arc::from_raw(data as *const Counters)) };
}

/// The arguments of one call.
struct Call {
    ctx: *mut ffi::sqlite3_context,
    argv: *mut *mut ffi::sqlite3_value,
    argc: usize,
}

impl Call {
    fn arg(&self, i: usize) -> *mut ffi::sqlite3_value {
        debug_assert!(i < self.argc);
        // SAFETY: SQLite passes `argc` valid values.
        unsafe { *self.argv.add(i) }
    }

    fn is_null(&self, i: usize) -> bool {
        // SAFETY: a valid value.
        unsafe { ffi::sqlite3_value_type(self.arg(i)) == ffi::SQLITE_NULL }
    }

    fn is_blob(&self, i: usize) -> bool {
        // SAFETY: a valid value.
        unsafe { ffi::sqlite3_value_type(self.arg(i)) == ffi::SQLITE_BLOB }
    }

    /// The value as text (numbers converted as SQLite converts them), `None` for NULL.
    fn text(&self, i: usize) -> Option<&[u8]> {
        // SAFETY: the pointer SQLite returns stays valid until the value changes, which it
        // does not during this call; the length is read after the text, as SQLite asks.
        unsafe {
            let p = ffi::sqlite3_value_text(self.arg(i));
            if p.is_null() {
                return None;
            }
            let n = ffi::sqlite3_value_bytes(self.arg(i));
            Some(std::slice::from_raw_parts(p, n.max(0) as usize))
        }
    }

    /// The value's bytes as a blob.
    fn blob(&self, i: usize) -> &[u8] {
        // SAFETY: as for `text`; a zero-length blob may be a null pointer.
        unsafe {
            let p = ffi::sqlite3_value_blob(self.arg(i)) as *const u8;
            let n = ffi::sqlite3_value_bytes(self.arg(i));
            if p.is_null() || n <= 0 {
                return &[];
            }
            std::slice::from_raw_parts(p, n as usize)
        }
    }

    fn user_data(&self) -> usize {
        // SAFETY: a valid context.
        unsafe { ffi::sqlite3_user_data(self.ctx) as usize }
    }

    fn limit(&self, which: c_int) -> usize {
        // SAFETY: a valid context's connection; -1 reads the limit without changing it.
        unsafe {
            ffi::sqlite3_limit(ffi::sqlite3_context_db_handle(self.ctx), which, -1).max(0) as usize
        }
    }

    fn int(&self, value: i64) {
        // SAFETY: a valid context.
        unsafe { ffi::sqlite3_result_int64(self.ctx, value) }
    }

    fn text_result(&self, value: &[u8]) {
        // SAFETY: SQLite copies the bytes (SQLITE_TRANSIENT) before this returns.
        unsafe {
            ffi::sqlite3_result_text64(
                self.ctx,
                value.as_ptr() as *const _,
                value.len() as u64,
                ffi::SQLITE_TRANSIENT(),
                ffi::SQLITE_UTF8 as u8,
            )
        }
    }

    fn error(&self, message: &str) {
        // SAFETY: SQLite copies the message.
        unsafe {
            ffi::sqlite3_result_error(
                self.ctx,
                message.as_ptr() as *const _,
                message.len() as c_int,
            )
        }
    }

    /// The statement was stopped (its deadline, its CPU, its request ended).
    fn interrupted(&self) {
        // SAFETY: a valid context.
        unsafe { ffi::sqlite3_result_error_code(self.ctx, ffi::SQLITE_INTERRUPT) }
    }

    fn too_big(&self) {
        // SAFETY: a valid context.
        unsafe { ffi::sqlite3_result_error_toobig(self.ctx) }
    }

    fn db(&self) -> *mut ffi::sqlite3 {
        // SAFETY: a valid context.
        unsafe { ffi::sqlite3_context_db_handle(self.ctx) }
    }
}

/// Asks the watch every [`STEPS_PER_CHECK`] steps.
struct Pacer(usize);

impl Pacer {
    fn step(&mut self, work: usize) -> bool {
        self.0 += work;
        if self.0 < STEPS_PER_CHECK {
            return true;
        }
        self.0 = 0;
        keep_going()
    }
}

/// Run `body` for SQLite; a panic becomes an error, never an unwind through C.
fn entry(
    ctx: *mut ffi::sqlite3_context,
    argc: c_int,
    argv: *mut *mut ffi::sqlite3_value,
    body: fn(&Call),
) {
    let call = Call {
        ctx,
        argv,
        argc: argc.max(0) as usize,
    };
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| body(&call))).is_err() {
        call.error("internal error in a host SQL function");
    }
}

/// Whether `b` continues a UTF-8 sequence.
fn continues(b: u8) -> bool {
    b & 0xc0 == 0x80
}

// --- instr(X, Y) --------------------------------------------------------------------------

unsafe extern "C" fn instr(
    ctx: *mut ffi::sqlite3_context,
    argc: c_int,
    argv: *mut *mut ffi::sqlite3_value,
) {
    entry(ctx, argc, argv, |call| {
        if call.is_null(0) || call.is_null(1) {
            return;
        }
        let as_blobs = call.is_blob(0) && call.is_blob(1);
        let (haystack, needle) = if as_blobs {
            (call.blob(0), call.blob(1))
        } else {
            match (call.text(0), call.text(1)) {
                (Some(h), Some(n)) => (h, n),
                _ => return,
            }
        };
        if needle.is_empty() {
            return call.int(1);
        }
        // Text is searched character by character: a match must start where a character
        // does (only invalid UTF-8 could match elsewhere).
        let finder = memchr::memmem::Finder::new(needle);
        let mut from = 0;
        let mut pacer = Pacer(0);
        let found = loop {
            let Some(at) = finder.find(&haystack[from..]).map(|at| from + at) else {
                break None;
            };
            if as_blobs || at == 0 || !continues(haystack[at]) {
                break Some(at);
            }
            if !pacer.step(at - from + 1) {
                return call.interrupted();
            }
            from = at + 1;
        };
        // SQLite steps from the first byte to each next character start, counting.
        let position = match found {
            None => 0,
            Some(at) if as_blobs => at as i64 + 1,
            Some(0) => 1,
            Some(at) => haystack[1..=at].iter().filter(|&&b| !continues(b)).count() as i64 + 1,
        };
        call.int(position);
    })
}

// --- replace(X, Y, Z) ---------------------------------------------------------------------

unsafe extern "C" fn replace(
    ctx: *mut ffi::sqlite3_context,
    argc: c_int,
    argv: *mut *mut ffi::sqlite3_value,
) {
    entry(ctx, argc, argv, |call| {
        let Some(text) = call.text(0) else { return };
        let Some(pattern) = call.text(1) else { return };
        if pattern.first().is_none_or(|&b| b == 0) {
            return call.text_result(text);
        }
        let Some(with) = call.text(2) else { return };
        let max = call.limit(ffi::SQLITE_LIMIT_LENGTH);
        let mut out = Vec::with_capacity(text.len());
        let mut pacer = Pacer(0);
        let mut last = 0;
        for at in memchr::memmem::find_iter(text, pattern) {
            out.extend_from_slice(&text[last..at]);
            out.extend_from_slice(with);
            last = at + pattern.len();
            if out.len() > max {
                return call.too_big();
            }
            if !pacer.step(with.len() + 1) {
                return call.interrupted();
            }
        }
        out.extend_from_slice(&text[last..]);
        if out.len() > max {
            return call.too_big();
        }
        call.text_result(&out);
    })
}

// --- trim(X [, Y]), ltrim, rtrim ----------------------------------------------------------

const LEFT: u8 = 1;
const RIGHT: u8 = 2;

unsafe extern "C" fn trim(
    ctx: *mut ffi::sqlite3_context,
    argc: c_int,
    argv: *mut *mut ffi::sqlite3_value,
) {
    entry(ctx, argc, argv, |call| {
        if call.is_null(0) {
            return;
        }
        let Some(text) = call.text(0) else { return };
        let set = if call.argc == 1 {
            CharSet::new(b" ")
        } else {
            match call.text(1) {
                Some(set) => CharSet::new(set),
                None => return,
            }
        };
        let ends = call.user_data() as u8;
        let (mut start, mut end) = (0, text.len());
        let mut pacer = Pacer(0);
        if !set.is_empty() {
            if ends & LEFT != 0 {
                while let Some(len) = set.prefix(&text[start..end]) {
                    start += len;
                    if !pacer.step(1) {
                        return call.interrupted();
                    }
                }
            }
            if ends & RIGHT != 0 {
                while let Some(len) = set.suffix(&text[start..end]) {
                    end -= len;
                    if !pacer.step(1) {
                        return call.interrupted();
                    }
                }
            }
        }
        call.text_result(&text[start..end]);
    })
}

/// The characters of `trim`'s second argument, as SQLite splits them (a byte of 0xc0 or more
/// and the continuation bytes after it; text ends at a NUL), each with its place in the set:
/// where two could match, the one that comes first in the set wins, as in SQLite.
struct CharSet<'a> {
    /// By length: each character of that length and its first place in the set.
    by_length: Vec<(usize, HashMap<&'a [u8], usize>)>,
}

impl<'a> CharSet<'a> {
    fn new(set: &'a [u8]) -> CharSet<'a> {
        let set = &set[..set.iter().position(|&b| b == 0).unwrap_or(set.len())];
        let mut by_length: Vec<(usize, HashMap<&[u8], usize>)> = Vec::new();
        let mut at = 0;
        let mut place = 0;
        while at < set.len() {
            let mut end = at + 1;
            if set[at] >= 0xc0 {
                while end < set.len() && continues(set[end]) {
                    end += 1;
                }
            }
            let len = end - at;
            let slot = match by_length.iter().position(|(l, _)| *l == len) {
                Some(slot) => slot,
                None => {
                    by_length.push((len, HashMap::new()));
                    by_length.len() - 1
                }
            };
            by_length[slot].1.entry(&set[at..end]).or_insert(place);
            place += 1;
            at = end;
        }
        CharSet { by_length }
    }

    fn is_empty(&self) -> bool {
        self.by_length.is_empty()
    }

    /// The length of the set's first character that `text` starts with.
    fn prefix(&self, text: &[u8]) -> Option<usize> {
        self.first(text, |len| text.get(..len))
    }

    /// The length of the set's first character that `text` ends with.
    fn suffix(&self, text: &[u8]) -> Option<usize> {
        self.first(text, |len| {
            text.len().checked_sub(len).map(|at| &text[at..])
        })
    }

    fn first<'t>(
        &self,
        text: &'t [u8],
        piece: impl Fn(usize) -> Option<&'t [u8]>,
    ) -> Option<usize> {
        if text.is_empty() {
            return None;
        }
        self.by_length
            .iter()
            .filter_map(|(len, chars)| Some((*chars.get(piece(*len)?)?, *len)))
            .min()
            .map(|(_, len)| len)
    }
}

// --- like(P, X [, E]) and glob(P, X) ------------------------------------------------------

/// `user_data` of the two pattern functions.
const LIKE: u8 = 1;
const GLOB: u8 = 2;

unsafe extern "C" fn like(
    ctx: *mut ffi::sqlite3_context,
    argc: c_int,
    argv: *mut *mut ffi::sqlite3_value,
) {
    entry(ctx, argc, argv, |call| {
        let glob = call.user_data() as u8 == GLOB;
        // SAFETY: a valid value.
        let pattern_bytes = unsafe { ffi::sqlite3_value_bytes(call.arg(0)) }.max(0) as usize;
        if pattern_bytes > call.limit(ffi::SQLITE_LIMIT_LIKE_PATTERN_LENGTH) {
            return call.error("LIKE or GLOB pattern too complex");
        }
        let mut rules = if glob { Rules::GLOB } else { Rules::LIKE };
        if call.argc == 3 {
            let Some(escape) = call.text(2) else { return };
            let escape = until_nul(escape);
            let mut chars = Utf8Chars::new(escape);
            let (Some(c), None) = (chars.next(), chars.next()) else {
                return call.error("ESCAPE expression must be a single character");
            };
            rules.escape = Some(c);
            if rules.any == Some(c) {
                rules.any = None;
            }
            if rules.one == Some(c) {
                rules.one = None;
            }
        }
        let (Some(pattern), Some(text)) = (call.text(0), call.text(1)) else {
            return;
        };
        let Some(pattern) = Pattern::compile(until_nul(pattern), &rules) else {
            return call.int(0);
        };
        match pattern.matches(until_nul(text), rules.no_case) {
            Some(found) => call.int(found as i64),
            None => call.interrupted(),
        }
    })
}

/// Text as C sees it: up to the first NUL.
fn until_nul(text: &[u8]) -> &[u8] {
    &text[..text.iter().position(|&b| b == 0).unwrap_or(text.len())]
}

/// Characters of text as SQLite reads them: a lead byte of 0xc0 or more takes every
/// continuation byte after it; an overlong form or a surrogate reads as U+FFFD; any other
/// byte is itself.
struct Utf8Chars<'a> {
    text: &'a [u8],
    at: usize,
}

impl<'a> Utf8Chars<'a> {
    fn new(text: &'a [u8]) -> Self {
        Utf8Chars { text, at: 0 }
    }
}

/// The payload bits of a lead byte of 0xc0 or more.
fn lead_bits(b: u8) -> u32 {
    match b {
        0xc0..=0xdf => (b & 0x1f) as u32,
        0xe0..=0xef => (b & 0x0f) as u32,
        0xf0..=0xf7 => (b & 0x07) as u32,
        0xf8..=0xfb => (b & 0x03) as u32,
        0xfc..=0xfd => (b & 0x01) as u32,
        _ => 0,
    }
}

impl Iterator for Utf8Chars<'_> {
    type Item = u32;

    fn next(&mut self) -> Option<u32> {
        let &first = self.text.get(self.at)?;
        self.at += 1;
        if first < 0xc0 {
            return Some(first as u32);
        }
        let mut c = lead_bits(first);
        while let Some(&b) = self.text.get(self.at) {
            if !continues(b) {
                break;
            }
            c = c.wrapping_shl(6).wrapping_add((b & 0x3f) as u32);
            self.at += 1;
        }
        if c < 0x80 || c & 0xFFFF_F800 == 0xD800 {
            c = 0xFFFD;
        }
        Some(c)
    }
}

/// What the pattern characters mean.
#[derive(Clone, Copy)]
struct Rules {
    any: Option<u32>,
    one: Option<u32>,
    escape: Option<u32>,
    /// `GLOB`'s `[...]`.
    sets: bool,
    /// ASCII letters match either case (`LIKE`).
    no_case: bool,
}

impl Rules {
    const LIKE: Rules = Rules {
        any: Some('%' as u32),
        one: Some('_' as u32),
        escape: None,
        sets: false,
        no_case: true,
    };
    const GLOB: Rules = Rules {
        any: Some('*' as u32),
        one: Some('?' as u32),
        escape: None,
        sets: true,
        no_case: false,
    };
}

/// One element of a compiled pattern.
enum Element {
    /// Any run of characters, empty included.
    Any,
    /// Exactly one character.
    One,
    /// This character.
    Char(u32),
    /// One character in (or, `invert`ed, not in) these inclusive ranges.
    Set {
        ranges: Vec<(u32, u32)>,
        invert: bool,
    },
}

struct Pattern(Vec<Element>);

impl Pattern {
    /// The pattern's elements, or `None` for a pattern that can match nothing (an escape or a
    /// `[` with nothing after it).
    fn compile(pattern: &[u8], rules: &Rules) -> Option<Pattern> {
        let mut chars = Utf8Chars::new(pattern);
        let mut elements = Vec::new();
        while let Some(c) = chars.next() {
            let element = if Some(c) == rules.any {
                Element::Any
            } else if Some(c) == rules.one {
                Element::One
            } else if Some(c) == rules.escape {
                Element::Char(chars.next()?)
            } else if rules.sets && c == '[' as u32 {
                Self::set(&mut chars)?
            } else {
                Element::Char(c)
            };
            // Runs of `%` are one `%`.
            if matches!(element, Element::Any) && matches!(elements.last(), Some(Element::Any)) {
                continue;
            }
            elements.push(element);
        }
        Some(Pattern(elements))
    }

    /// A `[...]` set, after its `[`: `^` first inverts it, `]` first is itself, `a-z` is a
    /// range unless the `-` is last; `None` when the `]` never comes.
    fn set(chars: &mut Utf8Chars<'_>) -> Option<Element> {
        let mut ranges = Vec::new();
        let mut invert = false;
        let mut c = chars.next()?;
        if c == '^' as u32 {
            invert = true;
            c = chars.next()?;
        }
        if c == ']' as u32 {
            ranges.push((c, c));
            c = chars.next()?;
        }
        let mut prior: Option<u32> = None;
        while c != ']' as u32 {
            let next_byte = chars.text.get(chars.at).copied();
            if c == '-' as u32
                && let Some(low) = prior
                && !matches!(next_byte, None | Some(b']'))
            {
                let high = chars.next()?;
                ranges.push((low, high));
                prior = None;
            } else {
                ranges.push((c, c));
                prior = (c > 0).then_some(c);
            }
            c = chars.next()?;
        }
        Some(Element::Set { ranges, invert })
    }

    /// Whether `text` matches, by the classic wildcard walk: on a mismatch, go back to the
    /// last `Any` and let it take one more character. No recursion; the watch is asked as it
    /// goes (`None`: stopped).
    fn matches(&self, text: &[u8], no_case: bool) -> Option<bool> {
        let elements = &self.0;
        let mut p = 0;
        let mut s = 0;
        // After the last `Any`: the next element, and where in the text it was tried.
        let mut retry: Option<(usize, usize)> = None;
        let mut pacer = Pacer(0);
        loop {
            if !pacer.step(1) {
                return None;
            }
            if p < elements.len() {
                if let Element::Any = elements[p] {
                    p += 1;
                    retry = Some((p, s));
                    continue;
                }
                let mut chars = Utf8Chars { text, at: s };
                if let Some(c) = chars.next()
                    && element_matches(&elements[p], c, no_case)
                {
                    p += 1;
                    s = chars.at;
                    continue;
                }
            } else if s == text.len() {
                return Some(true);
            }
            // A mismatch, or pattern done with text left: the last `Any` takes one more.
            let Some((after_any, tried_at)) = retry else {
                return Some(false);
            };
            let mut chars = Utf8Chars { text, at: tried_at };
            if chars.next().is_none() {
                return Some(false);
            }
            retry = Some((after_any, chars.at));
            p = after_any;
            s = chars.at;
        }
    }
}

fn element_matches(element: &Element, c: u32, no_case: bool) -> bool {
    match element {
        Element::Any | Element::One => true,
        Element::Char(want) => {
            *want == c
                || (no_case
                    && *want < 0x80
                    && c < 0x80
                    && (*want as u8).eq_ignore_ascii_case(&(c as u8)))
        }
        Element::Set { ranges, invert } => {
            ranges.iter().any(|&(low, high)| low <= c && c <= high) != *invert
        }
    }
}

// --- changes() and total_changes() --------------------------------------------------------

unsafe extern "C" fn changes(
    ctx: *mut ffi::sqlite3_context,
    argc: c_int,
    argv: *mut *mut ffi::sqlite3_value,
) {
    entry(ctx, argc, argv, |call| {
        let (total, baseline) = totals(call);
        // Nothing changed since the request took the connection: the last change was another
        // request's.
        // SAFETY: the context's open connection.
        let last = unsafe { ffi::sqlite3_changes64(call.db()) };
        call.int(if total == baseline { 0 } else { last });
    })
}

unsafe extern "C" fn total_changes(
    ctx: *mut ffi::sqlite3_context,
    argc: c_int,
    argv: *mut *mut ffi::sqlite3_value,
) {
    entry(ctx, argc, argv, |call| {
        let (total, baseline) = totals(call);
        call.int(total.saturating_sub(baseline));
    })
}

fn totals(call: &Call) -> (i64, i64) {
    // SAFETY: `user_data` is the `Counters` that `install` gave these functions, alive until
    // SQLite calls `release_counters`.
    let counters = unsafe { &*(call.user_data() as *const Counters) };
    // SAFETY: the context's open connection.
    let total = unsafe { ffi::sqlite3_total_changes64(call.db()) };
    (total, counters.baseline.load(Ordering::Relaxed))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conn() -> rusqlite::Connection {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        install(&conn, &Arc::new(Counters::default())).unwrap();
        conn
    }

    /// What SQLite's own functions answer, from a connection without ours.
    fn sqlite(sql: &str) -> rusqlite::types::Value {
        rusqlite::Connection::open_in_memory()
            .unwrap()
            .query_row(sql, [], |r| r.get(0))
            .unwrap()
    }

    fn ours(sql: &str) -> rusqlite::types::Value {
        conn().query_row(sql, [], |r| r.get(0)).unwrap()
    }

    #[test]
    fn answers_are_sqlites_own() {
        let cases = [
            "instr('hello', 'l')",
            "instr('héllo', 'l')",
            "instr('héllo', '')",
            "instr('abc', 'abcd')",
            "instr(x'00616263', x'63')",
            "instr(x'c3a9', 'é')",
            "instr(12345, 34)",
            "instr(1.5, '.')",
            "instr(NULL, 'a')",
            "instr('a', NULL)",
            "replace('aaaa', 'aa', 'b')",
            "replace('abc', '', 'x')",
            "replace('abc', NULL, 'x')",
            "replace('abc', 'b', NULL)",
            "replace(NULL, 'b', 'x')",
            "replace(123, 2, 9.5)",
            "replace('héhé', 'é', 'e')",
            "trim('  a  ')",
            "ltrim('xxaxx', 'x')",
            "rtrim('xxaxx', 'x')",
            "trim('ééaéé', 'é')",
            "trim('abcab', 'ba')",
            "trim('abc', '')",
            "trim('abc', NULL)",
            "trim(NULL)",
            "trim(12300, '0')",
            "'abc' LIKE 'a%'",
            "'ABC' LIKE 'a_c'",
            "'aBc' LIKE '%B%'",
            "'é' LIKE 'É'",
            "'é' LIKE '_'",
            "'a%c' LIKE 'a\\%c' ESCAPE '\\'",
            "'abc' LIKE 'a\\%c' ESCAPE '\\'",
            "'ab' LIKE 'ab\\' ESCAPE '\\'",
            "'a%' LIKE 'a%%' ESCAPE '%'",
            "'ax' LIKE 'a%%' ESCAPE '%'",
            "'a_b' LIKE 'a__b' ESCAPE '_'",
            "'abc' LIKE NULL",
            "NULL LIKE 'a'",
            "'abc' LIKE 'abc' ESCAPE NULL",
            "'' LIKE '%'",
            "'' LIKE '_'",
            "'mississippi' LIKE '%iss%ppi'",
            "'mississippi' LIKE '%iss%ppx'",
            "'abc' GLOB 'a*'",
            "'abc' GLOB 'A*'",
            "'abc' GLOB 'a?c'",
            "'abc' GLOB '[a-c]bc'",
            "'xbc' GLOB '[a-c]bc'",
            "'xbc' GLOB '[^a-c]bc'",
            "']' GLOB '[]]'",
            "'-' GLOB '[a-]'",
            "'b' GLOB '[a-]'",
            "'abc' GLOB '[abc'",
            "'abc' GLOB '*[c]'",
            "'a*b' GLOB 'a[*]b'",
            "'é' GLOB '[à-ê]'",
            "'abc' GLOB '*'",
            "x'616263' LIKE 'a%'",
            "'a' || char(0) || 'b' LIKE 'a'",
            "'a' LIKE 'a' || char(0) || 'x'",
            "123 LIKE '1%'",
            "cast(x'c3' AS TEXT) LIKE '_'",
            "cast(x'ff' AS TEXT) LIKE cast(x'ff' AS TEXT)",
            "cast(x'eda080' AS TEXT) LIKE cast(x'efbfbd' AS TEXT)",
        ];
        for case in cases {
            let sql = format!("SELECT {case}");
            assert_eq!(ours(&sql), sqlite(&sql), "{case}");
        }
    }

    #[test]
    fn like_and_glob_agree_with_sqlite_on_generated_cases() {
        // A small deterministic generator over an alphabet that exercises every rule.
        let alphabet = [
            "a", "b", "A", "%", "_", "*", "?", "[", "]", "^", "-", "é", "\\",
        ];
        let mut state = 0x2545F4914F6CDD1Du64;
        let mut pick = |n: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n as u64) as usize
        };
        let ours = conn();
        let theirs = rusqlite::Connection::open_in_memory().unwrap();
        for _ in 0..4000 {
            let mut word = || -> String {
                let len = pick(7);
                (0..len).map(|_| alphabet[pick(alphabet.len())]).collect()
            };
            let pattern = word();
            let text = word();
            for sql in [
                "SELECT ?2 LIKE ?1",
                "SELECT ?2 GLOB ?1",
                "SELECT ?2 LIKE ?1 ESCAPE '\\'",
                "SELECT ?2 LIKE ?1 ESCAPE '%'",
            ] {
                let a: Option<i64> = ours
                    .query_row(sql, [&pattern, &text], |r| r.get(0))
                    .unwrap();
                let b: Option<i64> = theirs
                    .query_row(sql, [&pattern, &text], |r| r.get(0))
                    .unwrap();
                assert_eq!(a, b, "{sql} with pattern {pattern:?}, text {text:?}");
            }
        }
    }

    #[test]
    fn a_pattern_of_thousands_of_wildcards_needs_no_stack() {
        let conn = conn();
        // SQLite's own largest pattern (50,000 bytes): 25,000 levels of its recursion.
        conn.set_limit(
            rusqlite::limits::Limit::SQLITE_LIMIT_LIKE_PATTERN_LENGTH,
            50_000,
        )
        .unwrap();
        let pattern = "a%".repeat(25_000);
        let found: i64 = conn
            .query_row("SELECT 'aaa' LIKE ?1", [&pattern], |r| r.get(0))
            .unwrap();
        assert_eq!(found, 0);
    }

    #[test]
    fn changes_count_only_what_the_current_request_did() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        let counters = Arc::new(Counters::default());
        install(&conn, &counters).unwrap();
        conn.execute_batch("CREATE TABLE t (x); INSERT INTO t VALUES (1), (2), (3);")
            .unwrap();
        counters.restart(&conn);
        let read = |sql: &str| conn.query_row(sql, [], |r| r.get::<_, i64>(0)).unwrap();
        assert_eq!(read("SELECT changes()"), 0);
        assert_eq!(read("SELECT total_changes()"), 0);
        assert_eq!(read("SELECT last_insert_rowid()"), 0);
        conn.execute("INSERT INTO t VALUES (4)", []).unwrap();
        assert_eq!(read("SELECT changes()"), 1);
        assert_eq!(read("SELECT total_changes()"), 1);
        assert_eq!(read("SELECT last_insert_rowid()"), 4);
    }
}
