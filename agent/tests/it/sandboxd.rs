//! [`SandboxdComputer`] against the real sandboxd router on a loopback port (no container):
//! shell sessions with real bash, the file and editor routes on a temporary root, the bearer
//! key, and the desktop routes' answers where this host has no X display (the action body with
//! `screenshot_id` is parsed and checked by sandboxd; the display itself is tested in the image).
//!
//! When the tests run as root, commands drop to `nobody`, as sandboxd drops to `agent` in the
//! image.

use std::path::PathBuf;
use std::sync::{Arc, Once};
use std::time::Duration;

use agent::{
    Computer, ComputerError, DesktopAction, EditCommand, ImageFormat, ObserveRequest,
    SandboxdComputer, Secret,
};
use nix::unistd::Uid;
use sandboxd::activity::Activity;
use sandboxd::api::{AppState, router};
use sandboxd::config::Settings;
use sandboxd::shell::{Shell, ShellConfig};
use supervisor::{Supervisor, SupervisorConfig};

const KEY: &str = "sandbox-test-key";

struct Sandbox {
    base: String,
    workspace: PathBuf,
    _workspace: tempfile::TempDir,
    _state: tempfile::TempDir,
}

fn init_reaping() {
    static ONCE: Once = Once::new();
    ONCE.call_once(sandboxd::pid1::init_reaping);
}

async fn start() -> anyhow::Result<Sandbox> {
    init_reaping();
    let workspace_dir = tempfile::tempdir()?;
    let workspace = workspace_dir.path().canonicalize()?;
    let root = Uid::effective().is_root();
    if root {
        std::os::unix::fs::chown(&workspace, Some(65534), Some(65534))?;
    }
    let state_parent = tempfile::tempdir()?;
    std::fs::set_permissions(
        state_parent.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o711),
    )?;
    // sandboxd refuses to start without a key (unless SANDBOX_AUTH=none).
    let mut settings =
        Settings::from_lookup(|name| (name == "SANDBOX_API_KEY").then(|| KEY.to_string()))?;
    settings.workspace = workspace.clone();
    settings.file_roots = vec![workspace.clone()];
    // A display that does not exist on this host.
    settings.display = ":97".into();
    let activity = Activity::new();
    let shell = Arc::new(Shell::new(
        ShellConfig {
            workspace: workspace.clone(),
            run_as: root.then(|| "nobody".to_string()),
            max_sessions: 16,
            idle_expiry: Duration::from_secs(3600),
            default_no_change_timeout: Duration::from_secs(120),
            output_limit: 1024 * 1024,
            stop_grace: Duration::from_secs(1),
            state_parent: state_parent.path().to_path_buf(),
            zygote: true,
        },
        activity.clone(),
    ));
    let supervisor = Arc::new(Supervisor::start(SupervisorConfig::default())?);
    let state = AppState::new(supervisor, Arc::new(settings), activity).with_shell(shell);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, router(state)).await });
    Ok(Sandbox {
        base: format!("http://{address}"),
        workspace,
        _workspace: workspace_dir,
        _state: state_parent,
    })
}

fn computer(sandbox: &Sandbox) -> anyhow::Result<SandboxdComputer> {
    Ok(SandboxdComputer::new(
        &sandbox.base,
        Some(Secret::new(KEY)),
    )?)
}

#[tokio::test]
async fn shell_commands_keep_their_session_until_restart() -> anyhow::Result<()> {
    let sandbox = start().await?;
    let computer = computer(&sandbox)?;
    let wait = Duration::from_secs(20);
    let first = computer
        .run_shell("export COLOUR=red; echo hello", wait, false)
        .await?;
    assert_eq!(first.exit_code, Some(0));
    assert!(first.output.contains("hello"), "{first:?}");
    let second = computer
        .run_shell("echo \"[$COLOUR]\"", wait, false)
        .await?;
    assert!(
        second.output.contains("[red]"),
        "the session carried over: {second:?}"
    );
    let failed = computer.run_shell("exit 4", wait, false).await?;
    assert_eq!(failed.exit_code, Some(4));
    let fresh = computer.run_shell("echo \"[$COLOUR]\"", wait, true).await?;
    assert!(
        fresh.output.contains("[]"),
        "a restart starts a new session: {fresh:?}"
    );
    let running = computer
        .run_shell("sleep 5", Duration::from_millis(200), false)
        .await?;
    assert!(
        running.still_running && running.exit_code.is_none(),
        "{running:?}"
    );
    Ok(())
}

#[tokio::test]
async fn files_and_the_editor_round_trip() -> anyhow::Result<()> {
    let sandbox = start().await?;
    let computer = computer(&sandbox)?;
    let path = sandbox.workspace.join("outputs/notes.txt");
    let path = path.to_string_lossy().to_string();
    computer
        .write_file(&path, "line one\nline two\n".as_bytes())
        .await?;
    assert_eq!(computer.read_file(&path).await?, "line one\nline two\n");
    let replaced = computer
        .edit(&EditCommand::StrReplace {
            path: path.clone(),
            old_str: "line two".into(),
            new_str: "line 2".into(),
        })
        .await?;
    assert!(!replaced.output.is_empty());
    assert_eq!(computer.read_file(&path).await?, "line one\nline 2\n");
    let viewed = computer
        .edit(&EditCommand::View {
            path: path.clone(),
            view_range: Some([2, -1]),
        })
        .await?;
    assert!(viewed.output.contains("line 2"), "{viewed:?}");
    let missing = computer
        .edit(&EditCommand::StrReplace {
            path: path.clone(),
            old_str: "not there".into(),
            new_str: String::new(),
        })
        .await;
    assert!(
        matches!(missing, Err(ComputerError::Refused { .. })),
        "{missing:?}"
    );
    let outside = computer.read_file("/etc/shadow").await;
    assert!(
        matches!(outside, Err(ComputerError::Refused { .. })),
        "{outside:?}"
    );
    Ok(())
}

#[tokio::test]
async fn desktop_calls_are_understood_by_sandboxd() -> anyhow::Result<()> {
    let sandbox = start().await?;
    let computer = computer(&sandbox)?;
    // The action body (with screenshot_id) is parsed, and the unknown id is refused by field.
    let click = DesktopAction::Click {
        x: Some(10.0),
        y: Some(10.0),
        button: None,
        num_clicks: None,
        modifiers: None,
    };
    match computer.act(&click, Some("123456")).await {
        Err(ComputerError::Refused { field, message }) => {
            assert_eq!(field.as_deref(), Some("screenshot_id"));
            assert!(message.contains("123456"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    let short = DesktopAction::DragPath {
        path: vec![[1.0, 1.0]],
        button: None,
        step_ms: None,
    };
    assert!(matches!(
        computer.act(&short, None).await,
        Err(ComputerError::Refused { field: Some(field), .. }) if field == "path"
    ));
    assert!(matches!(
        computer.act(&click, Some("not-a-number")).await,
        Err(ComputerError::Refused { .. })
    ));
    // There is no X display on this host: the sandbox says so.
    let shot = computer
        .observe(&ObserveRequest {
            max_width: Some(1024),
            max_height: Some(768),
            format: ImageFormat::Png,
        })
        .await;
    assert!(
        matches!(shot, Err(ComputerError::Unavailable { .. })),
        "{shot:?}"
    );
    let bad_bounds = computer
        .observe(&ObserveRequest {
            max_width: Some(4),
            max_height: None,
            format: ImageFormat::Png,
        })
        .await;
    assert!(
        matches!(&bad_bounds, Err(ComputerError::Refused { field: Some(f), .. }) if f == "max_width"),
        "{bad_bounds:?}"
    );
    Ok(())
}

#[tokio::test]
async fn a_wrong_key_is_an_http_error_not_a_refusal() -> anyhow::Result<()> {
    let sandbox = start().await?;
    let computer = SandboxdComputer::new(&sandbox.base, Some(Secret::new("wrong")))?;
    let result = computer
        .run_shell("true", Duration::from_secs(5), false)
        .await;
    assert!(
        matches!(result, Err(ComputerError::Http { status: 401, .. })),
        "{result:?}"
    );
    let text = format!("{:?}", computer);
    assert!(!text.contains("wrong"), "the key is not printed: {text}");
    Ok(())
}
