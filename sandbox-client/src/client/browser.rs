//! The browser: `GET /v1/browser/info` (user agent, CDP and noVNC addresses, viewports).

use reqwest::Method;

use super::SandboxClient;
use crate::error::ClientError;
use crate::types::BrowserInfoResult;

impl SandboxClient {
    /// The browser's CDP endpoint, noVNC page and viewports. 503 while Chromium is not running.
    pub async fn browser_info(&self) -> Result<BrowserInfoResult, ClientError> {
        let request = self.request(Method::GET, "/v1/browser/info");
        self.envelope("browser info", request).await
    }
}
