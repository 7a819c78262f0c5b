//! The `Origin` check for endpoints a browser can reach.
//!
//! Browsers send `Origin` on every WebSocket handshake and on cross-origin requests, and they
//! open WebSockets to any site without a CORS preflight: a page on any origin can try
//! `ws://127.0.0.1:8080/...`. A request that carries an `Origin` is therefore accepted only
//! when that origin is the server's own (the scheme-less `Host` it was reached at) or is listed
//! explicitly. Requests without `Origin` come from programs, not pages, and pass (they still
//! need their credential).

use axum::http::HeaderMap;
use axum::http::header::{HOST, ORIGIN};

/// Why a request's origin is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("origin {origin:?} may not use this endpoint (allowed: this server's own origin{listed})")]
pub struct OriginRefused {
    pub origin: String,
    listed: String,
}

/// Accepts requests without `Origin`, from the server's own origin, or from one of `allowed`
/// (exact `scheme://host[:port]` strings, compared without a trailing slash, case-insensitive).
pub fn check(headers: &HeaderMap, allowed: &[String]) -> Result<(), OriginRefused> {
    let Some(origin) = headers.get(ORIGIN) else {
        return Ok(());
    };
    let origin_text = origin.to_str().unwrap_or("(not text)").to_string();
    let normalized = origin_text.trim_end_matches('/').to_ascii_lowercase();
    if allowed
        .iter()
        .any(|a| a.trim_end_matches('/').eq_ignore_ascii_case(&normalized))
    {
        return Ok(());
    }
    if let Some(host) = headers.get(HOST).and_then(|h| h.to_str().ok())
        && same_host(&normalized, host)
    {
        return Ok(());
    }
    Err(OriginRefused {
        origin: origin_text,
        listed: if allowed.is_empty() {
            String::new()
        } else {
            format!(", {}", allowed.join(", "))
        },
    })
}

/// Whether `origin` (`scheme://host[:port]`) names the same host and port as the `Host` header,
/// with the scheme's default port filled in on either side.
fn same_host(origin: &str, host: &str) -> bool {
    let Ok(url) = url::Url::parse(origin) else {
        return false;
    };
    let (Some(origin_host), Some(origin_port)) = (url.host_str(), url.port_or_known_default())
    else {
        return false;
    };
    let Ok(host_url) = url::Url::parse(&format!("{}://{host}", url.scheme())) else {
        return false;
    };
    host_url.host_str() == Some(origin_host)
        && host_url.port_or_known_default() == Some(origin_port)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(origin: Option<&str>, host: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(HOST, host.parse().unwrap());
        if let Some(origin) = origin {
            headers.insert(ORIGIN, origin.parse().unwrap());
        }
        headers
    }

    #[test]
    fn programs_and_the_servers_own_pages_pass() {
        assert!(check(&headers(None, "10.0.0.2:8080"), &[]).is_ok());
        assert!(check(&headers(Some("http://10.0.0.2:8080"), "10.0.0.2:8080"), &[]).is_ok());
        assert!(check(&headers(Some("https://box.example"), "box.example"), &[]).is_ok());
        assert!(
            check(
                &headers(Some("https://box.example"), "box.example:443"),
                &[]
            )
            .is_ok()
        );
        assert!(check(&headers(Some("http://BOX.example:80/"), "box.example"), &[]).is_ok());
    }

    #[test]
    fn other_pages_are_refused_unless_listed() {
        for origin in [
            "http://127.0.0.1:3000",
            "http://evil.example",
            "null",
            "http://10.0.0.2:8081",
        ] {
            let error = check(&headers(Some(origin), "10.0.0.2:8080"), &[]).unwrap_err();
            assert_eq!(error.origin, origin);
        }
        let allowed = vec!["https://app.example".to_string()];
        assert!(
            check(
                &headers(Some("https://app.example"), "10.0.0.2:8080"),
                &allowed
            )
            .is_ok()
        );
        assert!(
            check(
                &headers(Some("https://app2.example"), "10.0.0.2:8080"),
                &allowed
            )
            .is_err()
        );
    }
}
