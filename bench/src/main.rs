//! `agentbox-bench <harness> [--flag value ...]`: the benchmark harnesses, one binary (one link
//! of the orchestrator's dependency tree instead of one per harness). Each harness measures
//! Agentbox and its baseline side by side in one run; see each module's documentation for what
//! it measures and its flags, and `bench/RESULTS.md` for the figures.

mod harness;

use std::process::ExitCode;

/// (name on the command line, what it measures).
const HARNESSES: &[(&str, &str)] = &[
    (
        "startup",
        "docker run to ready, sandboxd against the unsupervised floor",
    ),
    (
        "capabilities",
        "the sandbox API against the tools agents use today",
    ),
    (
        "claims",
        "warm-pool claims by the thousand, step by step, beside a baseline binary",
    ),
    (
        "shell-exec",
        "shell exec: zygote-forked shells, shells from scratch, docker exec",
    ),
    (
        "code-exec",
        "Jupyter and Node execution against docker exec",
    ),
    (
        "file-watch",
        "the watch API against polling the directory listing",
    ),
    (
        "first-view",
        "a first viewer's picture against a later viewer's",
    ),
    ("memory", "idle memory of sandboxes, program by program"),
    (
        "orchestrator",
        "cold create, warm claim, proxy overhead, API under load",
    ),
    (
        "pause",
        "pause and resume through the orchestrator against docker pause/unpause",
    ),
    (
        "hibernate",
        "wake against a cold create, snapshots, forks, idle cost paused and hibernated",
    ),
    ("run-steps", "per-step overhead of a computer-use run"),
    (
        "a2a",
        "what A2A adds over the runs API: first working, per event, 200 streams",
    ),
    (
        "replicas",
        "one Postgres: 200 clients' control-plane load on one replica and on two",
    ),
    (
        "churn",
        "creates and deletes by the hundred over two replicas: each done once",
    ),
    (
        "cluster",
        "Swarm: cold-create throughput and claim latency on one node and on three",
    ),
];

fn main() -> ExitCode {
    let name = std::env::args().nth(1).unwrap_or_default();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("agentbox-bench: cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let outcome = runtime.block_on(async {
        match name.as_str() {
            "startup" => harness::startup::main().await,
            "capabilities" => harness::capabilities::main().await,
            "claims" => harness::claims::main().await,
            "churn" => harness::churn::main().await,
            "cluster" => harness::cluster::main().await,
            "shell-exec" => harness::shell_exec::main().await,
            "code-exec" => harness::code_exec::main().await,
            "file-watch" => harness::file_watch::main().await,
            "first-view" => harness::first_view::main().await,
            "memory" => harness::memory::main().await,
            "orchestrator" => harness::orchestrator::main().await,
            "pause" => harness::pause::main().await,
            "hibernate" => harness::hibernate::main().await,
            "run-steps" => harness::run_steps::main().await,
            "a2a" => harness::a2a::main().await,
            "replicas" => harness::replicas::main().await,
            _ => Err(anyhow::anyhow!("unknown harness {name:?}")),
        }
    });
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("agentbox-bench {name}: {error:?}");
            if !HARNESSES.iter().any(|(known, _)| *known == name) {
                eprintln!("\nusage: agentbox-bench <harness> [--flag value ...]; harnesses:");
                for (known, what) in HARNESSES {
                    eprintln!("  {known:<14} {what}");
                }
            }
            ExitCode::FAILURE
        }
    }
}
