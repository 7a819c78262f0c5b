//! Code execution against real runtimes on the host: IPython kernels (Debian's
//! python3-ipykernel) through `sandboxd::jupyter`, and Node through `sandboxd::nodejs`.

use std::path::PathBuf;
use std::time::Duration;

use sandboxd::jupyter::{
    ExecuteRequest, ExecutionStatus, Jupyter, JupyterConfig, JupyterError, OutputLimits,
};
use sandboxd::nodejs::{NodeConfig, NodeSessions, RunRequest};

fn jupyter(dir: &tempfile::TempDir, max_sessions: usize, max_bytes: usize) -> Jupyter {
    Jupyter::new(JupyterConfig {
        python: PathBuf::from("/usr/bin/python3"),
        runtime_dir: dir.path().join("run"),
        workspace: dir.path().to_path_buf(),
        run_as: None,
        max_sessions,
        idle_expiry: Duration::from_secs(60),
        output: OutputLimits { max_bytes },
    })
}

fn request(code: &str, session: Option<&str>, timeout_secs: u64) -> ExecuteRequest {
    ExecuteRequest {
        code: code.to_string(),
        session_id: session.map(str::to_string),
        kernel_name: None,
        cwd: None,
        timeout: Duration::from_secs(timeout_secs),
    }
}

fn alive(pid: i32) -> bool {
    // Signal 0 checks existence; a zombie of ours counts as gone (the reaper collects it).
    let status = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    !status.is_empty() && !status.contains(") Z ")
}

#[tokio::test]
async fn a_kernel_keeps_state_reports_errors_and_bounds_output() {
    let dir = tempfile::tempdir().unwrap();
    let jupyter = jupyter(&dir, 4, 64 * 1024);
    let first = jupyter.execute(request("x = 41", None, 60)).await.unwrap();
    assert_eq!(first.session_id, "default");
    assert_eq!(first.execution.status, ExecutionStatus::Ok);
    let second = jupyter
        .execute(request("print('hi')\nx + 1", None, 30))
        .await
        .unwrap()
        .execution;
    assert_eq!(second.outputs[0].text.as_deref(), Some("hi\n"));
    assert_eq!(second.outputs[1].output_type, "execute_result");
    assert_eq!(second.outputs[1].data.as_ref().unwrap()["text/plain"], "42");

    let failed = jupyter
        .execute(request("raise ValueError('bad')", None, 30))
        .await
        .unwrap()
        .execution;
    assert_eq!(failed.status, ExecutionStatus::Error);
    let error = failed.outputs.last().unwrap();
    assert_eq!(error.ename.as_deref(), Some("ValueError"));
    assert_eq!(error.evalue.as_deref(), Some("bad"));

    // 1 MB of output against a 64 KiB bound: cut, and said so.
    let big = jupyter
        .execute(request("print('y' * 1_000_000)", None, 30))
        .await
        .unwrap()
        .execution;
    let total: usize = big
        .outputs
        .iter()
        .filter_map(|o| o.text.as_ref())
        .map(String::len)
        .sum();
    assert!(total <= 64 * 1024 + 200, "{total} bytes kept");
    let shapes: Vec<_> = big
        .outputs
        .iter()
        .map(|o| {
            (
                o.output_type,
                o.name.clone(),
                o.text.as_ref().map(String::len),
            )
        })
        .collect();
    assert!(
        big.outputs
            .iter()
            .any(|o| o.text.as_deref().is_some_and(|t| t.contains("truncated"))),
        "{shapes:?} {:?}",
        big.status
    );
    jupyter.delete_all().await;
}

/// ipykernel aborts requests that arrive while it is still aborting after an error (its
/// `stop_on_error`); one that came right after an error was answered `aborted`, empty.
#[tokio::test]
async fn the_request_after_an_error_runs() {
    let dir = tempfile::tempdir().unwrap();
    let jupyter = jupyter(&dir, 1, 1 << 20);
    for round in 0..50 {
        let failed = jupyter
            .execute(request("raise ValueError('no')", Some("e"), 60))
            .await
            .unwrap()
            .execution;
        assert_eq!(
            failed.status,
            ExecutionStatus::Error,
            "round {round}: {failed:?}"
        );
        let next = jupyter
            .execute(request("41 + 1", Some("e"), 60))
            .await
            .unwrap()
            .execution;
        assert_eq!(next.status, ExecutionStatus::Ok, "round {round}: {next:?}");
        assert_eq!(
            next.outputs[0].data.as_ref().unwrap()["text/plain"],
            "42",
            "round {round}"
        );
    }
    jupyter.delete_all().await;
}

#[tokio::test]
async fn timeouts_interrupt_deaths_restart_and_deletes_kill_the_group() {
    let dir = tempfile::tempdir().unwrap();
    let jupyter = jupyter(&dir, 2, 1 << 20);
    jupyter
        .execute(request("kept = 1", Some("s"), 60))
        .await
        .unwrap();
    let slow = jupyter
        .execute(request("import time; time.sleep(30)", Some("s"), 1))
        .await
        .unwrap()
        .execution;
    assert_eq!(slow.status, ExecutionStatus::Timeout);
    assert!(
        slow.outputs
            .iter()
            .any(|o| o.ename.as_deref() == Some("KeyboardInterrupt"))
    );
    let kept = jupyter
        .execute(request("kept", Some("s"), 30))
        .await
        .unwrap()
        .execution;
    assert_eq!(kept.status, ExecutionStatus::Ok, "{kept:?}");
    assert_eq!(
        kept.outputs[0].data.as_ref().unwrap()["text/plain"],
        "1",
        "state survives an interrupt"
    );

    // A kernel that exits is reported once and replaced by a fresh one.
    let died = jupyter
        .execute(request("import os; os._exit(3)", Some("s"), 30))
        .await
        .unwrap()
        .execution;
    assert_eq!(died.status, ExecutionStatus::Error);
    assert_eq!(died.outputs[0].ename.as_deref(), Some("KernelDied"));
    let fresh = jupyter
        .execute(request("'kept' in globals()", Some("s"), 60))
        .await
        .unwrap()
        .execution;
    assert_eq!(
        fresh.outputs[0].data.as_ref().unwrap()["text/plain"],
        "False"
    );

    // Code that ignores the interrupt: the kernel is killed and the session's state is lost.
    let stuck = jupyter
        .execute(request(
            "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(60)",
            Some("s"),
            1,
        ))
        .await
        .unwrap()
        .execution;
    assert_eq!(stuck.status, ExecutionStatus::Timeout);
    assert_eq!(stuck.outputs[0].ename.as_deref(), Some("KernelRestarted"));

    // A child process of the code goes with its session.
    let child = jupyter
        .execute(request(
            "import subprocess; p = subprocess.Popen(['sleep', '300']); p.pid",
            Some("s"),
            60,
        ))
        .await
        .unwrap()
        .execution;
    let pid: i32 = child.outputs[0].data.as_ref().unwrap()["text/plain"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(alive(pid));
    jupyter
        .create(Some("other".into()), None, None)
        .await
        .unwrap();
    assert!(matches!(
        jupyter.create(Some("third".into()), None, None).await,
        Err(JupyterError::TooManySessions(2))
    ));
    jupyter.delete("s").await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while alive(pid) && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!alive(pid), "the kernel's child {pid} outlived its session");
    assert!(matches!(
        jupyter.delete("s").await,
        Err(JupyterError::NoSession(_))
    ));
    assert!(matches!(
        jupyter
            .execute(ExecuteRequest {
                kernel_name: Some("ruby".into()),
                ..request("1", None, 5)
            })
            .await,
        Err(JupyterError::UnknownKernel { .. })
    ));
    jupyter.delete_all().await;
}

fn node_config(dir: &tempfile::TempDir) -> NodeConfig {
    NodeConfig {
        node: PathBuf::from("/usr/bin/node"),
        runtime_dir: dir.path().join("node"),
        workspace: dir.path().to_path_buf(),
        run_as: None,
        output_limit: 64 * 1024,
        max_sessions: 4,
        default_idle: Duration::from_secs(60),
    }
}

#[tokio::test]
async fn node_runs_are_fresh_bounded_and_killed_as_a_group() {
    let dir = tempfile::tempdir().unwrap();
    let config = node_config(&dir);
    let ok = sandboxd::nodejs::run(
        &config,
        RunRequest {
            code: "const fs = require('fs'); console.log(fs.readFileSync('a.txt', 'utf8') + fs.readFileSync(0, 'utf8'))".into(),
            stdin: Some("in".into()),
            files: [("a.txt".to_string(), "file+".to_string())].into(),
            cwd: None,
            timeout: Duration::from_secs(30),
        },
    )
    .await
    .unwrap();
    assert_eq!(
        (ok.status, ok.stdout.as_str(), ok.exit_code),
        ("ok", "file+in\n", 0)
    );

    let big = sandboxd::nodejs::run(
        &config,
        RunRequest {
            code: "process.stdout.write('z'.repeat(1000000))".into(),
            stdin: None,
            files: Default::default(),
            cwd: None,
            timeout: Duration::from_secs(30),
        },
    )
    .await
    .unwrap();
    assert!(big.stdout.len() < 64 * 1024 + 100 && big.stdout.contains("truncated"));

    let pid_file = dir.path().join("child.pid");
    let slow = sandboxd::nodejs::run(
        &config,
        RunRequest {
            code: format!(
                "const c = require('child_process').spawn('sleep', ['300']); require('fs').writeFileSync({:?}, String(c.pid)); setInterval(() => {{}}, 1000)",
                pid_file.display().to_string()
            ),
            stdin: None,
            files: Default::default(),
            cwd: None,
            timeout: Duration::from_secs(2),
        },
    )
    .await
    .unwrap();
    assert_eq!(slow.status, "timeout");
    let pid: i32 = std::fs::read_to_string(&pid_file).unwrap().parse().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while alive(pid) && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!alive(pid), "the run's child {pid} outlived its timeout");
    // Each run's directory is removed afterwards.
    let left: Vec<_> = std::fs::read_dir(dir.path().join("node"))
        .unwrap()
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[tokio::test]
async fn node_sessions_keep_globals_and_lose_them_on_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let sessions = NodeSessions::new(node_config(&dir));
    let t = Duration::from_secs(20);
    sessions
        .execute("n", "var count = 1; const k = 'kept'", None, t)
        .await
        .unwrap();
    let r = sessions
        .execute("n", "count += 1; console.log(k, count); count", None, t)
        .await
        .unwrap();
    assert_eq!(r.status, "ok");
    assert_eq!(r.stdout, "kept 2\n");
    assert_eq!(
        r.outputs.last().unwrap().data.as_ref().unwrap()["text/plain"],
        "2"
    );
    let err = sessions
        .execute("n", "throw new RangeError('nope')", None, t)
        .await
        .unwrap();
    assert_eq!(err.status, "error");
    assert_eq!(
        err.outputs.last().unwrap().ename.as_deref(),
        Some("RangeError")
    );
    // A synchronous loop is stopped by V8 and the session lives on.
    let spin = sessions
        .execute("n", "while (true) {}", None, Duration::from_secs(1))
        .await
        .unwrap();
    assert_eq!(spin.status, "timeout");
    let after = sessions.execute("n", "count", None, t).await.unwrap();
    assert_eq!(
        after.outputs.last().unwrap().data.as_ref().unwrap()["text/plain"],
        "2"
    );
    // A promise that never settles times out too; the session still answers.
    let hang = sessions
        .execute(
            "n",
            "await new Promise(() => {})",
            None,
            Duration::from_secs(1),
        )
        .await
        .unwrap();
    assert_eq!(hang.status, "timeout");
    assert_eq!(sessions.list().len(), 1);
    sessions.delete("n").await.unwrap();
    assert!(sessions.get("n").is_none());
}
