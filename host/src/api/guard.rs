//! Requests a browser makes on a web page's behalf. A page on another site may send
//! requests to the API (a form posted as `text/plain`, a `fetch` without CORS) and, with
//! DNS rebinding (its own name made to resolve to 127.0.0.1), read the answers as if it
//! were the API's own page. Curl and Connect's clients send neither `Origin` nor a
//! foreign `Host`, so they are not affected:
//! - a request whose `Origin` is not the API's own (the console's requests are) is refused;
//! - an open API (no tenants, so no tokens) on a loopback address answers only requests
//!   addressed to a loopback host (`localhost`, `127.0.0.1`, `[::1]`, any IP address),
//!   never one addressed to a name that some DNS server chose to point here.

use std::net::IpAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::ApiState;
use super::error::ApiError;

pub async fn refuse_foreign_pages(State(state): State<Arc<ApiState>>, request: Request, next: Next) -> Response {
    let open_on_loopback = state.local.ip().is_loopback() && !state.worker().has_tenants();
    match foreign(request.headers(), open_on_loopback) {
        Some(message) => ApiError::new(StatusCode::FORBIDDEN, message).into_response(),
        None => next.run(request).await,
    }
}

/// Why a request looks sent by another site's page, if it does.
fn foreign(headers: &HeaderMap, open_on_loopback: bool) -> Option<String> {
    let host = headers.get(header::HOST).map(|v| v.to_str().unwrap_or("?").trim().to_ascii_lowercase());
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("?").trim().to_ascii_lowercase();
        let same = host.as_deref().is_some_and(|host| {
            origin_authority(&origin)
                .is_some_and(|(authority, default_port)| authority == with_port(host, default_port))
        });
        if !same {
            return Some(format!(
                "Cross-origin request refused: this API answers only its own pages and clients that send no \
                 Origin (Origin {origin}, Host {})",
                host.as_deref().unwrap_or("none")
            ));
        }
    }
    if open_on_loopback
        && let Some(host) = host
        && !is_loopback_host(&host)
    {
        return Some(format!(
            "Request for host '{host}' refused: this API has no tenants (no tokens), so it answers only requests \
             addressed to localhost or an IP address (a name pointed here by DNS may be another site's page)"
        ));
    }
    None
}

/// `scheme://host[:port]` as `host:port` (the scheme's default port filled in), and that
/// default port.
fn origin_authority(origin: &str) -> Option<(String, &'static str)> {
    let (scheme, authority) = origin.split_once("://")?;
    let default_port = match scheme {
        "http" => "80",
        "https" => "443",
        _ => return None,
    };
    let authority = authority.trim_end_matches('/');
    let authority = if has_port(authority) { authority.to_string() } else { format!("{authority}:{default_port}") };
    Some((authority, default_port))
}

/// A `Host` header with the page's scheme's default port filled in (behind a proxy that
/// ends TLS, `Host: sluice.example` comes from `https://sluice.example`).
fn with_port(host: &str, default_port: &str) -> String {
    if has_port(host) { host.to_string() } else { format!("{host}:{default_port}") }
}

fn has_port(authority: &str) -> bool {
    // `[::1]` has colons but no port; `[::1]:8083` and `localhost:8083` have one.
    authority.rsplit_once(':').is_some_and(|(before, port)| {
        !port.is_empty()
            && port.bytes().all(|b| b.is_ascii_digit())
            && (!before.starts_with('[') || before.ends_with(']'))
    })
}

fn is_loopback_host(host: &str) -> bool {
    let name = if has_port(host) { host.rsplit_once(':').map_or(host, |(name, _)| name) } else { host };
    let name = name.trim_start_matches('[').trim_end_matches(']');
    name == "localhost" || name.ends_with(".localhost") || name.parse::<IpAddr>().is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_static(value));
        }
        map
    }

    #[test]
    fn clients_without_origin_on_a_loopback_host_pass() {
        assert_eq!(foreign(&headers(&[("host", "127.0.0.1:8083")]), true), None);
        assert_eq!(foreign(&headers(&[("host", "localhost:8083")]), true), None);
        assert_eq!(foreign(&headers(&[("host", "[::1]:8083")]), true), None);
        assert_eq!(foreign(&headers(&[]), true), None);
    }

    #[test]
    fn the_apis_own_page_passes() {
        let own = headers(&[("host", "localhost:8083"), ("origin", "http://localhost:8083")]);
        assert_eq!(foreign(&own, true), None);
        let default_port = headers(&[("host", "sluice.example"), ("origin", "http://sluice.example")]);
        assert_eq!(foreign(&default_port, false), None);
        let behind_tls = headers(&[("host", "sluice.example"), ("origin", "https://sluice.example")]);
        assert_eq!(foreign(&behind_tls, false), None);
        let other_scheme_port = headers(&[("host", "sluice.example:80"), ("origin", "https://sluice.example")]);
        assert!(foreign(&other_scheme_port, false).is_some());
        let ipv6 = headers(&[("host", "[::1]:8083"), ("origin", "http://[::1]:8083")]);
        assert_eq!(foreign(&ipv6, true), None);
    }

    #[test]
    fn another_sites_page_is_refused() {
        let form = headers(&[("host", "127.0.0.1:8083"), ("origin", "http://evil.example")]);
        assert!(foreign(&form, true).unwrap().contains("Cross-origin"));
        assert!(foreign(&form, false).is_some(), "refused with tenants too");
        let other_port = headers(&[("host", "localhost:8083"), ("origin", "http://localhost:3000")]);
        assert!(foreign(&other_port, true).is_some());
        let sandboxed = headers(&[("host", "localhost:8083"), ("origin", "null")]);
        assert!(foreign(&sandboxed, true).is_some());
    }

    #[test]
    fn a_rebound_name_is_refused_only_when_the_api_is_open() {
        let rebound = headers(&[("host", "evil.example:8083"), ("origin", "http://evil.example:8083")]);
        assert!(foreign(&rebound, true).unwrap().contains("evil.example"));
        assert_eq!(foreign(&rebound, false), None, "tokens protect an API with tenants");
    }
}
