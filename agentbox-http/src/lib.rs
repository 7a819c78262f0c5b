//! HTTP plumbing shared by sandboxd and the orchestrator, so each piece is written once.
//!
//! # Layout
//! - [`ws`]: WebSocket upgrades (limits, subprotocols) and the relay that joins a client's
//!   socket to an upstream one, with an optional byte filter and a stop signal.
//! - [`origin`]: the `Origin` check for browser-reachable endpoints (WebSockets above all,
//!   which browsers open cross-origin without asking anyone).
//!
//! **Invariant:** this crate knows HTTP and WebSockets but nothing of sandboxes, keys or the
//! routes of either server.

pub mod origin;
pub mod ws;
