//! sandbox-client: the wire types of sandboxd's HTTP API, defined once for the server and its
//! clients.
//!
//! sandboxd serves these types (its `api::types` re-exports them, and its OpenAPI document is
//! generated from them).
//!
//! # Layout
//! - [`types`]: every type on sandboxd's wire, one module per resource, in AIO Sandbox's shapes.
//!
//! **Invariant:** nothing here depends on a server framework (axum, hyper's server side); the
//! types know serde, utoipa (for the OpenAPI document) and schemars (for MCP tool schemas) only.

pub mod types;
