//! The agent library's integration tests, one test binary; each file is a module. Model providers
//! are test servers speaking their real wire protocols (`common::provider`); `sandboxd::...`
//! drives a real sandboxd router on a loopback port.

mod anthropic;
mod chat;
mod common;
mod gateway;
mod openai;
mod runner;
mod sandboxd;
mod streams;
