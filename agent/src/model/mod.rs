//! Model adapters behind one [`Model`] trait, picked by the model string ([`ModelSpec`]):
//!
//! - [`anthropic`]: `anthropic:<model>`, the Messages API (streamed) with the native computer,
//!   bash and text-editor tools.
//! - [`openai`]: `openai:<model>`, the Responses API (streamed) with the computer tool.
//! - [`chat`]: `openai-chat:<model>`, any OpenAI-compatible Chat Completions server with
//!   function tools and image inputs.
//! - [`script`]: `script:<path>`, a JSON list of steps replayed without a model.
//!
//! An adapter renders the provider-neutral transcript into its wire format, calls the provider
//! through the [`crate::gateway`], and turns the answer into a [`ModelTurn`]: visible text,
//! readable reasoning, and tool calls decoded into [`ToolRequest`]s the loop can run. The raw
//! answer is kept for the next turn.

pub mod anthropic;
pub mod chat;
pub mod openai;
pub mod script;
pub mod spec;
mod tools;

use std::collections::HashMap;

use async_trait::async_trait;
use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::action::DesktopAction;
use crate::computer::EditCommand;
use crate::gateway::GatewayError;
use crate::transcript::{Item, SafetyCheck};

pub use spec::{ModelOptions, ModelSpec, SetupError, SpecError, build_model};

/// A model the loop can ask for its next turn.
#[async_trait]
pub trait Model: Send + Sync {
    fn info(&self) -> &ModelInfo;
    async fn next_turn(&self, request: TurnRequest) -> Result<ModelTurn, ModelError>;
}

/// What the loop needs to know about a model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelInfo {
    /// `anthropic`, `openai`, `openai-chat`, `script`.
    pub provider: &'static str,
    pub model: String,
    /// The box screenshots are downscaled to fit (keeping the aspect ratio), as the provider
    /// recommends; `None` for the full screen.
    pub observation_bounds: Option<(u32, u32)>,
}

/// Everything a model needs for one turn. Owned, so a call can outlive a pause of the loop.
#[derive(Debug, Clone)]
pub struct TurnRequest {
    pub system: String,
    pub items: Vec<Item>,
    /// Bytes of the images the items refer to (by observation id). A missing one is rendered
    /// as dropped.
    pub images: HashMap<String, Bytes>,
    /// The size of the latest observation image: the coordinate space of the model's actions.
    pub display: (u32, u32),
    /// The step number (1 for the first model call).
    pub step: u32,
}

/// One answer of the model.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelTurn {
    /// Visible text.
    pub text: Option<String>,
    /// Readable reasoning (thinking text, reasoning summaries), for events only.
    pub reasoning: Vec<String>,
    pub calls: Vec<ToolCall>,
    pub usage: Usage,
    pub stop: StopReason,
    /// The answer as the provider sent it, to be sent back unchanged.
    pub raw: Vec<serde_json::Value>,
    /// HTTP attempts made for this turn.
    pub attempts: u32,
}

/// Why the model stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// It finished its turn (a final answer when there is no tool call).
    EndTurn,
    /// It wants tools run.
    ToolUse,
    /// It hit the output limit.
    MaxTokens,
    Other(String),
}

/// One tool call of a turn.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// The provider's id, to be paired with exactly one result.
    pub id: String,
    /// How it came in (see [`crate::transcript::ToolResult::channel`]).
    pub channel: String,
    pub request: ToolRequest,
    /// Safety checks that must be acknowledged by the person before it runs.
    pub safety_checks: Vec<SafetyCheck>,
}

/// What a tool call asks for, decoded from the provider's vocabulary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ToolRequest {
    /// Desktop actions in order, planned on the latest observation.
    Desktop {
        actions: Vec<DesktopAction>,
    },
    /// Just a new screenshot.
    Screenshot,
    /// An image of a region of the latest observation (x0, y0, x1, y1 in its pixels).
    Zoom {
        region: [f64; 4],
    },
    Shell {
        command: String,
        #[serde(default)]
        restart: bool,
        /// Seconds to wait for the answer (the command keeps running after); the loop's
        /// default when `None`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timeout_s: Option<f64>,
    },
    Edit {
        command: EditCommand,
    },
    /// Write a file (script steps only).
    WriteFile {
        path: String,
        #[serde(skip)]
        content: Vec<u8>,
        #[serde(default)]
        size: usize,
    },
    /// Ask the person a question and wait for the answer.
    RequestHuman {
        question: String,
    },
    /// End the run with this answer (script steps only; models end by not calling a tool).
    Finish {
        answer: String,
    },
    /// A call that cannot be run (unknown tool, bad arguments); answered with this error.
    Invalid {
        tool: String,
        message: String,
    },
}

impl ToolRequest {
    /// A short name for logs and events.
    pub fn kind(&self) -> &'static str {
        match self {
            ToolRequest::Desktop { .. } => "desktop",
            ToolRequest::Screenshot => "screenshot",
            ToolRequest::Zoom { .. } => "zoom",
            ToolRequest::Shell { .. } => "shell",
            ToolRequest::Edit { .. } => "edit",
            ToolRequest::WriteFile { .. } => "write_file",
            ToolRequest::RequestHuman { .. } => "request_human",
            ToolRequest::Finish { .. } => "finish",
            ToolRequest::Invalid { .. } => "invalid",
        }
    }
}

/// Tokens used by one model call (or summed over a run).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    #[serde(default)]
    pub cache_read_input_tokens: u64,
    #[serde(default)]
    pub cache_creation_input_tokens: u64,
    #[serde(default)]
    pub reasoning_tokens: u64,
}

impl Usage {
    pub fn add(&mut self, other: &Usage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.cache_read_input_tokens += other.cache_read_input_tokens;
        self.cache_creation_input_tokens += other.cache_creation_input_tokens;
        self.reasoning_tokens += other.reasoning_tokens;
    }
}

/// A failed turn.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ModelError {
    #[error(transparent)]
    Gateway(#[from] GatewayError),
    /// The script cannot go on (a step failed, or its file changed).
    #[error("{0}")]
    Script(String),
}
