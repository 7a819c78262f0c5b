//! Reverse proxies to the services inside a sandbox: plain HTTP with streaming bodies
//! ([`http`]), WebSocket relays ([`ws`]), and the RFB input filter for view-only VNC sessions
//! ([`rfb`]). The API layer decides who may use them; this module only moves bytes.

pub mod http;
pub mod rfb;
pub mod ws;
