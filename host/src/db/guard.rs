//! What route code's SQL may do: everything inside the project's own database, nothing outside
//! it.
//!
//! Two layers. [`check_statement`] reads a statement's first keyword before it is prepared, so
//! that `VACUUM` (which can write a copy of the database to any path) gets a clear message.
//! [`authorize`], SQLite's authorizer, runs while every statement is prepared, including the
//! statements of scripts and triggers, and refuses `ATTACH` and `DETACH`, `load_extension()`,
//! PRAGMAs that touch files, safety or the host's settings, and any use of the host's own
//! tables (`_filerouter_kv`, `_filerouter_migrations`, ...). The connection itself adds the
//! rest (`crate::db::sqlite`): no attached databases at all (`SQLITE_LIMIT_ATTACHED` = 0),
//! defensive mode (no writable schema), and a page limit for the database's size.
//!
//! A refusal is remembered in [`State`] so that the error route code sees names the reason,
//! not SQLite's bare "not authorized".

use std::sync::{
    Mutex,
    atomic::{AtomicBool, Ordering},
};

use rusqlite::hooks::{AuthAction, AuthContext, Authorization};

use super::DbError;

/// The prefix of the tables filerouter keeps in the project's database for itself.
pub const HOST_TABLE_PREFIX: &str = "_filerouter_";

/// One connection's guard: whether the host itself is running statements (then nothing is
/// refused), the reason for the last refusal, and whether route code changed the connection
/// (set a PRAGMA, made a temporary object), which the pool must then undo.
#[derive(Default)]
pub struct State {
    trusted: AtomicBool,
    denied: Mutex<Option<String>>,
    changed: AtomicBool,
    /// Set when route code prepared an `ALTER TABLE`, whose new name the authorizer is not
    /// told: the statement then runs in a savepoint and is undone if it gave a table one of
    /// the host's names (`crate::db::sqlite`).
    altered: AtomicBool,
}

impl State {
    /// Run `op` as the host: the guard allows everything meanwhile.
    pub fn trusted<T>(&self, op: impl FnOnce() -> T) -> T {
        self.trusted.store(true, Ordering::SeqCst);
        let value = op();
        self.trusted.store(false, Ordering::SeqCst);
        value
    }

    /// The reason for the refusal that made the last statement fail, if one did.
    pub fn take_denial(&self) -> Option<String> {
        self.denied.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    /// Whether route code may have changed the connection since the last call (and forget it).
    pub fn take_changed(&self) -> bool {
        self.changed.swap(false, Ordering::SeqCst)
    }

    /// Whether the statement just prepared alters a table (and forget it).
    pub fn take_altered(&self) -> bool {
        self.altered.swap(false, Ordering::SeqCst)
    }

    fn deny(&self, reason: String) -> Authorization {
        *self.denied.lock().unwrap_or_else(|e| e.into_inner()) = Some(reason);
        Authorization::Deny
    }
}

/// PRAGMAs route code may read, and those it may also set. Everything else (`journal_mode`,
/// `synchronous`, `writable_schema`, `temp_store_directory`, `mmap_size`, `cache_size`,
/// `busy_timeout`, `max_page_count`, `database_list`, ...) is refused: they touch files, the
/// database's safety, the host's settings, or name host paths.
const READABLE_PRAGMAS: &[&str] = &[
    "application_id",
    "auto_vacuum",
    "automatic_index",
    "collation_list",
    "compile_options",
    "data_version",
    "defer_foreign_keys",
    "encoding",
    "foreign_key_check",
    "foreign_key_list",
    "foreign_keys",
    "freelist_count",
    "function_list",
    "index_info",
    "index_list",
    "index_xinfo",
    "integrity_check",
    "legacy_alter_table",
    "module_list",
    "optimize",
    "page_count",
    "page_size",
    "pragma_list",
    "query_only",
    "quick_check",
    "read_uncommitted",
    "recursive_triggers",
    "reverse_unordered_selects",
    "schema_version",
    "table_info",
    "table_list",
    "table_xinfo",
    "user_version",
];

/// PRAGMAs whose argument names a table or index (or a count), not a new setting.
const PRAGMAS_WITH_ARGUMENT: &[&str] = &[
    "foreign_key_check",
    "foreign_key_list",
    "index_info",
    "index_list",
    "index_xinfo",
    "integrity_check",
    "optimize",
    "quick_check",
    "table_info",
    "table_list",
    "table_xinfo",
];

/// PRAGMAs route code may set: per-connection behaviour that the pool resets after every
/// request (`sqlite::RESET_PRAGMAS`), or the database's own version numbers.
const SETTABLE_PRAGMAS: &[&str] = &[
    "application_id",
    "automatic_index",
    "defer_foreign_keys",
    "foreign_keys",
    "legacy_alter_table",
    "query_only",
    "read_uncommitted",
    "recursive_triggers",
    "reverse_unordered_selects",
    "user_version",
];

/// SQLite's authorizer for route code's connections.
pub fn authorize(state: &State, context: AuthContext<'_>) -> Authorization {
    if state.trusted.load(Ordering::SeqCst) {
        return Authorization::Allow;
    }
    if let Some(name) = host_named(&context.action) {
        return state.deny(format!(
            "the name {name} belongs to filerouter (its tables for filerouter.kv and the migrations' record start with {HOST_TABLE_PREFIX}): route code cannot use or create it; use filerouter.kv, or another name"
        ));
    }
    if let AuthAction::AlterTable { .. } = context.action {
        state.altered.store(true, Ordering::SeqCst);
    }
    match context.action {
        AuthAction::Attach { .. } | AuthAction::Detach { .. } => state.deny(
            "ATTACH and DETACH are not allowed in the sandbox: route code reaches only the project's own database"
                .into(),
        ),
        AuthAction::Function { function_name }
            if function_name.eq_ignore_ascii_case("load_extension") =>
        {
            state.deny(
                "load_extension() is not allowed in the sandbox: SQLite extensions are native code"
                    .into(),
            )
        }
        AuthAction::Pragma {
            pragma_name,
            pragma_value,
        } => pragma(state, pragma_name, pragma_value),
        AuthAction::CreateTempTable { .. }
        | AuthAction::CreateTempIndex { .. }
        | AuthAction::CreateTempTrigger { .. }
        | AuthAction::CreateTempView { .. } => {
            state.changed.store(true, Ordering::SeqCst);
            Authorization::Allow
        }
        _ => Authorization::Allow,
    }
}

fn pragma(state: &State, name: &str, value: Option<&str>) -> Authorization {
    let name = name.to_ascii_lowercase();
    let readable = READABLE_PRAGMAS.contains(&name.as_str());
    let allowed = match value {
        None => readable,
        Some(_) if PRAGMAS_WITH_ARGUMENT.contains(&name.as_str()) => readable,
        Some(_) => SETTABLE_PRAGMAS.contains(&name.as_str()),
    };
    if allowed {
        if value.is_some() && !PRAGMAS_WITH_ARGUMENT.contains(&name.as_str()) {
            state.changed.store(true, Ordering::SeqCst);
        }
        return Authorization::Allow;
    }
    let what = if value.is_some() && readable {
        format!("setting PRAGMA {name}")
    } else {
        format!("PRAGMA {name}")
    };
    state.deny(format!(
        "{what} is not allowed in the sandbox: it touches the database's files, its safety or the server's settings (allowed: {})",
        SETTABLE_PRAGMAS.join(", ")
    ))
}

/// Whether `name` is one of the host's (SQLite compares names without regard to ASCII case).
pub fn is_host_name(name: &str) -> bool {
    name.len() >= HOST_TABLE_PREFIX.len()
        && name.as_bytes()[..HOST_TABLE_PREFIX.len()]
            .eq_ignore_ascii_case(HOST_TABLE_PREFIX.as_bytes())
}

/// The host's name that `action` uses or creates, if any: every table, index, trigger and
/// view name an action carries, in every statement kind.
fn host_named<'a>(action: &AuthAction<'a>) -> Option<&'a str> {
    let names: [Option<&str>; 2] = match *action {
        AuthAction::Read { table_name, .. }
        | AuthAction::Insert { table_name }
        | AuthAction::Update { table_name, .. }
        | AuthAction::Delete { table_name }
        | AuthAction::CreateTable { table_name }
        | AuthAction::CreateTempTable { table_name }
        | AuthAction::DropTable { table_name }
        | AuthAction::DropTempTable { table_name }
        | AuthAction::AlterTable { table_name, .. }
        | AuthAction::Analyze { table_name }
        | AuthAction::CreateVtable { table_name, .. }
        | AuthAction::DropVtable { table_name, .. } => [Some(table_name), None],
        AuthAction::CreateIndex {
            index_name,
            table_name,
        }
        | AuthAction::CreateTempIndex {
            index_name,
            table_name,
        }
        | AuthAction::DropIndex {
            index_name,
            table_name,
        }
        | AuthAction::DropTempIndex {
            index_name,
            table_name,
        } => [Some(index_name), Some(table_name)],
        AuthAction::CreateTrigger {
            trigger_name,
            table_name,
        }
        | AuthAction::CreateTempTrigger {
            trigger_name,
            table_name,
        }
        | AuthAction::DropTrigger {
            trigger_name,
            table_name,
        }
        | AuthAction::DropTempTrigger {
            trigger_name,
            table_name,
        } => [Some(trigger_name), Some(table_name)],
        AuthAction::CreateView { view_name }
        | AuthAction::CreateTempView { view_name }
        | AuthAction::DropView { view_name }
        | AuthAction::DropTempView { view_name } => [Some(view_name), None],
        AuthAction::Reindex { index_name } => [Some(index_name), None],
        _ => [None, None],
    };
    names.into_iter().flatten().find(|name| is_host_name(name))
}

/// Refuse, before SQLite sees it, a statement the authorizer has no word for.
pub fn check_statement(sql: &str) -> Result<(), DbError> {
    if first_keyword(sql).is_some_and(|k| k.eq_ignore_ascii_case("VACUUM")) {
        return Err(DbError::Refused(
            "VACUUM is not allowed in the sandbox: it rewrites the whole database (and VACUUM INTO writes a copy to a file)"
                .into(),
        ));
    }
    Ok(())
}

/// The statement `begin` asks to run first, if it is one of SQLite's BEGIN forms.
pub fn check_begin(begin: &str) -> Result<(), DbError> {
    let words: Vec<String> = begin
        .split_whitespace()
        .map(str::to_ascii_uppercase)
        .collect();
    const MODES: [&str; 3] = ["DEFERRED", "IMMEDIATE", "EXCLUSIVE"];
    let ok = match words.as_slice() {
        [b] => b == "BEGIN",
        [b, t] => b == "BEGIN" && (t == "TRANSACTION" || MODES.contains(&t.as_str())),
        [b, m, t] => b == "BEGIN" && MODES.contains(&m.as_str()) && t == "TRANSACTION",
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(DbError::Programming(format!(
            "invalid value for isolation_level: {begin:?} (use \"DEFERRED\", \"IMMEDIATE\" or \"EXCLUSIVE\")"
        )))
    }
}

/// `sql` past its leading white space, comments and semicolons.
pub fn skip_space_and_comments(sql: &str) -> &str {
    let mut rest = sql;
    loop {
        rest = rest.trim_start_matches(|c: char| c.is_whitespace() || c == ';');
        if let Some(after) = rest.strip_prefix("--") {
            rest = after.split_once('\n').map_or("", |(_, tail)| tail);
        } else if let Some(after) = rest.strip_prefix("/*") {
            rest = after.split_once("*/").map_or("", |(_, tail)| tail);
        } else {
            return rest;
        }
    }
}

/// The first keyword of `sql`, after white space and comments.
pub fn first_keyword(sql: &str) -> Option<&str> {
    let rest = skip_space_and_comments(sql);
    let end = rest
        .find(|c: char| !c.is_ascii_alphabetic())
        .unwrap_or(rest.len());
    (end > 0).then(|| &rest[..end])
}

/// Whether a statement starting with `keyword` changes rows (DB-API's `rowcount` counts them).
pub fn changes_rows(keyword: Option<&str>) -> bool {
    keyword.is_some_and(|k| {
        ["INSERT", "UPDATE", "DELETE", "REPLACE"]
            .iter()
            .any(|dml| k.eq_ignore_ascii_case(dml))
    })
}

/// Whether a statement starting with `keyword` inserts rows (DB-API's `lastrowid`).
pub fn inserts(keyword: Option<&str>) -> bool {
    keyword.is_some_and(|k| k.eq_ignore_ascii_case("INSERT") || k.eq_ignore_ascii_case("REPLACE"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_keyword_skips_space_and_comments() {
        assert_eq!(first_keyword("  select 1"), Some("select"));
        assert_eq!(
            first_keyword("-- hi\n/* x */ VACUUM INTO 'x'"),
            Some("VACUUM")
        );
        assert_eq!(first_keyword("/* unterminated"), None);
        assert_eq!(first_keyword(""), None);
        assert!(check_statement("/**/vacuum").is_err());
        assert!(check_statement("SELECT 'vacuum'").is_ok());
    }

    #[test]
    fn only_begin_forms_are_run_as_begin() {
        for ok in [
            "BEGIN",
            "begin deferred",
            "BEGIN IMMEDIATE",
            "BEGIN EXCLUSIVE TRANSACTION",
        ] {
            assert!(check_begin(ok).is_ok(), "{ok}");
        }
        for bad in ["BEGIN; DROP TABLE x", "COMMIT", "BEGIN NONSENSE", ""] {
            assert!(check_begin(bad).is_err(), "{bad}");
        }
    }
}
