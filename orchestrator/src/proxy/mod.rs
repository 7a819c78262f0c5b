//! Reverse proxying to sandboxd: plain HTTP with streaming bodies ([`http`]) and the RFB filter
//! for VNC sessions ([`rfb`]); WebSocket relays come from `agentbox_http::ws`. The API layer
//! decides who may use them; this module only moves and filters bytes.

pub mod http;
pub mod rfb;
