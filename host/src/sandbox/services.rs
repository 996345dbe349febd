//! The host services the guest imports (`wit/filerouter.wit`): `kv`, the project's key-value
//! store; `sql`, its database (`crate::db`); `upstream`, which hands middleware's `call_next` the host's own answer;
//! `plugins`, calls into the project's plugins (`crate::plugins`); and `stdlib`, the standard
//! library's compiled modules (`super::stdlib`); and `passwords`, password hashing at native
//! speed (`crate::passwords`); and `environment`, the settings and secrets the operator gives
//! (`crate::environment`); and `background`, which sends a request's response before its
//! background tasks run (`super::Sandbox::handle`); and `outbound`, route code's HTTP calls
//! through the project's gate (`crate::outbound`); and `response-stream`, a streamed response's head and
//! chunks (`super::stream`). Each impl here only adapts the generated
//! trait to the service's own module.
//!
//! These are the only calls out of the sandbox besides WASI's clock, randomness and stdio;
//! `outbound` is the only one that reaches the network.

use std::time::Duration;

use super::{
    CallState,
    bindings::filerouter::sandbox::{
        background, environment, kv, outbound, passwords, plugins, response_stream, snapshot, sql,
        stdlib, trace, types, upstream, websocket,
    },
    tap::{Started, hidden, taped},
};
use crate::{
    db,
    replay::{Sent, tape::Bytes},
    sandbox::{HttpRequest, HttpResponse},
    scheduler::Budget,
    traces::Active,
};

/// Produces the host's answer for a request whose target the host serves itself. It keeps the
/// body on its own side and returns the status and headers (with an empty body).
pub type Upstream = Box<dyn FnMut(HttpRequest) -> HttpResponse + Send>;

impl types::Host for CallState {}

impl environment::Host for CallState {
    fn declared(&mut self) -> wasmtime::Result<environment::Declarations> {
        let tap = taped!(self, "environment.declared", ());
        let declarations = environment::Declarations {
            settings: self.environment.settings_json().to_string(),
            names: self.environment.names().to_vec(),
        };
        tap.end(self, Ok(declarations))
    }

    /// Empty but in a request's call: the sandbox gives the server's own calls (and the build)
    /// the declarations only.
    /// Recorded as `[NAME]` placeholders, which a replay gives route code instead.
    fn values(&mut self) -> wasmtime::Result<Vec<(String, String)>> {
        let tap = taped!(self, "environment.values", ());
        let values = self.environment.values().to_vec();
        tap.end_kept(self, Ok(values), |values| {
            let placeholder = |name: &String| (name.clone(), format!("[{name}]"));
            values.iter().map(|(name, _)| placeholder(name)).collect()
        })
    }
}

impl kv::Host for CallState {
    async fn get(&mut self, key: String) -> wasmtime::Result<Result<Option<String>, String>> {
        let tap = taped!(self, "kv.get", (&key,));
        let span = self.kv_span("get");
        let done = self
            .kv
            .get(&key)
            .await
            .map_err(|e| failed(&span, e.to_string()));
        tap.end(self, Ok(done))
    }

    async fn set(
        &mut self,
        key: String,
        value: String,
        ttl_ms: Option<u64>,
    ) -> wasmtime::Result<Result<(), String>> {
        let tap = taped!(self, "kv.set", (&key, &value, ttl_ms));
        let span = self.kv_span("set");
        let done = self
            .kv
            .set(&key, value, ttl_ms.map(Duration::from_millis))
            .await
            .map_err(|e| failed(&span, e.to_string()));
        tap.end(self, Ok(done))
    }

    async fn delete(&mut self, key: String) -> wasmtime::Result<Result<bool, String>> {
        let tap = taped!(self, "kv.delete", (&key,));
        let span = self.kv_span("delete");
        let done = self
            .kv
            .delete(&key)
            .await
            .map_err(|e| failed(&span, e.to_string()));
        tap.end(self, Ok(done))
    }

    async fn incr(
        &mut self,
        key: String,
        by: i64,
        ttl_ms: Option<u64>,
    ) -> wasmtime::Result<Result<i64, String>> {
        let tap = taped!(self, "kv.incr", (&key, by, ttl_ms));
        let span = self.kv_span("incr");
        let done = self
            .kv
            .incr(&key, by, ttl_ms.map(Duration::from_millis))
            .await
            .map_err(|e| failed(&span, e.to_string()));
        tap.end(self, Ok(done))
    }

    async fn compare_and_set(
        &mut self,
        key: String,
        expected: Option<String>,
        value: Option<String>,
        ttl_ms: Option<u64>,
    ) -> wasmtime::Result<Result<bool, String>> {
        let tap = taped!(
            self,
            "kv.compare_and_set",
            (&key, &expected, &value, ttl_ms)
        );
        let span = self.kv_span("compare_and_set");
        let done = self
            .kv
            .compare_and_set(&key, expected, value, ttl_ms.map(Duration::from_millis))
            .await
            .map_err(|e| failed(&span, e.to_string()));
        tap.end(self, Ok(done))
    }

    async fn keys(
        &mut self,
        prefix: String,
        after: Option<String>,
        limit: u32,
    ) -> wasmtime::Result<Result<Vec<String>, String>> {
        let tap = taped!(self, "kv.keys", (&prefix, &after, limit));
        let span = self.kv_span("keys");
        let done = self
            .kv
            .keys(&prefix, after, limit as usize)
            .await
            .map_err(|e| failed(&span, e.to_string()));
        tap.end(self, Ok(done))
    }

    async fn write(
        &mut self,
        entries: Vec<(String, Option<String>)>,
        ttl_ms: Option<u64>,
    ) -> wasmtime::Result<Result<(), String>> {
        let tap = taped!(self, "kv.write", (&entries, ttl_ms));
        let span = self.kv_span("write");
        let done = self
            .kv
            .write(entries, ttl_ms.map(Duration::from_millis))
            .await
            .map_err(|e| failed(&span, e.to_string()));
        tap.end(self, Ok(done))
    }
}

/// Statements run on database threads (`crate::db::threads`); their CPU is charged to the
/// request's budget as they run, so a request past its CPU limit inside a statement stops
/// there: the statement is interrupted and the call traps, as at an epoch tick (504).
impl sql::Host for CallState {
    async fn dialect(&mut self) -> wasmtime::Result<sql::Engine> {
        let tap = taped!(self, "sql.dialect", ());
        tap.end(
            self,
            Ok(if self.db.database_is_postgres() {
                sql::Engine::Postgres
            } else {
                sql::Engine::Sqlite
            }),
        )
    }

    async fn open(&mut self, database: String) -> wasmtime::Result<Result<u32, sql::Error>> {
        let tap = taped!(self, "sql.open", (&database,));
        let opened = self.db.open(&database).await.map_err(error);
        tap.end(self, self.within_budget(opened))
    }

    async fn execute(
        &mut self,
        connection: u32,
        statement: String,
        params: sql::Params,
        begin: Option<String>,
    ) -> wasmtime::Result<Result<sql::Outcome, sql::Error>> {
        let tap = taped!(
            self,
            "sql.execute",
            (connection, &statement, &params, &begin)
        );
        let span = self.statement_span(&statement);
        let started = std::time::Instant::now();
        let done = self
            .db
            .execute(connection, statement, from_params(params), begin)
            .await
            .map(outcome)
            .map_err(|e| failed(&span, error(e)));
        crate::metrics::database_statement(started.elapsed());
        tap.end(self, self.within_budget(done))
    }

    async fn execute_many(
        &mut self,
        connection: u32,
        statement: String,
        params: Vec<sql::Params>,
        begin: Option<String>,
    ) -> wasmtime::Result<Result<sql::Outcome, sql::Error>> {
        let tap = taped!(
            self,
            "sql.execute_many",
            (connection, &statement, &params, &begin)
        );
        let params = params.into_iter().map(from_params).collect();
        let span = self.statement_span(&statement);
        let started = std::time::Instant::now();
        let done = self
            .db
            .execute_many(connection, statement, params, begin)
            .await
            .map(outcome)
            .map_err(|e| failed(&span, error(e)));
        crate::metrics::database_statement(started.elapsed());
        tap.end(self, self.within_budget(done))
    }

    async fn execute_script(
        &mut self,
        connection: u32,
        script: String,
    ) -> wasmtime::Result<Result<sql::Outcome, sql::Error>> {
        let tap = taped!(self, "sql.execute_script", (connection, &script));
        let span = self.statement_span(&script);
        let started = std::time::Instant::now();
        let done = self
            .db
            .execute_script(connection, script)
            .await
            .map(outcome)
            .map_err(|e| failed(&span, error(e)));
        crate::metrics::database_statement(started.elapsed());
        tap.end(self, self.within_budget(done))
    }

    async fn commit(&mut self, connection: u32) -> wasmtime::Result<Result<(), sql::Error>> {
        let tap = taped!(self, "sql.commit", (connection,));
        let done = self.db.commit(connection).await.map_err(error);
        tap.end(self, self.within_budget(done))
    }

    async fn rollback(&mut self, connection: u32) -> wasmtime::Result<Result<(), sql::Error>> {
        let tap = taped!(self, "sql.rollback", (connection,));
        let done = self.db.rollback(connection).await.map_err(error);
        tap.end(self, self.within_budget(done))
    }

    async fn close(&mut self, connection: u32) -> wasmtime::Result<()> {
        let tap = taped!(self, "sql.close", (connection,));
        self.db.close(connection);
        tap.end(self, Ok(()))
    }
}

impl CallState {
    /// The span of a statement, while the call is traced.
    fn statement_span(&self, statement: &str) -> Option<Active> {
        let system = if self.db.database_is_postgres() {
            "postgresql"
        } else {
            "sqlite"
        };
        self.trace.as_ref()?.statement(system, statement)
    }

    /// The span of a kv call, while the call is traced.
    fn kv_span(&self, operation: &'static str) -> Option<Active> {
        self.trace.as_ref()?.kv(operation)
    }

    /// `outcome` for the guest, or a trap when the request went past a time limit meanwhile
    /// (the budget knows which, and the call answers 504).
    fn within_budget<T>(&self, outcome: T) -> wasmtime::Result<T> {
        match self.budget.as_ref().and_then(Budget::overrun) {
            Some(_) => Err(wasmtime::Error::from(wasmtime::Trap::Interrupt)),
            None => Ok(outcome),
        }
    }
}

/// `error`, after marking `span` (if any) failed; the span's message is the kind of failure
/// only, never values.
fn failed<E>(span: &Option<Active>, error: E) -> E {
    if let Some(span) = span {
        span.fail("failed");
    }
    error
}

fn from_value(value: sql::Value) -> db::Value {
    match value {
        sql::Value::Null => db::Value::Null,
        sql::Value::Integer(i) => db::Value::Integer(i),
        sql::Value::Real(f) => db::Value::Real(f),
        sql::Value::Text(t) => db::Value::Text(t),
        sql::Value::Blob(b) => db::Value::Blob(b),
    }
}

fn to_value(value: db::Value) -> sql::Value {
    match value {
        db::Value::Null => sql::Value::Null,
        db::Value::Integer(i) => sql::Value::Integer(i),
        db::Value::Real(f) => sql::Value::Real(f),
        db::Value::Text(t) => sql::Value::Text(t),
        db::Value::Blob(b) => sql::Value::Blob(b),
    }
}

fn from_params(params: sql::Params) -> db::Params {
    match params {
        sql::Params::None => db::Params::None,
        sql::Params::Positional(values) => {
            db::Params::Positional(values.into_iter().map(from_value).collect())
        }
        sql::Params::Named(values) => db::Params::Named(
            values
                .into_iter()
                .map(|(name, value)| (name, from_value(value)))
                .collect(),
        ),
    }
}

fn outcome(outcome: db::Outcome) -> sql::Outcome {
    sql::Outcome {
        columns: outcome.columns,
        rows: outcome
            .rows
            .into_iter()
            .map(|row| row.into_iter().map(to_value).collect())
            .collect(),
        changes: outcome.changes,
        last_row_id: outcome.last_row_id,
        in_transaction: outcome.in_transaction,
    }
}

fn error(error: db::DbError) -> sql::Error {
    match error {
        db::DbError::Integrity(m) => sql::Error::Integrity(m),
        db::DbError::Operational(m) => sql::Error::Operational(m),
        db::DbError::Programming(m) => sql::Error::Programming(m),
        db::DbError::Data(m) => sql::Error::Data(m),
        db::DbError::Refused(m) => sql::Error::Refused(m),
        db::DbError::Limit(m) => sql::Error::Limit(m),
        db::DbError::Unavailable(m) => sql::Error::Unavailable(m),
    }
}

impl CallState {
    async fn outbound_start(
        &mut self,
        request: outbound::Request,
        body: Vec<u8>,
        more: bool,
    ) -> Result<u32, outbound::Error> {
        let mut headers = request.headers;
        // Traced: a client span, and its `traceparent` on the request (the host's, in place
        // of any route code set).
        let span = match self
            .trace
            .as_ref()
            .and_then(|t| t.outbound_start(&request.method, &request.url))
        {
            Some((span, traceparent)) => {
                headers.retain(|(name, _)| !name.eq_ignore_ascii_case("traceparent"));
                headers.push(("traceparent".into(), traceparent));
                Some(span)
            }
            None => None,
        };
        let request = crate::outbound::Request {
            method: request.method,
            url: request.url,
            headers,
            timeout_s: request.timeout_s,
            decode: request.decode,
        };
        let started = self
            .outbound_session()?
            .start(request, body, more)
            .map_err(|e| failed(&span, outbound_error(e)))?;
        if let (Some(trace), Some(span)) = (self.trace.as_mut(), span) {
            trace.outbound_opened(started, span);
        }
        Ok(started)
    }

    async fn outbound_write(
        &mut self,
        call: u32,
        body: Vec<u8>,
        more: bool,
    ) -> Result<(), outbound::Error> {
        self.outbound_session()?
            .write(call, body, more)
            .await
            .map_err(outbound_error)
    }

    async fn outbound_wait(&mut self, calls: Vec<u32>, timeout_ms: Option<u64>) -> Vec<u32> {
        match self.outbound.as_mut() {
            Some(session) => {
                session
                    .wait(&calls, timeout_ms.map(Duration::from_millis))
                    .await
            }
            None => calls,
        }
    }

    async fn outbound_head(&mut self, call: u32) -> Result<outbound::Response, outbound::Error> {
        let head = self.outbound_session()?.head(call).await;
        if let Some(trace) = self.trace.as_mut() {
            trace.outbound_answered(call, head.as_ref().map(|h| h.status).map_err(|_| "failed"));
        }
        let head = head.map_err(outbound_error)?;
        Ok(outbound::Response {
            status: head.status,
            headers: head.headers,
        })
    }

    async fn outbound_read(&mut self, call: u32, max: u32) -> Result<Vec<u8>, outbound::Error> {
        self.outbound_session()?
            .read(call, max as usize)
            .await
            .map_err(outbound_error)
    }

    async fn outbound_close(&mut self, call: u32) {
        if let Some(session) = self.outbound.as_mut() {
            session.close(call);
        }
        if let Some(trace) = self.trace.as_mut() {
            trace.outbound_closed(call);
        }
    }
}

/// Each call taped (`super::tap`): bodies as [`Bytes`], which a trace keeps as text when it
/// is UTF-8, where the operator's values are redacted.
impl outbound::Host for CallState {
    async fn start(
        &mut self,
        request: outbound::Request,
        body: Vec<u8>,
        more: bool,
    ) -> wasmtime::Result<Result<u32, outbound::Error>> {
        let tap = taped!(
            self,
            "outbound.start",
            (&request, Bytes(body.clone()), more)
        );
        let started = self.outbound_start(request, body, more).await;
        tap.end(self, Ok(started))
    }

    async fn write(
        &mut self,
        call: u32,
        body: Vec<u8>,
        more: bool,
    ) -> wasmtime::Result<Result<(), outbound::Error>> {
        let tap = taped!(self, "outbound.write", (call, Bytes(body.clone()), more));
        let written = self.outbound_write(call, body, more).await;
        tap.end(self, Ok(written))
    }

    /// Which calls are ready: the order concurrent calls completed in.
    async fn wait(
        &mut self,
        calls: Vec<u32>,
        timeout_ms: Option<u64>,
    ) -> wasmtime::Result<Vec<u32>> {
        let tap = taped!(self, "outbound.wait", (&calls, timeout_ms));
        let ready = self.outbound_wait(calls, timeout_ms).await;
        tap.end(self, Ok(ready))
    }

    async fn head(
        &mut self,
        call: u32,
    ) -> wasmtime::Result<Result<outbound::Response, outbound::Error>> {
        let tap = taped!(self, "outbound.head", (call,));
        let head = self.outbound_head(call).await;
        tap.end(self, Ok(head))
    }

    async fn read(
        &mut self,
        call: u32,
        max: u32,
    ) -> wasmtime::Result<Result<Vec<u8>, outbound::Error>> {
        let read = self.outbound_read_taped(call, max).await?;
        Ok(read.map(|bytes| bytes.0))
    }

    async fn close(&mut self, call: u32) -> wasmtime::Result<()> {
        let tap = taped!(self, "outbound.close", (call,));
        self.outbound_close(call).await;
        tap.end(self, Ok(()))
    }
}

impl CallState {
    /// `outbound.read`, taped with the body as [`Bytes`].
    async fn outbound_read_taped(
        &mut self,
        call: u32,
        max: u32,
    ) -> wasmtime::Result<Result<Bytes, outbound::Error>> {
        let tap = taped!(self, "outbound.read", (call, max));
        let read = self.outbound_read(call, max).await.map(Bytes);
        tap.end(self, Ok(read))
    }

    /// This call's outbound session; the server's own calls (route inspection, `config.py`,
    /// the build) have none.
    fn outbound_session(&mut self) -> Result<&mut crate::outbound::Session, outbound::Error> {
        self.outbound.as_mut().ok_or_else(|| {
            outbound::Error::Refused(
                "outbound calls are made by requests and the start-up hook only, \
                 not while a module is imported for the build or for route inspection"
                    .into(),
            )
        })
    }
}

fn outbound_error(error: crate::outbound::CallError) -> outbound::Error {
    use crate::outbound::CallError as E;
    match error {
        E::Refused(m) => outbound::Error::Refused(m),
        E::Invalid(m) => outbound::Error::Invalid(m),
        E::Limit(m) => outbound::Error::Limit(m),
        E::Timeout(m) => outbound::Error::Timeout(m),
        E::Network(m) => outbound::Error::Network(m),
        E::Decoding(m) => outbound::Error::Decoding(m),
    }
}

/// Route code's own spans (`filerouter.trace`); all in `crate::traces::CallTrace`, with its
/// bounds. Untraced calls keep nothing and answer 0.
impl trace::Host for CallState {
    fn start(
        &mut self,
        name: String,
        parent: Option<u32>,
        attributes: Vec<(String, trace::Value)>,
    ) -> u32 {
        let Some(trace) = self.trace.as_mut() else {
            return 0;
        };
        let attributes = attributes
            .into_iter()
            .map(|(key, value)| (key, attribute(value)))
            .collect();
        trace.guest_start(&name, parent, attributes)
    }

    fn set_attribute(&mut self, span: u32, key: String, value: trace::Value) {
        if let Some(trace) = self.trace.as_mut() {
            trace.guest_set(span, &key, attribute(value));
        }
    }

    fn end(&mut self, span: u32, error: Option<String>) {
        if let Some(trace) = self.trace.as_mut() {
            trace.guest_end(span, error.as_deref());
        }
    }
}

fn attribute(value: trace::Value) -> opentelemetry::Value {
    match value {
        trace::Value::Text(text) => text.into(),
        trace::Value::Integer(n) => n.into(),
        trace::Value::Float(x) => x.into(),
        trace::Value::Boolean(b) => b.into(),
    }
}

impl upstream::Host for CallState {
    fn respond(&mut self, request: HttpRequest) -> wasmtime::Result<HttpResponse> {
        let tap = taped!(self, "upstream.respond", (&request.method, &request.path));
        let response = match self.upstream.as_mut() {
            Some(answer) => answer(request),
            // Only a `host` target gets an upstream; the guest asks for it only then.
            None => HttpResponse {
                status: 500,
                headers: vec![("content-type".into(), "application/json".into())],
                body: br#"{"detail":"Internal Server Error"}"#.to_vec(),
                host_body: false,
            },
        };
        tap.end(self, Ok(response))
    }
}

impl background::Host for CallState {
    /// Hands a request's response to [`super::Sandbox::handle`], which answers with it while
    /// the call goes on to run the background tasks.
    fn respond(&mut self, response: HttpResponse) -> bool {
        // Taped: this is the response the client gets, not the call's own return.
        if let Some(tap) = self.tap() {
            let early = crate::replay::Outcome::response(response.status, &response.body);
            tap.responded(early);
        }
        match self.early.take() {
            Some(sender) => sender.send(super::Early::Response(response)).is_ok(),
            None => false,
        }
    }
}

impl response_stream::Host for CallState {
    /// Hands a streamed response's head and body to [`super::Sandbox::handle`], which answers
    /// with them while the call goes on to write the chunks; from now on the call runs under
    /// the stream's limits (`super::stream`). Taped: a replay's stream starts from the trace,
    /// and what it writes is compared with what was written.
    fn start(&mut self, head: HttpResponse) -> wasmtime::Result<Result<(), String>> {
        let status = head.status;
        let result = match self.tap_start("response-stream.start", || {
            serde_json::to_value((head.status, &head.headers))
        })? {
            Started::Answered(answer) => answer,
            Started::Go(taping) => {
                let result = self.start_stream(head);
                taping.end(self, Ok(result))?
            }
        };
        if result.is_ok() {
            if let Some(limits) = self.stream_setup.as_ref().map(|setup| setup.limits) {
                self.run_long(limits.cpu, limits);
            }
            self.sent_if(&result, || Sent::StreamStarted(status));
        }
        Ok(result)
    }

    async fn write(&mut self, chunk: Vec<u8>) -> wasmtime::Result<Result<(), String>> {
        let taping = match self.tap_start("response-stream.write", || {
            serde_json::to_value((Bytes(chunk.clone()),))
        })? {
            Started::Answered(answer) => {
                if !chunk.is_empty() {
                    self.sent_if(&answer, || Sent::Chunk(chunk));
                }
                return Ok(answer);
            }
            Started::Go(taping) => taping,
        };
        let kept = (self.tap.is_some() && !chunk.is_empty()).then(|| chunk.clone());
        let result = match self.stream.as_ref() {
            Some(writer) => writer.write(chunk).await,
            None => Err("no stream was started (`response-stream.start` first)".into()),
        };
        let result = taping.end(self, Ok(result))?;
        if let Some(chunk) = kept {
            self.sent_if(&result, || Sent::Chunk(chunk));
        }
        Ok(result)
    }

    async fn wait(&mut self, timeout_ms: u64) -> wasmtime::Result<bool> {
        let taping = taped!(self, "response-stream.wait", (timeout_ms,));
        let timeout = Duration::from_millis(timeout_ms);
        let over = match self.stream.as_ref() {
            Some(writer) => writer.wait(timeout).await,
            None => {
                tokio::time::sleep(timeout).await;
                false
            }
        };
        taping.end(self, Ok(over))
    }
}

impl CallState {
    /// Start the stream for real (not replayed).
    fn start_stream(&mut self, head: HttpResponse) -> Result<(), String> {
        if self.stream.is_some() {
            return Err("a stream was started already".into());
        }
        if !head.body.is_empty() || head.host_body {
            return Err("a stream's head has no body: write it in chunks".into());
        }
        let Some(setup) = self.stream_setup.clone() else {
            return Err(super::stream::Refused::NotARequest.to_string());
        };
        let Some(early) = self.early.take() else {
            return Err(super::stream::Refused::Sent.to_string());
        };
        match super::stream::start(&setup, early, head) {
            Ok(writer) => {
                self.stream = Some(writer);
                Ok(())
            }
            Err((early, refused)) => {
                self.early = early;
                Err(refused.to_string())
            }
        }
    }

    /// Tell the call's tap (recorded or replayed) that `sent` went out, when `result` is `ok`.
    fn sent_if<T, E>(&self, result: &Result<T, E>, sent: impl FnOnce() -> Sent) {
        if let (Ok(_), Some(tap)) = (result, self.tap()) {
            tap.sent(sent());
        }
    }
}

impl snapshot::Host for CallState {
    /// Collects what `bake` lists for [`super::snapshot::make_immortal`]; outside a bake
    /// there is no list, and nothing happens. Bounded by the bake's memory cap: objects are at
    /// least 8 bytes apart, so a real list holds at most one number per 4 bytes of memory, and
    /// anything past that is dropped.
    fn immortal(&mut self, objects: Vec<u32>) {
        if let Some(list) = self.immortal.as_mut() {
            let room = (self.limits.cap() / 4).saturating_sub(list.len());
            list.extend_from_slice(&objects[..objects.len().min(room)]);
        }
    }
}

impl plugins::Host for CallState {
    fn describe(&mut self, plugin: String) -> Result<Vec<plugins::FunctionInfo>, String> {
        match &self.plugins {
            Some(session) => session.describe(&plugin),
            None => Err(super::plugin_calls::no_plugins(&plugin)),
        }
    }

    async fn call(
        &mut self,
        plugin: String,
        function: String,
        args: Vec<plugins::Node>,
    ) -> wasmtime::Result<Result<Vec<plugins::Node>, plugins::CallError>> {
        let tap = taped!(self, "plugins.call", (&plugin, &function, &args));
        let called = match &mut self.plugins {
            Some(session) => session.call(&plugin, &function, args).await,
            None => Ok(Err(plugins::CallError::Unknown(
                super::plugin_calls::no_plugins(&plugin),
            ))),
        };
        tap.end(self, called)
    }
}

impl stdlib::Host for CallState {
    fn get(&mut self, name: String) -> Option<stdlib::CompiledModule> {
        super::stdlib::get(&name).map(|module| stdlib::CompiledModule {
            code: module.code.to_vec(),
            is_package: module.package,
        })
    }
}

/// Password hashing runs right here, on the guest's thread: the scheduler counts its CPU as
/// the request's, and the computation asks the request's budget as it goes, so a request past
/// its time limit stops in the middle of a hash (the trap is an interrupt, as at an epoch
/// tick, and the call answers 504).
impl passwords::Host for CallState {
    fn bcrypt_hash(
        &mut self,
        password: Vec<u8>,
        setting: Vec<u8>,
    ) -> wasmtime::Result<Result<Vec<u8>, String>> {
        let tap = taped!(
            self,
            "passwords.bcrypt_hash",
            (hidden(&password), Bytes(setting.clone()))
        );
        let mut meter = self.password_meter();
        tap.end(
            self,
            finish(crate::passwords::bcrypt::hash(
                &password, &setting, &mut meter,
            )),
        )
    }

    fn bcrypt_check(
        &mut self,
        password: Vec<u8>,
        hashed: Vec<u8>,
    ) -> wasmtime::Result<Result<bool, String>> {
        let tap = taped!(
            self,
            "passwords.bcrypt_check",
            (hidden(&password), Bytes(hashed.clone()))
        );
        let mut meter = self.password_meter();
        tap.end(
            self,
            finish(crate::passwords::bcrypt::check_password(
                &password, &hashed, &mut meter,
            )),
        )
    }

    fn bcrypt_kdf(
        &mut self,
        password: Vec<u8>,
        salt: Vec<u8>,
        length: u32,
        rounds: u32,
    ) -> wasmtime::Result<Result<Vec<u8>, String>> {
        let tap = taped!(
            self,
            "passwords.bcrypt_kdf",
            (hidden(&password), Bytes(salt.clone()), length, rounds)
        );
        let mut meter = self.password_meter();
        tap.end(
            self,
            finish(crate::passwords::bcrypt::kdf(
                &password, &salt, length, rounds, &mut meter,
            )),
        )
    }

    fn argon2_hash(
        &mut self,
        kind: passwords::Argon2Variant,
        version: u32,
        secret: Vec<u8>,
        salt: Vec<u8>,
        time_cost: u32,
        memory_cost: u32,
        parallelism: u32,
        hash_len: u32,
    ) -> wasmtime::Result<Result<Vec<u8>, String>> {
        let variant = match kind {
            passwords::Argon2Variant::Argon2d => crate::passwords::Argon2Variant::D,
            passwords::Argon2Variant::Argon2i => crate::passwords::Argon2Variant::I,
            passwords::Argon2Variant::Argon2id => crate::passwords::Argon2Variant::Id,
        };
        let tap = taped!(
            self,
            "passwords.argon2_hash",
            (
                format!("{kind:?}"),
                version,
                hidden(&secret),
                Bytes(salt.clone()),
                (time_cost, memory_cost, parallelism, hash_len)
            )
        );
        let cap = self.limits.cap() as u64;
        let mut meter = self.password_meter();
        let hashed = finish(crate::passwords::argon2::hash_raw(
            variant,
            version,
            &secret,
            &salt,
            time_cost,
            memory_cost,
            parallelism,
            hash_len,
            cap,
            &mut meter,
        ));
        tap.end(self, hashed)
    }

    fn pbkdf2_hmac(
        &mut self,
        digest: String,
        password: Vec<u8>,
        salt: Vec<u8>,
        iterations: u32,
        length: u32,
    ) -> wasmtime::Result<Result<Vec<u8>, String>> {
        let tap = taped!(
            self,
            "passwords.pbkdf2_hmac",
            (
                &digest,
                hidden(&password),
                Bytes(salt.clone()),
                iterations,
                length
            )
        );
        let mut meter = self.password_meter();
        tap.end(
            self,
            finish(crate::passwords::pbkdf2::pbkdf2_hmac(
                &digest, &password, &salt, iterations, length, &mut meter,
            )),
        )
    }

    fn scrypt(
        &mut self,
        password: Vec<u8>,
        salt: Vec<u8>,
        n: u64,
        r: u32,
        p: u32,
        max_memory: u64,
        length: u32,
    ) -> wasmtime::Result<Result<Vec<u8>, String>> {
        let tap = taped!(
            self,
            "passwords.scrypt",
            (
                hidden(&password),
                Bytes(salt.clone()),
                (n, r, p, max_memory),
                length
            )
        );
        let cap = self.limits.cap() as u64;
        let mut meter = self.password_meter();
        tap.end(
            self,
            finish(crate::passwords::scrypt::scrypt(
                &password, &salt, n, r, p, max_memory, length, cap, &mut meter,
            )),
        )
    }
}

impl CallState {
    /// Whether a password computation may go on: the request's budget says stop past its CPU
    /// or wall-clock limit (a yield cannot happen inside a host call, so it means go on).
    fn password_meter(&self) -> impl FnMut() -> bool + use<> {
        let budget = self.budget.clone();
        move || {
            budget
                .as_ref()
                .is_none_or(|budget| budget.tick() != crate::scheduler::Verdict::Stop)
        }
    }
}

/// A password function's outcome for the guest: a refused parameter is the guest's error to
/// raise; a stop traps the call as an epoch interrupt does (the budget knows which limit).
fn finish<T>(
    outcome: Result<T, crate::passwords::PasswordError>,
) -> wasmtime::Result<Result<T, String>> {
    match outcome {
        Ok(value) => Ok(Ok(value)),
        Err(crate::passwords::PasswordError::Invalid(message)) => Ok(Err(message)),
        Err(crate::passwords::PasswordError::Stopped) => {
            Err(wasmtime::Error::from(wasmtime::Trap::Interrupt))
        }
    }
}

impl websocket::Host for CallState {
    /// Hands the handshake's 101 and the connection to [`super::Sandbox::handle`], which
    /// answers with the 101 and runs the connection while the call goes on; from now on the
    /// call runs under the stream limits (`super::socket`). Taped, as every call of a session:
    /// a replay's session runs on the trace's messages, and what it sends is compared.
    fn accept(
        &mut self,
        subprotocol: Option<String>,
        head: HttpResponse,
    ) -> wasmtime::Result<Result<(), websocket::Refusal>> {
        let result = match self.tap_start("websocket.accept", || {
            serde_json::to_value((&subprotocol, head.status, &head.headers))
        })? {
            Started::Answered(answer) => answer,
            Started::Go(taping) => {
                let result = self.accept_socket(subprotocol, head);
                taping.end(self, Ok(result))?
            }
        };
        if result.is_ok() {
            if let Some(limits) = self.stream_setup.as_ref().map(|setup| setup.limits) {
                self.run_long(limits.cpu.min(self.cpu_used() + limits.message_cpu), limits);
            }
            self.sent_if(&result, || Sent::Accepted);
        }
        Ok(result)
    }

    async fn receive(
        &mut self,
        timeout_ms: Option<u64>,
    ) -> wasmtime::Result<Result<Option<websocket::Event>, String>> {
        let result =
            match self.tap_start("websocket.receive", || serde_json::to_value((timeout_ms,)))? {
                Started::Answered(answer) => answer,
                Started::Go(taping) => {
                    let result = self.receive_event(timeout_ms).await;
                    taping.end(self, Ok(result))?
                }
            };
        // Each message starts its own CPU allowance, within the connection's.
        if let (Ok(Some(websocket::Event::Message(_))), Some(budget), Some(setup)) =
            (&result, &self.budget, &self.stream_setup)
        {
            let limits = setup.limits;
            budget.extend(crate::scheduler::TimeLimits {
                cpu: limits.cpu.min(budget.cpu_used() + limits.message_cpu),
                wall: limits.duration,
            });
        }
        Ok(result)
    }

    async fn send(
        &mut self,
        message: websocket::Message,
    ) -> wasmtime::Result<Result<(), websocket::SendError>> {
        use super::socket::{Payload, SendFailed};
        let sent = |message: &websocket::Message| match message {
            websocket::Message::Text(text) => Sent::Text(text.clone()),
            websocket::Message::Binary(bytes) => Sent::Binary(bytes.clone()),
        };
        let taping = match self.tap_start("websocket.send", || match &message {
            websocket::Message::Text(text) => {
                serde_json::to_value(("text", Bytes(text.clone().into_bytes())))
            }
            websocket::Message::Binary(bytes) => {
                serde_json::to_value(("binary", Bytes(bytes.clone())))
            }
        })? {
            Started::Answered(answer) => {
                self.sent_if(&answer, || sent(&message));
                return Ok(answer);
            }
            Started::Go(taping) => taping,
        };
        let kept = self.tap.is_some().then(|| sent(&message));
        let result = match self.socket.as_ref() {
            None => Err(websocket::SendError::Invalid(NOT_ACCEPTED.into())),
            Some(socket) => {
                let payload = match message {
                    websocket::Message::Text(text) => Payload::Text(text),
                    websocket::Message::Binary(bytes) => Payload::Binary(bytes),
                };
                socket.send(payload).await.map_err(|failed| match failed {
                    SendFailed::Closed(code, reason) => {
                        websocket::SendError::Closed((code, reason))
                    }
                    SendFailed::TooLarge(message) => websocket::SendError::Invalid(message),
                })
            }
        };
        let result = taping.end(self, Ok(result))?;
        if let Some(kept) = kept {
            self.sent_if(&result, || kept);
        }
        Ok(result)
    }

    async fn close(&mut self, code: u16, reason: String) -> wasmtime::Result<Result<(), String>> {
        let taping =
            match self.tap_start("websocket.close", || serde_json::to_value((code, &reason)))? {
                Started::Answered(answer) => {
                    self.sent_if(&answer, || Sent::Close(code, reason));
                    return Ok(answer);
                }
                Started::Go(taping) => taping,
            };
        let result = match self.socket.as_ref() {
            Some(socket) => socket.close(code, reason.clone()).await,
            None => Err(NOT_ACCEPTED.into()),
        };
        let result = taping.end(self, Ok(result))?;
        self.sent_if(&result, || Sent::Close(code, reason));
        Ok(result)
    }
}

impl CallState {
    /// Accept the connection for real (not replayed).
    fn accept_socket(
        &mut self,
        subprotocol: Option<String>,
        head: HttpResponse,
    ) -> Result<(), websocket::Refusal> {
        use super::socket::{self, Refused};
        let invalid = |refused: Refused| websocket::Refusal::Invalid(refused.to_string());
        if self.socket.is_some() {
            return Err(invalid(Refused::Accepted));
        }
        let Some(setup) = self.socket_setup.take() else {
            return Err(invalid(Refused::NotAWebSocket));
        };
        let Some(early) = self.early.take() else {
            self.socket_setup = Some(setup);
            return Err(invalid(Refused::Sent));
        };
        match socket::accept(setup, early, subprotocol, head) {
            Ok(socket) => {
                self.socket = Some(socket);
                Ok(())
            }
            Err(back) => {
                let socket::NotAccepted {
                    setup,
                    early,
                    refused,
                } = *back;
                self.socket_setup = setup;
                self.early = early;
                Err(match refused {
                    Refused::Full(_) => websocket::Refusal::Full(refused.to_string()),
                    refused => invalid(refused),
                })
            }
        }
    }

    /// The socket's next event, for real (not replayed).
    async fn receive_event(
        &mut self,
        timeout_ms: Option<u64>,
    ) -> Result<Option<websocket::Event>, String> {
        use super::socket::{Event, Payload};
        let Some(socket) = self.socket.as_mut() else {
            return Err(NOT_ACCEPTED.into());
        };
        let event = socket
            .receive(timeout_ms.map(Duration::from_millis))
            .await?;
        Ok(event.map(|event| match event {
            Event::Message(Payload::Text(text)) => {
                websocket::Event::Message(websocket::Message::Text(text))
            }
            Event::Message(Payload::Binary(bytes)) => {
                websocket::Event::Message(websocket::Message::Binary(bytes))
            }
            Event::Closed(code, reason) => websocket::Event::Closed((code, reason)),
        }))
    }
}

/// What `websocket`'s calls say before `accept`.
const NOT_ACCEPTED: &str = "the WebSocket was not accepted: call `await websocket.accept()` first";

impl CallState {
    /// The CPU this call used so far (zero outside a scheduled call).
    fn cpu_used(&self) -> Duration {
        self.budget
            .as_ref()
            .map_or(Duration::ZERO, |budget| budget.cpu_used())
    }

    /// From now on the call is a long connection's (a stream's, a socket's): it may use `cpu`
    /// in all, counted from its start, and last `limits.duration`, and so may its database
    /// statements and outbound calls.
    fn run_long(&mut self, cpu: Duration, limits: super::stream::StreamLimits) {
        if let Some(budget) = &self.budget {
            budget.extend(crate::scheduler::TimeLimits {
                cpu,
                wall: limits.duration,
            });
        }
        let deadline = std::time::Instant::now() + limits.duration;
        self.db.extend_deadline(deadline);
        if let Some(outbound) = self.outbound.as_mut() {
            outbound.extend_deadline(deadline);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use wasmtime_wasi::WasiCtxBuilder;

    use super::*;

    fn state(memory_bytes: usize) -> CallState {
        let data = crate::data::Data::default();
        CallState::new(
            WasiCtxBuilder::new().build(),
            crate::sandbox::MemoryLimiter::new(memory_bytes),
            &data,
            Instant::now(),
        )
    }

    #[test]
    fn immortal_lists_are_kept_only_during_a_bake_and_within_the_memory_cap() {
        let mut call = state(64);
        snapshot::Host::immortal(&mut call, vec![8, 16]);
        assert_eq!(call.immortal, None, "kept outside a bake");

        call.immortal = Some(Vec::new());
        snapshot::Host::immortal(&mut call, vec![8, 16, 24, 32]);
        snapshot::Host::immortal(&mut call, (0..100).collect());
        let kept = call.immortal.unwrap();
        assert_eq!(kept.len(), 16, "one number per 4 bytes of a 64-byte cap");
        assert_eq!(kept[..6], [8, 16, 24, 32, 0, 1]);
    }
}
