//! The desktop crate's integration tests against a real Xvfb, one test binary; each file is a
//! module (`capture::...`, `keyboard::...`, `pointer::...`).

mod capture;
mod common;
mod keyboard;
mod pointer;
