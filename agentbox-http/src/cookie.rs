//! Reading a cookie from a request's `Cookie` headers.

use axum::http::HeaderMap;
use axum::http::header::COOKIE;

/// The value of cookie `name`, if the request carries it (the first one, across every `Cookie`
/// header; names compare exactly).
pub fn value<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .find(|(n, _)| *n == name)
        .map(|(_, value)| value)
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    #[test]
    fn cookies_are_found_by_name_across_headers() {
        let mut headers = HeaderMap::new();
        headers.append(COOKIE, HeaderValue::from_static("a=1; viewer=xyz"));
        headers.append(COOKIE, HeaderValue::from_static("b=2"));
        assert_eq!(value(&headers, "viewer"), Some("xyz"));
        assert_eq!(value(&headers, "b"), Some("2"));
        assert_eq!(value(&headers, "view"), None);
        assert_eq!(value(&headers, "c"), None);
    }
}
