//! The sandbox client's integration tests, one test binary; each file is a module (`desktop::...`
//! needs Xvfb on the host, `sandboxd::...` a real sandboxd router on a loopback port).

mod common;
mod desktop;
mod openapi;
mod sandboxd;
