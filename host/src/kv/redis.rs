//! The kv store in Redis: for several `filerouter run` processes, on different machines, that
//! share one project's (or tenant's) state.
//!
//! Every operation is one Lua script, so it is atomic on the server: the bounds check and the
//! write of a multi-key `write` (all or none), `incr`'s read, sum and create-with-ttl,
//! `compare_and_set`'s compare and swap. Every key the store touches lives under the prefix the
//! host gives (e.g. `filerouter:t:acme:`). Under that prefix `P`:
//!
//! - `P v:{key}`: the value (JSON text), with a Redis expiry when it has a ttl (so Redis frees
//!   it on its own);
//! - `P idx`: a sorted set of every stored key (score 0), for listing by prefix in byte order
//!   (`ZRANGEBYLEX`) and counting keys (`ZCARD`);
//! - `P exp`: a sorted set of the keys that expire, scored by their expiry in Unix ms;
//! - `P cost`: a hash of what each key costs ([`super::cost`]), and `P stats` (field `bytes`)
//!   their sum, so that expired entries can be dropped and their cost given back;
//! - `P tmp`: a scratch key `incr` uses and deletes within its script.
//!
//! Route code's keys are only ever appended to `P v:`, so it never names a Redis key of its
//! own, and two stores meet only if one's prefix begins the other's (`app:` and `app:v:x:`);
//! the host's prefixes never do (`crate::data::KvPrefix` escapes the names in them).
//!
//! An entry is live while its value key exists and its expiry (in [`now_ms`] time, the host's
//! clock, which the scripts are given so both backends agree) is in the future. Expired entries
//! still count against the bounds until they are dropped: a few on every write, all of them when
//! a write would not fit (as the SQLite backend does). Redis's own expiry of value keys is
//! relative (`PX`), so a clock that differs between Redis and the host never drops a value early.
//!
//! The connection is made on the first operation (one multiplexed connection, shared by all
//! calls) and made again after a connection error. Errors say nothing of the URL (its password
//! least of all). An operation that fails with [`KvError::Unavailable`] after its script was
//! sent (the connection broke, or the answer came too late) may have been applied all the same
//! (all of it or none of it, as ever).
//!
//! `rediss://` connects with TLS (rustls): the server's certificate must chain to the system's
//! roots, or to those of the CA file named by the URL's `ssl_ca_certs=PATH` (redis-py's name for
//! it), and be for the host name (or IP address) connected to.
//!
//! Needs Redis 6.0 or later (`SET … KEEPTTL`), a single server or a primary (not a cluster), and
//! a `maxmemory-policy` that does not evict (`noeviction`): an evicted index would break the
//! bounds' accounting.

use std::{sync::LazyLock, time::Duration};

use redis::{AsyncConnectionConfig, Client, Script, aio::MultiplexedConnection};
use tokio::sync::Mutex;

use super::{Bounds, ENTRY_OVERHEAD, KvError, now_ms};

/// How long connecting (TCP, and the handshake) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long one script may take to answer once sent.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);

/// How long one operation may take in all: waiting for the connection, connecting, running.
const OP_TIMEOUT: Duration = Duration::from_secs(15);

/// The longest Redis expiry (`PX`) the store sets, in ms (about 31,700 years): larger ones would
/// overflow Redis's clock. Beyond it the entry still expires, by the store's own check.
const MAX_PX: u64 = 1_000_000_000_000_000;

/// How many expired entries every write drops on its way, so that they do not pile up in a
/// store that never fills.
const PURGE_ON_WRITE: usize = 8;

/// What every script starts with: the layout of the keys, and the store's rules. `ARGV[1]` is
/// the prefix, `ARGV[2]` the time in ms; a writing script also has the bounds in `ARGV[3]`
/// (keys) and `ARGV[4]` (bytes) and the ttl in `ARGV[5]` (expiry, Unix ms) and `ARGV[6]` (ms to
/// live), both empty for none. Lua compares strings by locale (`strcoll`): the scripts only test
/// them for equality, and the byte order comes from Rust and `ZRANGEBYLEX`.
const PRELUDE: &str = r#"
local P = ARGV[1]
local NOW = tonumber(ARGV[2])
local IDX, EXP, COST, STATS = P .. 'idx', P .. 'exp', P .. 'cost', P .. 'stats'
local MAX_KEYS, MAX_BYTES = tonumber(ARGV[3] or '0'), tonumber(ARGV[4] or '0')
local EXPAT, PX = ARGV[5], ARGV[6]
if EXPAT == '' then EXPAT = nil end
if PX == '' then PX = nil end

local function vkey(k) return P .. 'v:' .. k end

local function unexpired(k)
  local e = redis.call('ZSCORE', EXP, k)
  return not e or tonumber(e) > NOW
end

-- The value under k, unless absent or expired.
local function live(k)
  local v = redis.call('GET', vkey(k))
  if not v then return nil end
  if not unexpired(k) then return nil end
  return v
end

-- Remove k, live or expired, and give back what it cost.
local function remove(k)
  local c = redis.call('HGET', COST, k)
  redis.call('DEL', vkey(k))
  redis.call('ZREM', IDX, k)
  redis.call('ZREM', EXP, k)
  if c then
    redis.call('HDEL', COST, k)
    redis.call('HINCRBY', STATS, 'bytes', -tonumber(c))
  end
end

-- Drop up to n expired entries (all of them if n is nil).
local function purge(n)
  while true do
    local batch = n or 1000
    local ks = redis.call('ZRANGEBYSCORE', EXP, '-inf', NOW, 'LIMIT', 0, batch)
    for _, k in ipairs(ks) do remove(k) end
    if n or #ks < batch then return end
  end
end

-- Whether entries ({key, value or false}, in order) fit the bounds: nil, or why not.
local function refusal(entries)
  local keys = redis.call('ZCARD', IDX)
  local bytes = tonumber(redis.call('HGET', STATS, 'bytes') or '0')
  local seen = {}
  for _, e in ipairs(entries) do
    local k, v = e[1], e[2]
    local old = seen[k]
    if old == nil then
      local c = redis.call('HGET', COST, k)
      old = c and tonumber(c) or false
    end
    if v then
      local new = #k + #v + OVERHEAD
      if not old and keys >= MAX_KEYS then return 'full' end
      local rest = bytes - (old or 0)
      if rest < 0 then rest = 0 end
      if rest + new > MAX_BYTES then return 'fullbytes' end
      if not old then keys = keys + 1 end
      bytes = rest + new
      seen[k] = new
    else
      if old then
        keys = keys - 1
        bytes = bytes - old
      end
      seen[k] = false
    end
  end
  return nil
end

-- Like refusal, but first drops every expired entry if they do not fit.
local function make_room(entries)
  if refusal(entries) == nil then return nil end
  purge(nil)
  return refusal(entries)
end

-- Store v under k: with the script's ttl, or (keep) with the ttl k has.
local function store(k, v, keep)
  local c = redis.call('HGET', COST, k)
  local new = #k + #v + OVERHEAD
  if keep then
    redis.call('SET', vkey(k), v, 'KEEPTTL')
  elseif EXPAT then
    redis.call('SET', vkey(k), v, 'PX', PX)
    redis.call('ZADD', EXP, EXPAT, k)
  else
    redis.call('SET', vkey(k), v)
    redis.call('ZREM', EXP, k)
  end
  redis.call('ZADD', IDX, 0, k)
  redis.call('HSET', COST, k, new)
  redis.call('HINCRBY', STATS, 'bytes', new - (c and tonumber(c) or 0))
end
"#;

/// `ARGV[3]`: the key. Returns `{'ok', value}`, or `{'ok'}` when absent or expired.
const GET: &str = r#"
local v = live(ARGV[3])
if v then return {'ok', v} end
return {'ok'}
"#;

/// `ARGV[3]`: the key. Returns `{'ok', '1'}` if it was live, `{'ok', '0'}` if not.
const DELETE: &str = r#"
local k = ARGV[3]
local was = live(k) and '1' or '0'
remove(k)
return {'ok', was}
"#;

/// `ARGV[7]`: the key, `ARGV[8]`: what to add. The sum is computed by `INCRBY` on the scratch
/// key (exact 64-bit integers; Lua's numbers are doubles) and read back as text. Returns
/// `{'ok', sum}`, or `{'nan'}`, `{'overflow'}`, `{'full'}`, `{'fullbytes'}`.
const INCR: &str = r#"
local k, by = ARGV[7], ARGV[8]
purge(PURGE)
local cur = live(k)
local start = '0'
if cur then
  -- What Rust's `trim().parse::<i64>()` takes: ASCII space around, a sign, digits. INCRBY
  -- wants no space, no '+' and no leading zeros: normalize.
  local sign, digits = string.match(cur, '^[ \t\n\r\v\f]*([%+%-]?)([0-9]+)[ \t\n\r\v\f]*$')
  if not digits then return {'nan'} end
  digits = (string.gsub(digits, '^0+', ''))
  if digits == '' then
    start = '0'
  elseif sign == '-' then
    start = '-' .. digits
  else
    start = digits
  end
end
local tmp = P .. 'tmp'
redis.call('SET', tmp, start)
local r = redis.pcall('INCRBY', tmp, by)
local sum = redis.call('GET', tmp)
redis.call('DEL', tmp)
if type(r) == 'table' and r.err then
  if string.find(string.lower(r.err), 'overflow', 1, true) then return {'overflow'} end
  return {'nan'}
end
local why = make_room({{k, sum}})
if why then return {why} end
store(k, sum, cur ~= nil)
return {'ok', sum}
"#;

/// `ARGV[7]`: the key; `ARGV[8]`: `'1'` if a value is expected (`ARGV[9]`), `'0'` for absent;
/// `ARGV[10]`: `'1'` to store `ARGV[11]`, `'0'` to delete. Returns `{'ok'}` if it swapped,
/// `{'no'}` if the value was not the expected one, or `{'full'}`, `{'fullbytes'}`.
const COMPARE_AND_SET: &str = r#"
local k = ARGV[7]
purge(PURGE)
local cur = live(k)
if ARGV[8] == '1' then
  if cur ~= ARGV[9] then return {'no'} end
elseif cur then
  return {'no'}
end
if ARGV[10] == '1' then
  local v = ARGV[11]
  local why = make_room({{k, v}})
  if why then return {why} end
  store(k, v, false)
else
  remove(k)
end
return {'ok'}
"#;

/// `ARGV[3]`: the prefix; `ARGV[4]`: where to start, a `ZRANGEBYLEX` bound; `ARGV[5]`: at most
/// how many. Returns `{'ok', key…}`: live keys with the prefix, in byte order.
const KEYS: &str = r#"
local prefix, start, limit = ARGV[3], ARGV[4], tonumber(ARGV[5])
local out = {'ok'}
local chunk = limit
if chunk < 100 then chunk = 100 end
while true do
  local ks = redis.call('ZRANGEBYLEX', IDX, start, '+', 'LIMIT', 0, chunk)
  for _, k in ipairs(ks) do
    if string.sub(k, 1, #prefix) ~= prefix then return out end
    if redis.call('EXISTS', vkey(k)) == 1 and unexpired(k) then
      out[#out + 1] = k
      if #out > limit then return out end
    end
  end
  if #ks < chunk then return out end
  start = '(' .. ks[#ks]
end
"#;

/// From `ARGV[7]` on, one triple per entry: `'s'` (set) or `'d'` (delete), the key, the value
/// (empty for a delete). Returns `{'ok'}`, or `{'full'}`, `{'fullbytes'}` having written nothing.
const WRITE: &str = r#"
local entries = {}
for i = 7, #ARGV, 3 do
  local v = false
  if ARGV[i] == 's' then v = ARGV[i + 2] end
  entries[#entries + 1] = {ARGV[i + 1], v}
end
purge(PURGE)
local why = make_room(entries)
if why then return {why} end
for _, e in ipairs(entries) do
  if e[2] then store(e[1], e[2], false) else remove(e[1]) end
end
return {'ok'}
"#;

/// The scripts, compiled (hashed) once; Redis caches them by hash, and the client loads one
/// again when Redis does not know it (after a restart).
struct Scripts {
    get: Script,
    delete: Script,
    incr: Script,
    compare_and_set: Script,
    keys: Script,
    write: Script,
}

static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| {
    let script = |body: &str| {
        Script::new(&format!(
            "local OVERHEAD = {ENTRY_OVERHEAD}\nlocal PURGE = {PURGE_ON_WRITE}\n{PRELUDE}\n{body}"
        ))
    };
    Scripts {
        get: script(GET),
        delete: script(DELETE),
        incr: script(INCR),
        compare_and_set: script(COMPARE_AND_SET),
        keys: script(KEYS),
        write: script(WRITE),
    }
});

/// A store under one prefix on one Redis server.
pub struct RedisKv {
    client: Client,
    prefix: String,
    /// The URL's password, as given and decoded, to scrub from error messages.
    secrets: Vec<String>,
    /// The URL's `ssl_ca_certs`, for messages.
    ca_file: Option<std::path::PathBuf>,
    slot: Mutex<Slot>,
}

/// The connection, once made; `generation` tells a failed connection from its replacement.
#[derive(Default)]
struct Slot {
    conn: Option<MultiplexedConnection>,
    generation: u64,
}

impl RedisKv {
    /// The store under `prefix` on the server at `url` (`redis://[user:password@]host[:port][/db]`,
    /// `rediss://…[?ssl_ca_certs=PATH]` or `unix:///path?pass=…`). Only parses the URL and reads
    /// the CA file: the first operation connects.
    pub fn new(url: &str, prefix: &str) -> Result<Self, KvError> {
        let mut secrets: Vec<String> = raw_password(url).into_iter().collect();
        let bad = |e: String| KvError::Unavailable(scrub(&format!("bad Redis URL: {e}"), &secrets));
        let (url, ca_file) = split_ca_file(url).map_err(bad)?;
        let client = match &ca_file {
            None => Client::open(url.as_str()),
            Some(path) => {
                crate::server_tls::install_default_provider();
                crate::server_tls::read_ca_file(path).map_err(|e| bad(e.to_string()))?;
                let pem = std::fs::read(path)
                    .map_err(|e| bad(format!("the CA file {}: {e}", path.display())))?;
                Client::build_with_tls(
                    url.as_str(),
                    redis::TlsCertificates {
                        client_tls: None,
                        root_cert: Some(pem),
                    },
                )
            }
        }
        .map_err(|e| bad(e.to_string()))?;
        if url.starts_with("rediss://") {
            crate::server_tls::install_default_provider();
        }
        if let Some(password) = client.get_connection_info().redis_settings().password() {
            secrets.push(password.to_string());
        }
        secrets.retain(|s| !s.is_empty());
        Ok(Self {
            client,
            prefix: prefix.to_string(),
            secrets,
            ca_file,
            slot: Mutex::new(Slot::default()),
        })
    }

    /// The value under `key`, unless absent or expired ([`super::KvStore::get`]).
    pub async fn get(&self, key: &str) -> Result<Option<String>, KvError> {
        let mut reply = self
            .run(&SCRIPTS.get, self.read_args(), &[key.as_bytes()])
            .await?;
        ok(&mut reply)?;
        reply.next().map(text).transpose()
    }

    /// Remove `key`; whether it was there and live ([`super::KvStore::delete`]).
    pub async fn delete(&self, key: &str) -> Result<bool, KvError> {
        let mut reply = self
            .run(&SCRIPTS.delete, self.read_args(), &[key.as_bytes()])
            .await?;
        ok(&mut reply)?;
        Ok(reply.next().as_deref() == Some(b"1".as_slice()))
    }

    /// Add `by` to the integer under `key`, creating it with `ttl` ([`super::KvStore::incr`]).
    pub async fn incr(
        &self,
        bounds: Bounds,
        key: &str,
        by: i64,
        ttl: Option<Duration>,
    ) -> Result<i64, KvError> {
        let by = by.to_string();
        let mut reply = self
            .run(
                &SCRIPTS.incr,
                self.write_args(bounds, ttl),
                &[key.as_bytes(), by.as_bytes()],
            )
            .await?;
        match reply.next().as_deref() {
            Some(b"ok") => {}
            other => return Err(refusal(bounds, other)),
        }
        let sum = reply.next().map(text).transpose()?.unwrap_or_default();
        sum.parse().map_err(|_| {
            KvError::Unavailable(format!("Redis returned a sum that is not one: {sum:?}"))
        })
    }

    /// Swap the value under `key` if it is `expected` ([`super::KvStore::compare_and_set`]).
    pub async fn compare_and_set(
        &self,
        bounds: Bounds,
        key: &str,
        expected: Option<String>,
        value: Option<String>,
        ttl: Option<Duration>,
    ) -> Result<bool, KvError> {
        let flag = |v: &Option<String>| if v.is_some() { b"1" } else { b"0" };
        let args: [&[u8]; 5] = [
            key.as_bytes(),
            flag(&expected),
            expected.as_deref().unwrap_or("").as_bytes(),
            flag(&value),
            value.as_deref().unwrap_or("").as_bytes(),
        ];
        let mut reply = self
            .run(
                &SCRIPTS.compare_and_set,
                self.write_args(bounds, ttl),
                &args,
            )
            .await?;
        match reply.next().as_deref() {
            Some(b"ok") => Ok(true),
            Some(b"no") => Ok(false),
            other => Err(refusal(bounds, other)),
        }
    }

    /// Live keys with `prefix`, in byte order, after `after`, at most `limit`
    /// ([`super::KvStore::keys`]).
    pub async fn keys(
        &self,
        prefix: &str,
        after: Option<String>,
        limit: usize,
    ) -> Result<Vec<String>, KvError> {
        // Keys with the prefix are contiguous in byte order, from the prefix itself on.
        let start = match after {
            Some(after) if after.as_str() >= prefix => format!("({after}"),
            _ => format!("[{prefix}"),
        };
        let limit = limit.to_string();
        let mut reply = self
            .run(
                &SCRIPTS.keys,
                self.read_args(),
                &[prefix.as_bytes(), start.as_bytes(), limit.as_bytes()],
            )
            .await?;
        ok(&mut reply)?;
        reply.map(text).collect()
    }

    /// Set and delete several keys, all or none ([`super::KvStore::write`]).
    pub async fn write(
        &self,
        bounds: Bounds,
        entries: Vec<(String, Option<String>)>,
        ttl: Option<Duration>,
    ) -> Result<(), KvError> {
        let mut args: Vec<&[u8]> = Vec::with_capacity(entries.len() * 3);
        for (key, value) in &entries {
            let op: &[u8] = if value.is_some() { b"s" } else { b"d" };
            args.extend([
                op,
                key.as_bytes(),
                value.as_deref().unwrap_or("").as_bytes(),
            ]);
        }
        let mut reply = self
            .run(&SCRIPTS.write, self.write_args(bounds, ttl), &args)
            .await?;
        match reply.next().as_deref() {
            Some(b"ok") => Ok(()),
            other => Err(refusal(bounds, other)),
        }
    }

    /// The arguments every script starts with: the prefix and the time.
    fn read_args(&self) -> Vec<Vec<u8>> {
        vec![
            self.prefix.clone().into_bytes(),
            now_ms().to_string().into_bytes(),
        ]
    }

    /// The arguments a writing script starts with: the prefix, the time, the bounds and the ttl
    /// (its expiry in [`now_ms`] time, and how long Redis should keep the value).
    fn write_args(&self, bounds: Bounds, ttl: Option<Duration>) -> Vec<Vec<u8>> {
        let now = now_ms();
        let (expires, px) = match ttl {
            Some(ttl) => {
                let ms = ttl.as_millis().min(i64::MAX as u128) as i64;
                // PX 0 is an error to Redis; the store's own check already sees it expired.
                let px = (ms as u64).clamp(1, MAX_PX);
                (now.saturating_add(ms).to_string(), px.to_string())
            }
            None => (String::new(), String::new()),
        };
        vec![
            self.prefix.clone().into_bytes(),
            now.to_string().into_bytes(),
            bounds.max_keys.to_string().into_bytes(),
            bounds.max_total_bytes.to_string().into_bytes(),
            expires.into_bytes(),
            px.into_bytes(),
        ]
    }

    /// Run `script` with `args` then `more`, within [`OP_TIMEOUT`]; its reply, a list of strings.
    async fn run(
        &self,
        script: &Script,
        args: Vec<Vec<u8>>,
        more: &[&[u8]],
    ) -> Result<std::vec::IntoIter<Vec<u8>>, KvError> {
        let mut invocation = script.prepare_invoke();
        for arg in &args {
            invocation.arg(arg.as_slice());
        }
        for arg in more {
            invocation.arg(*arg);
        }
        let attempt = async {
            let (mut conn, generation) = self.connection().await?;
            match invocation.invoke_async::<Vec<Vec<u8>>>(&mut conn).await {
                Ok(reply) => Ok(reply.into_iter()),
                Err(e) => {
                    if e.is_io_error() || e.is_unrecoverable_error() {
                        self.forget(generation).await;
                    }
                    Err(self.unavailable(&e))
                }
            }
        };
        tokio::time::timeout(OP_TIMEOUT, attempt)
            .await
            .unwrap_or_else(|_| {
                Err(KvError::Unavailable(format!(
                    "Redis did not answer within {OP_TIMEOUT:?}"
                )))
            })
    }

    /// The shared connection, made now if there is none.
    async fn connection(&self) -> Result<(MultiplexedConnection, u64), KvError> {
        let mut slot = self.slot.lock().await;
        if let Some(conn) = &slot.conn {
            return Ok((conn.clone(), slot.generation));
        }
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(Some(RESPONSE_TIMEOUT));
        let connecting = self
            .client
            .get_multiplexed_async_connection_with_config(&config);
        let conn = match tokio::time::timeout(CONNECT_TIMEOUT * 2, connecting).await {
            Ok(Ok(conn)) => conn,
            Ok(Err(e)) => return Err(self.unavailable(&e)),
            Err(_) => {
                return Err(KvError::Unavailable(format!(
                    "could not connect to Redis within {:?}",
                    CONNECT_TIMEOUT * 2
                )));
            }
        };
        slot.generation += 1;
        slot.conn = Some(conn.clone());
        Ok((conn, slot.generation))
    }

    /// Drop the connection of `generation` after an error on it (unless already replaced), so
    /// that the next operation connects again.
    async fn forget(&self, generation: u64) {
        let mut slot = self.slot.lock().await;
        if slot.generation == generation {
            slot.conn = None;
        }
    }

    fn unavailable(&self, e: &redis::RedisError) -> KvError {
        let message = crate::server_tls::explain(&format!("Redis: {e}"), self.ca_file.as_deref());
        KvError::Unavailable(scrub(&message, &self.secrets))
    }
}

/// Check that a reply starts with `ok`.
fn ok(reply: &mut std::vec::IntoIter<Vec<u8>>) -> Result<(), KvError> {
    match reply.next().as_deref() {
        Some(b"ok") => Ok(()),
        other => Err(unexpected(other)),
    }
}

/// The error a script's refusal stands for.
fn refusal(bounds: Bounds, word: Option<&[u8]>) -> KvError {
    match word {
        Some(b"full") => KvError::Full(bounds.max_keys),
        Some(b"fullbytes") => KvError::FullBytes(bounds.max_total_bytes),
        Some(b"nan") => KvError::NotAnInteger,
        Some(b"overflow") => KvError::Overflow,
        other => unexpected(other),
    }
}

fn unexpected(word: Option<&[u8]>) -> KvError {
    match word {
        Some(word) => KvError::Unavailable(format!(
            "unexpected reply from Redis: {:?}",
            String::from_utf8_lossy(word)
        )),
        None => KvError::Unavailable("empty reply from Redis".into()),
    }
}

/// A stored key or value as text (what this store wrote is; something else under the prefix may
/// not be).
fn text(bytes: Vec<u8>) -> Result<String, KvError> {
    String::from_utf8(bytes)
        .map_err(|_| KvError::Unavailable("Redis holds a key or value that is not UTF-8".into()))
}

/// The password in `url` as written (percent-encoded): between `scheme://user:` and `@`, or a
/// `pass=` query parameter (unix sockets).
/// `url` without its `ssl_ca_certs=PATH` query parameter, and that path; only a `rediss://` URL
/// may have one.
fn split_ca_file(url: &str) -> Result<(String, Option<std::path::PathBuf>), String> {
    const KEY: &str = "ssl_ca_certs";
    let Some((head, query)) = url.split_once('?') else {
        return Ok((url.to_string(), None));
    };
    let (query, fragment) = match query.split_once('#') {
        Some((query, fragment)) => (query, Some(fragment)),
        None => (query, None),
    };
    let mut ca_file = None;
    let mut kept = Vec::new();
    for pair in query.split('&') {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        if percent_encoding::percent_decode_str(key).decode_utf8_lossy() == KEY {
            let value = percent_encoding::percent_decode_str(value).decode_utf8_lossy();
            if value.is_empty() {
                return Err(format!(
                    "{KEY} is empty: name a PEM file of CA certificates"
                ));
            }
            ca_file = Some(std::path::PathBuf::from(value.into_owned()));
        } else {
            kept.push(pair);
        }
    }
    if ca_file.is_some() && !url.starts_with("rediss://") {
        return Err(format!("{KEY} is for TLS connections: use a rediss:// URL"));
    }
    let mut rest = head.to_string();
    if !kept.is_empty() {
        rest.push('?');
        rest.push_str(&kept.join("&"));
    }
    if let Some(fragment) = fragment {
        rest.push('#');
        rest.push_str(fragment);
    }
    Ok((rest, ca_file))
}

fn raw_password(url: &str) -> Vec<String> {
    let mut found = Vec::new();
    if let Some((_, rest)) = url.split_once("://") {
        let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
        if let Some((userinfo, _)) = authority.rsplit_once('@')
            && let Some((_, password)) = userinfo.split_once(':')
        {
            found.push(password.to_string());
        }
    }
    if let Some((_, query)) = url.split_once('?') {
        for pair in query.split(['&', '#']) {
            if let Some(password) = pair.strip_prefix("pass=") {
                found.push(password.to_string());
            }
        }
    }
    found
}

/// `message` with every one of `secrets` blanked out.
fn scrub(message: &str, secrets: &[String]) -> String {
    secrets
        .iter()
        .filter(|s| !s.is_empty())
        .fold(message.to_string(), |m, s| m.replace(s.as_str(), "***"))
}

#[cfg(test)]
mod tests {
    use super::split_ca_file;

    #[test]
    fn the_ca_file_leaves_the_url_and_only_a_tls_url_may_name_one() {
        assert_eq!(
            split_ca_file("rediss://:pw@cache:6380/0?ssl_ca_certs=%2Fetc%2Fca.pem&protocol=resp3")
                .unwrap(),
            (
                "rediss://:pw@cache:6380/0?protocol=resp3".to_string(),
                Some("/etc/ca.pem".into())
            )
        );
        assert_eq!(
            split_ca_file("rediss://cache/0?ssl_ca_certs=/ca.pem#insecure").unwrap(),
            (
                "rediss://cache/0#insecure".to_string(),
                Some("/ca.pem".into())
            )
        );
        assert_eq!(
            split_ca_file("redis://cache:6379").unwrap(),
            ("redis://cache:6379".to_string(), None)
        );
        assert!(
            split_ca_file("redis://cache/0?ssl_ca_certs=/ca.pem")
                .unwrap_err()
                .contains("rediss://")
        );
        assert!(split_ca_file("rediss://cache/0?ssl_ca_certs=").is_err());
    }
}
