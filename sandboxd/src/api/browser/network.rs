//! The browser's network and configuration: the requests of the active tab
//! (`GET /v1/browser/network/requests`) and their HAR (`POST /v1/browser/network/export_har`),
//! extra headers for every request (`/headers`) or one origin's (`/scoped_headers`), routes that
//! abort or answer requests (`POST`/`DELETE /route`), the page emulation of
//! `POST /v1/browser/config`, and `POST /v1/browser/restart`. See [`crate::browser::network`].

use std::collections::BTreeMap;
use std::ffi::OsStr;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderName, HeaderValue};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::{save_path_error, write_file};
use crate::api::error::ApiError;
use crate::api::extract::{AioJson, AioQuery};
use crate::api::types::{
    AddRouteRequest, Envelope, ErrorBody, ExportHarRequest, HarExport, HeadersSet, NetworkRequest,
    NetworkRequestsQuery, NetworkTiming, RemoveRouteRequest, RouteInfo, ScopedHeadersRequest,
    SetHeadersRequest,
};
use crate::api::{AppState, files};
use crate::browser::network;
use crate::browser::network::{RequestRecord, Route, RouteAction, RuleSet};

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(requests))
        .routes(routes!(export_har))
        .routes(routes!(set_headers))
        .routes(routes!(set_scoped_headers))
        .routes(routes!(add_route, remove_route))
}

/// Most headers one call sets.
const MAX_HEADERS: usize = 100;
/// Longest header value accepted, in bytes.
const MAX_HEADER_VALUE: usize = 8192;
/// Most routes in force at once.
const MAX_ROUTES: usize = 100;
/// Most origins with scoped headers at once.
const MAX_ORIGINS: usize = 100;
/// Largest route body, in bytes.
const MAX_ROUTE_BODY: usize = 1024 * 1024;
/// Longest URL pattern, in bytes.
const MAX_PATTERN: usize = 4096;

fn request_item(r: RequestRecord) -> NetworkRequest {
    NetworkRequest {
        id: r.id,
        url: r.url,
        method: r.method,
        resource_type: r.resource_type,
        status: r.status,
        status_text: r.status_text,
        mime_type: r.mime_type,
        request_headers: r.request_headers,
        response_headers: r.response_headers,
        timestamp: r.started,
        duration_ms: r.duration_ms,
        timing: r.timing.map(|t| NetworkTiming {
            blocked: t.blocked,
            dns: t.dns,
            connect: t.connect,
            ssl: t.ssl,
            send: t.send,
            wait: t.wait,
            receive: t.receive,
        }),
        size: r.encoded_size,
        failure: r.failure,
        from_cache: r.from_cache,
        remote_address: r.remote_address,
        protocol: r.protocol,
        finished: r.finished,
        route: r.route,
    }
}

/// The requests the active tab made since it was first used through the API (at most the
/// latest 1000), oldest first: URL, method, resource type, status, headers, timing.
#[utoipa::path(get, path = "/v1/browser/network/requests", tag = "browser-network",
    params(NetworkRequestsQuery),
    responses(
        (status = 200, body = Envelope<Vec<NetworkRequest>>),
        (status = 422, description = "`limit` is out of range", body = ErrorBody),
    ))]
pub async fn requests(
    State(state): State<AppState>,
    AioQuery(query): AioQuery<NetworkRequestsQuery>,
) -> Result<Json<Envelope<Vec<NetworkRequest>>>, ApiError> {
    let limit = match query.limit {
        None => network::MAX_REQUESTS,
        Some(n) if (1..=network::MAX_REQUESTS as i64).contains(&n) => n as usize,
        Some(n) => {
            return Err(ApiError::invalid_at(
                vec!["query".into(), "limit".into()],
                format!(
                    "`limit` must be a whole number from 1 to {}, got {n}",
                    network::MAX_REQUESTS
                ),
            ));
        }
    };
    let filter = query.filter.unwrap_or_default();
    let mut records: Vec<RequestRecord> = state
        .browser
        .requests()
        .await?
        .into_iter()
        .filter(|r| network::passes(r, &filter))
        .collect();
    let skip = records.len().saturating_sub(limit);
    records.drain(..skip);
    Ok(Json(Envelope::ok(
        records.into_iter().map(request_item).collect(),
    )))
}

/// The active tab's requests as HAR 1.2: written to `save_path` (inside the allowed file roots),
/// or, without one, in the answer.
#[utoipa::path(post, path = "/v1/browser/network/export_har", tag = "browser-network",
    request_body = ExportHarRequest,
    responses(
        (status = 200, body = Envelope<HarExport>),
        (status = 403, description = "the path is outside the allowed file roots", body = ErrorBody),
        (status = 422, description = "`save_path` is blank", body = ErrorBody),
    ))]
pub async fn export_har(
    State(state): State<AppState>,
    AioJson(request): AioJson<ExportHarRequest>,
) -> Result<Json<Envelope<HarExport>>, ApiError> {
    if let Some(path) = &request.save_path {
        super::validate::not_blank("save_path", path)?;
        let path = path.clone();
        files::run(&state, move |files| {
            files.confinement().resolve(OsStr::new(&path))?;
            Ok(())
        })
        .await
        .map_err(|e| save_path_error(e, "save_path"))?;
    }
    let records = state.browser.requests().await?;
    let browser = state
        .browser
        .version()
        .await
        .map(|v| v.browser)
        .unwrap_or_default();
    let har = network::har(&records, &browser);
    let entries = records.len();
    match request.save_path {
        Some(path) => {
            let text = serde_json::to_string_pretty(&har)
                .map_err(|e| ApiError::internal(format!("cannot encode the HAR: {e}")))?;
            let written = write_file(&state, path, text)
                .await
                .map_err(|e| save_path_error(e, "save_path"))?;
            let mut envelope = Envelope::ok(HarExport {
                path: Some(written.clone()),
                entries,
                har: None,
            });
            envelope.message = format!("wrote {entries} requests to {written}");
            Ok(Json(envelope))
        }
        None => Ok(Json(Envelope::ok(HarExport {
            path: None,
            entries,
            har: Some(har),
        }))),
    }
}

/// Checks headers to set; `loc` is the field holding them.
fn checked_headers(
    loc: &[&str],
    headers: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, String>, ApiError> {
    let at = |name: Option<&str>| {
        let mut loc: Vec<String> = loc.iter().map(|s| s.to_string()).collect();
        loc.extend(name.map(str::to_string));
        loc
    };
    let field = loc.last().copied().unwrap_or("headers");
    if headers.len() > MAX_HEADERS {
        return Err(ApiError::invalid_at(
            at(None),
            format!(
                "`{field}` has {} headers; at most {MAX_HEADERS} are accepted",
                headers.len()
            ),
        ));
    }
    let mut seen: Vec<String> = Vec::new();
    for (name, value) in headers {
        if HeaderName::from_bytes(name.as_bytes()).is_err() {
            return Err(ApiError::invalid_at(
                at(Some(name)),
                format!("`{field}`: {name:?} is not a valid header name"),
            ));
        }
        let lower = name.to_ascii_lowercase();
        if seen.contains(&lower) {
            return Err(ApiError::invalid_at(
                at(Some(name)),
                format!("`{field}`: the header {name:?} is given twice (names ignore case)"),
            ));
        }
        seen.push(lower);
        if value.len() > MAX_HEADER_VALUE || HeaderValue::from_str(value).is_err() {
            return Err(ApiError::invalid_at(
                at(Some(name)),
                format!(
                    "`{field}`: the value of {name:?} must be at most {MAX_HEADER_VALUE} bytes of visible text (no line breaks)"
                ),
            ));
        }
    }
    Ok(headers.clone())
}

fn headers_set(rules: &RuleSet) -> HeadersSet {
    HeadersSet {
        headers: rules.extra_headers.keys().cloned().collect(),
        scoped: rules
            .scoped_headers
            .iter()
            .map(|(origin, headers)| (origin.clone(), headers.keys().cloned().collect()))
            .collect(),
    }
}

/// Sets the headers added to every request of every tab from now on (they replace the ones set
/// before; `{}` removes them).
#[utoipa::path(post, path = "/v1/browser/network/headers", tag = "browser-network",
    request_body = SetHeadersRequest,
    responses(
        (status = 200, body = Envelope<HeadersSet>),
        (status = 422, description = "a header name or value is invalid", body = ErrorBody),
    ))]
pub async fn set_headers(
    State(state): State<AppState>,
    AioJson(request): AioJson<SetHeadersRequest>,
) -> Result<Json<Envelope<HeadersSet>>, ApiError> {
    let headers = checked_headers(&["body", "headers"], &request.headers)?;
    let count = headers.len();
    let rules = state
        .browser
        .change_rules(move |rules| {
            rules.extra_headers = headers;
            rules.clone()
        })
        .await?;
    let mut envelope = Envelope::ok(headers_set(&rules));
    envelope.message = format!("{count} extra headers on every request");
    Ok(Json(envelope))
}

/// `scheme://host[:port]` of an origin (or a URL) given by a client.
fn checked_origin(text: &str) -> Result<String, ApiError> {
    let bad = |message: String| ApiError::invalid("origin", message);
    let text = text.trim();
    if text.is_empty() {
        return Err(bad("`origin` is required, as scheme://host[:port]".into()));
    }
    match url::Url::parse(text) {
        Ok(url) if matches!(url.scheme(), "http" | "https") && url.host_str().is_some() => {
            network::origin_of(url.as_str())
                .ok_or_else(|| bad(format!("`origin`: {text:?} has no origin")))
        }
        _ => Err(bad(format!(
            "`origin` must be an http(s) origin such as https://example.com, got {text:?}"
        ))),
    }
}

/// Sets the headers added to the requests to one origin (`scheme://host[:port]`) in every tab
/// from now on; they replace the ones set before for it (`{}` removes them).
#[utoipa::path(post, path = "/v1/browser/network/scoped_headers", tag = "browser-network",
    request_body = ScopedHeadersRequest,
    responses(
        (status = 200, body = Envelope<HeadersSet>),
        (status = 422, description = "the origin or a header is invalid", body = ErrorBody),
    ))]
pub async fn set_scoped_headers(
    State(state): State<AppState>,
    AioJson(request): AioJson<ScopedHeadersRequest>,
) -> Result<Json<Envelope<HeadersSet>>, ApiError> {
    let origin = checked_origin(&request.origin)?;
    let headers = checked_headers(&["body", "headers"], &request.headers)?;
    let rules = state.browser.rules();
    if !headers.is_empty()
        && !rules.scoped_headers.contains_key(&origin)
        && rules.scoped_headers.len() >= MAX_ORIGINS
    {
        return Err(ApiError::invalid(
            "origin",
            format!(
                "headers are scoped to {MAX_ORIGINS} origins already; remove one first (set `{{}}` for it)"
            ),
        ));
    }
    let count = headers.len();
    let scoped = origin.clone();
    let rules = state
        .browser
        .change_rules(move |rules| {
            if headers.is_empty() {
                rules.scoped_headers.remove(&scoped);
            } else {
                rules.scoped_headers.insert(scoped, headers);
            }
            rules.clone()
        })
        .await?;
    let mut envelope = Envelope::ok(headers_set(&rules));
    envelope.message = format!("{count} extra headers on the requests to {origin}");
    Ok(Json(envelope))
}

fn checked_pattern(pattern: &str) -> Result<String, ApiError> {
    let pattern = pattern.trim();
    if pattern.is_empty() {
        return Err(ApiError::invalid(
            "url_pattern",
            "`url_pattern` is required: a URL, or a glob such as **/api/*",
        ));
    }
    if pattern.len() > MAX_PATTERN {
        return Err(ApiError::invalid(
            "url_pattern",
            format!("`url_pattern` is longer than {MAX_PATTERN} bytes"),
        ));
    }
    Ok(pattern.to_string())
}

/// The route a request asks for.
fn route_of(request: &AddRouteRequest) -> Result<Route, ApiError> {
    let pattern = checked_pattern(&request.url_pattern)?;
    let abort = request.abort.unwrap_or(false);
    let action = match (&request.response, abort) {
        (Some(_), true) => {
            return Err(ApiError::invalid(
                "abort",
                "give `abort: true` or a `response`, not both",
            ));
        }
        (None, false) => {
            return Err(ApiError::invalid(
                "response",
                "a route needs a `response` to answer with, or `abort: true`",
            ));
        }
        (None, true) => RouteAction::Abort,
        (Some(response), false) => {
            let loc = |field: &str| vec!["body".into(), "response".into(), field.to_string()];
            let status = response.status.unwrap_or(200);
            if !(100..=599).contains(&status) {
                return Err(ApiError::invalid_at(
                    loc("status"),
                    format!(
                        "`response.status` must be an HTTP status from 100 to 599, got {status}"
                    ),
                ));
            }
            let headers = checked_headers(
                &["body", "response", "headers"],
                &response.headers.clone().unwrap_or_default(),
            )?;
            let mut headers: Vec<(String, String)> = headers.into_iter().collect();
            let has_type = headers
                .iter()
                .any(|(n, _)| n.eq_ignore_ascii_case("content-type"));
            match response.content_type.as_deref().map(str::trim) {
                Some(kind) if !kind.is_empty() => {
                    if HeaderValue::from_str(kind).is_err() {
                        return Err(ApiError::invalid_at(
                            loc("content_type"),
                            "`response.content_type` must be visible text (no line breaks)",
                        ));
                    }
                    headers.retain(|(n, _)| !n.eq_ignore_ascii_case("content-type"));
                    headers.push(("Content-Type".into(), kind.to_string()));
                }
                _ if !has_type => {
                    headers.push(("Content-Type".into(), "text/plain; charset=utf-8".into()));
                }
                _ => {}
            }
            let body = response.body.clone().unwrap_or_default().into_bytes();
            if body.len() > MAX_ROUTE_BODY {
                return Err(ApiError::invalid_at(
                    loc("body"),
                    format!("`response.body` is longer than {MAX_ROUTE_BODY} bytes"),
                ));
            }
            RouteAction::Fulfill {
                // 100..=599: fits.
                status: status as u16,
                headers,
                body,
            }
        }
    };
    Ok(Route { pattern, action })
}

fn route_list(routes: &[Route]) -> Vec<RouteInfo> {
    routes
        .iter()
        .map(|r| match &r.action {
            RouteAction::Abort => RouteInfo {
                url_pattern: r.pattern.clone(),
                action: "abort".into(),
                status: None,
            },
            RouteAction::Fulfill { status, .. } => RouteInfo {
                url_pattern: r.pattern.clone(),
                action: "fulfill".into(),
                status: Some(*status),
            },
        })
        .collect()
}

/// Adds a route for every tab: requests whose URL matches `url_pattern` (the URL, or a glob
/// where `*` is any characters) fail (`abort: true`) or get `response` without reaching the
/// network. A route with the same pattern is replaced; the first matching route wins. Answers
/// the routes in force.
#[utoipa::path(post, path = "/v1/browser/network/route", tag = "browser-network",
    request_body = AddRouteRequest,
    responses(
        (status = 200, body = Envelope<Vec<RouteInfo>>),
        (status = 422, description = "the pattern or the response is invalid", body = ErrorBody),
    ))]
pub async fn add_route(
    State(state): State<AppState>,
    AioJson(request): AioJson<AddRouteRequest>,
) -> Result<Json<Envelope<Vec<RouteInfo>>>, ApiError> {
    let route = route_of(&request)?;
    let rules = state.browser.rules();
    if rules.routes.len() >= MAX_ROUTES && !rules.routes.iter().any(|r| r.pattern == route.pattern)
    {
        return Err(ApiError::invalid(
            "url_pattern",
            format!("{MAX_ROUTES} routes are in force already; remove one first"),
        ));
    }
    let pattern = route.pattern.clone();
    let routes = state
        .browser
        .change_rules(move |rules| {
            match rules.routes.iter_mut().find(|r| r.pattern == route.pattern) {
                Some(existing) => *existing = route,
                None => rules.routes.push(route),
            }
            rules.routes.clone()
        })
        .await?;
    let mut envelope = Envelope::ok(route_list(&routes));
    envelope.message = format!("route {pattern} added");
    Ok(Json(envelope))
}

/// Removes the route with this `url_pattern`; answers the routes left.
#[utoipa::path(delete, path = "/v1/browser/network/route", tag = "browser-network",
    request_body = RemoveRouteRequest,
    responses(
        (status = 200, body = Envelope<Vec<RouteInfo>>),
        (status = 404, description = "no route has this pattern", body = ErrorBody),
        (status = 422, description = "`url_pattern` is missing", body = ErrorBody),
    ))]
pub async fn remove_route(
    State(state): State<AppState>,
    AioJson(request): AioJson<RemoveRouteRequest>,
) -> Result<Json<Envelope<Vec<RouteInfo>>>, ApiError> {
    let pattern = checked_pattern(&request.url_pattern)?;
    let rules = state.browser.rules();
    if !rules.routes.iter().any(|r| r.pattern == pattern) {
        let known: Vec<&str> = rules.routes.iter().map(|r| r.pattern.as_str()).collect();
        return Err(ApiError::not_found(format!(
            "no route has the pattern {pattern:?} (routes in force: {})",
            if known.is_empty() {
                "none".to_string()
            } else {
                known.join(", ")
            }
        )));
    }
    let removed = pattern.clone();
    let routes = state
        .browser
        .change_rules(move |rules| {
            rules.routes.retain(|r| r.pattern != removed);
            rules.routes.clone()
        })
        .await?;
    let mut envelope = Envelope::ok(route_list(&routes));
    envelope.message = format!("route {pattern} removed");
    Ok(Json(envelope))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::types::RouteResponseModel;

    #[test]
    fn headers_are_checked_by_name() {
        let good = BTreeMap::from([("X-Test".to_string(), "1".to_string())]);
        assert_eq!(checked_headers(&["body", "headers"], &good).unwrap(), good);
        for (name, value) in [("bad name", "1"), ("X-A", "line\nbreak")] {
            let bad = BTreeMap::from([(name.to_string(), value.to_string())]);
            let error = checked_headers(&["body", "headers"], &bad).unwrap_err();
            assert_eq!(
                error.loc.unwrap(),
                vec!["body".to_string(), "headers".into(), name.into()]
            );
        }
        let twice = BTreeMap::from([
            ("X-A".to_string(), "1".to_string()),
            ("x-a".to_string(), "2".to_string()),
        ]);
        assert!(checked_headers(&["body", "headers"], &twice).is_err());
    }

    #[test]
    fn origins_are_normalised() {
        assert_eq!(
            checked_origin("http://127.0.0.1:8000/path?x").unwrap(),
            "http://127.0.0.1:8000"
        );
        assert_eq!(
            checked_origin("https://Example.com").unwrap(),
            "https://example.com"
        );
        for bad in ["", "example.com", "file:///etc", "ftp://x"] {
            let error = checked_origin(bad).unwrap_err();
            assert_eq!(
                error.loc.unwrap(),
                vec!["body".to_string(), "origin".into()]
            );
        }
    }

    #[test]
    fn routes_need_one_action_and_a_sane_response() {
        let request = |response: Option<RouteResponseModel>, abort: Option<bool>| AddRouteRequest {
            url_pattern: "**/x".into(),
            response,
            abort,
        };
        assert_eq!(
            route_of(&request(None, Some(true))).unwrap().action,
            RouteAction::Abort
        );
        let mocked = route_of(&request(
            Some(RouteResponseModel {
                body: Some("hi".into()),
                content_type: Some("text/html".into()),
                ..RouteResponseModel::default()
            }),
            None,
        ))
        .unwrap();
        assert_eq!(
            mocked.action,
            RouteAction::Fulfill {
                status: 200,
                headers: vec![("Content-Type".into(), "text/html".into())],
                body: b"hi".to_vec(),
            }
        );
        for (bad, loc) in [
            (request(None, None), vec!["body", "response"]),
            (request(None, Some(false)), vec!["body", "response"]),
            (
                request(Some(RouteResponseModel::default()), Some(true)),
                vec!["body", "abort"],
            ),
            (
                request(
                    Some(RouteResponseModel {
                        status: Some(1000),
                        ..RouteResponseModel::default()
                    }),
                    None,
                ),
                vec!["body", "response", "status"],
            ),
            (
                AddRouteRequest {
                    url_pattern: "  ".into(),
                    ..request(None, Some(true))
                },
                vec!["body", "url_pattern"],
            ),
        ] {
            let error = route_of(&bad).unwrap_err();
            assert_eq!(error.loc.unwrap(), loc);
        }
    }
}
