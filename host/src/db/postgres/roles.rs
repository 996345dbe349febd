//! The two roles filerouter uses one Postgres database with, so that the boundary between the
//! host's tables and route code's SQL is Postgres's privileges, not the text of the SQL.
//!
//! - The **owner** is the role of the operator's URL (`postgres://OWNER:PASSWORD@…/db`). It owns
//!   the database and the host's schema [`HOST_SCHEMA`] (the migrations' record), and it runs
//!   only the host's own statements. It needs `CREATEROLE` to make the route role (once, and
//!   to repair it); no project SQL ever runs as it.
//! - The **route role**, `OWNER_route`, is a login role of its own: `NOCREATEROLE NOCREATEDB`,
//!   a member of no role, with `CONNECT`, `TEMPORARY` and `CREATE` on the database and `USAGE`
//!   and `CREATE` on `public`, and no rights on [`HOST_SCHEMA`]. Route code's requests and the
//!   project's migrations run on connections that log in as it, so nothing they run (`SET
//!   ROLE`, `RESET ROLE`, `set_config('role', …)`, `DO`, `query_to_xml`, any spelling) can be
//!   the owner: it owns every table the project makes. Its password is derived from the
//!   owner's ([`route_password`]): every process that has the URL derives the same one, and
//!   route code, which never sees the URL, cannot. The owner is made a member of it (`GRANT
//!   route TO owner`), so the operator, logged in as the owner, can use the project's tables.
//!
//! [`prepare`] makes or checks all this when a process connects (under an advisory lock, so
//! replicas starting together do it once), moves a record kept by an earlier version in
//! `public._filerouter_migrations` into [`HOST_SCHEMA`], and gives the route role the objects
//! the owner made before (an earlier version ran route code as the owner). It changes nothing
//! that is already right, so a start needs `CREATEROLE` only to create or repair the route
//! role. [`repair`] puts back what route code may change about its own role (its password, its
//! `ALTER ROLE … SET` settings) when a login as it fails. Not for: running statements (that is
//! [`super`]).

use hmac::{KeyInit, Mac};
use tokio_postgres::{Client, error::SqlState};

/// The host's schema: the owner's, no rights for anyone else.
pub const HOST_SCHEMA: &str = "_filerouter";

/// The migrations' record.
pub const RECORD: &str = "_filerouter.migrations";

/// Where an earlier version kept the record.
const OLD_RECORD: &str = "_filerouter_migrations";

/// What the route role's name adds to the owner's.
const ROUTE_SUFFIX: &str = "_route";

/// The advisory lock that makes one process at a time prepare a database (`frroles` in ASCII).
const PREPARE_LOCK: i64 = 0x0066_7272_6f6c_6573;

/// The longest role name Postgres keeps (`NAMEDATALEN - 1`); longer ones are cut.
const MAX_NAME: usize = 63;

/// Why the roles could not be prepared: each says what to do.
#[derive(Debug, thiserror::Error)]
pub enum RoleError {
    #[error(
        "the database URL has no password: filerouter derives the password of route code's role from it (with trust authentication any password will do)"
    )]
    NoPassword,
    #[error("the database URL names no user")]
    NoUser,
    #[error(
        "the role name {0:?} is too long for route code's role ({0}{ROUTE_SUFFIX} must fit in {MAX_NAME} bytes): use a shorter role"
    )]
    NameTooLong(String),
    #[error(
        "the role {owner} cannot {action} the role {route} that route code logs in as (it lacks CREATEROLE): as a superuser, run ALTER ROLE {owner} CREATEROLE (see docs/guides/data.md, \"Several servers: Postgres and Redis\")"
    )]
    NoCreateRole {
        owner: String,
        route: String,
        action: &'static str,
    },
    #[error(
        "the role {owner} does not own the database {database}: as a superuser, run ALTER DATABASE {database} OWNER TO {owner}"
    )]
    NotOwner { owner: String, database: String },
    #[error(
        "a role {route} exists that filerouter did not make for {owner}: route code would log in as it; drop or rename it, or connect as another role"
    )]
    Foreign { owner: String, route: String },
    #[error("the role {route} that route code logs in as {problem}: as a superuser, {fix}")]
    Privileged {
        route: String,
        problem: String,
        fix: String,
    },
    #[error(
        "the schema {HOST_SCHEMA} belongs to {0}, not to the URL's role: filerouter keeps its own tables there; as a superuser, drop it or run ALTER SCHEMA {HOST_SCHEMA} OWNER TO the URL's role"
    )]
    SchemaTaken(String),
    #[error(
        "route code's role {route} lacks {what} on schema public: as the schema's owner, run GRANT USAGE, CREATE ON SCHEMA public TO {route}"
    )]
    Public { route: String, what: &'static str },
    #[error("preparing the database's roles failed: {0}")]
    Server(String),
}

impl From<tokio_postgres::Error> for RoleError {
    fn from(e: tokio_postgres::Error) -> Self {
        RoleError::Server(super::error(&e).to_string())
    }
}

/// Route code's role, as the host knows it.
#[derive(Clone)]
pub struct RouteRole {
    pub owner: String,
    pub name: String,
    password: String,
}

impl std::fmt::Debug for RouteRole {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RouteRole({} for {})", self.name, self.owner)
    }
}

impl RouteRole {
    /// The route role of the owner in `config`, and the configuration that logs in as it.
    pub fn of(
        config: &tokio_postgres::Config,
    ) -> Result<(RouteRole, tokio_postgres::Config), RoleError> {
        let owner = config.get_user().ok_or(RoleError::NoUser)?.to_string();
        let password = config.get_password().ok_or(RoleError::NoPassword)?;
        let name = format!("{owner}{ROUTE_SUFFIX}");
        if name.len() > MAX_NAME {
            return Err(RoleError::NameTooLong(owner));
        }
        let role = RouteRole {
            password: route_password(password, &name),
            owner,
            name,
        };
        let mut route = config.clone();
        route.user(&role.name).password(role.password.as_bytes());
        Ok((role, route))
    }

    /// What `COMMENT ON ROLE` says of a route role filerouter made: how it knows its own.
    fn marker(&self) -> String {
        format!("filerouter: route code's role for {}", self.owner)
    }
}

/// The route role's password: HMAC-SHA-256 of its name, keyed with the owner's password.
pub fn route_password(owner_password: &[u8], route: &str) -> String {
    let mut mac = hmac::Hmac::<sha2_11::Sha256>::new_from_slice(owner_password)
        .expect("HMAC takes a key of any length");
    mac.update(b"filerouter route role\0");
    mac.update(route.as_bytes());
    hex::encode(mac.finalize().into_bytes())
}

/// `name` as a quoted identifier.
pub fn ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// `text` as a string literal (standard_conforming_strings is on for the host's sessions).
fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// Whether a failure is a race with another process preparing at the same time (roles are
/// shared by the cluster's databases, the advisory lock only by one database's sessions).
fn is_race(e: &tokio_postgres::Error) -> bool {
    e.code().is_some_and(|c| {
        *c == SqlState::UNIQUE_VIOLATION
            || *c == SqlState::T_R_SERIALIZATION_FAILURE
            || *c == SqlState::T_R_DEADLOCK_DETECTED
            || *c == SqlState::INTERNAL_ERROR
    })
}

/// Make or check the host's schema and record, the route role and its rights, on `client`,
/// logged in as the owner. See the module's doc.
pub async fn prepare(client: &Client, role: &RouteRole) -> Result<(), RoleError> {
    let mut tries = 0;
    loop {
        client.batch_execute("BEGIN").await?;
        match prepare_in_transaction(client, role).await {
            Ok(()) => {
                client.batch_execute("COMMIT").await?;
                return Ok(());
            }
            Err(e) => {
                let _ = client.batch_execute("ROLLBACK").await;
                match e {
                    Step::Race(_) if tries < 3 => tries += 1,
                    Step::Race(e) => return Err(e.into()),
                    Step::Failed(e) => return Err(e),
                }
            }
        }
    }
}

/// One step's failure: a race to try again, or the answer.
enum Step {
    Race(tokio_postgres::Error),
    Failed(RoleError),
}

impl From<tokio_postgres::Error> for Step {
    fn from(e: tokio_postgres::Error) -> Self {
        if is_race(&e) {
            Step::Race(e)
        } else {
            Step::Failed(e.into())
        }
    }
}

impl From<RoleError> for Step {
    fn from(e: RoleError) -> Self {
        Step::Failed(e)
    }
}

/// What the owner is and may do.
struct Owner {
    superuser: bool,
    createrole: bool,
    owns_database: bool,
    database: String,
}

async fn prepare_in_transaction(client: &Client, role: &RouteRole) -> Result<(), Step> {
    client
        .batch_execute(&format!(
            "SET LOCAL search_path = pg_catalog; SELECT pg_advisory_xact_lock({PREPARE_LOCK})"
        ))
        .await?;
    let row = client
        .query_one(
            "SELECT r.rolsuper, r.rolcreaterole, d.datdba = r.oid, current_database()::text
               FROM pg_roles r, pg_database d
              WHERE r.rolname = session_user AND d.datname = current_database()",
            &[],
        )
        .await?;
    let owner = Owner {
        superuser: row.get(0),
        createrole: row.get(1),
        owns_database: row.get(2),
        database: row.get(3),
    };
    if !owner.owns_database && !owner.superuser {
        return Err(RoleError::NotOwner {
            owner: role.owner.clone(),
            database: owner.database,
        }
        .into());
    }
    let may_change_roles = owner.superuser || owner.createrole;
    let cannot = |action: &'static str| RoleError::NoCreateRole {
        owner: role.owner.clone(),
        route: role.name.clone(),
        action,
    };
    host_schema(client).await?;
    route_role(client, role, may_change_roles, &cannot).await?;
    let member = client
        .query_one(
            "SELECT pg_has_role(session_user, $1::text, 'USAGE')",
            &[&role.name],
        )
        .await?;
    if !member.get::<_, bool>(0) {
        if !may_change_roles {
            return Err(cannot("make itself a member of").into());
        }
        client
            .batch_execute(&format!(
                "GRANT {} TO {}",
                ident(&role.name),
                ident(&role.owner)
            ))
            .await?;
    }
    route_rights(client, role, &owner).await?;
    give_old_objects(client, role).await?;
    Ok(())
}

/// The host's schema, the owner's alone, with the record in it (an earlier version's moved
/// there).
async fn host_schema(client: &Client) -> Result<(), Step> {
    let owner = client
        .query_opt(
            "SELECT pg_get_userbyid(nspowner)::text, nspowner = (SELECT oid FROM pg_roles WHERE rolname = session_user)
               FROM pg_namespace WHERE nspname = $1::text",
            &[&HOST_SCHEMA],
        )
        .await?;
    match owner {
        None => {
            client
                .batch_execute(&format!("CREATE SCHEMA {HOST_SCHEMA}"))
                .await?
        }
        Some(row) if !row.get::<_, bool>(1) => {
            return Err(RoleError::SchemaTaken(row.get(0)).into());
        }
        Some(_) => {}
    }
    // No one else may use it (a schema grants nothing by default: this undoes grants by hand).
    let open = client
        .query_one(
            "SELECT coalesce(bool_or(a.grantee <> n.nspowner), false)
               FROM pg_namespace n, aclexplode(coalesce(n.nspacl, acldefault('n', n.nspowner))) a
              WHERE n.nspname = $1::text",
            &[&HOST_SCHEMA],
        )
        .await?;
    if open.get::<_, bool>(0) {
        let grantees: Vec<String> = client
            .query(
                "SELECT DISTINCT CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(a.grantee)) END
                   FROM pg_namespace n, aclexplode(n.nspacl) a
                  WHERE n.nspname = $1::text AND a.grantee <> n.nspowner",
                &[&HOST_SCHEMA],
            )
            .await?
            .iter()
            .map(|r| r.get(0))
            .collect();
        client
            .batch_execute(&format!(
                "REVOKE ALL ON SCHEMA {HOST_SCHEMA} FROM {} CASCADE",
                grantees.join(", ")
            ))
            .await?;
    }
    let record = client
        .query_one("SELECT to_regclass($1::text) IS NOT NULL", &[&RECORD])
        .await?;
    if !record.get::<_, bool>(0) {
        // An earlier version's record, made by the owner (not one route code made since).
        let old = client
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                  WHERE n.nspname = 'public' AND c.relname = $1::text AND c.relkind = 'r'
                    AND c.relowner = (SELECT oid FROM pg_roles WHERE rolname = session_user))",
                &[&OLD_RECORD],
            )
            .await?;
        if old.get::<_, bool>(0) {
            client
                .batch_execute(&format!(
                    "ALTER TABLE public.{OLD_RECORD} SET SCHEMA {HOST_SCHEMA};
                     ALTER TABLE {HOST_SCHEMA}.{OLD_RECORD} RENAME TO migrations;"
                ))
                .await?;
            tracing::info!(
                "moved the migrations' record from public.{OLD_RECORD} to {RECORD}, where route code cannot reach it"
            );
        } else {
            client
                .batch_execute(&format!(
                    "CREATE TABLE {RECORD} (
                        name TEXT PRIMARY KEY NOT NULL,
                        checksum TEXT NOT NULL,
                        applied_at TEXT NOT NULL
                    )"
                ))
                .await?;
        }
    }
    // The transaction that applied a migration, until the host saw it commit.
    let has_xid = client
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_attribute
              WHERE attrelid = $1::text::regclass AND attname = 'xid' AND NOT attisdropped)",
            &[&RECORD],
        )
        .await?;
    if !has_xid.get::<_, bool>(0) {
        client
            .batch_execute(&format!("ALTER TABLE {RECORD} ADD COLUMN xid BIGINT"))
            .await?;
    }
    Ok(())
}

/// The route role: made if missing, else checked to be filerouter's and without privileges
/// route code must not have.
async fn route_role(
    client: &Client,
    role: &RouteRole,
    may_change_roles: bool,
    cannot: &dyn Fn(&'static str) -> RoleError,
) -> Result<(), Step> {
    let row = client
        .query_opt(
            "SELECT rolsuper, rolreplication, rolbypassrls, rolcreaterole, rolcreatedb, rolcanlogin,
                    rolconfig IS NOT NULL, coalesce(rolvaliduntil < 'infinity', false),
                    coalesce(shobj_description(oid, 'pg_authid'), ''),
                    (SELECT string_agg(quote_ident(pg_get_userbyid(roleid)), ', ')
                       FROM pg_auth_members WHERE member = r.oid)
               FROM pg_roles r WHERE rolname = $1::text",
            &[&role.name],
        )
        .await?;
    let Some(row) = row else {
        if !may_change_roles {
            return Err(cannot("create").into());
        }
        let verifier = postgres_protocol::password::scram_sha_256(role.password.as_bytes());
        client
            .batch_execute(&format!(
                "CREATE ROLE {name} LOGIN NOINHERIT NOCREATEROLE NOCREATEDB PASSWORD {verifier};
                 COMMENT ON ROLE {name} IS {marker};",
                name = ident(&role.name),
                verifier = literal(&verifier),
                marker = literal(&role.marker()),
            ))
            .await?;
        tracing::info!(
            "created the role {} that route code logs in as (the role {} keeps filerouter's tables, out of its reach)",
            role.name,
            role.owner
        );
        return Ok(());
    };
    if row.get::<_, String>(8) != role.marker() {
        return Err(RoleError::Foreign {
            owner: role.owner.clone(),
            route: role.name.clone(),
        }
        .into());
    }
    let privileged = |problem: &str, fix: String| RoleError::Privileged {
        route: role.name.clone(),
        problem: problem.to_string(),
        fix,
    };
    if row.get::<_, bool>(0) || row.get::<_, bool>(1) || row.get::<_, bool>(2) {
        return Err(privileged(
            "is a superuser, or has REPLICATION or BYPASSRLS",
            format!(
                "run ALTER ROLE {} NOSUPERUSER NOREPLICATION NOBYPASSRLS",
                ident(&role.name)
            ),
        )
        .into());
    }
    if let Some(roles) = row.get::<_, Option<String>>(9) {
        return Err(privileged(
            &format!("is a member of {roles}"),
            format!("run REVOKE {roles} FROM {}", ident(&role.name)),
        )
        .into());
    }
    let mut fix = Vec::new();
    if row.get::<_, bool>(3) || row.get::<_, bool>(4) || !row.get::<_, bool>(5) {
        fix.push(format!(
            "ALTER ROLE {} NOCREATEROLE NOCREATEDB LOGIN",
            ident(&role.name)
        ));
    }
    if row.get::<_, bool>(7) {
        fix.push(format!(
            "ALTER ROLE {} VALID UNTIL 'infinity'",
            ident(&role.name)
        ));
    }
    if row.get::<_, bool>(6) {
        fix.push(format!("ALTER ROLE {} RESET ALL", ident(&role.name)));
    }
    if !fix.is_empty() {
        if !may_change_roles {
            return Err(cannot("repair").into());
        }
        client.batch_execute(&fix.join(";")).await?;
    }
    Ok(())
}

/// The route role's rights: to connect, make temporary tables and schemas in the database,
/// and use and create in `public`.
async fn route_rights(client: &Client, role: &RouteRole, owner: &Owner) -> Result<(), Step> {
    let database = client
        .query_one(
            "SELECT has_database_privilege($1::text, current_database(), 'CONNECT')
                AND has_database_privilege($1::text, current_database(), 'TEMPORARY')
                AND has_database_privilege($1::text, current_database(), 'CREATE')",
            &[&role.name],
        )
        .await?;
    if !database.get::<_, bool>(0) {
        client
            .batch_execute(&format!(
                "GRANT CONNECT, TEMPORARY, CREATE ON DATABASE {} TO {}",
                ident(&owner.database),
                ident(&role.name)
            ))
            .await?;
    }
    match public_rights(client, &role.name).await? {
        None | Some((true, true)) => {}
        Some(_) => {
            // The owner of the database may grant this on Postgres 15's `public` (owned by
            // pg_database_owner); on an older `public`, PUBLIC has both already.
            client
                .batch_execute(&format!(
                    "SET LOCAL client_min_messages = error; GRANT USAGE, CREATE ON SCHEMA public TO {}",
                    ident(&role.name)
                ))
                .await?;
            let what = match public_rights(client, &role.name).await? {
                Some((false, _)) => "USAGE",
                Some((_, false)) => "CREATE",
                _ => return Ok(()),
            };
            return Err(RoleError::Public {
                route: role.name.clone(),
                what,
            }
            .into());
        }
    }
    Ok(())
}

/// Whether `route` may use and create in `public` (`None`: there is no `public`).
async fn public_rights(
    client: &Client,
    route: &str,
) -> Result<Option<(bool, bool)>, tokio_postgres::Error> {
    Ok(client
        .query_opt(
            "SELECT has_schema_privilege($1::text, 'public', 'USAGE'),
                    has_schema_privilege($1::text, 'public', 'CREATE')
               FROM pg_namespace WHERE nspname = 'public'",
            &[&route],
        )
        .await?
        .map(|r| (r.get(0), r.get(1))))
}

/// Give the route role what the owner made in this database outside the host's schema (an
/// earlier version ran route code and migrations as the owner), so that later migrations,
/// which run as the route role, may alter it. Once: afterwards the owner makes nothing there.
async fn give_old_objects(client: &Client, role: &RouteRole) -> Result<(), Step> {
    let rows = client
        .query(
            "SELECT o.type, o.identity,
                    s.classid = 'pg_type'::regclass AND t.typtype = 'd'
               FROM pg_shdepend s
               CROSS JOIN LATERAL pg_identify_object(s.classid, s.objid, 0) o
               LEFT JOIN pg_type t ON s.classid = 'pg_type'::regclass AND t.oid = s.objid
              WHERE s.refclassid = 'pg_authid'::regclass AND s.deptype = 'o'
                AND s.refobjid = (SELECT oid FROM pg_roles WHERE rolname = session_user)
                AND s.dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
                AND o.schema IS DISTINCT FROM $1::text
                AND NOT (s.classid = 'pg_namespace'::regclass AND o.identity = quote_ident($1::text))
                -- Members of an extension, and sequences that follow their column's table.
                AND NOT EXISTS (SELECT 1 FROM pg_depend d
                                 WHERE d.classid = s.classid AND d.objid = s.objid
                                   AND (d.deptype = 'e' OR (d.classid = 'pg_class'::regclass
                                        AND d.refclassid = 'pg_class'::regclass AND d.deptype IN ('a', 'i'))))
              ORDER BY o.type = 'schema' DESC",
            &[&HOST_SCHEMA],
        )
        .await?;
    if rows.is_empty() {
        return Ok(());
    }
    let mut given = 0;
    let mut left = Vec::new();
    for row in rows {
        let kind: String = row.get(0);
        let identity: String = row.get(1);
        let keyword = match kind.as_str() {
            "type" if row.get::<_, bool>(2) => "DOMAIN".to_string(),
            "statistics object" => "STATISTICS".to_string(),
            "table"
            | "view"
            | "materialized view"
            | "sequence"
            | "foreign table"
            | "function"
            | "procedure"
            | "aggregate"
            | "type"
            | "schema"
            | "collation"
            | "conversion"
            | "operator"
            | "operator class"
            | "operator family"
            | "text search configuration"
            | "text search dictionary"
            | "large object" => kind.to_ascii_uppercase(),
            "extension" => continue,
            _ => {
                left.push(format!("{kind} {identity}"));
                continue;
            }
        };
        let statement = format!(
            "SAVEPOINT give; ALTER {keyword} {identity} OWNER TO {}; RELEASE SAVEPOINT give;",
            ident(&role.name)
        );
        match client.batch_execute(&statement).await {
            Ok(()) => given += 1,
            Err(e) => {
                client
                    .batch_execute("ROLLBACK TO SAVEPOINT give; RELEASE SAVEPOINT give;")
                    .await?;
                left.push(format!("{kind} {identity} ({})", super::error(&e)));
            }
        }
    }
    if given > 0 {
        tracing::info!(
            "gave {given} objects the role {} made to the role {} that route code and migrations now run as",
            role.owner,
            role.name
        );
    }
    if !left.is_empty() {
        tracing::warn!(
            "objects the role {} owns outside {HOST_SCHEMA} stay its own, so route code's role {} cannot alter them: {}",
            role.owner,
            role.name,
            left.join("; ")
        );
    }
    Ok(())
}

/// Put back what route code may change about its own role, after a login as it failed: its
/// password (`ALTER ROLE … PASSWORD` needs no privilege for one's own role) and its settings
/// (`ALTER ROLE … SET role = …` makes every login fail).
pub async fn repair(client: &Client, role: &RouteRole) -> Result<(), RoleError> {
    let verifier = postgres_protocol::password::scram_sha_256(role.password.as_bytes());
    // A fresh session of the owner's: nothing route code made in `public` may stand in for a
    // function named below.
    client.batch_execute("SET search_path = pg_catalog").await?;
    let marked = client
        .query_opt(
            "SELECT 1 FROM pg_roles WHERE rolname = $1::text
                AND shobj_description(oid, 'pg_authid') = $2::text",
            &[&role.name, &role.marker()],
        )
        .await?;
    if marked.is_none() {
        return Err(RoleError::Foreign {
            owner: role.owner.clone(),
            route: role.name.clone(),
        });
    }
    client
        .batch_execute(&format!(
            "ALTER ROLE {name} PASSWORD {verifier}; ALTER ROLE {name} RESET ALL;",
            name = ident(&role.name),
            verifier = literal(&verifier),
        ))
        .await
        .map_err(|e| match e.code() {
            Some(c) if *c == SqlState::INSUFFICIENT_PRIVILEGE => RoleError::NoCreateRole {
                owner: role.owner.clone(),
                route: role.name.clone(),
                action: "repair",
            },
            _ => e.into(),
        })?;
    tracing::warn!(
        "route code's role {} could not log in (its password or settings were changed, perhaps by route code): they were put back",
        role.name
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_route_role_and_its_password_follow_from_the_url() {
        let config: tokio_postgres::Config = "postgres://shop:s3cret@db/shop".parse().unwrap();
        let (role, route) = RouteRole::of(&config).unwrap();
        assert_eq!(role.name, "shop_route");
        assert_eq!(route.get_user(), Some("shop_route"));
        let password = route.get_password().unwrap();
        assert_eq!(password.len(), 64);
        assert_eq!(
            std::str::from_utf8(password).unwrap(),
            route_password(b"s3cret", "shop_route")
        );
        assert_ne!(
            route_password(b"s3cret", "shop_route"),
            route_password(b"other", "shop_route")
        );
        assert!(!format!("{role:?}").contains(&role.password));

        let none: tokio_postgres::Config = "postgres://shop@db/shop".parse().unwrap();
        assert!(matches!(RouteRole::of(&none), Err(RoleError::NoPassword)));
        let long = format!("postgres://{}:pw@db/x", "a".repeat(58));
        let long: tokio_postgres::Config = long.parse().unwrap();
        assert!(matches!(
            RouteRole::of(&long),
            Err(RoleError::NameTooLong(_))
        ));
    }

    #[test]
    fn identifiers_and_literals_are_quoted() {
        assert_eq!(ident("a\"b"), "\"a\"\"b\"");
        assert_eq!(literal("it's"), "'it''s'");
    }
}
