//! The remote desktop's VNC side: the VNC server (x11vnc) listens on loopback only and asks for
//! a password; sandboxd is the only way in from outside the container.
//!
//! - [`passwords`]: two random passwords written for the VNC server at every start, one with
//!   full access and one **view-only**. x11vnc itself then refuses input from a session that
//!   authenticated with the view-only one: a second layer under any filter in front of it.
//! - [`rfb`]: the RFB (VNC protocol) handshakes. Towards x11vnc, sandboxd authenticates as the
//!   session's mode (view or control). Towards the client, sandboxd terminates the handshake
//!   itself: exactly version 3.8 and security type None, nothing else accepted, so what follows
//!   is plain client messages whose boundaries any filter can follow.
//! - [`VncGateway`]: opens an authenticated connection to the VNC server for one viewer,
//!   starting the server on the first viewer (it is not needed before anyone watches).
//!
//! **Invariant:** this module knows the RFB protocol and the supervisor, nothing of HTTP.

pub mod passwords;
pub mod rfb;

use std::sync::Arc;
use std::time::Duration;

use supervisor::{ProgramState, Supervisor};
use tokio::net::TcpStream;

pub use passwords::VncPasswords;

/// Settings of the remote desktop sandboxd fronts on its own port (`/vnc/`, `/websockify`).
#[derive(Debug, Clone)]
pub struct VncSettings {
    /// The VNC server (x11vnc), listening on loopback only (`SANDBOXD_VNC_ADDR`, default
    /// `127.0.0.1:5900`).
    pub addr: std::net::SocketAddr,
    /// The supervised program that serves it, started on the first viewer
    /// (`SANDBOXD_VNC_PROGRAM`, default `x11vnc`).
    pub program: String,
    /// Where sandboxd writes the VNC server's passwords (one full-access, one view-only), fresh
    /// at every start (`SANDBOXD_VNC_PASSWORD_FILE`, default `/run/sandboxd/vnc-passwords`).
    pub password_file: std::path::PathBuf,
    /// noVNC's static files (`SANDBOXD_NOVNC_DIR`, default `/usr/share/novnc`).
    pub novnc_dir: std::path::PathBuf,
}

/// How a viewer may use the desktop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ViewMode {
    /// Watch only: authenticated with the view-only password.
    View,
    /// Watch and control.
    Control,
}

/// Why a viewer could not be connected.
#[derive(Debug, thiserror::Error)]
pub enum VncError {
    #[error("the remote desktop is not configured in this sandbox (no program {0:?})")]
    NoProgram(String),
    #[error("the VNC server did not become ready in time (state: {0})")]
    NotReady(String),
    #[error("the VNC server is unavailable: {0}")]
    Supervisor(#[from] supervisor::SupervisorError),
    #[error("connecting to the VNC server: {0}")]
    Connect(std::io::Error),
    #[error(transparent)]
    Handshake(#[from] rfb::HandshakeError),
}

/// How long the VNC server may take to start for the first viewer.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// Opens authenticated connections to the VNC server.
pub struct VncGateway {
    settings: VncSettings,
    passwords: VncPasswords,
    supervisor: Arc<Supervisor>,
}

impl VncGateway {
    pub fn new(
        settings: VncSettings,
        passwords: VncPasswords,
        supervisor: Arc<Supervisor>,
    ) -> Self {
        Self {
            settings,
            passwords,
            supervisor,
        }
    }

    /// Starts the VNC server if it is not running and waits until it is ready.
    async fn ensure_running(&self) -> Result<(), VncError> {
        let name = self.settings.program.as_str();
        let state = |snapshot: &[supervisor::ProgramStatus]| {
            snapshot.iter().find(|p| p.name == name).map(|p| p.state)
        };
        match state(&self.supervisor.status()) {
            None => return Err(VncError::NoProgram(name.to_string())),
            Some(ProgramState::Ready) => return Ok(()),
            Some(ProgramState::Stopped | ProgramState::Exited | ProgramState::Fatal) => {
                tracing::info!(
                    program = name,
                    "starting the VNC server for the first viewer"
                );
                self.supervisor.start_program(name).await?;
            }
            // Starting, stopping or backing off: it is on its way; wait.
            Some(_) => {}
        }
        let ready = self
            .supervisor
            .wait_for(START_TIMEOUT, |snapshot| {
                state(snapshot) == Some(ProgramState::Ready)
            })
            .await;
        match ready {
            Some(_) => Ok(()),
            None => Err(VncError::NotReady(
                state(&self.supervisor.status())
                    .map_or("unknown", ProgramState::as_str)
                    .to_string(),
            )),
        }
    }

    /// A connection to the VNC server, authenticated for `mode`, positioned right after the
    /// server's SecurityResult: the next bytes the server expects are the client's ClientInit.
    pub async fn open(&self, mode: ViewMode) -> Result<TcpStream, VncError> {
        self.ensure_running().await?;
        let mut stream = TcpStream::connect(self.settings.addr)
            .await
            .map_err(VncError::Connect)?;
        let _ = stream.set_nodelay(true);
        let password = match mode {
            ViewMode::View => self.passwords.view(),
            ViewMode::Control => self.passwords.full(),
        };
        rfb::authenticate_upstream(&mut stream, password).await?;
        Ok(stream)
    }
}
