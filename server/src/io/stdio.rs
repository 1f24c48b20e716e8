//! The protocol stream, protected at the level of file descriptors (seed 000 section 3).
//!
//! Before the manifest is read, fds 0 and 1 are duplicated to private descriptors used
//! only by the protocol reader and writer; then fd 1 is pointed at stderr and fd 0 at
//! /dev/null. Anything else in the process that writes to standard output (a panic
//! message, a C library) lands on stderr, and nothing else can read the client's messages.

use std::fs::File;
use std::io;
use std::os::unix::io::FromRawFd;
use std::rc::Rc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::env::{LocalBoxFuture, Stdio};

pub struct ProtectedStdio {
    reader: Option<Rc<tokio::sync::Mutex<tokio::fs::File>>>,
    writer: Rc<tokio::sync::Mutex<tokio::fs::File>>,
    outbox: Rc<Outbox>,
}

/// Lines waiting to be written, batched: while one write is in flight, the lines other
/// answers queue go out together in the next write (one syscall and one flush for all).
/// Each caller returns once its own line is written, so a client that does not read still
/// holds every writer back.
#[derive(Default)]
struct Outbox {
    queued: std::cell::RefCell<Vec<u8>>,
    /// Bytes queued since start, and bytes written (queued offsets, not buffer indexes).
    queued_total: std::cell::Cell<u64>,
    written_total: std::cell::Cell<u64>,
    /// A write failed: every line not yet written fails with it.
    failed: std::cell::Cell<Option<io::ErrorKind>>,
}

/// Takes fds 0 and 1 for the protocol and points the process's own at /dev/null and stderr.
pub fn protect_stdio() -> io::Result<ProtectedStdio> {
    // SAFETY: plain descriptor calls on fds this process owns; each result is checked.
    unsafe {
        let reader = libc::fcntl(0, libc::F_DUPFD_CLOEXEC, 3);
        let writer = libc::fcntl(1, libc::F_DUPFD_CLOEXEC, 3);
        if reader < 0 || writer < 0 {
            return Err(io::Error::last_os_error());
        }
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
        if null < 0 || libc::dup2(null, 0) < 0 || libc::dup2(2, 1) < 0 {
            return Err(io::Error::last_os_error());
        }
        libc::close(null);
        Ok(ProtectedStdio {
            reader: Some(Rc::new(tokio::sync::Mutex::new(tokio::fs::File::from_std(File::from_raw_fd(reader))))),
            writer: Rc::new(tokio::sync::Mutex::new(tokio::fs::File::from_std(File::from_raw_fd(writer)))),
            outbox: Rc::default(),
        })
    }
}

impl ProtectedStdio {
    /// For commands that do not read the protocol: reads are EOF, lines go to stdout.
    pub fn for_command() -> ProtectedStdio {
        // SAFETY: duplicating fd 1 gives this value its own descriptor to own.
        let writer = unsafe { File::from_raw_fd(libc::fcntl(1, libc::F_DUPFD_CLOEXEC, 3)) };
        ProtectedStdio {
            reader: None,
            writer: Rc::new(tokio::sync::Mutex::new(tokio::fs::File::from_std(writer))),
            outbox: Rc::default(),
        }
    }
}

impl Stdio for ProtectedStdio {
    fn read(&self, max: usize) -> LocalBoxFuture<'static, io::Result<Vec<u8>>> {
        let reader = self.reader.clone();
        Box::pin(async move {
            let Some(reader) = reader else {
                return Ok(Vec::new());
            };
            let mut file = reader.lock().await;
            let mut buffer = vec![0u8; max];
            loop {
                match file.read(&mut buffer).await {
                    Ok(n) => {
                        buffer.truncate(n);
                        return Ok(buffer);
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e),
                }
            }
        })
    }

    fn write_line(&self, line: Vec<u8>) -> LocalBoxFuture<'static, io::Result<()>> {
        let writer = Rc::clone(&self.writer);
        let outbox = Rc::clone(&self.outbox);
        Box::pin(async move {
            outbox.queued.borrow_mut().extend_from_slice(&line);
            let mine = outbox.queued_total.get() + line.len() as u64;
            outbox.queued_total.set(mine);
            // The lock is held across a whole batch and its flush, so lines never interleave;
            // write_all retries short writes and EINTR.
            let mut file = writer.lock().await;
            if outbox.written_total.get() >= mine {
                return Ok(()); // An earlier holder wrote this line in its batch.
            }
            if let Some(kind) = outbox.failed.get() {
                return Err(io::Error::new(kind, "an earlier write to the client failed"));
            }
            let batch = std::mem::take(&mut *outbox.queued.borrow_mut());
            let end = outbox.queued_total.get();
            let written = async {
                file.write_all(&batch).await?;
                file.flush().await
            }
            .await;
            match written {
                Ok(()) => {
                    outbox.written_total.set(end);
                    Ok(())
                }
                Err(error) => {
                    outbox.failed.set(Some(error.kind()));
                    Err(error)
                }
            }
        })
    }

    fn log(&self, line: &crate::env::LogLine<'_>) {
        crate::io::log::emit(line);
    }
}
