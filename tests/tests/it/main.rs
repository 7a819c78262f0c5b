//! End-to-end tests against the real image in real Docker (`browser_api`, `file_api_image`,
//! `sandbox_image`) and the checks of the tree itself (`tidy`, `scripts`), one test binary; each
//! file is a module, so `cargo nextest run -p agentbox-tests -E 'test(/^tidy::/)'` runs tidy.

mod browser_api;
mod file_api_image;
mod sandbox_image;
mod scripts;
mod tidy;
