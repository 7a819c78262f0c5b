//! Readiness probes: one attempt at a time, each bounded by a timeout.

use std::process::{Command, Stdio};
use std::time::Duration;

use http_body_util::Empty;
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use tokio::io::AsyncReadExt;
use tokio::net::{TcpStream, UnixStream};

use crate::reaper::reaper;
use crate::spec::ReadinessProbe;

/// Runs one attempt of `probe`. `Ok` means ready; `Err` says why not, for the program's
/// `last_error`.
pub async fn probe_once(probe: &ReadinessProbe, timeout: Duration) -> Result<(), String> {
    match tokio::time::timeout(timeout, attempt(probe)).await {
        Ok(result) => result,
        Err(_) => Err(format!("probe timed out after {} ms", timeout.as_millis())),
    }
}

async fn attempt(probe: &ReadinessProbe) -> Result<(), String> {
    match probe {
        ReadinessProbe::UnixSocket(path) => UnixStream::connect(path)
            .await
            .map(drop)
            .map_err(|e| format!("unix socket {}: {e}", path.display())),
        ReadinessProbe::Tcp(address) => TcpStream::connect(address.as_str())
            .await
            .map(drop)
            .map_err(|e| format!("tcp {address}: {e}")),
        ReadinessProbe::Banner { address, expect } => {
            let mut stream = TcpStream::connect(address.as_str())
                .await
                .map_err(|e| format!("tcp {address}: {e}"))?;
            let mut got = vec![0u8; expect.len()];
            stream
                .read_exact(&mut got)
                .await
                .map_err(|e| format!("reading banner from {address}: {e}"))?;
            if got == expect.as_bytes() {
                Ok(())
            } else {
                Err(format!(
                    "banner from {address} was {:?}, expected {expect:?}",
                    String::from_utf8_lossy(&got)
                ))
            }
        }
        ReadinessProbe::Http(url) => http_get(url).await,
        ReadinessProbe::Exec(argv) => exec(argv).await,
    }
}

/// `http://host:port/path` split into the authority and the path.
fn split_http_url(url: &str) -> Result<(&str, &str), String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("not an http:// URL: {url}"))?;
    Ok(match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    })
}

async fn http_get(url: &str) -> Result<(), String> {
    let (authority, path) = split_http_url(url)?;
    let stream = TcpStream::connect(authority)
        .await
        .map_err(|e| format!("GET {url}: {e}"))?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake::<_, Empty<Bytes>>(TokioIo::new(stream))
            .await
            .map_err(|e| format!("GET {url}: {e}"))?;
    let driver = tokio::spawn(connection);
    let request = hyper::Request::get(path)
        .header(hyper::header::HOST, authority)
        .body(Empty::new())
        .map_err(|e| format!("GET {url}: {e}"))?;
    let result = sender.send_request(request).await;
    driver.abort();
    let response = result.map_err(|e| format!("GET {url}: {e}"))?;
    if response.status().is_success() {
        Ok(())
    } else {
        Err(format!("GET {url}: status {}", response.status()))
    }
}

async fn exec(argv: &[String]) -> Result<(), String> {
    let (program, args) = argv
        .split_first()
        .ok_or_else(|| "empty exec probe".to_string())?;
    let mut command = Command::new(program);
    command
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0);
    let child = reaper()
        .spawn(&mut command)
        .map_err(|e| format!("exec probe {program}: {e}"))?;
    // If the probe is cancelled by its timeout, kill the probe's process group.
    let group = crate::process::ProcessGroup::kill_on_drop(child.pid);
    let status = child
        .exit
        .await
        .map_err(|_| "exec probe: reaper went away".to_string())?;
    group.release();
    if status.success() {
        Ok(())
    } else {
        Err(format!("exec probe {program}: {status}"))
    }
}

use std::os::unix::process::CommandExt;

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;
    use tokio::net::TcpListener;

    const T: Duration = Duration::from_secs(2);

    #[tokio::test]
    async fn tcp_probe_follows_the_listener() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let probe = ReadinessProbe::Tcp(address.clone());
        assert!(probe_once(&probe, T).await.is_ok());
        drop(listener);
        assert!(probe_once(&probe, T).await.is_err());
    }

    #[tokio::test]
    async fn banner_probe_checks_the_greeting() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            for greeting in [&b"RFB 003.008\n"[..], b"SSH-2.0-x\r\n"] {
                let (mut s, _) = listener.accept().await.unwrap();
                s.write_all(greeting).await.unwrap();
            }
        });
        let probe = ReadinessProbe::Banner {
            address,
            expect: "RFB 003.008".into(),
        };
        assert!(probe_once(&probe, T).await.is_ok());
        let err = probe_once(&probe, T).await.unwrap_err();
        assert!(err.contains("SSH-2.0"), "{err}");
    }

    #[tokio::test]
    async fn http_probe_wants_2xx() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            for status in ["200 OK", "503 Service Unavailable"] {
                let (mut s, _) = listener.accept().await.unwrap();
                let mut buf = [0u8; 1024];
                let _ = s.read(&mut buf).await.unwrap();
                let body = format!("HTTP/1.1 {status}\r\ncontent-length: 0\r\n\r\n");
                s.write_all(body.as_bytes()).await.unwrap();
            }
        });
        let probe = ReadinessProbe::Http(format!("http://{address}/json/version"));
        assert!(probe_once(&probe, T).await.is_ok());
        let err = probe_once(&probe, T).await.unwrap_err();
        assert!(err.contains("503"), "{err}");
    }

    #[tokio::test]
    async fn exec_probe_uses_the_exit_status_and_times_out() {
        let ok = ReadinessProbe::Exec(vec!["true".into()]);
        assert!(probe_once(&ok, T).await.is_ok());
        let bad = ReadinessProbe::Exec(vec!["false".into()]);
        assert!(
            probe_once(&bad, T)
                .await
                .unwrap_err()
                .contains("exit code 1")
        );
        let slow = ReadinessProbe::Exec(vec!["sleep".into(), "30".into()]);
        let err = probe_once(&slow, Duration::from_millis(100))
            .await
            .unwrap_err();
        assert!(err.contains("timed out"), "{err}");
    }

    #[tokio::test]
    async fn unix_socket_probe_needs_a_listener_not_just_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("X1");
        let probe = ReadinessProbe::UnixSocket(path.clone());
        assert!(probe_once(&probe, T).await.is_err());
        let listener = tokio::net::UnixListener::bind(&path).unwrap();
        assert!(probe_once(&probe, T).await.is_ok());
        drop(listener); // the stale socket file stays behind
        assert!(path.exists());
        assert!(probe_once(&probe, T).await.is_err());
    }
}
