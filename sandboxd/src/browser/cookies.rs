//! Cookies (CDP `Storage.*Cookies` on the browser's default context, `Network.getCookies` for a
//! URL filter) and the browser's *state*: its cookies plus the localStorage of the origins its
//! tabs show, in Playwright's `storage_state` format (`{"cookies": [...], "origins": [{"origin",
//! "localStorage": [{"name", "value"}]}]}`), so a state saved here loads in Playwright and back.
//!
//! Loading sets every cookie, and the localStorage of each origin a tab shows right now; origins
//! no tab shows are reported as skipped (setting them would mean opening their pages).
//! Reading and writing the state file is the caller's (the HTTP layer confines the path).

use std::collections::BTreeSet;

use chromiumoxide::cdp::browser_protocol::network::{
    self, Cookie, CookieParam, CookieSameSite, TimeSinceEpoch,
};
use chromiumoxide::cdp::browser_protocol::storage;
use chromiumoxide::error::CdpError;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::error::BrowserError;
use super::{BrowserService, js, script};

/// A cookie as answered and saved (Playwright's shape).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CookieRecord {
    pub name: String,
    pub value: String,
    pub domain: String,
    pub path: String,
    /// Seconds since the Unix epoch; -1 for a session cookie.
    pub expires: f64,
    #[serde(rename = "httpOnly")]
    pub http_only: bool,
    pub secure: bool,
    /// `Strict`, `Lax` or `None`.
    #[serde(rename = "sameSite")]
    pub same_site: String,
}

/// A cookie to set: `name`, `value`, and either `url` or `domain` (with `path`, default `/`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CookieSpec {
    pub name: String,
    pub value: String,
    pub url: Option<String>,
    pub domain: Option<String>,
    pub path: Option<String>,
    /// Seconds since the Unix epoch; `None` or negative: a session cookie.
    pub expires: Option<f64>,
    pub http_only: Option<bool>,
    pub secure: Option<bool>,
    pub same_site: Option<SameSite>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SameSite {
    Strict,
    Lax,
    None,
}

impl SameSite {
    /// `Strict`, `Lax` or `None`, in any case.
    pub fn parse(text: &str) -> Option<Self> {
        match text.to_ascii_lowercase().as_str() {
            "strict" => Some(Self::Strict),
            "lax" => Some(Self::Lax),
            "none" => Some(Self::None),
            _ => None,
        }
    }
}

/// One localStorage item.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StorageItem {
    pub name: String,
    pub value: String,
}

/// The localStorage of one origin.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OriginStorage {
    pub origin: String,
    #[serde(rename = "localStorage")]
    pub local_storage: Vec<StorageItem>,
}

/// What `state/save` writes and `state/load` reads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StorageState {
    pub cookies: Vec<CookieRecord>,
    pub origins: Vec<OriginStorage>,
}

/// What loading a state did.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LoadedState {
    pub cookies: usize,
    /// Origins whose localStorage was set (a tab shows them).
    pub origins: Vec<String>,
    /// Origins no tab shows: their localStorage was not set.
    pub skipped_origins: Vec<String>,
}

/// A cookie set failed: which one, and why.
#[derive(Debug)]
pub struct CookieFailure {
    pub item: usize,
    pub error: BrowserError,
}

fn record(cookie: Cookie) -> CookieRecord {
    CookieRecord {
        name: cookie.name,
        value: cookie.value,
        domain: cookie.domain,
        path: cookie.path,
        expires: if cookie.session { -1.0 } else { cookie.expires },
        http_only: cookie.http_only,
        secure: cookie.secure,
        same_site: cookie
            .same_site
            .map_or("Lax", |s| match s {
                CookieSameSite::Strict => "Strict",
                CookieSameSite::Lax => "Lax",
                CookieSameSite::None => "None",
            })
            .to_string(),
    }
}

fn param(spec: &CookieSpec) -> CookieParam {
    let mut param = CookieParam::new(spec.name.clone(), spec.value.clone());
    param.url = spec.url.clone();
    param.domain = spec.domain.clone();
    param.path = spec
        .path
        .clone()
        .or_else(|| spec.domain.as_ref().map(|_| "/".to_string()));
    param.expires = spec.expires.filter(|e| *e >= 0.0).map(TimeSinceEpoch::new);
    param.http_only = spec.http_only;
    param.secure = spec.secure;
    param.same_site = spec.same_site.map(|s| match s {
        SameSite::Strict => CookieSameSite::Strict,
        SameSite::Lax => CookieSameSite::Lax,
        SameSite::None => CookieSameSite::None,
    });
    param
}

impl From<&CookieRecord> for CookieSpec {
    fn from(r: &CookieRecord) -> Self {
        Self {
            name: r.name.clone(),
            value: r.value.clone(),
            url: None,
            domain: Some(r.domain.clone()),
            path: Some(r.path.clone()),
            expires: Some(r.expires),
            http_only: Some(r.http_only),
            secure: Some(r.secure),
            same_site: SameSite::parse(&r.same_site),
        }
    }
}

impl BrowserService {
    /// The browser's cookies; with `urls`, only those the browser would send to one of them.
    pub async fn cookies(
        &self,
        urls: Option<&[String]>,
    ) -> Result<Vec<CookieRecord>, BrowserError> {
        match urls {
            Some(urls) => {
                self.bounded("reading cookies", |_, page| async move {
                    let params = network::GetCookiesParams {
                        urls: Some(urls.to_vec()),
                    };
                    let cookies = page.execute(params).await?.result.cookies;
                    Ok(cookies.into_iter().map(record).collect())
                })
                .await
            }
            None => {
                self.bounded_session("reading cookies", |session| async move {
                    let cookies = session
                        .browser
                        .execute(storage::GetCookiesParams::default())
                        .await?
                        .result
                        .cookies;
                    Ok(cookies.into_iter().map(record).collect())
                })
                .await
            }
        }
    }

    /// Sets cookies one by one, stopping at the first the browser refuses.
    pub async fn set_cookies(&self, cookies: &[CookieSpec]) -> Result<usize, CookieFailure> {
        for (item, spec) in cookies.iter().enumerate() {
            self.bounded_session("setting cookies", |session| async move {
                let params = storage::SetCookiesParams::new(vec![param(spec)]);
                match session.browser.execute(params).await {
                    Ok(_) => Ok(()),
                    Err(CdpError::Chrome(error)) => Err(BrowserError::invalid(
                        "cookies",
                        format!(
                            "the browser refused cookie {:?}: {}",
                            spec.name, error.message
                        ),
                    )),
                    Err(other) => Err(other.into()),
                }
            })
            .await
            .map_err(|error| CookieFailure { item, error })?;
        }
        Ok(cookies.len())
    }

    /// Deletes every cookie; answers how many there were.
    pub async fn clear_cookies(&self) -> Result<usize, BrowserError> {
        self.bounded_session("clearing cookies", |session| async move {
            let count = session
                .browser
                .execute(storage::GetCookiesParams::default())
                .await?
                .result
                .cookies
                .len();
            session
                .browser
                .execute(storage::ClearCookiesParams::default())
                .await?;
            Ok(count)
        })
        .await
    }

    /// The cookies, and the localStorage of every origin a tab shows.
    pub async fn storage_state(&self) -> Result<StorageState, BrowserError> {
        let cookies = self.cookies(None).await?;
        let origins = self
            .bounded_session("reading localStorage", |session| async move {
                let mut origins: Vec<OriginStorage> = Vec::new();
                for tab in session.tabs().await? {
                    let page = session.page(&tab.target_id).await?;
                    let found: Option<OriginStorage> =
                        script::call(&page, js::STORAGE, &[]).await?;
                    if let Some(found) = found
                        && !origins.iter().any(|o| o.origin == found.origin)
                    {
                        origins.push(found);
                    }
                }
                Ok(origins)
            })
            .await?;
        Ok(StorageState { cookies, origins })
    }

    /// Sets a saved state's cookies, and the localStorage of the origins a tab shows.
    pub async fn load_storage_state(
        &self,
        state: &StorageState,
    ) -> Result<LoadedState, BrowserError> {
        let specs: Vec<CookieSpec> = state.cookies.iter().map(CookieSpec::from).collect();
        let cookies = self.set_cookies(&specs).await.map_err(|f| match f.error {
            BrowserError::Invalid { message, .. } => BrowserError::invalid(
                "path",
                format!("cookie {} of the state file: {message}", f.item),
            ),
            other => other,
        })?;
        let origins = &state.origins;
        let set = self
            .bounded_session("setting localStorage", |session| async move {
                let mut set = BTreeSet::new();
                for tab in session.tabs().await? {
                    let page = session.page(&tab.target_id).await?;
                    for origin in origins {
                        let count: Option<usize> = script::call(
                            &page,
                            js::STORAGE_LOAD,
                            &[json!(origin.origin), json!(origin.local_storage)],
                        )
                        .await?;
                        if count.is_some() {
                            set.insert(origin.origin.clone());
                        }
                    }
                }
                Ok(set)
            })
            .await?;
        Ok(LoadedState {
            cookies,
            skipped_origins: origins
                .iter()
                .map(|o| o.origin.clone())
                .filter(|o| !set.contains(o))
                .collect(),
            origins: set.into_iter().collect(),
        })
    }
}
