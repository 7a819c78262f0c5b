//! A2A (Agent2Agent): the orchestrator as an A2A agent. Every run is a task; a message makes a
//! run or answers its question; streams follow the run's log. Both wire versions (0.3 and
//! 1.0) are read into one [`model`] and written back from it ([`codec`]), inside JSON-RPC
//! ([`rpc`]).
//!
//! - [`model`]: messages, parts, tasks, updates and calls, whatever the version;
//! - [`rpc`]: the JSON-RPC envelope, the protocol version of a request, error codes;
//! - [`codec`]: the two wire versions;
//! - [`project`]: a run's events as the task's status, history and stream updates;
//! - [`tasks`]: the task operations over the runs service, scoped to the calling key;
//! - [`card`]: the Agent Card.
//!
//! **Invariant:** this module knows nothing of HTTP; `api::a2a` serves it.

pub mod card;
pub mod codec;
pub mod model;
pub mod project;
pub mod rpc;
pub mod tasks;
