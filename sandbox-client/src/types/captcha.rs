//! Captcha detection (`/v1/browser/captcha/*`): what captcha widgets the active page shows, and
//! waiting until none remains (a person solves them through the live view). sandboxd never
//! solves captchas.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// One captcha widget on the page.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct CaptchaWidget {
    /// `recaptcha`, `hcaptcha` or `turnstile`.
    pub kind: String,
    /// What matched: the iframe's `src` or the element's selector.
    pub evidence: String,
    /// Its response token has a value (a person solved it).
    pub solved: bool,
}

/// `GET /v1/browser/captcha/detect`.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct CaptchaDetection {
    /// Whether any captcha widget is on the page.
    pub detected: bool,
    /// The kind of the first widget found.
    pub kind: Option<String>,
    pub widgets: Vec<CaptchaWidget>,
    /// The page's URL.
    pub url: String,
}

/// `POST /v1/browser/captcha/wait`.
#[derive(Debug, Default, Deserialize, Serialize, ToSchema, schemars::JsonSchema)]
pub struct CaptchaWaitRequest {
    /// Seconds to wait, above 0 and at most 600 (default 120).
    pub timeout: Option<f64>,
    /// Seconds between checks, from 0.1 to 10 (default 1).
    pub poll_interval: Option<f64>,
}

/// AIO's `CaptchaWaitResult`.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct CaptchaWaitResult {
    /// No captcha remains on the page.
    pub resolved: bool,
    /// Seconds waited.
    pub waited: f64,
    /// The widgets still on the page when the wait timed out.
    pub remaining: Vec<CaptchaWidget>,
}
