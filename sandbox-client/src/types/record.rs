//! Screen recording (`POST /v1/display/record`): AIO's request and `DisplayRecordResult`, plus
//! the limits the recording runs under.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::names::name_enum;

name_enum! {
    /// What a record call does: `start` a recording, `stop` it (the file is finished and its
    /// size and duration reported), or report its `status`.
    pub enum RecordAction, "action" {
        Start = "start",
        Stop = "stop",
        Status = "status",
    }
}

name_enum! {
    /// Where the recorder is: `idle` (nothing recorded yet), `recording`, or `stopped` (the
    /// last recording ended; its file is complete).
    pub enum RecordStatus, "status" {
        Idle = "idle",
        Recording = "recording",
        Stopped = "stopped",
    }
}

/// `POST /v1/display/record`.
#[derive(Debug, Deserialize, Serialize, ToSchema, schemars::JsonSchema)]
pub struct DisplayRecordRequest {
    pub action: RecordAction,
    /// The MP4 file to write (start only; default
    /// `$SANDBOX_WORKSPACE/recordings/recording_<UTC time>.mp4`). Confined like every file API
    /// path; missing directories are created; an existing file is replaced. Download it with
    /// `GET /v1/file/download`.
    pub save_path: Option<String>,
    /// Frames per second (default 15, at most 60).
    pub fps: Option<f64>,
    /// H.264 quality: 0 (lossless) to 51 (worst); default 28.
    pub crf: Option<f64>,
    /// Seconds after which the recording stops by itself (default 600, at most 3600).
    pub max_duration: Option<f64>,
    /// The captured area's width from the screen's left edge: even, at most the screen's
    /// (default: the screen's).
    pub width: Option<f64>,
    /// The captured area's height from the screen's top edge: even, at most the screen's
    /// (default: the screen's).
    pub height: Option<f64>,
}

/// AIO's `DisplayRecordResult`, with the settings and limits of the recording.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct DisplayRecordResult {
    pub status: RecordStatus,
    /// The video file (absolute).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub save_path: Option<String>,
    /// Seconds of video recorded so far (or in all, once stopped).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration: Option<f64>,
    /// The file's size now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file_size_bytes: Option<u64>,
    /// Frames per second.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fps: Option<u32>,
    /// The captured area's size.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub width: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub height: Option<u32>,
    /// The recording stops by itself after this many seconds...
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_duration: Option<f64>,
    /// ... or when the file reaches this size.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_file_size_bytes: Option<u64>,
    /// How the recording ended (`stopped`, `limit_reached`, `killed`, `failed: <why>`), once
    /// it has.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ended: Option<String>,
}
