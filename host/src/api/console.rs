//! The web console: one page (HTML, CSS, JavaScript embedded in the binary, nothing fetched
//! from elsewhere) served at `/` to browsers and at `/console`. It is a client of the REST API
//! and `/metrics` only, with the caller's own token, so it can do nothing the API would not
//! let that token do; the page itself is public.
//!
//! `GET /` stays Connect's JSON for API clients: the page is served only to a request whose
//! `Accept` prefers HTML (a browser's navigation). Every console response forbids inline
//! scripts and any other origin with a Content-Security-Policy, and the script renders every
//! name, value and trace as text (see `console/console.js`).

use axum::extract::{Path, Request};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};

const INDEX_HTML: &str = include_str!("console/index.html");
const SCRIPT: &str = include_str!("console/console.js");
const STYLE: &str = include_str!("console/console.css");

/// Scripts and styles from this origin only (no inline script or style element, no eval),
/// API calls to this origin only, and no framing.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The console's own paths, served without a token (the page holds no data).
pub const PATH: &str = "/console";

/// Whether a request is for the console page or its files rather than the API.
pub fn is_console_request(request: &Request) -> bool {
    let path = request.uri().path();
    let is_get = request.method() == Method::GET || request.method() == Method::HEAD;
    is_get && (path == PATH || path.starts_with("/console/") || (path == "/" && wants_html(request.headers())))
}

/// A browser's navigation asks for `text/html` before anything else; curl and Connect's
/// clients ask for `*/*` or JSON.
pub fn wants_html(headers: &HeaderMap) -> bool {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or_default();
    accept.split(',').next().is_some_and(|first| first.trim().starts_with("text/html"))
}

fn page(content_type: &'static str, body: &'static str) -> Response {
    let headers = [
        (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
        (header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CONTENT_SECURITY_POLICY)),
        (header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff")),
        (header::REFERRER_POLICY, HeaderValue::from_static("no-referrer")),
        (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
    ];
    (headers, body).into_response()
}

/// The console's page.
pub fn index() -> Response {
    page("text/html; charset=utf-8", INDEX_HTML)
}

/// `GET /console`
pub async fn index_route() -> Response {
    index()
}

/// `GET /console/{file}`: the script and the style sheet.
pub async fn asset(Path(file): Path<String>) -> Response {
    match file.as_str() {
        "console.js" => page("text/javascript; charset=utf-8", SCRIPT),
        "console.css" => page("text/css; charset=utf-8", STYLE),
        _ => {
            super::error::error_response(StatusCode::NOT_FOUND, &format!("HTTP 404 Not Found: no console file {file}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_browser_navigation_gets_the_page_at_the_root() {
        let accept = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::ACCEPT, value.parse().unwrap());
            headers
        };
        assert!(wants_html(&accept("text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8")));
        assert!(!wants_html(&accept("*/*")));
        assert!(!wants_html(&accept("application/json")));
        assert!(!wants_html(&HeaderMap::new()));
    }

    #[test]
    fn the_page_loads_no_inline_script_and_nothing_from_elsewhere() {
        assert!(INDEX_HTML.contains(r#"<script src="/console/console.js" defer></script>"#));
        assert_eq!(INDEX_HTML.matches("<script").count(), 1, "one script element, and it has a src");
        assert!(!INDEX_HTML.contains("style="), "no inline style");
        for text in [INDEX_HTML, SCRIPT, STYLE] {
            assert!(!text.contains("http://") && !text.contains("https://"), "nothing fetched from elsewhere");
        }
        for sink in ["innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"] {
            assert!(!SCRIPT.contains(sink), "console.js must render text as text: it uses {sink}");
        }
    }
}
