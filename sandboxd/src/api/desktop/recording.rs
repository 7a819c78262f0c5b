//! `POST /v1/display/record`: AIO's screen recording (start, stop, status), served by
//! [`crate::recording`] (ffmpeg's x11grab). The video file is opened here through the file
//! confinement, so it lies where the file API can read it (`GET /v1/file/download`).

use std::time::SystemTime;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::api::AppState;
use crate::api::error::ApiError;
use crate::api::extract::AioJson;
use crate::api::types::{
    DisplayRecordRequest, DisplayRecordResult, Envelope, ErrorBody, RecordAction, RecordStatus,
};
use crate::api::validate::{self, SecondsRange};
use crate::recording::{Ending, RecordError, Report, Request, Status};

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(record))
}

/// Records the whole X desktop (the browser, its tabs and popups, the terminal...) to an MP4
/// file (H.264, fragmented MP4) with ffmpeg. One recording at a time; it stops by itself after
/// `max_duration` or at the file size limit, both given in the answer.
#[utoipa::path(post, path = "/v1/display/record", tag = "desktop",
    request_body = DisplayRecordRequest,
    responses(
        (status = 200, description = "`start`: recording; `stop`: the finished file; `status`: where the recorder is", body = Envelope<DisplayRecordResult>),
        (status = 403, description = "`save_path` is outside the allowed roots", body = ErrorBody),
        (status = 409, description = "`start` while recording, or `stop` with nothing recorded", body = ErrorBody),
        (status = 422, description = "a field is missing or invalid (the message names it)", body = ErrorBody),
        (status = 500, description = "ffmpeg could not start or record the display", body = ErrorBody),
    ))]
pub async fn record(
    State(state): State<AppState>,
    AioJson(request): AioJson<DisplayRecordRequest>,
) -> Result<Json<Envelope<DisplayRecordResult>>, ApiError> {
    let recorder = &state.recorder;
    let (report, message) = match request.action {
        RecordAction::Start => {
            let limits = recorder.limits();
            let max = limits.max_duration.as_secs_f64();
            let ask = Request {
                fps: whole("fps", request.fps, 1, limits.max_fps)?,
                crf: whole("crf", request.crf, 0, 51)?,
                max_duration: validate::optional_seconds(
                    "max_duration",
                    request.max_duration,
                    SecondsRange::above(0.0, max),
                )?,
                width: whole("width", request.width, 2, u32::MAX)?,
                height: whole("height", request.height, 2, u32::MAX)?,
            };
            let options = recorder.options(&ask).map_err(record_error)?;
            let path = match request.save_path.as_deref() {
                Some(path) => {
                    validate::not_blank("save_path", path)?;
                    path.to_string()
                }
                None => default_path(&state),
            };
            let files = state.files.clone();
            let output = tokio::task::spawn_blocking(move || files.create_output(path.as_ref()))
                .await
                .map_err(|e| ApiError::internal(format!("opening the video file: {e}")))?
                .map_err(crate::api::files::file_error)?;
            let report = recorder
                .start(options, output.file, output.path)
                .await
                .map_err(record_error)?;
            (report, "Recording started")
        }
        RecordAction::Stop => (
            recorder.stop().await.map_err(record_error)?,
            "Recording stopped",
        ),
        RecordAction::Status => (recorder.status().await, "Recording status"),
    };
    let mut envelope = Envelope::ok(result(&report, recorder.limits().max_file_bytes));
    envelope.message = message.into();
    if let Some(Ending::Failed(why)) = &report.ending {
        envelope.message = format!("the recording failed: {why}");
    }
    Ok(Json(envelope))
}

/// `$SANDBOX_WORKSPACE/recordings/recording_<UTC time>.mp4`.
fn default_path(state: &AppState) -> String {
    recordings_path(state, "recording")
}

/// `$SANDBOX_WORKSPACE/recordings/<prefix>_<UTC time>.mp4` (also the page recording's default).
pub(crate) fn recordings_path(state: &AppState, prefix: &str) -> String {
    let stamp: String = agentbox_http::timestamp::rfc3339(SystemTime::now())
        .chars()
        .filter(|c| !matches!(c, '-' | ':'))
        .collect();
    state
        .settings
        .workspace
        .join("recordings")
        .join(format!("{prefix}_{stamp}.mp4"))
        .to_string_lossy()
        .into_owned()
}

/// An optional whole number field from `min` to `max` (AIO's SDK may send `15.0`).
pub(crate) fn whole(
    field: &str,
    value: Option<f64>,
    min: u32,
    max: u32,
) -> Result<Option<u32>, ApiError> {
    value
        .map(|v| {
            validate::whole_number(field, Some(v), 0, i64::from(min)..=i64::from(max))
                .map(|n| n as u32)
        })
        .transpose()
}

fn result(report: &Report, max_file_bytes: u64) -> DisplayRecordResult {
    let options = report.options;
    DisplayRecordResult {
        status: match report.status {
            Status::Idle => RecordStatus::Idle,
            Status::Recording => RecordStatus::Recording,
            Status::Stopped => RecordStatus::Stopped,
        },
        save_path: report
            .path
            .as_ref()
            .map(|p| p.to_string_lossy().into_owned()),
        duration: report.duration.map(|d| (d * 1000.0).round() / 1000.0),
        file_size_bytes: report.file_size_bytes,
        fps: options.map(|o| o.fps),
        width: options.map(|o| o.width),
        height: options.map(|o| o.height),
        max_duration: options.map(|o| o.max_duration.as_secs_f64()),
        max_file_size_bytes: Some(options.map_or(max_file_bytes, |o| o.max_file_bytes)),
        ended: report.ending.as_ref().map(|ending| match ending {
            Ending::Stopped => "stopped".into(),
            Ending::LimitReached => "limit_reached".into(),
            Ending::Killed => "killed".into(),
            Ending::Failed(why) => format!("failed: {why}"),
        }),
    }
}

fn record_error(error: RecordError) -> ApiError {
    let message = error.to_string();
    match error {
        RecordError::AlreadyRecording { .. } | RecordError::NotRecording => {
            ApiError::conflict(message)
        }
        RecordError::Invalid { field, message } => ApiError::invalid(field, message),
        RecordError::Spawn { .. } | RecordError::Failed { .. } => {
            ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, message)
        }
    }
}
