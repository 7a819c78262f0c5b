//! Being PID 1: reap every child (orphans included), and keep the process's memory to itself.

use supervisor::ReapScope;

/// Makes sandboxd non-dumpable: its `/proc/<pid>` files (environment, memory) become root-only
/// and other processes of the same user cannot ptrace it. Agents' commands run as the same user
/// as sandboxd, so this is what keeps them from reading its API key out of `/proc/1/environ`.
pub fn protect_own_memory() {
    if let Err(error) = nix::sys::prctl::set_dumpable(false) {
        tracing::warn!(%error, "cannot mark sandboxd non-dumpable");
    }
}

/// Chooses what the reaper waits for. As PID 1 every orphan in the container is re-parented to
/// us; anywhere else we become a child subreaper so orphans of our programs still come to us.
pub fn init_reaping() {
    let pid = std::process::id();
    let scope = if pid == 1 {
        ReapScope::AllChildren
    } else {
        match nix::sys::prctl::set_child_subreaper(true) {
            Ok(()) => ReapScope::AllChildren,
            Err(error) => {
                tracing::warn!(%error, "cannot become a child subreaper; reaping own children only");
                ReapScope::OwnChildren
            }
        }
    };
    supervisor::reaper::set_scope(scope);
    // Start the reaper thread now, before any child exists.
    let _ = supervisor::reaper();
    tracing::info!(pid, ?scope, "reaper started");
}
