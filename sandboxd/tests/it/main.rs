//! sandboxd's integration tests, one test binary (one link of the dependency tree, not one per
//! file). Each file is a module, so a test's name starts with its file's (`shell::...`,
//! `vnc::...`): `cargo nextest run -p sandboxd -E 'test(/^shell::/)'`. Everything here runs on
//! the host without Docker; `vnc` needs Xvfb and x11vnc (the fast lane leaves it out).

mod browser_router;
mod code;
mod confine_property;
mod file_api;
mod file_watch;
mod keep_alive;
mod mcp;
mod openapi_document;
mod router;
mod shell;
mod vnc;
