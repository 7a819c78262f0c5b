//! `/v1/sandbox/home/*`: the agent's home as a tar archive, taken while the sandbox is held
//! still ([`crate::quiesce`]), for the orchestrator's hibernation, snapshots and browser
//! profiles; and the release of a sandbox held after its archive.

use std::io::{self, Write};
use std::path::PathBuf;

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use tokio::sync::mpsc;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::api::AppState;
use crate::api::error::ApiError;
use crate::api::extract::AioJson;
use crate::api::types::{Envelope, ErrorBody, HomeArchiveRequest, HomeReleased};
use crate::home_archive;
use crate::quiesce::QuiesceError;

/// Bytes per chunk of the streamed archive.
const CHUNK: usize = 256 * 1024;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(archive))
        .routes(routes!(release))
}

/// The home (or one folder of it) as a tar archive, streamed. The browser is stopped first (it
/// saves its session, tabs and cookies) and the agent's other processes are frozen while the
/// archive is written, so it is never a half-written state; then they are released, unless
/// `keep_held`. Left out: `.cache`, shell and REPL histories, Jupyter's runtime folder,
/// Chromium's singleton lock, metrics files, GPU caches and crash reports, sockets and FIFOs. A failure while streaming ends the response
/// without the end of the chunked body (the archive is then incomplete and must be dropped).
#[utoipa::path(post, path = "/v1/sandbox/home/archive", tag = "sandbox",
    request_body(content = HomeArchiveRequest, description = "optional: the whole home, released after"),
    responses(
        (status = 200, description = "the archive (POSIX tar)", content_type = "application/x-tar", body = Vec<u8>),
        (status = 409, description = "an archive is being taken already", body = ErrorBody),
        (status = 422, description = "`path` is not a relative folder inside the home", body = ErrorBody),
        (status = 503, description = "the browser did not stop", body = ErrorBody),
    ))]
pub async fn archive(
    State(state): State<AppState>,
    AioJson(request): AioJson<HomeArchiveRequest>,
) -> Result<Response, ApiError> {
    let only = match request.path.as_deref() {
        None => None,
        Some(path) => Some(relative_folder(path)?),
    };
    let hold = state.quiescer.hold().await.map_err(|error| match error {
        QuiesceError::Busy => ApiError::conflict(error.to_string()),
        _ => ApiError::unavailable(error.to_string()),
    })?;
    let (tx, rx) = mpsc::channel::<io::Result<Bytes>>(4);
    let home = state.settings.home_dir.clone();
    let keep_held = request.keep_held;
    tokio::spawn(async move {
        let errors = tx.clone();
        let written = tokio::task::spawn_blocking(move || {
            let mut out = ChunkWriter::new(tx);
            let written = home_archive::write(&home, only.as_deref(), &mut out)?;
            out.flush()?;
            Ok::<_, io::Error>(written)
        })
        .await
        .unwrap_or_else(|join| Err(io::Error::other(join.to_string())));
        match written {
            Ok(written) => {
                tracing::info!(
                    entries = written.entries,
                    bytes = written.bytes,
                    skipped = written.skipped,
                    "home archived"
                );
                if keep_held {
                    hold.keep();
                    return;
                }
            }
            Err(error) => {
                tracing::warn!(%error, "archiving the home failed");
                // The body ends with an error, not with its last chunk: the reader sees an
                // incomplete archive.
                let _ = errors.send(Err(error)).await;
            }
        }
        hold.release().await;
    });
    let body = Body::from_stream(futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    }));
    Ok(([(header::CONTENT_TYPE, "application/x-tar")], body).into_response())
}

/// Releases a sandbox held after its archive (`keep_held`): its processes thaw and the browser
/// starts again, restoring its session.
#[utoipa::path(post, path = "/v1/sandbox/home/release", tag = "sandbox",
    responses((status = 200, body = Envelope<HomeReleased>)))]
pub async fn release(State(state): State<AppState>) -> Json<Envelope<HomeReleased>> {
    let released = state.quiescer.release_current().await;
    Json(Envelope::ok(HomeReleased { released }))
}

fn relative_folder(path: &str) -> Result<PathBuf, ApiError> {
    let candidate = PathBuf::from(path.trim_end_matches('/'));
    let fine = !candidate.as_os_str().is_empty()
        && candidate
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)));
    if !fine {
        return Err(ApiError::invalid(
            "path",
            format!("`path` must be a relative folder inside the home without `..`, got {path:?}"),
        ));
    }
    Ok(candidate)
}

/// Collects the archive into chunks for the response body; a reader that went away is a broken
/// pipe, which ends the walk.
struct ChunkWriter {
    tx: mpsc::Sender<io::Result<Bytes>>,
    buffer: Vec<u8>,
}

impl ChunkWriter {
    fn new(tx: mpsc::Sender<io::Result<Bytes>>) -> Self {
        Self {
            tx,
            buffer: Vec::with_capacity(CHUNK),
        }
    }

    fn send(&mut self) -> io::Result<()> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        let chunk = Bytes::from(std::mem::replace(
            &mut self.buffer,
            Vec::with_capacity(CHUNK),
        ));
        self.tx
            .blocking_send(Ok(chunk))
            .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "the reader went away"))
    }
}

impl Write for ChunkWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.buffer.extend_from_slice(data);
        if self.buffer.len() >= CHUNK {
            self.send()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.send()
    }
}
