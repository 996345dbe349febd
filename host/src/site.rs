//! What one listening socket serves: one project (`dev`, `run --project`), or many tenants
//! chosen by the request's host (`run --tenants`).
//!
//! The server hands every request here; a project goes straight to the [`router`], tenants first
//! pick the tenant ([`tenants`]), whose project then goes to the same router.
//!
//! [`router`]: crate::router
//! [`tenants`]: crate::tenants

use std::{net::SocketAddr, time::Duration};

use hyper::{Request, Response, body::Incoming};

use crate::{
    app::App, config::ServerSettings, request_body::BodyBudget, response::Body, router,
    tenants::Tenants,
};

/// One project, or tenants by host.
#[derive(Clone)]
pub enum Site {
    Project(App),
    Tenants(Tenants),
}

impl Site {
    /// Answer one request; its body is read within `budget` and `body_timeout`.
    pub async fn respond(
        &self,
        request: Request<Incoming>,
        peer: SocketAddr,
        budget: &BodyBudget,
        body_timeout: Duration,
    ) -> Response<Body> {
        match self {
            Site::Project(app) => router::respond(app, request, peer, budget, body_timeout).await,
            Site::Tenants(tenants) => tenants.respond(request, peer, budget, body_timeout).await,
        }
    }

    /// The server settings the connection limits come from: the project's `config.py`, or the
    /// defaults for tenants (whose projects do not decide for the process).
    pub fn server_settings(&self) -> ServerSettings {
        match self {
            Site::Project(app) => app.current().settings.server.clone(),
            Site::Tenants(_) => ServerSettings::default(),
        }
    }
}
