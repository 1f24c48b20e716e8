//! The admin channel's Unix socket: bound under a temporary name, made 0600, then renamed into
//! place, so it is never reachable with a looser mode; each peer's account is checked with
//! SO_PEERCRED (root bypasses file modes, so the mode alone would not keep another account
//! out). One request line, one answer line, then the connection closes.

use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};

use crate::env::{AdminChannel, AdminHandler, LocalBoxFuture};

/// Connections answered at once; more wait in the listen backlog.
const CONNECTIONS_MAX: usize = 16;
/// How long a peer may take to send its request line (`warden resolve` sends it at once).
const REQUEST_READ_MS: u64 = 5_000;
/// How long writing the answer may take before the peer is dropped.
const ANSWER_WRITE_MS: u64 = 10_000;
/// The longest answer line a client reads.
const ANSWER_BYTES_MAX: usize = 1024 * 1024;

pub struct RealAdmin;

impl AdminChannel for RealAdmin {
    fn serve(
        &self,
        path: &Path,
        request_bytes_max: usize,
        handler: AdminHandler,
    ) -> LocalBoxFuture<'static, io::Result<()>> {
        let path = path.to_path_buf();
        Box::pin(async move {
            let listener = bind_private(&path)?;
            let open = std::sync::Arc::new(tokio::sync::Semaphore::new(CONNECTIONS_MAX));
            loop {
                let permit = std::sync::Arc::clone(&open).acquire_owned().await.expect("the semaphore is never closed");
                let (stream, _) = listener.accept().await?;
                let handler = Rc::clone(&handler);
                tokio::task::spawn_local(async move {
                    let _permit = permit;
                    let _ = answer(stream, request_bytes_max, handler).await;
                });
            }
        })
    }

    fn ask(&self, path: &Path, request: Vec<u8>, timeout_ms: u64) -> LocalBoxFuture<'static, io::Result<Vec<u8>>> {
        let path = path.to_path_buf();
        Box::pin(async move {
            let exchange = async {
                let mut stream = UnixStream::connect(&path).await?;
                // A server that refuses this peer answers without reading: the write may
                // fail, and its answer still waits to be read.
                let mut line_out = request;
                line_out.push(b'\n');
                let sent = stream.write_all(&line_out).await;
                let mut line = Vec::new();
                let mut reader = BufReader::new(stream.take(ANSWER_BYTES_MAX as u64 + 1));
                reader.read_until(b'\n', &mut line).await?;
                match (line.strip_suffix(b"\n"), sent) {
                    (Some(answer), _) => Ok(answer.to_vec()),
                    (None, Err(error)) => Err(error),
                    (None, Ok(())) => {
                        Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the server closed without an answer"))
                    }
                }
            };
            match tokio::time::timeout(Duration::from_millis(timeout_ms), exchange).await {
                Ok(answered) => answered,
                Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, format!("no answer within {timeout_ms} ms"))),
            }
        })
    }
}

/// Binds at `path` with mode 0600 from its first moment there.
fn bind_private(path: &Path) -> io::Result<UnixListener> {
    let staging = PathBuf::from(format!("{}.new", path.display()));
    for stale in [&staging, &path.to_path_buf()] {
        match std::fs::remove_file(stale) {
            Err(error) if error.kind() != io::ErrorKind::NotFound => return Err(error),
            _ => {}
        }
    }
    let listener = UnixListener::bind(&staging)?;
    std::fs::set_permissions(&staging, std::fs::Permissions::from_mode(0o600))?;
    std::fs::rename(&staging, path)?;
    Ok(listener)
}

/// Reads one request line (bounded in size and time) from a peer of this account, and writes
/// the handler's answer.
async fn answer(stream: UnixStream, request_bytes_max: usize, handler: AdminHandler) -> io::Result<()> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let own = unsafe { libc::geteuid() };
    let peer = stream.peer_cred()?.uid();
    let (read, mut write) = stream.into_split();
    let answer = if peer != own {
        refusal(&format!(
            "refused: this server's admin channel serves its own account (uid {own}) only, not uid {peer}"
        ))
    } else {
        let mut line = Vec::new();
        let mut reader = BufReader::new(read.take(request_bytes_max as u64 + 1));
        let read = tokio::time::timeout(Duration::from_millis(REQUEST_READ_MS), reader.read_until(b'\n', &mut line));
        match read.await {
            Err(_) => refusal(&format!("no request line within {REQUEST_READ_MS} ms")),
            Ok(Err(error)) => return Err(error),
            Ok(Ok(_)) => match line.strip_suffix(b"\n") {
                Some(request) => handler(request.to_vec()).await,
                None if line.len() > request_bytes_max => {
                    refusal(&format!("the request is over the limit of {request_bytes_max} bytes"))
                }
                None => refusal("the request line has no end"),
            },
        }
    };
    let written = async {
        write.write_all(&answer).await?;
        write.write_all(b"\n").await?;
        write.shutdown().await
    };
    tokio::time::timeout(Duration::from_millis(ANSWER_WRITE_MS), written)
        .await
        .unwrap_or_else(|_| Err(io::Error::new(io::ErrorKind::TimedOut, "the peer does not read its answer")))
}

/// An answer line refusing the request, in the channel's answer shape.
fn refusal(problem: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({"error": problem})).expect("JSON values serialise")
}
