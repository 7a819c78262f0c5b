//! [`Checkpoint`]: the state a run resumes from after its process died.
//!
//! The loop hands one to the sink after every completed step and before every tool call. It
//! holds the conversation (the model's raw turns, reasoning and signatures included; images by
//! reference only), the step counter, the results of the current step so far, the calls still
//! unanswered, and the call in flight. [`crate::Runner::resume`] answers the in-flight call with
//! "outcome unknown" (it is never run again), the other unanswered calls with "not executed",
//! takes a fresh screenshot and goes on.

use serde::{Deserialize, Serialize};

use crate::model::{ToolRequest, Usage};
use crate::observation::ObservationMeta;
use crate::transcript::{Item, ToolResult};

/// The checkpoint format version.
pub const CHECKPOINT_VERSION: u32 = 1;

/// A call whose result is not in the conversation yet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingCall {
    pub id: String,
    pub channel: String,
    pub request: ToolRequest,
}

/// Resumable state of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Checkpoint {
    pub version: u32,
    /// The model string (`provider:model`) the conversation belongs to.
    pub model: String,
    /// Model calls made so far.
    pub step: u32,
    pub transcript: Vec<Item>,
    /// Results of the current step's calls that have finished.
    #[serde(default)]
    pub partial_results: Vec<ToolResult>,
    /// Calls of the current step without a result, in order.
    #[serde(default)]
    pub pending_calls: Vec<PendingCall>,
    /// The id of the call being performed (the first pending one), if one was started.
    #[serde(default)]
    pub in_flight: Option<String>,
    /// The latest observation the model was shown.
    #[serde(default)]
    pub latest_observation: Option<ObservationMeta>,
    pub usage: Usage,
    /// Time the agent has driven (pauses and waits for input not counted).
    pub active_ms: u64,
    /// Images dropped from the conversation so far.
    pub images_dropped: u64,
}
