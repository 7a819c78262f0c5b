//! A general process supervisor. It knows nothing of X, browsers or HTTP: it runs programs
//! described by [`ProgramSpec`]s and looks after them.
//!
//! - Programs start in dependency order, each only once everything it `depends_on` is *ready*
//!   (its readiness probe passed). When a program stops being ready, the programs that depend on
//!   it are stopped and started again once it is ready again.
//! - A program that exits is restarted by its [`RestartPolicy`], with exponential back-off; too
//!   many failed starts in a row make it [`ProgramState::Fatal`].
//! - Stopping sends the stop signal to the program's whole process group and, after its
//!   stop-wait, `SIGKILL` to the group. [`Supervisor::shutdown`] stops dependents before their
//!   dependencies.
//! - Every child of the process is reaped by one [`reaper`], which in PID 1 mode also reaps
//!   re-parented orphans.
//! - Program output goes to size-rotated files and to `tracing`.
//!
//! # Layout
//! - [`spec`]: the TOML configuration, validation, variable expansion, dependency order.
//! - [`supervisor`]: the state machine task and the [`Supervisor`] handle.
//! - [`reaper`]: the process-wide child reaper; every spawn goes through it.
//! - [`process`]: building a program's command (identity, session) and [`process::ProcessGroup`],
//!   the one way to signal or kill a process group.
//! - [`probe`]: readiness probes.
//! - [`logs`]: rotating log files and output pumping.

pub mod logs;
pub mod probe;
pub mod process;
pub mod reaper;
pub mod spec;
pub mod supervisor;

pub use reaper::{ExitStatus, ReapScope, reaper};
pub use spec::{
    ConfigError, GlobalSettings, ProgramSpec, ReadinessProbe, RestartPolicy, SupervisorConfig,
};
pub use supervisor::{ProgramState, ProgramStatus, Supervisor, SupervisorError};
