//! The `sandboxd` binary: read settings, set up logging and the reaper, run.

use std::process::ExitCode;

fn main() -> ExitCode {
    let settings = match sandboxd::config::Settings::from_env() {
        Ok(settings) => settings,
        Err(error) => {
            eprintln!("sandboxd: {error}");
            return ExitCode::from(2);
        }
    };
    // Root only long enough to read the key: from here on the agent's user, with no way back.
    if let Some(user) = &settings.run_as
        && let Err(error) = sandboxd::privileges::become_user(user)
    {
        eprintln!("sandboxd: {error}");
        return ExitCode::from(2);
    }
    // SAFETY: no other thread exists yet (the runtime and the reaper start below), so changing the
    // environment cannot race with a reader. Secrets must not be inherited by supervised programs.
    #[allow(unsafe_code)]
    unsafe {
        sandboxd::config::scrub_secrets_from_env()
    };
    // Then the runtime, and the signal handlers in it before anything else: as PID 1, a SIGTERM
    // that arrives before sandboxd handles it is dropped by the kernel, and `docker stop` then
    // waits out its stop-wait and kills. Everything before this point takes microseconds.
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(16)
        .thread_stack_size(sandboxd::WORKER_STACK_BYTES)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("sandboxd: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let signals = {
        let _entered = runtime.enter();
        match agentbox_http::signals::TerminationSignals::install() {
            Ok(signals) => signals,
            Err(error) => {
                eprintln!("sandboxd: cannot listen for termination signals: {error}");
                return ExitCode::FAILURE;
            }
        }
    };
    // chromiumoxide warns on every protocol message it does not know: errors only.
    agentbox_http::logging::init(settings.log_format, "info,chromiumoxide=error");
    sandboxd::pid1::protect_own_memory();
    sandboxd::pid1::init_reaping();

    let result = runtime.block_on(sandboxd::run(settings, signals));
    // Every program is stopped and the API drained by now; what may still run is a blocking
    // task a stop abandoned (the API's construction): not waited for past a moment.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!(error = format!("{error:#}"), "sandboxd failed");
            ExitCode::FAILURE
        }
    }
}
