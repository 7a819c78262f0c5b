//! agentbox-http's integration tests, one test binary; each file is a module (`relay::...`,
//! `unread_body::...`), all in-process with real sockets.

mod relay;
mod unread_body;
