//! sandbox-client: the wire types of sandboxd's HTTP API, defined once for the server and its
//! clients, and [`SandboxClient`], a typed async client for that API.
//!
//! sandboxd serves these types (its `api::types` re-exports them, and its OpenAPI document is
//! generated from them); the orchestrator and the agent read and send the same types through
//! the client, so a field renamed on one side is a compile error on the other.
//!
//! # Layout
//! - [`types`]: every type on sandboxd's wire, one module per resource, in AIO Sandbox's shapes.
//! - [`client`]: [`SandboxClient`] (base URL, key, timeouts, pooled connections) and one module
//!   per resource it calls: health, desktop, shell, files, browser.
//! - [`error`]: [`ClientError`], what a call can fail with.
//!
//! **Invariant:** nothing here depends on a server framework (axum, hyper's server side); the
//! types know serde, utoipa (for the OpenAPI document) and schemars (for MCP tool schemas) only.

pub mod client;
pub mod error;
pub mod types;

pub use client::{ClientConfig, SandboxClient, Screenshot};
pub use error::ClientError;
pub use types::ScreenshotInfo;
