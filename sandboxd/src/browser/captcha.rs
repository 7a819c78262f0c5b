//! Captcha detection on the active tab: which reCAPTCHA, hCaptcha and Cloudflare Turnstile
//! widgets are visible (`js/captcha.js`), and waiting until none is left unsolved, for a person
//! solves it through the live view (take-over). sandboxd never solves captchas.

use std::time::Duration;

use serde::Deserialize;
use tokio::time::Instant;

use super::error::BrowserError;
use super::{BrowserService, script};

const DETECT: &str = include_str!("js/captcha.js");

/// One widget on the page.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Widget {
    /// `recaptcha`, `hcaptcha` or `turnstile`.
    pub kind: String,
    /// The selector of its container, or its iframe's `src`.
    pub evidence: String,
    /// Its response token has a value.
    pub solved: bool,
}

/// What the page shows.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Scan {
    pub url: String,
    pub widgets: Vec<Widget>,
}

impl Scan {
    /// The widgets still waiting for a person.
    pub fn unsolved(&self) -> Vec<Widget> {
        self.widgets.iter().filter(|w| !w.solved).cloned().collect()
    }
}

/// How a wait ended.
#[derive(Debug, Clone)]
pub struct WaitOutcome {
    /// No unsolved widget is left.
    pub resolved: bool,
    pub waited: Duration,
    /// The unsolved widgets at the end (empty when resolved).
    pub remaining: Vec<Widget>,
}

impl BrowserService {
    /// The captcha widgets on the active tab.
    pub async fn detect_captcha(&self) -> Result<Scan, BrowserError> {
        self.bounded("looking for captchas", |_, page| async move {
            script::call::<Scan>(&page, DETECT, &[]).await
        })
        .await
    }

    /// Checks the active tab every `poll` until no unsolved widget is left, or `timeout`.
    pub async fn wait_captcha(
        &self,
        timeout: Duration,
        poll: Duration,
    ) -> Result<WaitOutcome, BrowserError> {
        let started = Instant::now();
        let deadline = started + timeout;
        loop {
            let scan = self.detect_captcha().await?;
            let remaining = scan.unsolved();
            if remaining.is_empty() {
                return Ok(WaitOutcome {
                    resolved: true,
                    waited: started.elapsed(),
                    remaining,
                });
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(WaitOutcome {
                    resolved: false,
                    waited: started.elapsed(),
                    remaining,
                });
            }
            tokio::time::sleep_until(deadline.min(now + poll)).await;
        }
    }
}
