//! The supervisor with ordinary processes (`sh`, `sleep`): start order, restarts, back-off,
//! fatal, stops that kill whole process groups, shutdown order, identities and log rotation.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use supervisor::{
    ExitStatus, GlobalSettings, ProgramSpec, ProgramState, ProgramStatus, ReadinessProbe,
    RestartPolicy, Supervisor, SupervisorConfig,
};

const LONG: Duration = Duration::from_secs(30);

fn sh(name: &str, script: &str) -> ProgramSpec {
    let mut spec = ProgramSpec::new(name, "sh").args(["-c", script]);
    spec.backoff_initial_secs = 0.05;
    spec.backoff_max_secs = 0.2;
    spec.start_secs = 0.2;
    spec.stop_wait_secs = 2.0;
    spec
}

fn config(programs: Vec<ProgramSpec>) -> SupervisorConfig {
    SupervisorConfig {
        supervisor: GlobalSettings::default(),
        programs,
    }
}

fn find<'a>(snapshot: &'a [ProgramStatus], name: &str) -> &'a ProgramStatus {
    snapshot
        .iter()
        .find(|p| p.name == name)
        .expect("program in snapshot")
}

async fn until(
    sup: &Supervisor,
    what: &str,
    pred: impl FnMut(&[ProgramStatus]) -> bool,
) -> Arc<[ProgramStatus]> {
    match sup.wait_for(LONG, pred).await {
        Some(snapshot) => snapshot,
        None => panic!(
            "timed out waiting for {what}; last state: {:#?}",
            sup.status()
        ),
    }
}

fn all_ready(s: &[ProgramStatus]) -> bool {
    s.iter().all(|p| p.state == ProgramState::Ready)
}

fn group_alive(pgid: i32) -> bool {
    nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pgid), None).is_ok()
}

#[tokio::test]
async fn dependents_start_only_after_dependencies_are_ready() {
    let dir = tempfile::tempdir().unwrap();
    let flag = dir.path().join("a-ready");
    let flag_s = flag.display().to_string();
    let mut a = sh("a", &format!("sleep 0.3; touch {flag_s}; exec sleep 100"));
    a.ready = Some(ReadinessProbe::Exec(vec![
        "test".into(),
        "-e".into(),
        flag_s.clone(),
    ]));
    // b fails at once if it is started before a's flag exists.
    let mut b = sh("b", &format!("test -e {flag_s} || exit 9; exec sleep 100"));
    b.depends_on = vec!["a".into()];
    let sup = Supervisor::start(config(vec![b, a])).unwrap();

    let early = sup.status();
    assert_eq!(find(&early, "b").state, ProgramState::Stopped);
    assert_eq!(find(&early, "b").waiting_for, ["a"]);

    let snapshot = until(&sup, "both ready", all_ready).await;
    let b = find(&snapshot, "b");
    assert_eq!((b.failures, b.restarts, b.last_exit), (0, 0, None));
    sup.shutdown().await;
}

#[tokio::test]
async fn killing_a_dependency_restarts_it_and_then_its_dependents() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("a.sock");
    // `a` is ready when its unix socket accepts connections (python keeps it listening).
    let mut a = ProgramSpec::new("a", "python3").args([
        "-c",
        &format!(
            "import socket,os,time\ns=socket.socket(socket.AF_UNIX)\n\
             p={:?}\ntry: os.unlink(p)\nexcept OSError: pass\ns.bind(p); s.listen(8)\ntime.sleep(1000)",
            sock.display().to_string()
        ),
    ]);
    a.ready = Some(ReadinessProbe::UnixSocket(sock.clone()));
    a.start_secs = 0.2;
    let mut b = sh("b", "exec sleep 100");
    b.depends_on = vec!["a".into()];
    let mut c = sh("c", "exec sleep 100");
    c.depends_on = vec!["b".into()];
    let sup = Supervisor::start(config(vec![a, b, c])).unwrap();
    let before = until(&sup, "all ready", all_ready).await;
    let pid = |s: &[ProgramStatus], n| find(s, n).pid.unwrap();

    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid(&before, "a")),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();

    let after = until(&sup, "a, b and c restarted and ready", |s| {
        all_ready(s) && ["a", "b", "c"].iter().all(|n| find(s, n).restarts == 1)
    })
    .await;
    for name in ["a", "b", "c"] {
        assert_ne!(
            pid(&before, name),
            pid(&after, name),
            "{name} has a new process"
        );
    }
    assert_eq!(
        find(&after, "a").last_exit,
        Some(ExitStatus::Signal {
            signal: 9,
            core_dumped: false
        })
    );
    // b and c came back after a was ready again.
    assert!(find(&after, "b").started_at >= find(&after, "a").ready_at);
    assert!(find(&after, "c").started_at >= find(&after, "b").ready_at);
    sup.shutdown().await;
}

#[tokio::test]
async fn a_program_that_exits_at_once_backs_off_then_goes_fatal() {
    let mut bad = sh("bad", "exit 3");
    bad.start_retries = 2;
    let sup = Supervisor::start(config(vec![bad])).unwrap();
    let mut seen_backoff = false;
    let snapshot = until(&sup, "fatal", |s| {
        seen_backoff |= s[0].state == ProgramState::Backoff;
        s[0].state == ProgramState::Fatal
    })
    .await;
    assert!(seen_backoff, "went through back-off before fatal");
    let bad = &snapshot[0];
    assert_eq!(bad.failures, 3);
    assert_eq!(bad.restarts, 2);
    assert_eq!(bad.last_exit, Some(ExitStatus::Code(3)));
    assert!(bad.last_error.as_deref().unwrap().contains("exit code 3"));
    assert_eq!(sup.required_not_ready(), ["bad"]);

    // An explicit start clears the failures and tries again.
    sup.start_program("bad").await.unwrap();
    until(&sup, "failing again", |s| s[0].restarts > 2).await;
    sup.shutdown().await;
}

#[tokio::test]
async fn a_missing_executable_is_a_failed_start_with_a_clear_error() {
    let mut missing = ProgramSpec::new("missing", "/nonexistent/program");
    missing.start_retries = 1;
    missing.backoff_initial_secs = 0.01;
    let sup = Supervisor::start(config(vec![missing])).unwrap();
    let snapshot = until(&sup, "fatal", |s| s[0].state == ProgramState::Fatal).await;
    let error = snapshot[0].last_error.clone().unwrap();
    assert!(error.contains("/nonexistent/program"), "{error}");
}

#[tokio::test]
async fn restart_policies_never_and_on_failure_leave_clean_exits_alone() {
    let mut never = sh("never", "exit 1");
    never.restart = RestartPolicy::Never;
    let mut on_failure = sh("on-failure", "exit 0");
    on_failure.restart = RestartPolicy::OnFailure;
    let sup = Supervisor::start(config(vec![never, on_failure])).unwrap();
    let snapshot = until(&sup, "both exited", |s| {
        s.iter().all(|p| p.state == ProgramState::Exited)
    })
    .await;
    assert!(snapshot.iter().all(|p| p.restarts == 0));
}

#[tokio::test]
async fn a_probe_that_never_passes_counts_as_a_failed_start() {
    let mut slow = sh("slow", "exec sleep 100");
    slow.ready = Some(ReadinessProbe::Tcp("127.0.0.1:1".into()));
    slow.ready_timeout_secs = 0.2;
    slow.start_retries = 1;
    let sup = Supervisor::start(config(vec![slow])).unwrap();
    let snapshot = until(&sup, "fatal", |s| s[0].state == ProgramState::Fatal).await;
    let error = snapshot[0].last_error.clone().unwrap();
    assert!(error.contains("not ready after"), "{error}");
    assert_eq!(snapshot[0].pid, None);
}

#[tokio::test]
async fn stop_kills_the_whole_group_after_stop_wait() {
    // The shell and its children ignore SIGTERM, so only the SIGKILL after stop_wait ends them.
    let mut stubborn = sh("stubborn", "trap '' TERM; sleep 100 & sleep 100 & wait");
    stubborn.start_secs = 0.1;
    stubborn.stop_wait_secs = 0.3;
    let sup = Supervisor::start(config(vec![stubborn])).unwrap();
    let ready = until(&sup, "ready", all_ready).await;
    let pgid = ready[0].pid.unwrap();
    assert!(group_alive(pgid));

    let started = std::time::Instant::now();
    sup.stop_program("stubborn").await.unwrap();
    let stopped = until(&sup, "stopped", |s| s[0].state == ProgramState::Stopped).await;
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "waited for stop_wait"
    );
    assert_eq!(
        stopped[0].last_exit,
        Some(ExitStatus::Signal {
            signal: 9,
            core_dumped: false
        })
    );
    // The sleeps in its group are gone too (give init a moment to reap them).
    let deadline = std::time::Instant::now() + LONG;
    while group_alive(pgid) && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!group_alive(pgid), "process group {pgid} still has members");
    // A stopped program stays stopped.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(sup.status()[0].state, ProgramState::Stopped);
}

#[tokio::test]
async fn a_stop_by_the_caller_sends_no_signal_and_stays_stopped_when_the_program_exits() {
    // The program writes a file when SIGTERM reaches it; the caller ends it with SIGUSR1.
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("got-term");
    let mut graceful = sh(
        "graceful",
        &format!(
            "trap 'touch {}; exit 0' TERM; trap 'exit 0' USR1; while :; do sleep 0.05; done",
            marker.display()
        ),
    );
    graceful.start_secs = 0.1;
    graceful.stop_wait_secs = 5.0;
    let sup = Supervisor::start(config(vec![graceful])).unwrap();
    let ready = until(&sup, "ready", all_ready).await;
    let pid = ready[0].pid.unwrap();

    sup.stop_program_by_caller("graceful").await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        sup.status()[0].state,
        ProgramState::Stopping,
        "still running"
    );
    assert!(!marker.exists(), "no stop signal was sent");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGUSR1,
    )
    .unwrap();
    let stopped = until(&sup, "stopped", |s| s[0].state == ProgramState::Stopped).await;
    assert_eq!(stopped[0].last_exit, Some(ExitStatus::Code(0)));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        sup.status()[0].state,
        ProgramState::Stopped,
        "not restarted"
    );
    assert!(!marker.exists());
}

#[tokio::test]
async fn shutdown_stops_dependents_before_dependencies() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("order");
    let script = |name: &str| {
        format!(
            "trap 'echo {name} >> {}; exit 0' TERM; while :; do sleep 0.05; done",
            record.display()
        )
    };
    let mut a = sh("a", &script("a"));
    a.start_secs = 0.1;
    let mut b = sh("b", &script("b"));
    b.depends_on = vec!["a".into()];
    b.start_secs = 0.1;
    let mut c = sh("c", &script("c"));
    c.depends_on = vec!["b".into()];
    c.start_secs = 0.1;
    let sup = Supervisor::start(config(vec![a, b, c])).unwrap();
    until(&sup, "all ready", all_ready).await;
    sup.shutdown().await;
    let order = std::fs::read_to_string(&record).unwrap();
    assert_eq!(order, "c\nb\na\n");
    assert!(sup.status().iter().all(|p| p.pid.is_none()));
    assert!(
        sup.restart_program("a").await.is_err(),
        "no restarts after shutdown"
    );
}

#[tokio::test]
async fn restart_request_starts_a_new_process() {
    let sup = Supervisor::start(config(vec![sh("p", "exec sleep 100")])).unwrap();
    let first = until(&sup, "ready", all_ready).await;
    sup.restart_program("p").await.unwrap();
    let second = until(&sup, "restarted", |s| all_ready(s) && s[0].restarts == 1).await;
    assert_ne!(first[0].pid, second[0].pid);
    assert_eq!(
        second[0].failures, 0,
        "a requested restart is not a failure"
    );
    assert!(matches!(
        sup.restart_program("nope").await,
        Err(supervisor::SupervisorError::UnknownProgram(_))
    ));
    sup.shutdown().await;
}

#[tokio::test]
async fn programs_run_as_the_configured_user_with_its_environment() {
    if !nix::unistd::Uid::effective().is_root() {
        eprintln!("not root: only checking that switching users is refused");
        let mut p = sh("p", "true");
        p.user = Some("nobody".into());
        let err = Supervisor::start(config(vec![p])).err().unwrap();
        assert!(err.to_string().contains("not root"), "{err}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let out = dir.path().join("id");
    let mut p = sh(
        "p",
        &format!(
            "echo \"$(id -u) $(id -g) $USER $HOME $EXTRA\" > {}; exec sleep 100",
            out.display()
        ),
    );
    p.user = Some("nobody".into());
    p.env.insert("EXTRA".into(), "x1".into());
    let sup = Supervisor::start(config(vec![p])).unwrap();
    until(&sup, "ready", all_ready).await;
    let text = std::fs::read_to_string(&out).unwrap();
    assert_eq!(text.trim(), "65534 65534 nobody /nonexistent x1");
    sup.shutdown().await;
}

#[tokio::test]
async fn output_goes_to_rotated_log_files() {
    let dir = tempfile::tempdir().unwrap();
    let settings = GlobalSettings {
        log_dir: Some(dir.path().to_path_buf()),
        log_max_bytes: 2048,
        log_backups: 2,
    };
    let mut chatty = sh(
        "chatty",
        "i=0; while [ $i -lt 400 ]; do echo \"line $i of output\"; i=$((i+1)); done; echo done >&2; exec sleep 100",
    );
    chatty.start_secs = 0.5;
    let sup = Supervisor::start(SupervisorConfig {
        supervisor: settings,
        programs: vec![chatty],
    })
    .unwrap();
    until(&sup, "ready", all_ready).await;
    let log = dir.path().join("chatty.log");
    let deadline = std::time::Instant::now() + LONG;
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("done")
    {
        assert!(std::time::Instant::now() < deadline, "output never arrived");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["chatty.log", "chatty.log.1", "chatty.log.2"]);
    let newest = std::fs::read_to_string(&log).unwrap();
    assert!(newest.contains("line 399 of output"));
    assert!(Path::new(&dir.path().join("chatty.log.2")).exists());
    sup.shutdown().await;
}
