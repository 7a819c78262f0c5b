//! `POST /v1/browser/page/record`: AIO's page screencast (once, start, pause, resume, stop,
//! status), served by [`crate::page_recording`] on the active tab. The video file is opened
//! here through the file confinement, so it lies where the file API can read it
//! (`GET /v1/file/download`).

use std::time::Duration;

use axum::Json;
use axum::extract::State;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::api::AppState;
use crate::api::error::ApiError;
use crate::api::extract::AioJson;
use crate::api::types::{
    Envelope, ErrorBody, PageRecordAction, PageRecordRequest, PageRecordResult,
};
use crate::api::validate::{self, SecondsRange};
use crate::page_recording::{Options, PageRecordError, Report};

/// The longest `once`.
const MAX_ONCE: f64 = 60.0;
const DEFAULT_ONCE: Duration = Duration::from_secs(5);

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(record))
}

/// Records the active tab's rendering (CDP screencast frames, encoded by ffmpeg to H.264 in
/// fragmented MP4). One recording at a time; it stops by itself after its duration or at the
/// file size limit. `once` records `duration` seconds and answers the finished file.
#[utoipa::path(post, path = "/v1/browser/page/record", tag = "browser",
    request_body = PageRecordRequest,
    responses(
        (status = 200, description = "the recording's state (finished for `once` and `stop`)", body = Envelope<PageRecordResult>),
        (status = 403, description = "`save_path` is outside the allowed roots", body = ErrorBody),
        (status = 409, description = "`start` or `once` while recording; `pause`, `resume` or `stop` with nothing recording", body = ErrorBody),
        (status = 422, description = "a field is invalid (the message names it)", body = ErrorBody),
        (status = 500, description = "ffmpeg could not start", body = ErrorBody),
        (status = 503, description = "the browser is not running", body = ErrorBody),
    ))]
pub async fn record(
    State(state): State<AppState>,
    AioJson(request): AioJson<PageRecordRequest>,
) -> Result<Json<Envelope<PageRecordResult>>, ApiError> {
    let recorder = &state.page_recorder;
    let limits = recorder.limits();
    let action = request.action.unwrap_or(PageRecordAction::Once);
    let (report, message) = match action {
        PageRecordAction::Once | PageRecordAction::Start => {
            let once = action == PageRecordAction::Once;
            let max = if once {
                MAX_ONCE
            } else {
                limits.max_duration.as_secs_f64()
            };
            let duration = validate::optional_seconds(
                "duration",
                request.duration,
                SecondsRange::above(0.0, max),
            )?
            .unwrap_or(if once {
                DEFAULT_ONCE
            } else {
                limits.default_duration
            });
            let options = Options {
                fps: crate::api::desktop::recording::whole("fps", request.fps, 1, limits.max_fps)?
                    .unwrap_or(limits.default_fps),
                quality: crate::api::desktop::recording::whole("quality", request.quality, 1, 100)?
                    .unwrap_or(limits.default_quality),
                // `once` stops the recording itself after `duration`: the limit is a backstop.
                max_duration: if once {
                    duration + Duration::from_secs(5)
                } else {
                    duration
                },
            };
            let path = match request.save_path.as_deref() {
                Some(path) => {
                    validate::not_blank("save_path", path)?;
                    path.to_string()
                }
                None => default_path(&state),
            };
            let page = state.browser.active_page().await?;
            let files = state.files.clone();
            let output = tokio::task::spawn_blocking(move || files.create_output(path.as_ref()))
                .await
                .map_err(|e| ApiError::internal(format!("opening the video file: {e}")))?
                .map_err(crate::api::files::file_error)?;
            let started = recorder
                .start(page, options, output.file, output.path)
                .await
                .map_err(record_error)?;
            if once {
                // The recording stops by itself at its duration; wait for it, then finish.
                tokio::time::sleep(duration).await;
                (
                    recorder.stop().await.map_err(record_error)?,
                    "Page recorded",
                )
            } else {
                (started, "Page recording started")
            }
        }
        PageRecordAction::Pause => (
            recorder.pause(true).await.map_err(record_error)?,
            "Page recording paused",
        ),
        PageRecordAction::Resume => (
            recorder.pause(false).await.map_err(record_error)?,
            "Page recording resumed",
        ),
        PageRecordAction::Stop => (
            recorder.stop().await.map_err(record_error)?,
            "Page recording stopped",
        ),
        PageRecordAction::Status => (recorder.status().await, "Page recording status"),
    };
    let mut envelope = Envelope::ok(result(&report));
    envelope.message = match report.ended.as_deref() {
        Some(failed) if failed.starts_with("failed") => format!("the page recording {failed}"),
        _ => message.into(),
    };
    Ok(Json(envelope))
}

/// `$SANDBOX_WORKSPACE/recordings/page_<UTC time>.mp4`.
fn default_path(state: &AppState) -> String {
    crate::api::desktop::recording::recordings_path(state, "page")
}

fn result(report: &Report) -> PageRecordResult {
    PageRecordResult {
        status: report.status.name().into(),
        save_path: report
            .path
            .as_ref()
            .map(|p| p.to_string_lossy().into_owned()),
        duration: report.duration.map(|d| (d * 1000.0).round() / 1000.0),
        frames: report.frames,
        file_size_bytes: report.file_size_bytes,
        fps: report.options.map(|o| o.fps),
        quality: report.options.map(|o| o.quality),
        max_duration: report.options.map(|o| o.max_duration.as_secs_f64()),
        ended: report.ended.clone(),
    }
}

fn record_error(error: PageRecordError) -> ApiError {
    let message = error.to_string();
    match error {
        PageRecordError::AlreadyRecording { .. } | PageRecordError::NotRecording => {
            ApiError::conflict(message)
        }
        PageRecordError::Spawn { .. } => ApiError::internal(message),
        // As every browser route answers: 409 when the tab went away meanwhile, 503 while the
        // browser is down, 502 when it refused the command.
        PageRecordError::Browser(error) => ApiError {
            message,
            ..ApiError::from(error)
        },
    }
}
