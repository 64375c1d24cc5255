//! Who is calling: the tenant a bearer token belongs to, the operator, or anyone (when
//! `sluice.toml` declares no tenants), and which connectors that caller may address.
//!
//! A tenant addresses its own connectors by name and never sees another tenant's: those
//! are 404s, as if they did not exist. The operator sees every tenant; it addresses one
//! with the `X-Sluice-Tenant` header, or with a qualified name `tenant/name` (in a URL,
//! `tenant%2Fname`); without either it lists every connector as `tenant/name`.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::ApiState;
use super::error::ApiError;
use crate::config::{DEFAULT_TENANT, WorkerConfig};
use crate::storage::Namespace;

/// The operator's header naming the tenant a request is about.
pub const TENANT_HEADER: &str = "x-sluice-tenant";

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// No tenants are declared: the API is open, on the `default` tenant.
    Open,
    Tenant(String),
    /// The operator, about one tenant (`X-Sluice-Tenant`) or all of them.
    Operator {
        tenant: Option<String>,
    },
}

/// Paths anyone may read: the API's own description, and whether the worker is healthy
/// (probes carry no token).
const PUBLIC_PATHS: &[&str] = &["/openapi.json", "/health"];

/// Decides the caller of every request (401 when a token is needed and missing or wrong).
pub async fn authenticate(State(state): State<Arc<ApiState>>, mut request: Request, next: Next) -> Response {
    let caller = if PUBLIC_PATHS.contains(&request.uri().path()) || super::console::is_console_request(&request) {
        Ok(Caller::Open)
    } else {
        caller_of(state.worker(), request.headers())
    };
    match caller {
        Ok(caller) => {
            request.extensions_mut().insert(caller);
            next.run(request).await
        }
        Err(e) => e.into_response(),
    }
}

fn caller_of(worker: &WorkerConfig, headers: &HeaderMap) -> Result<Caller, ApiError> {
    let unauthorized = |message: &str| ApiError::new(StatusCode::UNAUTHORIZED, message);
    let authorization = headers.get(header::AUTHORIZATION).map(|value| value.to_str().unwrap_or_default().trim());
    let token = authorization.and_then(|value| {
        let (scheme, token) = value.split_once(' ')?;
        scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
    });
    let tenant_header = headers.get(TENANT_HEADER).and_then(|v| v.to_str().ok()).map(|t| t.trim().to_string());
    if let Some(token) = token {
        if worker.is_operator(token) {
            let tenant = tenant_header.filter(|t| !t.is_empty());
            // A tenant that does not exist is said so, not answered as one with nothing.
            if let Some(unknown) = tenant.as_deref().filter(|t| worker.tenant(t).is_none()) {
                let declared = worker.tenant_choices();
                return Err(ApiError::bad_request(format!(
                    "{TENANT_HEADER}: unknown tenant '{unknown}' (the tenants: {declared})"
                )));
            }
            return Ok(Caller::Operator { tenant });
        }
        if let Some(tenant) = worker.authenticate(token) {
            return Ok(Caller::Tenant(tenant.name.clone()));
        }
        if worker.has_tenants() {
            return Err(unauthorized("The bearer token is not valid"));
        }
    }
    if worker.has_tenants() {
        return Err(match authorization {
            None => unauthorized("This worker has tenants: send the header 'Authorization: Bearer <token>'"),
            Some(_) => unauthorized("Expected the header 'Authorization: Bearer <token>'"),
        });
    }
    Ok(Caller::Open)
}

impl Caller {
    /// The connector `name` (as in a URL) means for this caller; a name this caller cannot
    /// address is not found.
    pub fn namespace(&self, name: &str) -> Result<Namespace, ApiError> {
        let not_found = || ApiError::not_found(format!("Connector {name} not found"));
        match (self, name.split_once('/')) {
            (Caller::Operator { tenant: None }, Some((tenant, connector))) => Ok(Namespace::new(tenant, connector)),
            (Caller::Operator { tenant: Some(tenant) }, Some((qualifier, connector))) if qualifier == tenant => {
                Ok(Namespace::new(tenant.as_str(), connector))
            }
            (_, Some(_)) => Err(not_found()),
            (Caller::Open | Caller::Operator { tenant: None }, None) => Ok(Namespace::new(DEFAULT_TENANT, name)),
            (Caller::Tenant(tenant) | Caller::Operator { tenant: Some(tenant) }, None) => {
                Ok(Namespace::new(tenant.as_str(), name))
            }
        }
    }

    /// The tenant this caller's new connectors belong to, if the caller decides it.
    pub fn tenant(&self) -> Option<&str> {
        match self {
            Caller::Open => Some(DEFAULT_TENANT),
            Caller::Tenant(tenant) | Caller::Operator { tenant: Some(tenant) } => Some(tenant),
            Caller::Operator { tenant: None } => None,
        }
    }

    /// Whether this caller may see the connector.
    pub fn sees(&self, ns: &Namespace) -> bool {
        match self.tenant() {
            Some(tenant) => ns.tenant == tenant,
            None => true,
        }
    }

    /// How this caller names the connector in lists and bodies.
    pub fn name_of(&self, ns: &Namespace) -> String {
        match self {
            Caller::Operator { tenant: None } => format!("{}/{}", ns.tenant, ns.connector),
            _ => ns.connector.clone(),
        }
    }

    pub fn is_operator(&self) -> bool {
        matches!(self, Caller::Operator { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenant_addresses_only_its_own_connectors() {
        let acme = Caller::Tenant("acme".into());
        assert_eq!(acme.namespace("files").unwrap(), Namespace::new("acme", "files"));
        assert_eq!(acme.namespace("globex/files").unwrap_err().status, StatusCode::NOT_FOUND);
        assert!(acme.sees(&Namespace::new("acme", "x")));
        assert!(!acme.sees(&Namespace::new("globex", "x")));
    }

    #[test]
    fn the_operator_qualifies_names_or_picks_a_tenant() {
        let operator = Caller::Operator { tenant: None };
        assert_eq!(operator.namespace("globex/files").unwrap(), Namespace::new("globex", "files"));
        assert_eq!(operator.namespace("files").unwrap(), Namespace::new(DEFAULT_TENANT, "files"));
        assert_eq!(operator.name_of(&Namespace::new("acme", "files")), "acme/files");
        let about_acme = Caller::Operator { tenant: Some("acme".into()) };
        assert_eq!(about_acme.namespace("files").unwrap(), Namespace::new("acme", "files"));
        assert_eq!(about_acme.namespace("acme/files").unwrap(), Namespace::new("acme", "files"));
        assert!(about_acme.namespace("globex/files").is_err());
        assert!(!about_acme.sees(&Namespace::new("globex", "files")));
    }

    #[test]
    fn tokens_decide_the_caller() {
        let toml = format!(
            "[operator]\ntoken_sha256 = \"{}\"\n[[tenant]]\nname = \"acme\"\ntoken_sha256 = \"{}\"\n",
            crate::config::hash_token("op"),
            crate::config::hash_token("acme-token")
        );
        let worker = WorkerConfig::parse(&toml).unwrap();
        let headers = |value: Option<&str>| {
            let mut headers = HeaderMap::new();
            if let Some(value) = value {
                headers.insert(header::AUTHORIZATION, value.parse().unwrap());
            }
            headers
        };
        assert_eq!(caller_of(&worker, &headers(Some("Bearer acme-token"))).unwrap(), Caller::Tenant("acme".into()));
        assert_eq!(caller_of(&worker, &headers(Some("bearer  op"))).unwrap(), Caller::Operator { tenant: None });
        for bad in [None, Some("Bearer nope"), Some("Basic YWNtZQ=="), Some("acme-token")] {
            assert_eq!(caller_of(&worker, &headers(bad)).unwrap_err().status, StatusCode::UNAUTHORIZED, "{bad:?}");
        }
        let open = WorkerConfig::default();
        assert_eq!(caller_of(&open, &headers(None)).unwrap(), Caller::Open);
    }
}
