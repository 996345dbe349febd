//! Reading route code's SQL before it goes to Postgres: a small lexer that knows where string
//! literals (`'...'`, `E'...'` with backslash escapes), quoted identifiers (`"..."`), comments
//! (`--`, nested `/* */`), dollar-quoted strings (`$$...$$`, `$tag$...$tag$`) and `::` casts
//! are, so that what it looks for is only found in the SQL itself.
//!
//! On that it builds what [`super::postgres`] needs: [`rewrite`] turns the placeholders route
//! code writes for Python's `sqlite3` (`?`, `?NNN`, `:name`, `@name`, `$name`; `$NNN` as
//! Postgres numbers them) into Postgres's `$1..$n` and orders the values to match;
//! [`names_host_table`] finds the host's own `_filerouter_` tables; [`statements`] splits a
//! script at its semicolons; [`keywords`] reads a statement's first words.
//!
//! Placeholders are numbered as SQLite numbers them: a `?` takes the number after the largest
//! so far, `?NNN` (and `$NNN`) is number NNN, and a name takes the next number the first time
//! it appears and the same number after. A `?` is always a placeholder: Postgres's JSON
//! operators `?`, `?|` and `?&` must be written as the functions `jsonb_exists`,
//! `jsonb_exists_any` and `jsonb_exists_all`. A `:name` inside an array slice (`a[lo:hi]`) is
//! read as a placeholder too; write the bounds as numbers or with spaces (`a[lo : hi]`).

use super::{DbError, Params, Value, guard::HOST_TABLE_PREFIX};

/// The largest placeholder number (SQLite's `SQLITE_MAX_VARIABLE_NUMBER`).
pub const MAX_PARAMETER: usize = 32766;

/// One placeholder as written.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Placeholder {
    /// `?`
    Next,
    /// `?NNN` or `$NNN`.
    Numbered(usize),
    /// `:name`, `@name` or `$name`, with its sign.
    Named(String),
}

/// What a stretch of SQL is.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    /// An unquoted word: a keyword or an identifier.
    Word,
    /// `"..."`; its text without the quotes, `""` unescaped.
    QuotedIdentifier(String),
    /// `'...'`, `E'...'`, `B'...'`, `X'...'`, `U&'...'`.
    String,
    /// `$tag$...$tag$`; the byte range of its body.
    DollarString(std::ops::Range<usize>),
    Comment,
    Placeholder(Placeholder),
    Semicolon,
    /// Anything else: white space, numbers, operators, punctuation, `::`.
    Other,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Piece {
    kind: Kind,
    start: usize,
    end: usize,
}

fn is_ident_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_' || b >= 0x80
}

fn is_ident_char(b: u8) -> bool {
    is_ident_start(b) || b.is_ascii_digit() || b == b'$'
}

/// Cut `sql` into pieces. Unterminated strings, identifiers and comments run to the end (the
/// server reports them).
fn lex(sql: &str) -> Vec<Piece> {
    let bytes = sql.as_bytes();
    let len = bytes.len();
    let mut pieces = Vec::new();
    let mut i = 0;
    let at = |i: usize| bytes.get(i).copied().unwrap_or(0);
    while i < len {
        let start = i;
        let b = bytes[i];
        let kind = match b {
            b'-' if at(i + 1) == b'-' => {
                i = sql[i..].find('\n').map_or(len, |n| i + n + 1);
                Kind::Comment
            }
            b'/' if at(i + 1) == b'*' => {
                // Postgres's block comments nest.
                let mut depth = 0usize;
                while i < len {
                    if bytes[i] == b'/' && at(i + 1) == b'*' {
                        depth += 1;
                        i += 2;
                    } else if bytes[i] == b'*' && at(i + 1) == b'/' {
                        depth -= 1;
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        i += 1;
                    }
                }
                Kind::Comment
            }
            b'\'' => {
                i = end_of_string(bytes, i + 1, false);
                Kind::String
            }
            b'"' => {
                let (end, text) = quoted_identifier(sql, i + 1);
                i = end;
                Kind::QuotedIdentifier(text)
            }
            b';' => {
                i += 1;
                Kind::Semicolon
            }
            b':' if at(i + 1) == b':' => {
                i += 2;
                Kind::Other
            }
            b':' | b'@' if is_ident_start(at(i + 1)) => {
                i += 1;
                while i < len && is_ident_char_no_dollar(bytes[i]) {
                    i += 1;
                }
                Kind::Placeholder(Placeholder::Named(sql[start..i].to_string()))
            }
            b'?' => {
                i += 1;
                while i < len && bytes[i].is_ascii_digit() {
                    i += 1;
                }
                if i == start + 1 {
                    Kind::Placeholder(Placeholder::Next)
                } else {
                    Kind::Placeholder(Placeholder::Numbered(number(&sql[start + 1..i])))
                }
            }
            b'$' => dollar(sql, &mut i),
            b'0'..=b'9' => {
                while i < len && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                    i += 1;
                }
                Kind::Other
            }
            b if is_ident_start(b) => {
                // E'...' (backslash escapes), U&'...' and U&"...", B'...', X'...', N'...'.
                let prefix_string = |i: usize| at(i) == b'\'';
                if matches!(b, b'e' | b'E') && prefix_string(i + 1) {
                    i = end_of_string(bytes, i + 2, true);
                    Kind::String
                } else if matches!(b, b'b' | b'B' | b'x' | b'X' | b'n' | b'N')
                    && prefix_string(i + 1)
                {
                    i = end_of_string(bytes, i + 2, false);
                    Kind::String
                } else if matches!(b, b'u' | b'U') && at(i + 1) == b'&' && at(i + 2) == b'\'' {
                    i = end_of_string(bytes, i + 3, false);
                    Kind::String
                } else if matches!(b, b'u' | b'U') && at(i + 1) == b'&' && at(i + 2) == b'"' {
                    let (end, text) = quoted_identifier(sql, i + 3);
                    i = end;
                    Kind::QuotedIdentifier(text)
                } else {
                    while i < len && is_ident_char(bytes[i]) {
                        i += 1;
                    }
                    Kind::Word
                }
            }
            _ => {
                // One character (whole, for UTF-8 beyond ASCII; those start words above).
                i += 1;
                Kind::Other
            }
        };
        pieces.push(Piece {
            kind,
            start,
            end: i,
        });
    }
    pieces
}

/// Names of placeholders are letters, digits and `_` (a `$` would be read as part of them).
fn is_ident_char_no_dollar(b: u8) -> bool {
    is_ident_start(b) || b.is_ascii_digit()
}

/// The number of `?NNN`/`$NNN` (past the largest allowed when it does not fit).
fn number(digits: &str) -> usize {
    digits.parse().unwrap_or(usize::MAX)
}

/// Past the `'` that closes a string whose text starts at `i`; `''` is a quote, and with
/// `backslashes` (`E'...'`) so is `\'`.
fn end_of_string(bytes: &[u8], mut i: usize, backslashes: bool) -> usize {
    while i < bytes.len() {
        match bytes[i] {
            b'\\' if backslashes => i += 2,
            b'\'' if bytes.get(i + 1) == Some(&b'\'') => i += 2,
            b'\'' => return i + 1,
            _ => i += 1,
        }
    }
    bytes.len()
}

/// Past the `"` that closes a quoted identifier whose text starts at `i`, and its text.
fn quoted_identifier(sql: &str, start: usize) -> (usize, String) {
    let bytes = sql.as_bytes();
    let mut i = start;
    let mut text = String::new();
    let mut from = start;
    while i < bytes.len() {
        if bytes[i] == b'"' {
            text.push_str(&sql[from..i]);
            if bytes.get(i + 1) == Some(&b'"') {
                text.push('"');
                i += 2;
                from = i;
                continue;
            }
            return (i + 1, text);
        }
        i += 1;
    }
    text.push_str(&sql[from..]);
    (bytes.len(), text)
}

/// A `$` at `*i`: a dollar-quoted string, `$NNN`, `$name`, or a lone `$`.
fn dollar(sql: &str, i: &mut usize) -> Kind {
    let bytes = sql.as_bytes();
    let start = *i;
    let mut j = start + 1;
    if bytes.get(j).is_some_and(|b| b.is_ascii_digit()) {
        while j < bytes.len() && bytes[j].is_ascii_digit() {
            j += 1;
        }
        *i = j;
        return Kind::Placeholder(Placeholder::Numbered(number(&sql[start + 1..j])));
    }
    while j < bytes.len() && is_ident_char_no_dollar(bytes[j]) {
        j += 1;
    }
    if bytes.get(j) == Some(&b'$') {
        // `$$` or `$tag$`: the body runs to the same tag.
        let tag = &sql[start..=j];
        let body = j + 1;
        match sql[body..].find(tag) {
            Some(n) => {
                *i = body + n + tag.len();
                Kind::DollarString(body..body + n)
            }
            None => {
                *i = sql.len();
                Kind::DollarString(body..sql.len())
            }
        }
    } else if j > start + 1 {
        *i = j;
        Kind::Placeholder(Placeholder::Named(sql[start..j].to_string()))
    } else {
        *i = start + 1;
        Kind::Other
    }
}

/// A statement with Postgres's `$1..$n` for route code's placeholders, and the values in that
/// order (as [`Params`] gave them).
#[derive(Debug, Clone, PartialEq)]
pub struct Rewritten {
    pub sql: String,
    pub values: Vec<Value>,
}

/// Rewrite `sql`'s placeholders to `$1..$n` and pick their values from `params`, with the
/// errors Python's `sqlite3` raises for a wrong count or a missing name.
pub fn rewrite(sql: &str, params: &Params) -> Result<Rewritten, DbError> {
    let pieces = lex(sql);
    // Number the placeholders as SQLite does.
    let mut largest = 0usize;
    let mut names: Vec<(String, usize)> = Vec::new();
    let mut numbered: Vec<(usize, usize)> = Vec::new(); // (piece index, number)
    for (index, piece) in pieces.iter().enumerate() {
        let Kind::Placeholder(placeholder) = &piece.kind else {
            continue;
        };
        let n = match placeholder {
            Placeholder::Next => largest + 1,
            Placeholder::Numbered(n) => {
                if *n == 0 || *n > MAX_PARAMETER {
                    return Err(DbError::Operational(format!(
                        "variable number must be between ?1 and ?{MAX_PARAMETER}"
                    )));
                }
                *n
            }
            Placeholder::Named(name) => match names.iter().find(|(known, _)| known == name) {
                Some((_, n)) => *n,
                None => {
                    names.push((name.clone(), largest + 1));
                    largest + 1
                }
            },
        };
        if n > MAX_PARAMETER {
            return Err(DbError::Operational("too many SQL variables".into()));
        }
        largest = largest.max(n);
        numbered.push((index, n));
    }
    let values = match params {
        Params::None | Params::Positional(_) => {
            let given: &[Value] = match params {
                Params::Positional(values) => values,
                _ => &[],
            };
            if given.len() != largest {
                return Err(DbError::Programming(format!(
                    "Incorrect number of bindings supplied. The current statement uses {largest}, and there are {} supplied.",
                    given.len()
                )));
            }
            given.to_vec()
        }
        Params::Named(given) => {
            let mut values = Vec::with_capacity(largest);
            for n in 1..=largest {
                let Some((name, _)) = names.iter().find(|(_, known)| *known == n) else {
                    return Err(DbError::Programming(format!(
                        "Binding {n} has no name, but you supplied a dictionary (which has only names)."
                    )));
                };
                let bare = &name[1..];
                let value = given
                    .iter()
                    .find(|(key, _)| key == bare)
                    .map(|(_, value)| value.clone())
                    .ok_or_else(|| {
                        DbError::Programming(format!(
                            "You did not supply a value for binding parameter {name}."
                        ))
                    })?;
                values.push(value);
            }
            values
        }
    };
    let mut out = String::with_capacity(sql.len() + 8);
    let mut from = 0;
    for (index, n) in numbered {
        let piece = &pieces[index];
        out.push_str(&sql[from..piece.start]);
        // `a$1` would be one identifier: keep a placeholder apart from a word before it.
        if out.as_bytes().last().is_some_and(|b| is_ident_char(*b)) {
            out.push(' ');
        }
        out.push('$');
        out.push_str(&n.to_string());
        from = piece.end;
    }
    out.push_str(&sql[from..]);
    Ok(Rewritten { sql: out, values })
}

/// The first host table `sql` names (a word or quoted identifier starting with `_filerouter_`,
/// or the prefix anywhere in a dollar-quoted body such as a function's), outside string
/// literals and comments.
pub fn names_host_table(sql: &str) -> Option<String> {
    let prefixed = |text: &str| {
        text.len() >= HOST_TABLE_PREFIX.len()
            && text.as_bytes()[..HOST_TABLE_PREFIX.len()]
                .eq_ignore_ascii_case(HOST_TABLE_PREFIX.as_bytes())
    };
    for piece in lex(sql) {
        match &piece.kind {
            Kind::Word if prefixed(&sql[piece.start..piece.end]) => {
                return Some(sql[piece.start..piece.end].to_string());
            }
            Kind::QuotedIdentifier(text) if prefixed(text) => return Some(text.clone()),
            Kind::DollarString(body) => {
                let lower = sql[body.clone()].to_ascii_lowercase();
                if let Some(at) = lower.find(HOST_TABLE_PREFIX) {
                    let word: String = sql[body.start + at..body.end]
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    return Some(word);
                }
            }
            _ => {}
        }
    }
    None
}

/// One statement of a script: its byte offset and its text (without the `;`). Statements that
/// hold nothing but white space and comments are left out, as Postgres skips them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Statement<'a> {
    pub offset: usize,
    pub text: &'a str,
}

/// Split `script` at its semicolons (not those in strings, comments or dollar-quoted bodies,
/// nor those inside a `CREATE FUNCTION ... BEGIN ATOMIC ... END` body).
pub fn statements<'a>(script: &'a str) -> Vec<Statement<'a>> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut first: Vec<String> = Vec::new();
    let mut depth = 0usize;
    let mut meaningful = false;
    let push = |out: &mut Vec<Statement<'a>>, start: usize, end: usize, meaningful: bool| {
        if meaningful {
            out.push(Statement {
                offset: start,
                text: &script[start..end],
            });
        }
    };
    for piece in lex(script) {
        match &piece.kind {
            Kind::Semicolon if depth == 0 => {
                push(&mut out, start, piece.start, meaningful);
                start = piece.end;
                first.clear();
                meaningful = false;
            }
            Kind::Comment | Kind::Semicolon => {}
            Kind::Other
                if script[piece.start..piece.end]
                    .trim_matches(|c: char| c.is_whitespace())
                    .is_empty() => {}
            Kind::Word => {
                meaningful = true;
                let word = script[piece.start..piece.end].to_ascii_uppercase();
                // psql's rule: in CREATE [OR REPLACE] FUNCTION or PROCEDURE, BEGIN and CASE
                // open a block that END closes (SQL-standard bodies hold semicolons).
                if matches!(word.as_str(), "BEGIN" | "CASE") && creates_routine(&first) {
                    depth += 1;
                } else if word == "END" {
                    depth = depth.saturating_sub(1);
                }
                if first.len() < 4 {
                    first.push(word);
                }
            }
            _ => meaningful = true,
        }
    }
    push(&mut out, start, script.len(), meaningful);
    out
}

/// Whether a statement starting with `words` creates a function or a procedure.
fn creates_routine(words: &[String]) -> bool {
    let routine = |w: Option<&String>| w.is_some_and(|w| w == "FUNCTION" || w == "PROCEDURE");
    words.first().is_some_and(|w| w == "CREATE")
        && (routine(words.get(1))
            || (words.get(1).is_some_and(|w| w == "OR")
                && words.get(2).is_some_and(|w| w == "REPLACE")
                && routine(words.get(3))))
}

/// The first `n` words of `sql` (past white space and comments; stops at anything that is not
/// a word), upper case.
pub fn keywords(sql: &str, n: usize) -> Vec<String> {
    let mut words = Vec::new();
    for piece in lex(sql) {
        if words.len() == n {
            break;
        }
        match piece.kind {
            Kind::Comment => {}
            Kind::Other if sql[piece.start..piece.end].trim().is_empty() => {}
            Kind::Word => words.push(sql[piece.start..piece.end].to_ascii_uppercase()),
            _ => break,
        }
    }
    words
}

/// Whether `sql` holds the words `AND CHAIN` (not `AND NO CHAIN`) outside strings and comments.
pub fn chains(sql: &str) -> bool {
    let words: Vec<String> = lex(sql)
        .into_iter()
        .filter(|p| p.kind == Kind::Word)
        .map(|p| sql[p.start..p.end].to_ascii_uppercase())
        .collect();
    words.windows(2).any(|w| w[0] == "AND" && w[1] == "CHAIN")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn positional(sql: &str, n: i64) -> Rewritten {
        rewrite(
            sql,
            &Params::Positional((1..=n).map(Value::Integer).collect()),
        )
        .unwrap()
    }

    fn named(sql: &str, names: &[&str]) -> Result<Rewritten, DbError> {
        rewrite(
            sql,
            &Params::Named(
                names
                    .iter()
                    .enumerate()
                    .map(|(i, name)| (name.to_string(), Value::Integer(i as i64 + 1)))
                    .collect(),
            ),
        )
    }

    #[test]
    fn question_marks_become_numbered_placeholders() {
        let r = positional("SELECT * FROM t WHERE a = ? AND b = ?", 2);
        assert_eq!(r.sql, "SELECT * FROM t WHERE a = $1 AND b = $2");
        assert_eq!(r.values, [Value::Integer(1), Value::Integer(2)]);
        assert_eq!(positional("VALUES(?,?)", 2).sql, "VALUES($1,$2)");
        // ?NNN as SQLite numbers them; the next ? follows the largest.
        assert_eq!(positional("SELECT ?2, ?1, ?", 3).sql, "SELECT $2, $1, $3");
        // Postgres's own $NNN stays as it is.
        assert_eq!(
            positional("SELECT $2::int, $1", 2).sql,
            "SELECT $2::int, $1"
        );
        assert_eq!(positional("SELECT a?", 1).sql, "SELECT a $1");
    }

    #[test]
    fn literals_comments_and_casts_are_left_alone() {
        let sql = "SELECT '?', 'it''s :x', E'\\' ?', \"?col\", $$ ? :y $$, $fn$ @z ? $fn$, \
                   x::text, -- ? :c\n /* ? /* nested ? */ :d */ ?";
        let r = positional(sql, 1);
        assert_eq!(
            r.sql,
            "SELECT '?', 'it''s :x', E'\\' ?', \"?col\", $$ ? :y $$, $fn$ @z ? $fn$, \
                   x::text, -- ? :c\n /* ? /* nested ? */ :d */ $1"
        );
        // A word ending in $ is an identifier, and `:=` / `=>` are not names.
        assert_eq!(
            positional("SELECT a$b, f(x := ?)", 1).sql,
            "SELECT a$b, f(x := $1)"
        );
        // Operators around @ stay.
        assert_eq!(
            positional("SELECT a @> b, c <@ d, ?", 1).sql,
            "SELECT a @> b, c <@ d, $1"
        );
        // Unterminated pieces run to the end.
        assert_eq!(positional("SELECT 'abc ?", 0).sql, "SELECT 'abc ?");
        assert_eq!(positional("SELECT $$ ?", 0).sql, "SELECT $$ ?");
        assert_eq!(positional("SELECT /* ?", 0).sql, "SELECT /* ?");
        // Non-ASCII text around placeholders.
        assert_eq!(
            positional("SELECT 'é?' || ? || \"ü\"", 1).sql,
            "SELECT 'é?' || $1 || \"ü\""
        );
        // Array slices with numbers are not names.
        assert_eq!(positional("SELECT a[1:2], ?", 1).sql, "SELECT a[1:2], $1");
    }

    #[test]
    fn names_take_numbers_in_order_of_first_appearance() {
        let r = named(
            "SELECT :a, @b, $c, :a WHERE x = :b",
            &["c", "b", "a", "extra"],
        )
        .unwrap();
        // :a → $1, @b → $2, $c → $3, :a again $1, :b is another name than @b → $4.
        assert_eq!(r.sql, "SELECT $1, $2, $3, $1 WHERE x = $4");
        assert_eq!(
            r.values,
            [
                Value::Integer(3),
                Value::Integer(2),
                Value::Integer(1),
                Value::Integer(2)
            ]
        );
        let missing = named("SELECT :a, :x", &["a"]).unwrap_err();
        assert_eq!(
            missing,
            DbError::Programming("You did not supply a value for binding parameter :x.".into())
        );
        let unnamed = named("SELECT ?", &["a"]).unwrap_err();
        assert!(
            matches!(&unnamed, DbError::Programming(m) if m.starts_with("Binding 1 has no name")),
            "{unnamed:?}"
        );
        // A name bound by position, as SQLite allows.
        assert_eq!(positional("SELECT :a, :b, :a", 2).sql, "SELECT $1, $2, $1");
    }

    #[test]
    fn wrong_counts_read_as_in_sqlite() {
        let error = rewrite("SELECT ?, ?", &Params::Positional(vec![Value::Null])).unwrap_err();
        assert_eq!(
            error,
            DbError::Programming(
                "Incorrect number of bindings supplied. The current statement uses 2, and there are 1 supplied.".into()
            )
        );
        let error = rewrite("SELECT ?", &Params::None).unwrap_err();
        assert!(
            error.to_string().contains("uses 1, and there are 0"),
            "{error}"
        );
        assert!(rewrite("SELECT 1", &Params::None).is_ok());
        assert!(rewrite("SELECT ?0", &Params::None).is_err());
        assert!(rewrite("SELECT ?99999999999999999999999", &Params::None).is_err());
    }

    #[test]
    fn host_tables_are_found_outside_string_literals() {
        for sql in [
            "SELECT * FROM _filerouter_migrations",
            "select * from public._FILEROUTER_kv",
            "DELETE FROM \"_filerouter_migrations\"",
            "CREATE FUNCTION f() RETURNS int AS $$ SELECT count(*) FROM _filerouter_migrations $$ LANGUAGE sql",
            "DO $x$ BEGIN EXECUTE 'DROP TABLE _filerouter_migrations'; END $x$",
        ] {
            assert!(names_host_table(sql).is_some(), "{sql}");
        }
        for sql in [
            "INSERT INTO notes (text) VALUES ('_filerouter_migrations')",
            "SELECT 1 -- _filerouter_migrations",
            "SELECT my_filerouter_table FROM t",
            "SELECT E'\\'_filerouter_x'",
        ] {
            assert_eq!(names_host_table(sql), None, "{sql}");
        }
    }

    #[test]
    fn scripts_split_at_semicolons_outside_literals_and_bodies() {
        let script = "CREATE TABLE a (x text default ';');\n-- only a comment;\n;\
                      INSERT INTO a VALUES ($$;$$);\
                      CREATE FUNCTION f() RETURNS int LANGUAGE sql BEGIN ATOMIC SELECT 1; SELECT CASE WHEN true THEN 2 END; END;\
                      /* trailing */";
        let texts: Vec<&str> = statements(script).iter().map(|s| s.text.trim()).collect();
        assert_eq!(
            texts,
            [
                "CREATE TABLE a (x text default ';')",
                "INSERT INTO a VALUES ($$;$$)",
                "CREATE FUNCTION f() RETURNS int LANGUAGE sql BEGIN ATOMIC SELECT 1; SELECT CASE WHEN true THEN 2 END; END",
            ]
        );
        let offsets: Vec<usize> = statements("SELECT 1;\n  SELECT 2")
            .iter()
            .map(|s| s.offset)
            .collect();
        assert_eq!(offsets, [0, 9]);
        assert!(statements("  -- nothing\n").is_empty());
        // BEGIN opens a block only in a function or procedure.
        assert_eq!(statements("CREATE TABLE t (begin int); SELECT 1").len(), 2);
        assert_eq!(
            statements("CREATE OR REPLACE PROCEDURE p() BEGIN ATOMIC SELECT 1; END; CALL p()")
                .len(),
            2
        );
    }

    #[test]
    fn keywords_skip_comments() {
        assert_eq!(
            keywords("/* a */ rollback -- x\n to savepoint s", 3),
            ["ROLLBACK", "TO", "SAVEPOINT"]
        );
        assert_eq!(keywords("COMMIT;", 2), ["COMMIT"]);
        assert!(chains("COMMIT AND CHAIN"));
        assert!(!chains("COMMIT AND NO CHAIN"));
        assert!(!chains("SELECT 'and chain'"));
    }
}
