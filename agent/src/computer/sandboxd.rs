//! [`SandboxdComputer`]: the [`Computer`] trait over sandboxd's REST API with reqwest.
//!
//! Routes used: `GET /v1/browser/screenshot` (the id, sizes and scale come in `x-*` headers),
//! `POST /v1/browser/actions` (coordinates in observation pixels, mapped by sandboxd through the
//! transform it recorded for `screenshot_id`), `POST /v1/shell/exec`, `POST /v1/file/read`,
//! `POST /v1/file/write`, `POST /v1/file/str_replace_editor`. The wire structs are private and
//! minimal: they are meant to be replaced by the shared sandboxd client crate.

use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use base64::Engine;
use bytes::Bytes;
use reqwest::StatusCode;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::Mutex;

use super::{
    ActionReport, Computer, ComputerError, EditCommand, EditOutcome, SettleReport, ShellOutcome,
};
use crate::action::DesktopAction;
use crate::observation::{ImageFormat, Observation, ObservationMeta, ObserveRequest, fit_within};
use crate::secret::Secret;

/// Time allowed for a screenshot.
const SCREENSHOT_TIMEOUT: Duration = Duration::from_secs(30);
/// Time allowed for an action: sandboxd allows waits and drags of up to 60 s.
const ACTION_TIMEOUT: Duration = Duration::from_secs(90);
/// Time allowed for a file call.
const FILE_TIMEOUT: Duration = Duration::from_secs(60);
/// Added to a shell command's own timeout for the answer to arrive.
const SHELL_GRACE: Duration = Duration::from_secs(30);

/// A sandbox reached over HTTP at `base_url` (sandboxd itself, or a proxy in front of it),
/// authenticated with a bearer key when one is given.
pub struct SandboxdComputer {
    base_url: String,
    key: Option<Secret>,
    client: reqwest::Client,
    /// The shell session commands run in, so the working directory and environment carry over
    /// between commands (sandboxd creates it on the first command).
    shell_session: Mutex<Option<String>>,
}

impl std::fmt::Debug for SandboxdComputer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SandboxdComputer")
            .field("base_url", &self.base_url)
            .field("key", &self.key)
            .finish()
    }
}

impl SandboxdComputer {
    /// `base_url` such as `http://10.0.0.5:8091`; paths are appended to it.
    pub fn new(base_url: impl Into<String>, key: Option<Secret>) -> Result<Self, ComputerError> {
        let base_url = base_url.into().trim_end_matches('/').to_string();
        if !(base_url.starts_with("http://") || base_url.starts_with("https://")) {
            return Err(ComputerError::Refused {
                field: Some("base_url".into()),
                message: format!("base_url must start with http:// or https://, got {base_url:?}"),
            });
        }
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| ComputerError::Transport {
                step: "client setup",
                message: e.to_string(),
            })?;
        Ok(Self {
            base_url,
            key,
            client,
            shell_session: Mutex::new(None),
        })
    }

    fn request(
        &self,
        method: reqwest::Method,
        path: &str,
        timeout: Duration,
    ) -> reqwest::RequestBuilder {
        let mut builder = self
            .client
            .request(method, format!("{}{}", self.base_url, path))
            .timeout(timeout);
        if let Some(key) = &self.key {
            builder = builder.bearer_auth(key.expose());
        }
        builder
    }

    /// POSTs `body` and returns the envelope's `data`.
    async fn post<B: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        step: &'static str,
        path: &str,
        body: &B,
        timeout: Duration,
    ) -> Result<T, ComputerError> {
        let response = self
            .request(reqwest::Method::POST, path, timeout)
            .json(body)
            .send()
            .await
            .map_err(|e| transport(step, &e))?;
        let status = response.status();
        let bytes = response.bytes().await.map_err(|e| transport(step, &e))?;
        if !status.is_success() {
            return Err(error_answer(step, status, &bytes));
        }
        let envelope: wire::Envelope<T> =
            serde_json::from_slice(&bytes).map_err(|e| ComputerError::Protocol {
                step,
                message: e.to_string(),
            })?;
        if !envelope.success {
            return Err(ComputerError::Refused {
                field: None,
                message: envelope.message.unwrap_or_else(|| format!("{step} failed")),
            });
        }
        envelope.data.ok_or_else(|| ComputerError::Protocol {
            step,
            message: "the answer has no data".into(),
        })
    }

    async fn screenshot(
        &self,
        request: &ObserveRequest,
        step: &'static str,
    ) -> Result<Observation, ComputerError> {
        let mut query: Vec<(&str, String)> = Vec::new();
        if let Some(w) = request.max_width {
            query.push(("max_width", w.to_string()));
        }
        if let Some(h) = request.max_height {
            query.push(("max_height", h.to_string()));
        }
        match request.format {
            ImageFormat::Png => query.push(("format", "png".into())),
            ImageFormat::Jpeg { quality } => {
                query.push(("format", "jpeg".into()));
                query.push(("quality", quality.to_string()));
            }
        }
        let query = query
            .iter()
            .map(|(name, value)| format!("{name}={value}"))
            .collect::<Vec<_>>()
            .join("&");
        let response = self
            .request(
                reqwest::Method::GET,
                &format!("/v1/browser/screenshot?{query}"),
                SCREENSHOT_TIMEOUT,
            )
            .send()
            .await
            .map_err(|e| transport(step, &e))?;
        let status = response.status();
        if !status.is_success() {
            let bytes = response.bytes().await.unwrap_or_default();
            return Err(error_answer(step, status, &bytes));
        }
        let headers = response.headers().clone();
        let header = |name: &str| -> Result<String, ComputerError> {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
                .ok_or_else(|| ComputerError::Protocol {
                    step,
                    message: format!("the screenshot answer has no {name} header"),
                })
        };
        let number = |name: &str| -> Result<u32, ComputerError> {
            header(name)?
                .trim()
                .parse::<u32>()
                .map_err(|_| ComputerError::Protocol {
                    step,
                    message: format!("the {name} header is not a number"),
                })
        };
        let id = header("x-screenshot-id")?;
        let image_width = number("x-image-width")?;
        let image_height = number("x-image-height")?;
        let screen_width = number("x-screen-width")?;
        let screen_height = number("x-screen-height")?;
        let mime = headers
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or(request.format.mime())
            .to_string();
        let image = response.bytes().await.map_err(|e| transport(step, &e))?;
        Ok(Observation {
            id,
            image,
            mime,
            image_width,
            image_height,
            screen_width,
            screen_height,
            taken_at: SystemTime::now(),
        })
    }

    async fn action(
        &self,
        action: &DesktopAction,
        screenshot_id: Option<u64>,
    ) -> Result<wire::ActionData, ComputerError> {
        let body = wire::ActionBody {
            action,
            screenshot_id,
        };
        let response = self
            .request(reqwest::Method::POST, "/v1/browser/actions", ACTION_TIMEOUT)
            .json(&body)
            .send()
            .await
            .map_err(|e| transport("action", &e))?;
        let status = response.status();
        let bytes = response
            .bytes()
            .await
            .map_err(|e| transport("action", &e))?;
        if !status.is_success() {
            return Err(error_answer("action", status, &bytes));
        }
        let answer: wire::ActionAnswer =
            serde_json::from_slice(&bytes).map_err(|e| ComputerError::Protocol {
                step: "action",
                message: e.to_string(),
            })?;
        Ok(answer.data)
    }
}

#[async_trait]
impl Computer for SandboxdComputer {
    async fn observe(&self, request: &ObserveRequest) -> Result<Observation, ComputerError> {
        self.screenshot(request, "screenshot").await
    }

    async fn act(
        &self,
        action: &DesktopAction,
        observation_id: Option<&str>,
    ) -> Result<ActionReport, ComputerError> {
        let screenshot_id = match observation_id {
            None => None,
            Some(id) => Some(id.parse::<u64>().map_err(|_| ComputerError::Refused {
                field: Some("screenshot_id".into()),
                message: format!("observation {id:?} is not a sandboxd screenshot id"),
            })?),
        };
        let data = self.action(action, screenshot_id).await?;
        Ok(ActionReport {
            cursor: data.cursor.map(|c| (c.x, c.y)),
            settle: data.settle.map(Into::into),
        })
    }

    async fn wait_settled(
        &self,
        quiet: Duration,
        timeout: Duration,
    ) -> Result<SettleReport, ComputerError> {
        let action = DesktopAction::WaitSettled {
            quiet_ms: Some(quiet.as_millis() as u64),
            timeout_ms: Some(timeout.as_millis() as u64),
        };
        let data = self.action(&action, None).await?;
        data.settle.map(Into::into).ok_or(ComputerError::Protocol {
            step: "wait settled",
            message: "the answer has no settle report".into(),
        })
    }

    async fn zoom(
        &self,
        observation: &ObservationMeta,
        region: [f64; 4],
        bounds: (u32, u32),
    ) -> Result<Observation, ComputerError> {
        let full = self.screenshot(&ObserveRequest::full(), "zoom").await?;
        let refuse = |message: String| ComputerError::Refused {
            field: Some("region".into()),
            message,
        };
        let [x0, y0, x1, y1] = region;
        if !(observation.contains(x0, y0) && x1 > x0 && y1 > y0)
            || x1 > f64::from(observation.image_width)
            || y1 > f64::from(observation.image_height)
        {
            return Err(refuse(format!(
                "region [{x0}, {y0}, {x1}, {y1}] is not a rectangle inside the {}x{} screenshot",
                observation.image_width, observation.image_height
            )));
        }
        let decoded =
            image::load_from_memory(&full.image).map_err(|e| ComputerError::Protocol {
                step: "zoom",
                message: format!("the screenshot cannot be decoded: {e}"),
            })?;
        let (sx, sy) = (observation.scale_x(), observation.scale_y());
        let left = (x0 * sx).floor().max(0.0) as u32;
        let top = (y0 * sy).floor().max(0.0) as u32;
        let right = ((x1 * sx).ceil() as u32).min(decoded.width());
        let bottom = ((y1 * sy).ceil() as u32).min(decoded.height());
        if right <= left || bottom <= top {
            return Err(refuse("region is empty on the screen".into()));
        }
        let mut crop = decoded.crop_imm(left, top, right - left, bottom - top);
        let (w, h) = fit_within((crop.width(), crop.height()), bounds);
        if (w, h) != (crop.width(), crop.height()) {
            crop = crop.resize_exact(w, h, image::imageops::FilterType::Triangle);
        }
        let mut encoded = Vec::new();
        crop.write_to(
            &mut std::io::Cursor::new(&mut encoded),
            image::ImageFormat::Png,
        )
        .map_err(|e| ComputerError::Protocol {
            step: "zoom",
            message: format!("cannot encode the zoomed image: {e}"),
        })?;
        Ok(Observation {
            id: format!("{}-zoom", full.id),
            image: Bytes::from(encoded),
            mime: "image/png".into(),
            image_width: w,
            image_height: h,
            screen_width: right - left,
            screen_height: bottom - top,
            taken_at: SystemTime::now(),
        })
    }

    async fn run_shell(
        &self,
        command: &str,
        timeout: Duration,
        restart: bool,
    ) -> Result<ShellOutcome, ComputerError> {
        let mut session = self.shell_session.lock().await;
        if restart {
            *session = None;
        }
        let body = wire::ShellExec {
            command,
            id: session.as_deref(),
            timeout: timeout.as_secs_f64(),
        };
        let result: wire::ShellResult = self
            .post(
                "shell",
                "/v1/shell/exec",
                &body,
                timeout.saturating_add(SHELL_GRACE),
            )
            .await?;
        *session = Some(result.session_id);
        Ok(ShellOutcome {
            still_running: result.status == "running" || result.status == "no_change_timeout",
            exit_code: result.exit_code,
            output: result.output,
            truncated: result.truncated,
        })
    }

    async fn read_file(&self, path: &str) -> Result<String, ComputerError> {
        let result: wire::FileRead = self
            .post(
                "read file",
                "/v1/file/read",
                &wire::FileReadBody { file: path },
                FILE_TIMEOUT,
            )
            .await?;
        Ok(result.content)
    }

    async fn write_file(&self, path: &str, content: &[u8]) -> Result<(), ComputerError> {
        let body = wire::FileWriteBody {
            file: path,
            content: base64::engine::general_purpose::STANDARD.encode(content),
            encoding: "base64",
        };
        let _: serde_json::Value = self
            .post("write file", "/v1/file/write", &body, FILE_TIMEOUT)
            .await?;
        Ok(())
    }

    async fn edit(&self, command: &EditCommand) -> Result<EditOutcome, ComputerError> {
        let result: wire::EditResult = self
            .post(
                "edit file",
                "/v1/file/str_replace_editor",
                command,
                FILE_TIMEOUT,
            )
            .await?;
        Ok(EditOutcome {
            output: result.output,
        })
    }
}

fn transport(step: &'static str, error: &reqwest::Error) -> ComputerError {
    ComputerError::Transport {
        step,
        message: error.without_url_string(),
    }
}

trait WithoutUrl {
    fn without_url_string(&self) -> String;
}

impl WithoutUrl for reqwest::Error {
    /// The error without the URL (it can carry a proxy token in its path).
    fn without_url_string(&self) -> String {
        let kind = if self.is_timeout() {
            "timed out"
        } else if self.is_connect() {
            "connection failed"
        } else if self.is_body() || self.is_decode() {
            "the answer was cut"
        } else {
            "request failed"
        };
        let mut message = kind.to_string();
        let mut source = std::error::Error::source(self);
        while let Some(cause) = source {
            message.push_str(": ");
            message.push_str(&cause.to_string());
            source = cause.source();
        }
        message
    }
}

/// Maps an error answer: 4xx with a message is a refusal (naming the field for 422), 503 is
/// unavailable, the rest is an HTTP error.
fn error_answer(step: &'static str, status: StatusCode, body: &[u8]) -> ComputerError {
    let parsed: Option<wire::ErrorBody> = serde_json::from_slice(body).ok();
    let message = parsed
        .as_ref()
        .and_then(|b| b.message.clone())
        .unwrap_or_else(|| String::from_utf8_lossy(&body[..body.len().min(500)]).into_owned());
    let field = parsed
        .and_then(|b| b.detail)
        .and_then(|d| d.into_iter().next())
        .and_then(|d| d.loc.last().cloned());
    match status.as_u16() {
        401 | 403 if message.contains("API key") => ComputerError::Http {
            step,
            status: status.as_u16(),
            message,
        },
        400..=499 if status != StatusCode::TOO_MANY_REQUESTS => {
            ComputerError::Refused { field, message }
        }
        503 => ComputerError::Unavailable { step, message },
        other => ComputerError::Http {
            step,
            status: other,
            message,
        },
    }
}

mod wire {
    //! sandboxd's JSON, only the fields used.

    use serde::{Deserialize, Serialize};

    use crate::action::DesktopAction;

    #[derive(Deserialize)]
    pub struct Envelope<T> {
        pub success: bool,
        pub message: Option<String>,
        pub data: Option<T>,
    }

    #[derive(Deserialize)]
    pub struct ErrorBody {
        pub message: Option<String>,
        pub detail: Option<Vec<ErrorDetail>>,
    }

    #[derive(Deserialize)]
    pub struct ErrorDetail {
        pub loc: Vec<String>,
    }

    #[derive(Serialize)]
    pub struct ActionBody<'a> {
        #[serde(flatten)]
        pub action: &'a DesktopAction,
        #[serde(skip_serializing_if = "Option::is_none")]
        pub screenshot_id: Option<u64>,
    }

    #[derive(Deserialize)]
    pub struct ActionAnswer {
        pub data: ActionData,
    }

    #[derive(Deserialize)]
    pub struct ActionData {
        pub cursor: Option<Cursor>,
        pub settle: Option<Settle>,
    }

    #[derive(Deserialize)]
    pub struct Cursor {
        pub x: i32,
        pub y: i32,
    }

    #[derive(Deserialize)]
    pub struct Settle {
        pub settled: bool,
        pub waited_ms: u64,
        pub frames: u32,
    }

    impl From<Settle> for super::SettleReport {
        fn from(s: Settle) -> Self {
            Self {
                settled: s.settled,
                waited_ms: s.waited_ms,
                frames: s.frames,
            }
        }
    }

    #[derive(Serialize)]
    pub struct ShellExec<'a> {
        pub command: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        pub id: Option<&'a str>,
        pub timeout: f64,
    }

    #[derive(Deserialize)]
    pub struct ShellResult {
        pub session_id: String,
        pub status: String,
        #[serde(default)]
        pub output: String,
        pub exit_code: Option<i32>,
        #[serde(default)]
        pub truncated: bool,
    }

    #[derive(Serialize)]
    pub struct FileReadBody<'a> {
        pub file: &'a str,
    }

    #[derive(Deserialize)]
    pub struct FileRead {
        pub content: String,
    }

    #[derive(Serialize)]
    pub struct FileWriteBody<'a> {
        pub file: &'a str,
        pub content: String,
        pub encoding: &'static str,
    }

    #[derive(Deserialize)]
    pub struct EditResult {
        pub output: String,
    }
}
