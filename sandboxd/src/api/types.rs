//! Every type that crosses sandboxd's HTTP boundary. They are defined once, in the
//! `sandbox-client` crate, so that sandboxd and its clients share them; this module re-exports
//! them for the handlers.

pub use sandbox_client::types::*;
