//! Every type that crosses sandboxd's HTTP boundary, in one place: one file per resource.
//! sandboxd serves them and clients send and read them; each is defined here only.
//!
//! JSON routes answer in AIO Sandbox's envelope, `{success, message, data}`; clients written for
//! AIO parse these shapes unchanged. Request types ignore unknown fields (AIO's SDKs may send
//! extra ones) and accept `null` for every optional field. The OpenAPI document at
//! `/v1/openapi.json` is generated from these types and the route annotations.

pub mod activity;
pub mod bash;
pub mod browser;
pub mod browser_more;
pub mod browser_network;
pub mod captcha;
pub mod code;
pub mod common;
pub mod desktop;
pub mod file;
pub mod file_watch;
pub mod health;
pub mod home;
pub mod hooks;
pub mod mcp;
mod names;
pub mod page_record;
pub mod processes;
pub mod record;
pub mod sandbox;
pub mod shell;
pub mod skills;
pub mod tickets;
pub mod util;

pub use activity::*;
pub use bash::*;
pub use browser::*;
pub use browser_more::*;
pub use browser_network::*;
pub use captcha::*;
pub use code::*;
pub use common::*;
pub use desktop::*;
pub use file::*;
pub use file_watch::*;
pub use health::*;
pub use home::*;
pub use hooks::*;
pub use mcp::*;
pub use page_record::*;
pub use processes::*;
pub use record::*;
pub use sandbox::*;
pub use shell::*;
pub use skills::*;
pub use tickets::*;
pub use util::*;
