//! The orchestrator as an A2A agent: every run is a task; a message makes a run or answers its
//! question; streams follow the run's log. Speaks the protocol of [`crate::a2a`].
//!
//! - [`project`]: a run's events as the task's status, history and stream updates;
//! - [`tasks`]: the task operations over the runs service, scoped to the calling key;
//! - [`card`]: the Agent Card.
//!
//! **Invariant:** this module knows nothing of HTTP; `api::a2a` serves it.

pub mod card;
pub mod project;
pub mod tasks;
