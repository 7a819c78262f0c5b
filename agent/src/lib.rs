//! The computer-use agent: a model looks at one sandbox's desktop and acts on it until the task
//! is done, watched through events, interruptible by a person, restartable from checkpoints.
//! This crate is what a program embeds to drive one sandbox; it has no HTTP server and no
//! database (the orchestrator's `runs` module stores events and checkpoints and serves them).
//!
//! ```text
//!            ┌──────────── Control (take_over / hand_back / cancel / answer)
//!            ▼
//!   Runner (loop) ──TurnRequest──▶ Model (anthropic | openai | openai-chat | script)
//!     │   ▲                          └─ gateway: HTTP, SSE, retries, typed errors
//!     │   └──ModelTurn (text, reasoning, ToolCalls)
//!     ├──observe / act / settle / shell / files──▶ Computer (SandboxdComputer)
//!     └──events, screenshots, checkpoints────────▶ EventSink
//! ```
//!
//! # Layout
//! - [`runner`]: the loop ([`Runner`], [`RunConfig`], [`Limits`]); the rules it keeps are in
//!   its module documentation.
//! - [`control`]: [`Control`], the handle for takeover, hand-back, cancel and answers.
//! - [`event`]: [`Event`] (serde, tagged by `type`) and the [`EventSink`] trait.
//! - [`checkpoint`]: [`Checkpoint`], the state a run resumes from.
//! - [`computer`]: the [`Computer`] trait and [`SandboxdComputer`] over sandboxd's REST API.
//! - [`action`]: [`DesktopAction`], the closed desktop vocabulary (sandboxd's `action_type`s).
//! - [`observation`]: screenshots with ids and their image-to-screen transform.
//! - [`model`]: the [`Model`] trait, [`ModelSpec`] (the model string), the adapters
//!   ([`model::anthropic`], [`model::openai`], [`model::chat`], [`model::script`]).
//! - [`transcript`]: the provider-neutral conversation and image trimming.
//! - [`gateway`]: one streamed provider call: retries, back-off, timeouts, typed errors.
//! - [`sse`]: the Server-Sent Events decoder (any chunk split).
//! - [`tool_names`]: provider-safe tool names.
//! - [`secret`]: API keys that never print.

pub mod action;
pub mod checkpoint;
pub mod computer;
pub mod control;
pub mod event;
pub mod gateway;
pub mod model;
pub mod observation;
pub mod runner;
pub mod secret;
pub mod sse;
pub mod tool_names;
pub mod transcript;

pub use action::{Button, DesktopAction};
pub use checkpoint::Checkpoint;
pub use computer::{
    ActionReport, Computer, ComputerError, EditCommand, EditOutcome, SandboxdComputer,
    SettleReport, ShellOutcome,
};
pub use control::{Control, ControlError, InputSignal, Phase};
pub use event::{
    ActionOutcome, ErrorKind, EventSink, InputKind, RecordingSink, RunEvent, RunStatus, SinkError,
    Timings,
};
pub use model::{
    Model, ModelError, ModelInfo, ModelOptions, ModelSpec, ModelTurn, SetupError, SpecError,
    ToolCall, ToolRequest, TurnRequest, Usage, build_model,
};
pub use observation::{ImageFormat, Observation, ObservationMeta, ObserveRequest};
pub use runner::{
    ConfigError, Limits, RepeatPolicy, RunConfig, RunError, RunOutcome, Runner, SettlePolicy,
};
pub use secret::Secret;
