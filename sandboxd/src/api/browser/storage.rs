//! Cookies (`/v1/browser/cookies`) and the browser's saved state (`/v1/browser/state/save`,
//! `/load`: cookies + localStorage, in Playwright's `storage_state` format, in a file inside the
//! allowed file roots). See [`crate::browser::cookies`].

use std::ffi::OsStr;

use axum::Json;
use axum::extract::State;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::{save_path_error, write_file};
use crate::api::AppState;
use crate::api::error::ApiError;
use crate::api::extract::{AioJson, AioQuery};
use crate::api::files;
use crate::api::types::{
    CookieInput, CookieItem, CookiesQuery, Envelope, ErrorBody, SavedFile, SetCookiesRequest,
    StateLoaded, StatePathRequest,
};
use crate::api::validate;
use crate::browser::cookies::{CookieRecord, CookieSpec, SameSite, StorageState};
use crate::files::content::{ReadEncoding, ReadRequest};

/// Most cookies one request sets.
const MAX_COOKIES: usize = 1000;
/// Most URLs one cookie query filters by.
const MAX_URLS: usize = 50;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(get_cookies, set_cookies, clear_cookies))
        .routes(routes!(save_state))
        .routes(routes!(load_state))
}

fn cookie_item(c: CookieRecord) -> CookieItem {
    CookieItem {
        name: c.name,
        value: c.value,
        domain: c.domain,
        path: c.path,
        expires: c.expires,
        http_only: c.http_only,
        secure: c.secure,
        same_site: c.same_site,
    }
}

/// The browser's cookies (Playwright's shape); `urls` (comma-separated) keeps only those the
/// browser would send to one of them.
#[utoipa::path(get, path = "/v1/browser/cookies", tag = "browser-cookies", params(CookiesQuery),
    responses(
        (status = 200, body = Envelope<Vec<CookieItem>>),
        (status = 422, description = "a URL in `urls` is not an http(s) URL", body = ErrorBody),
    ))]
pub async fn get_cookies(
    State(state): State<AppState>,
    AioQuery(query): AioQuery<CookiesQuery>,
) -> Result<Json<Envelope<Vec<CookieItem>>>, ApiError> {
    let urls = match query
        .urls
        .as_deref()
        .map(str::trim)
        .filter(|u| !u.is_empty())
    {
        None => None,
        Some(text) => {
            let urls: Vec<String> = text
                .split(',')
                .map(str::trim)
                .filter(|u| !u.is_empty())
                .map(str::to_string)
                .collect();
            let bad = |message: String| {
                ApiError::invalid_at(vec!["query".into(), "urls".into()], message)
            };
            if urls.len() > MAX_URLS {
                return Err(bad(format!("`urls` lists more than {MAX_URLS} URLs")));
            }
            for url in &urls {
                match url::Url::parse(url) {
                    Ok(u) if matches!(u.scheme(), "http" | "https") => {}
                    _ => return Err(bad(format!("`urls`: {url:?} is not an http(s) URL"))),
                }
            }
            Some(urls)
        }
    };
    let cookies = state.browser.cookies(urls.as_deref()).await?;
    Ok(Json(Envelope::ok(
        cookies.into_iter().map(cookie_item).collect(),
    )))
}

fn cookie_loc(n: usize, field: &str) -> Vec<String> {
    vec!["body".into(), "cookies".into(), n.to_string(), field.into()]
}

/// Checks one cookie to set.
fn cookie_spec(n: usize, input: &CookieInput) -> Result<CookieSpec, ApiError> {
    let bad = |field: &str, message: String| ApiError::invalid_at(cookie_loc(n, field), message);
    let name = match input.name.as_deref() {
        Some(name) if !name.trim().is_empty() => name.to_string(),
        _ => return Err(bad("name", format!("cookies[{n}].name is required"))),
    };
    if name.contains([';', '=', '\n', '\r']) {
        return Err(bad(
            "name",
            format!("cookies[{n}].name must not contain ';', '=' or a newline"),
        ));
    }
    let Some(value) = input.value.clone() else {
        return Err(bad("value", format!("cookies[{n}].value is required")));
    };
    if value.contains([';', '\n', '\r']) {
        return Err(bad(
            "value",
            format!("cookies[{n}].value must not contain ';' or a newline"),
        ));
    }
    if name.len() + value.len() > 4096 {
        return Err(bad(
            "value",
            format!("cookies[{n}]: name and value are longer than 4096 bytes"),
        ));
    }
    let url = input
        .url
        .as_deref()
        .map(str::trim)
        .filter(|u| !u.is_empty());
    let domain = input
        .domain
        .as_deref()
        .map(str::trim)
        .filter(|d| !d.is_empty());
    match (url, domain) {
        (Some(url), _) => match url::Url::parse(url) {
            Ok(u) if matches!(u.scheme(), "http" | "https") && u.host_str().is_some() => {}
            _ => {
                return Err(bad(
                    "url",
                    format!("cookies[{n}].url: {url:?} is not an http(s) URL"),
                ));
            }
        },
        (None, Some(_)) => {}
        (None, None) => {
            return Err(bad(
                "url",
                format!("cookies[{n}] needs a `url` or a `domain`"),
            ));
        }
    }
    let same_site = match input.same_site.as_deref() {
        None => None,
        Some(text) => Some(SameSite::parse(text).ok_or_else(|| {
            bad(
                "sameSite",
                format!("cookies[{n}].sameSite must be Strict, Lax or None, got {text:?}"),
            )
        })?),
    };
    if let Some(expires) = input.expires
        && !expires.is_finite()
    {
        return Err(bad(
            "expires",
            format!("cookies[{n}].expires must be a number of seconds"),
        ));
    }
    Ok(CookieSpec {
        name,
        value,
        url: url.map(str::to_string),
        domain: domain.map(str::to_string),
        path: input.path.clone(),
        expires: input.expires,
        http_only: input.http_only,
        secure: input.secure,
        same_site,
    })
}

/// Sets cookies: each needs `name`, `value`, and `url` or `domain` (`path`, `expires` in
/// seconds since the epoch, `httpOnly`, `secure` and `sameSite` are optional). All are checked
/// first; the browser may still refuse one (a `secure` cookie for an http URL, say), which stops
/// there, naming it.
#[utoipa::path(post, path = "/v1/browser/cookies", tag = "browser-cookies",
    request_body = SetCookiesRequest,
    responses(
        (status = 200, body = Envelope<Object>),
        (status = 422, description = "a cookie is malformed or refused", body = ErrorBody),
    ))]
pub async fn set_cookies(
    State(state): State<AppState>,
    AioJson(request): AioJson<SetCookiesRequest>,
) -> Result<Json<Envelope<()>>, ApiError> {
    if request.cookies.len() > MAX_COOKIES {
        return Err(ApiError::invalid(
            "cookies",
            format!(
                "`cookies` lists {} cookies; at most {MAX_COOKIES} are accepted",
                request.cookies.len()
            ),
        ));
    }
    let specs = request
        .cookies
        .iter()
        .enumerate()
        .map(|(n, c)| cookie_spec(n, c))
        .collect::<Result<Vec<_>, _>>()?;
    match state.browser.set_cookies(&specs).await {
        Ok(count) => Ok(crate::api::browser::done(format!("set {count} cookies"))),
        Err(failure) => {
            let n = failure.item;
            let mut error = ApiError::from(failure.error);
            if error.loc.is_some() {
                error.loc = Some(vec!["body".into(), "cookies".into(), n.to_string()]);
            }
            error.message = format!("cookies[{n}]: {}", error.message);
            Err(error)
        }
    }
}

/// Deletes every cookie of the browser.
#[utoipa::path(delete, path = "/v1/browser/cookies", tag = "browser-cookies",
    responses((status = 200, body = Envelope<Object>)))]
pub async fn clear_cookies(State(state): State<AppState>) -> Result<Json<Envelope<()>>, ApiError> {
    let count = state.browser.clear_cookies().await?;
    Ok(crate::api::browser::done(format!(
        "deleted {count} cookies"
    )))
}

/// Saves the browser's cookies and the localStorage of the origins its tabs show to a JSON file
/// (Playwright's `storage_state` format) inside the allowed file roots.
#[utoipa::path(post, path = "/v1/browser/state/save", tag = "browser-state",
    request_body = StatePathRequest,
    responses(
        (status = 200, body = Envelope<SavedFile>),
        (status = 403, description = "the path is outside the allowed file roots", body = ErrorBody),
        (status = 422, description = "`path` is missing", body = ErrorBody),
    ))]
pub async fn save_state(
    State(state): State<AppState>,
    AioJson(request): AioJson<StatePathRequest>,
) -> Result<Json<Envelope<SavedFile>>, ApiError> {
    validate::not_blank("path", &request.path)?;
    let path = request.path.clone();
    files::run(&state, move |files| {
        files.confinement().resolve(OsStr::new(&path))?;
        Ok(())
    })
    .await
    .map_err(|e| save_path_error(e, "path"))?;
    let saved = state.browser.storage_state().await?;
    let json = serde_json::to_string_pretty(&saved)
        .map_err(|e| ApiError::internal(format!("cannot encode the state: {e}")))?;
    let written = write_file(&state, request.path.clone(), json)
        .await
        .map_err(|e| save_path_error(e, "path"))?;
    Ok(Json(Envelope::ok(SavedFile {
        path: written,
        count: saved.cookies.len(),
        origins: Some(saved.origins.into_iter().map(|o| o.origin).collect()),
    })))
}

/// Loads a state saved by `state/save` (or by Playwright): sets its cookies, and the
/// localStorage of its origins that a tab shows now (`skipped_origins` lists the others).
#[utoipa::path(post, path = "/v1/browser/state/load", tag = "browser-state",
    request_body = StatePathRequest,
    responses(
        (status = 200, body = Envelope<StateLoaded>),
        (status = 403, description = "the path is outside the allowed file roots", body = ErrorBody),
        (status = 404, description = "the file does not exist", body = ErrorBody),
        (status = 422, description = "`path` is missing, or the file is not a saved state", body = ErrorBody),
    ))]
pub async fn load_state(
    State(state): State<AppState>,
    AioJson(request): AioJson<StatePathRequest>,
) -> Result<Json<Envelope<StateLoaded>>, ApiError> {
    validate::not_blank("path", &request.path)?;
    let path = request.path.clone();
    let read = files::run(&state, move |files| {
        files.read(&ReadRequest {
            path: OsStr::new(&path),
            start_line: None,
            end_line: None,
            encoding: ReadEncoding::Utf8,
        })
    })
    .await
    .map_err(|e| save_path_error(e, "path"))?;
    let saved: StorageState = serde_json::from_str(&read.content).map_err(|e| {
        ApiError::invalid(
            "path",
            format!(
                "{} is not a saved browser state (`cookies` and `origins`): {e}",
                read.path.display()
            ),
        )
    })?;
    let loaded = state.browser.load_storage_state(&saved).await?;
    let mut envelope = Envelope::ok(StateLoaded {
        path: read.path.to_string_lossy().into_owned(),
        cookies: loaded.cookies,
        origins: loaded.origins,
        skipped_origins: loaded.skipped_origins.clone(),
    });
    if !loaded.skipped_origins.is_empty() {
        envelope.message = format!(
            "localStorage not set for {} (no tab shows them; open one and load again)",
            loaded.skipped_origins.join(", ")
        );
    }
    Ok(Json(envelope))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(name: &str, value: &str) -> CookieInput {
        CookieInput {
            name: Some(name.into()),
            value: Some(value.into()),
            url: Some("https://example.com/".into()),
            ..CookieInput::default()
        }
    }

    #[test]
    fn cookies_are_checked_field_by_field() {
        let spec = cookie_spec(0, &input("a", "1")).unwrap();
        assert_eq!(spec.url.as_deref(), Some("https://example.com/"));
        let mut same_site = input("a", "1");
        same_site.same_site = Some("strict".into());
        assert_eq!(
            cookie_spec(0, &same_site).unwrap().same_site,
            Some(SameSite::Strict)
        );
        let mut no_target = input("a", "1");
        no_target.url = None;
        let mut with_domain = no_target.clone();
        with_domain.domain = Some(".example.com".into());
        assert!(cookie_spec(0, &with_domain).is_ok());
        let mut bad_url = input("a", "1");
        bad_url.url = Some("file:///etc/passwd".into());
        let mut bad_same_site = input("a", "1");
        bad_same_site.same_site = Some("sometimes".into());
        let mut no_value = input("a", "1");
        no_value.value = None;
        for (bad, field) in [
            (no_target, "url"),
            (bad_url, "url"),
            (bad_same_site, "sameSite"),
            (no_value, "value"),
            (input("", "1"), "name"),
            (input("a=b", "1"), "name"),
            (input("a", "1;2"), "value"),
        ] {
            let error = cookie_spec(3, &bad).unwrap_err();
            assert_eq!(error.loc.unwrap(), cookie_loc(3, field));
            assert!(error.message.contains("cookies[3]"), "{}", error.message);
        }
    }
}
