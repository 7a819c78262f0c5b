//! A2A (Agent2Agent), the protocol: one internal [`model`] that both wire versions (0.3 and 1.0)
//! are read into and written from ([`codec`]), inside JSON-RPC ([`rpc`]), and the [`client`]
//! that calls a remote A2A agent. The orchestrator's own A2A agent (tasks over runs, the card)
//! is `crate::a2a_server`; `runs::remote` drives a remote agent through the client.
//!
//! - [`model`]: messages, parts, tasks, updates and calls, whatever the version;
//! - [`rpc`]: the JSON-RPC envelope, the protocol version of a request, error codes;
//! - [`codec`]: the two wire versions, both ways (a server's requests in and answers out, a
//!   client's answers in);
//! - [`client`]: a remote A2A agent called over A2A 1.0 JSON-RPC (its card checked);
//! - [`reach`]: the addresses the client may connect to (public ones, and ranges allowed).
//!
//! **Invariant:** this module knows nothing of runs, nor of the HTTP server (`api::a2a`
//! serves the protocol; the client makes its own HTTP requests, through `reqwest`).

pub mod client;
pub mod codec;
pub mod model;
pub mod reach;
pub mod rpc;
