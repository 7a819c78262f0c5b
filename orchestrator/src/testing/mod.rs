//! Fakes behind the lifecycle's seams, for unit tests that run in milliseconds without Docker
//! (compiled only with `cfg(test)`, never into the binary):
//!
//! - [`platform::FakePlatform`] is both the [`Backend`](crate::backend::Backend) and the
//!   [`SandboxProbe`](crate::sandboxes::sandboxd::SandboxProbe): it records containers, answers
//!   for each container's sandboxd, and lets a test make a step fail, hold a step open until
//!   released (to force an interleaving), kill a container or make it vanish;
//! - [`clock::ManualClock`] is a [`Clock`](crate::clock::Clock) that only moves when told to
//!   (or when the lifecycle sleeps on it);
//! - [`computer::FakeSandbox`] is a sandbox's desktop and files behind the runs' seam: the
//!   [`Computer`](agent::Computer) a run's loop drives and the files its sink copies, handed out
//!   by [`computer::FakeConnector`] (which can hold a connection, as the sandbox can an action);
//! - [`harness::Harness`] builds the real [`Sandboxes`](crate::sandboxes::Sandboxes) over the
//!   fakes and a real SQLite database in a temporary directory, and checks the "nothing leaks"
//!   invariant.
//!
//! The database is never faked: every test runs the real SQL.

pub(crate) mod clock;
pub(crate) mod computer;
pub(crate) mod harness;
pub(crate) mod platform;

pub(crate) use clock::ManualClock;
pub(crate) use computer::{FakeConnector, FakeSandbox};
pub(crate) use harness::{Harness, eventually};
pub(crate) use platform::{FakePlatform, Step};
