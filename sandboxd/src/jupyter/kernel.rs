//! One running IPython kernel (Debian's `python3-ipykernel`) and the Jupyter messaging client
//! that talks to it over ZeroMQ on Unix sockets.
//!
//! The kernel is started in its own process group with a fresh connection file (random HMAC key,
//! `ipc` transport in a private directory, so nothing else in the sandbox can reach its
//! sockets by port). Two reader tasks move messages from the iopub and shell sockets into
//! channels (so waiting on them is cancel-safe) and a third waits for the process to exit. An
//! execution sends one `execute_request` and gathers the iopub messages whose parent is that
//! request until the kernel reports idle and the shell reply has arrived; on timeout the kernel
//! gets SIGINT (a KeyboardInterrupt), and a kernel that does not come back is killed.

use std::path::{Path, PathBuf};
use std::time::Duration;

use jupyter_protocol::{
    ConnectionInfo, ExecuteRequest, ExecutionState, JupyterMessage, JupyterMessageContent,
    KernelInfoRequest, ReplyStatus, Transport,
};
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use std::os::unix::process::CommandExt;
use supervisor::process::ProcessGroup;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::{ExecutionStatus, JupyterError, Output, OutputLimits};

/// Messages buffered from a socket while nobody is reading (older ones are dropped by the
/// sender waiting; ZeroMQ's own high-water mark applies behind it).
const CHANNEL_CAPACITY: usize = 1024;
/// How long a started kernel has to answer `kernel_info_request` on shell and iopub.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long an interrupted execution has to finish before the kernel is declared stuck.
const INTERRUPT_GRACE: Duration = Duration::from_secs(3);

/// How a kernel process is started.
#[derive(Debug, Clone)]
pub struct LaunchSpec {
    /// The Python interpreter with ipykernel (`python3`).
    pub python: PathBuf,
    /// The kernel's working directory.
    pub cwd: PathBuf,
    /// Where the connection file and sockets go (created, mode 0700).
    pub runtime_dir: PathBuf,
    /// Run the kernel as this user (when sandboxd is root).
    pub run_as: Option<(u32, u32)>,
}

/// What one execution produced.
#[derive(Debug, Clone)]
pub struct Execution {
    pub status: ExecutionStatus,
    pub execution_count: Option<usize>,
    pub outputs: Vec<Output>,
    pub msg_id: String,
}

/// A running kernel and its client sockets.
pub struct Kernel {
    child_pgid: i32,
    /// Resolves when the process has exited.
    exited: watch::Receiver<bool>,
    shell_tx: jupyter_zmq_client::Connection<zeromq::DealerSendHalf>,
    shell_rx: mpsc::Receiver<JupyterMessage>,
    iopub_rx: mpsc::Receiver<JupyterMessage>,
    runtime_dir: PathBuf,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl std::fmt::Debug for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kernel")
            .field("pgid", &self.child_pgid)
            .field("runtime_dir", &self.runtime_dir)
            .finish()
    }
}

fn random_hex(bytes: usize) -> Result<String, JupyterError> {
    let mut buf = vec![0u8; bytes];
    getrandom::fill(&mut buf[..]).map_err(|e| {
        JupyterError::Runtime(format!("no random numbers for the kernel's key: {e}"))
    })?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

impl Kernel {
    /// Starts a kernel and waits until it answers on its shell and iopub channels.
    pub async fn start(spec: &LaunchSpec) -> Result<Self, JupyterError> {
        let dir = spec.runtime_dir.join(format!("kernel-{}", random_hex(8)?));
        create_private_dir(&dir, spec.run_as)?;
        let info = ConnectionInfo {
            ip: dir.join("k").to_string_lossy().into_owned(),
            transport: Transport::IPC,
            shell_port: 1,
            iopub_port: 2,
            stdin_port: 3,
            control_port: 4,
            hb_port: 5,
            key: random_hex(32)?,
            signature_scheme: "hmac-sha256".into(),
            kernel_name: Some("python3".into()),
        };
        let file = dir.join("connection.json");
        let json = serde_json::to_vec(&info)
            .map_err(|e| JupyterError::Protocol(format!("connection file: {e}")))?;
        write_private_file(&file, &json, spec.run_as)?;

        let mut command = std::process::Command::new(&spec.python);
        command
            .args(["-m", "ipykernel_launcher", "-f"])
            .arg(&file)
            // Tracebacks without terminal colour codes: they are read by programs and people
            // in JSON, not in a terminal.
            .arg("--InteractiveShell.colors=NoColor")
            .arg("--HistoryManager.enabled=False")
            .current_dir(&spec.cwd)
            .env("PYTHONUNBUFFERED", "1")
            .env("MPLBACKEND", "agg")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .process_group(0);
        if let Some((uid, gid)) = spec.run_as {
            command.uid(uid).gid(gid);
        }
        let spawned =
            supervisor::reaper()
                .spawn(&mut command)
                .map_err(|e| JupyterError::Spawn {
                    program: spec.python.display().to_string(),
                    source: e,
                })?;
        let pgid = spawned.pid;
        let (exited_tx, exited) = watch::channel(false);
        let mut tasks = vec![tokio::spawn(wait_for_exit(spawned.exit, exited_tx))];

        let session = uuid::Uuid::new_v4().to_string();
        let socket_dir = dir.clone();
        let mut exited_early = exited.clone();
        let connect = async {
            // ZeroMQ retries a connection to a socket not bound yet with a growing backoff
            // (up to seconds): wait for the kernel's sockets to exist first, which is quick.
            for port in [info.shell_port, info.iopub_port] {
                let path = socket_dir.join(format!("k-{port}"));
                while !path.exists() {
                    if *exited_early.borrow_and_update() {
                        return Err(jupyter_zmq_client::RuntimeError::ZmqMessageError(
                            "the kernel exited while starting".into(),
                        ));
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
            let iopub =
                jupyter_zmq_client::create_client_iopub_connection(&info, "", &session).await?;
            let identity = jupyter_zmq_client::peer_identity_for_session(&session)?;
            let shell = jupyter_zmq_client::create_client_shell_connection_with_identity(
                &info, &session, identity,
            )
            .await?;
            Ok::<_, jupyter_zmq_client::RuntimeError>((iopub, shell))
        };
        let started = Instant::now();
        // ZeroMQ connects in the background: a socket that is not bound yet is retried.
        let (iopub, shell) = match tokio::time::timeout(START_TIMEOUT, connect).await {
            Ok(Ok(sockets)) => sockets,
            Ok(Err(e)) => {
                ProcessGroup::new(pgid).kill();
                return Err(JupyterError::Protocol(format!(
                    "connecting to the kernel: {e}"
                )));
            }
            Err(_) => {
                ProcessGroup::new(pgid).kill();
                return Err(JupyterError::StartTimeout(START_TIMEOUT));
            }
        };
        let (shell_tx, shell_recv) = shell.split();
        let (shell_in, shell_rx) = mpsc::channel(CHANNEL_CAPACITY);
        let (iopub_in, iopub_rx) = mpsc::channel(CHANNEL_CAPACITY);
        tasks.push(tokio::spawn(forward_shell(shell_recv, shell_in)));
        tasks.push(tokio::spawn(forward_iopub(iopub, iopub_in)));
        let mut kernel = Kernel {
            child_pgid: pgid,
            exited,
            shell_tx,
            shell_rx,
            iopub_rx,
            runtime_dir: dir,
            tasks,
        };
        let deadline = started + START_TIMEOUT;
        if let Err(e) = kernel.wait_ready(deadline).await {
            kernel.kill();
            return Err(e);
        }
        tracing::debug!(
            elapsed_ms = started.elapsed().as_millis() as u64,
            "kernel ready"
        );
        Ok(kernel)
    }

    /// Sends `kernel_info_request` until its reply arrives on shell and its idle status on
    /// iopub: only then is the subscription known to be live (a SUB socket misses what is
    /// published before it is connected).
    async fn wait_ready(&mut self, deadline: Instant) -> Result<(), JupyterError> {
        loop {
            if *self.exited.borrow() {
                return Err(JupyterError::Died);
            }
            let request: JupyterMessage = KernelInfoRequest {}.into();
            let id = request.header.msg_id.clone();
            self.send(request).await?;
            let round = (Instant::now() + Duration::from_millis(500)).min(deadline);
            let mut replied = false;
            let mut idle = false;
            while !(replied && idle) {
                tokio::select! {
                    message = self.shell_rx.recv() => match message {
                        Some(m) if parent_id(&m) == Some(id.as_str()) => replied = true,
                        Some(_) => {}
                        None => return Err(JupyterError::Died),
                    },
                    message = self.iopub_rx.recv() => match message {
                        Some(m) if parent_id(&m) == Some(id.as_str()) => {
                            if let JupyterMessageContent::Status(s) = &m.content {
                                idle |= s.execution_state == ExecutionState::Idle;
                            }
                        }
                        Some(_) => {}
                        None => return Err(JupyterError::Died),
                    },
                    _ = tokio::time::sleep_until(round) => break,
                }
            }
            if replied && idle {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(JupyterError::StartTimeout(START_TIMEOUT));
            }
        }
    }

    async fn send(&mut self, message: JupyterMessage) -> Result<(), JupyterError> {
        self.shell_tx
            .send(message)
            .await
            .map_err(|e| JupyterError::Protocol(format!("sending to the kernel: {e}")))
    }

    /// The kernel's process group (the kernel's own pid).
    pub fn pgid(&self) -> i32 {
        self.child_pgid
    }

    /// Whether the kernel process has exited.
    pub fn is_dead(&self) -> bool {
        *self.exited.borrow()
    }

    /// Runs `code` and gathers its outputs until the kernel is idle again or `timeout` passes.
    /// On timeout the kernel is interrupted; `Err(Stuck)` means it did not come back and must
    /// be replaced.
    pub async fn execute(
        &mut self,
        code: &str,
        silent: bool,
        timeout: Duration,
        limits: &OutputLimits,
    ) -> Result<Execution, JupyterError> {
        // Whatever earlier executions left behind (late output after a timeout) is not ours.
        while self.iopub_rx.try_recv().is_ok() {}
        while self.shell_rx.try_recv().is_ok() {}
        let mut request = ExecuteRequest::new(code.to_string());
        request.silent = silent;
        request.store_history = !silent;
        // One request at a time reaches a kernel, so there is never a queue to abort after an
        // error; with `stop_on_error` ipykernel aborts requests that arrive before it has
        // finished aborting (a race the next request loses on a busy machine: it is answered
        // `aborted`, with no outputs).
        request.stop_on_error = false;
        let message: JupyterMessage = request.into();
        let id = message.header.msg_id.clone();
        self.send(message).await?;

        let mut gathered = Gathered::new(limits);
        let mut deadline = Instant::now() + timeout;
        let mut interrupted = false;
        let mut exited = self.exited.clone();
        loop {
            if gathered.idle && gathered.replied {
                break;
            }
            tokio::select! {
                message = self.iopub_rx.recv() => match message {
                    Some(m) if parent_id(&m) == Some(id.as_str()) => gathered.iopub(m),
                    Some(_) => {}
                    None => return Err(JupyterError::Died),
                },
                message = self.shell_rx.recv() => match message {
                    Some(m) if parent_id(&m) == Some(id.as_str()) => gathered.reply(m),
                    Some(_) => {}
                    None => return Err(JupyterError::Died),
                },
                _ = exited.wait_for(|dead| *dead) => return Err(JupyterError::Died),
                _ = tokio::time::sleep_until(deadline) => {
                    if interrupted {
                        return Err(JupyterError::Stuck);
                    }
                    interrupted = true;
                    self.interrupt();
                    deadline = Instant::now() + INTERRUPT_GRACE;
                }
            }
        }
        let status = if interrupted {
            ExecutionStatus::Timeout
        } else if gathered.error {
            ExecutionStatus::Error
        } else {
            ExecutionStatus::Ok
        };
        let mut outputs = gathered.outputs;
        if gathered.truncated {
            outputs.push(Output::stream(
                "stderr",
                format!(
                    "\n[agentbox: output truncated at {} bytes]\n",
                    limits.max_bytes
                ),
            ));
        }
        Ok(Execution {
            status,
            execution_count: gathered.execution_count,
            outputs,
            msg_id: id,
        })
    }

    /// Sends SIGINT to the kernel process (ipykernel turns it into KeyboardInterrupt).
    pub fn interrupt(&self) {
        // The kernel leads its own process group; the signal goes to the kernel alone, so
        // that a child process the code started is not torn down with it.
        if let Err(e) = nix::sys::signal::kill(Pid::from_raw(self.child_pgid), Signal::SIGINT) {
            tracing::debug!(error = %e, "interrupting the kernel");
        }
    }

    /// Kills the kernel's whole process group and removes its sockets.
    pub fn kill(&mut self) {
        ProcessGroup::new(self.child_pgid).kill();
        for task in self.tasks.drain(..) {
            task.abort();
        }
        if let Err(e) = std::fs::remove_dir_all(&self.runtime_dir) {
            tracing::debug!(error = %e, dir = %self.runtime_dir.display(), "removing kernel dir");
        }
    }
}

impl Drop for Kernel {
    fn drop(&mut self) {
        self.kill();
    }
}

fn parent_id(message: &JupyterMessage) -> Option<&str> {
    message.parent_header.as_ref().map(|h| h.msg_id.as_str())
}

async fn wait_for_exit(
    exit: tokio::sync::oneshot::Receiver<supervisor::reaper::ExitStatus>,
    exited: watch::Sender<bool>,
) {
    let status = exit.await;
    tracing::debug!(?status, "kernel exited");
    exited.send_replace(true);
}

async fn forward_shell(
    mut socket: jupyter_zmq_client::Connection<zeromq::DealerRecvHalf>,
    to: mpsc::Sender<JupyterMessage>,
) {
    loop {
        match socket.read().await {
            Ok(message) => {
                if to.send(message).await.is_err() {
                    return;
                }
            }
            Err(e) => {
                tracing::debug!(error = %e, "kernel shell channel");
                if is_fatal(&e) {
                    return;
                }
            }
        }
    }
}

async fn forward_iopub(
    mut socket: jupyter_zmq_client::ClientIoPubConnection,
    to: mpsc::Sender<JupyterMessage>,
) {
    loop {
        match socket.read().await {
            Ok(message) => {
                if to.send(message).await.is_err() {
                    return;
                }
            }
            Err(e) => {
                tracing::debug!(error = %e, "kernel iopub channel");
                if is_fatal(&e) {
                    return;
                }
            }
        }
    }
}

/// A socket error ends the reader; a message that does not parse (an unknown message type, a
/// bad signature) is skipped.
fn is_fatal(error: &jupyter_zmq_client::RuntimeError) -> bool {
    matches!(error, jupyter_zmq_client::RuntimeError::ZmqError(_))
}

/// Outputs of one execution as they arrive, bounded.
struct Gathered {
    outputs: Vec<Output>,
    bytes: usize,
    max_bytes: usize,
    truncated: bool,
    idle: bool,
    replied: bool,
    error: bool,
    execution_count: Option<usize>,
}

impl Gathered {
    fn new(limits: &OutputLimits) -> Self {
        Self {
            outputs: Vec::new(),
            bytes: 0,
            max_bytes: limits.max_bytes,
            truncated: false,
            idle: false,
            replied: false,
            error: false,
            execution_count: None,
        }
    }

    fn iopub(&mut self, message: JupyterMessage) {
        let output = match message.content {
            JupyterMessageContent::Status(s) => {
                self.idle |= s.execution_state == ExecutionState::Idle;
                return;
            }
            JupyterMessageContent::StreamContent(s) => {
                let name = match s.name {
                    jupyter_protocol::Stdio::Stdout => "stdout",
                    jupyter_protocol::Stdio::Stderr => "stderr",
                };
                // Consecutive writes to one stream read as one output, as in a notebook.
                if let Some(last) = self.outputs.last_mut()
                    && last.output_type == "stream"
                    && last.name.as_deref() == Some(name)
                    && !self.truncated
                {
                    let room = self.max_bytes.saturating_sub(self.bytes);
                    let text = clip(&s.text, room);
                    self.bytes += text.len();
                    self.truncated |= text.len() < s.text.len();
                    if let Some(t) = last.text.as_mut() {
                        t.push_str(text);
                    }
                    return;
                }
                Output::stream(name, s.text)
            }
            JupyterMessageContent::ExecuteResult(r) => {
                self.execution_count = Some(r.execution_count.value());
                Output::data(
                    "execute_result",
                    serde_json::to_value(&r.data).unwrap_or_default(),
                    serde_json::Value::Object(r.metadata),
                    Some(r.execution_count.value()),
                )
            }
            JupyterMessageContent::DisplayData(d) => Output::data(
                "display_data",
                serde_json::to_value(&d.data).unwrap_or_default(),
                serde_json::Value::Object(d.metadata),
                None,
            ),
            JupyterMessageContent::ErrorOutput(e) => {
                self.error = true;
                Output::error(e.ename, e.evalue, e.traceback)
            }
            _ => return,
        };
        self.push(output);
    }

    fn reply(&mut self, message: JupyterMessage) {
        if let JupyterMessageContent::ExecuteReply(reply) = message.content {
            self.replied = true;
            self.execution_count = Some(reply.execution_count.value());
            if reply.status != ReplyStatus::Ok {
                self.error = true;
            }
        }
    }

    fn push(&mut self, output: Output) {
        if self.truncated {
            return;
        }
        let size = output.approximate_size();
        if self.bytes + size > self.max_bytes {
            self.truncated = true;
            // A stream is cut to the room left; anything else is left out whole.
            if let Some(text) = output
                .text
                .as_deref()
                .filter(|_| output.output_type == "stream")
            {
                let room = self.max_bytes.saturating_sub(self.bytes);
                let cut = clip(text, room).to_string();
                self.bytes += cut.len();
                self.outputs.push(Output::stream(
                    output.name.as_deref().unwrap_or("stdout"),
                    cut,
                ));
            }
            return;
        }
        self.bytes += size;
        self.outputs.push(output);
    }
}

/// The longest prefix of `text` of at most `max` bytes that ends on a character boundary.
fn clip(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

fn create_private_dir(dir: &Path, owner: Option<(u32, u32)>) -> Result<(), JupyterError> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| JupyterError::Runtime(format!("creating {}: {e}", dir.display())))?;
    if let Some((uid, gid)) = owner {
        std::os::unix::fs::chown(dir, Some(uid), Some(gid))
            .map_err(|e| JupyterError::Runtime(format!("chown {}: {e}", dir.display())))?;
    }
    Ok(())
}

fn write_private_file(
    path: &Path,
    contents: &[u8],
    owner: Option<(u32, u32)>,
) -> Result<(), JupyterError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .and_then(|mut f| f.write_all(contents).map(|()| f))
        .map_err(|e| JupyterError::Runtime(format!("writing {}: {e}", path.display())))?;
    file.flush()
        .map_err(|e| JupyterError::Runtime(format!("writing {}: {e}", path.display())))?;
    if let Some((uid, gid)) = owner {
        std::os::unix::fs::chown(path, Some(uid), Some(gid))
            .map_err(|e| JupyterError::Runtime(format!("chown {}: {e}", path.display())))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clip_keeps_characters_whole() {
        assert_eq!(clip("héllo", 2), "h");
        assert_eq!(clip("héllo", 3), "hé");
        assert_eq!(clip("abc", 10), "abc");
    }

    #[test]
    fn streams_are_joined_and_bounded() {
        let limits = OutputLimits { max_bytes: 8 };
        let mut g = Gathered::new(&limits);
        g.push(Output::stream("stdout", "abc".into()));
        // The second write to the same stream joins the first, cut at the limit.
        let msg: JupyterMessage = jupyter_protocol::StreamContent::stdout("defghij").into();
        g.iopub(msg);
        assert_eq!(g.outputs.len(), 1);
        assert_eq!(g.outputs[0].text.as_deref(), Some("abcdefgh"));
        assert!(g.truncated);
    }
}
