//! Child processes (the operator's notify command) and the process environment.

use std::io;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncWriteExt;

use crate::env::{LocalBoxFuture, Process, ProcessOutcome, ProcessRequest};

pub struct RealProcess;

impl Process for RealProcess {
    fn run(&self, request: ProcessRequest) -> LocalBoxFuture<'static, io::Result<ProcessOutcome>> {
        Box::pin(async move {
            let (program, args) = request.argv.split_first().ok_or_else(|| io::Error::other("empty command"))?;
            let mut child = tokio::process::Command::new(program)
                .args(args)
                .current_dir(&request.cwd)
                .env_clear()
                .envs(request.env.iter().map(|(k, v)| (k, v)))
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .kill_on_drop(true)
                .spawn()?;
            if let Some(mut stdin) = child.stdin.take() {
                // A command that does not read its input is not an error.
                let _ = stdin.write_all(&request.stdin).await;
            }
            match tokio::time::timeout(Duration::from_millis(request.timeout_ms), child.wait()).await {
                Ok(status) => Ok(ProcessOutcome { exit_code: status?.code() }),
                Err(_) => {
                    let _ = child.kill().await;
                    Ok(ProcessOutcome { exit_code: None })
                }
            }
        })
    }

    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }

    fn shutdown_signal(&self) -> LocalBoxFuture<'static, ()> {
        use tokio::signal::unix::{signal, SignalKind};
        // Registered now, so a signal that comes before the first poll is not missed.
        let registered = (signal(SignalKind::terminate()), signal(SignalKind::interrupt()));
        Box::pin(async move {
            match registered {
                (Ok(mut terminate), Ok(mut interrupt)) => {
                    tokio::select! {
                        _ = terminate.recv() => {}
                        _ = interrupt.recv() => {}
                    }
                }
                // No signal handling (no reactor for it): signals keep their default action.
                _ => std::future::pending().await,
            }
        })
    }
}
