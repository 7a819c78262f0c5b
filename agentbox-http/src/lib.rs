//! HTTP plumbing shared by sandboxd and the orchestrator, so each piece is written once.
//!
//! # Layout
//! - [`request_id`]: request ids, the request span and its completion log line.
//! - [`logging`]: the `tracing` subscriber and [`logging::LogFormat`].
//! - [`body`]: JSON bodies and query strings into typed values, errors naming the field.
//! - [`cookie`]: a cookie's value from the request's `Cookie` headers.
//! - [`fallback`]: the 404 and 405 answers for requests no route takes.
//! - [`openapi`]: finishing a generated OpenAPI document (security requirements).
//! - [`ws`]: WebSocket upgrades (limits, subprotocols) and the relay that joins a client's
//!   socket to an upstream one, with an optional byte filter and a stop signal.
//! - [`origin`]: the `Origin` check for browser-reachable endpoints (WebSockets above all,
//!   which browsers open cross-origin without asking anyone).
//! - [`timestamp`]: instants on the wire, RFC 3339 in UTC with milliseconds.
//! - [`unread_body`]: the layer that drains a request body the handler left unread, or
//!   announces `Connection: close`, so a refusal does not break a client's pooled connection.
//! - [`signals`]: SIGTERM and SIGINT, listened for from a server's first moment (a PID 1
//!   drops a signal it does not handle), and start-up steps that a stop cancels.
//! - [`plumbing`]: the fallbacks, request ids and unread-body layer around a server's routes,
//!   in one order for both servers.
//!
//! **Invariant:** this crate knows HTTP, WebSockets and a server process's signals but nothing
//! of sandboxes, keys or the routes of either server.

pub mod body;
pub mod cookie;
pub mod fallback;
pub mod logging;
pub mod openapi;
pub mod origin;
pub mod plumbing;
pub mod request_id;
pub mod signals;
pub mod timestamp;
pub mod unread_body;
pub mod ws;
