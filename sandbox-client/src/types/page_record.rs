//! Page screencast recording (`POST /v1/browser/page/record`): AIO's request and the recording's
//! state (AIO answers a free-form dict).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::names::name_enum;

name_enum! {
    /// What a page record call does: `once` (record `duration` seconds and answer the finished
    /// file), `start`, `pause`, `resume`, `stop` (the file is finished), or `status`.
    pub enum PageRecordAction, "action" {
        Once = "once",
        Start = "start",
        Pause = "pause",
        Resume = "resume",
        Stop = "stop",
        Status = "status",
    }
}

/// `POST /v1/browser/page/record`.
#[derive(Debug, Default, Deserialize, Serialize, ToSchema, schemars::JsonSchema)]
pub struct PageRecordRequest {
    /// Default `once`.
    pub action: Option<PageRecordAction>,
    /// The MP4 file to write (`once` and `start`; default
    /// `$SANDBOX_WORKSPACE/recordings/page_<UTC time>.mp4`), confined like every file API path;
    /// download it with `GET /v1/file/download`.
    pub save_path: Option<String>,
    /// Seconds: how long `once` records (default 5, at most 60), or after how long a started
    /// recording stops by itself (default 300, at most 1800).
    pub duration: Option<f64>,
    /// Frames per second, 1 to 30 (default 10).
    pub fps: Option<f64>,
    /// JPEG quality of the captured frames, 1 to 100 (default 80).
    pub quality: Option<f64>,
}

/// The page recording's state.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct PageRecordResult {
    /// `idle`, `recording`, `paused` or `stopped`.
    pub status: String,
    pub save_path: Option<String>,
    /// Seconds of video so far (or in all, once stopped).
    pub duration: Option<f64>,
    /// Frames written to the video.
    pub frames: u64,
    pub file_size_bytes: Option<u64>,
    pub fps: Option<u32>,
    pub quality: Option<u32>,
    /// After this many seconds the recording stops by itself.
    pub max_duration: Option<f64>,
    /// How it ended, once it has: `stopped`, `limit_reached` or `failed: <why>`.
    pub ended: Option<String>,
}
