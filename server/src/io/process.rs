//! Child processes (the operator's notify command) and the process environment.

use std::cell::{Cell, RefCell};
use std::io;
use std::process::Stdio;
use std::rc::Rc;
use std::time::Duration;

use tokio::io::AsyncWriteExt;

use crate::env::{LocalBoxFuture, Process, ProcessOutcome, ProcessRequest};

#[derive(Default)]
pub struct RealProcess {
    /// The shutdown signals received, once listening began.
    signals: RefCell<Option<Rc<Received>>>,
}

struct Received {
    count: Cell<u64>,
    changed: tokio::sync::Notify,
}

impl RealProcess {
    /// The count of shutdown signals, listening for them from the first call on: a task
    /// counts each SIGTERM, SIGINT and SIGHUP for the life of the process.
    fn received(&self) -> Rc<Received> {
        if let Some(received) = self.signals.borrow().as_ref() {
            return Rc::clone(received);
        }
        let received = Rc::new(Received { count: Cell::new(0), changed: tokio::sync::Notify::new() });
        *self.signals.borrow_mut() = Some(Rc::clone(&received));
        use tokio::signal::unix::{signal, SignalKind};
        let kinds = [SignalKind::terminate(), SignalKind::interrupt(), SignalKind::hangup()];
        let mut listening: Vec<_> = kinds.into_iter().filter_map(|kind| signal(kind).ok()).collect();
        let counted = Rc::clone(&received);
        tokio::task::spawn_local(async move {
            loop {
                if listening.is_empty() {
                    return;
                }
                let any = futures_util::future::select_all(listening.iter_mut().map(|s| Box::pin(s.recv())));
                if any.await.0.is_none() {
                    return;
                }
                counted.count.set(counted.count.get() + 1);
                counted.changed.notify_waiters();
            }
        });
        received
    }
}

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

    fn shutdown_signals(&self) -> u64 {
        self.signals.borrow().as_ref().map_or(0, |received| received.count.get())
    }

    fn shutdown_signal(&self, nth: u64) -> LocalBoxFuture<'static, ()> {
        let received = self.received();
        Box::pin(async move {
            loop {
                // Registered before the count is read: a signal in between still wakes it.
                let changed = received.changed.notified();
                tokio::pin!(changed);
                changed.as_mut().enable();
                if received.count.get() >= nth {
                    return;
                }
                changed.await;
            }
        })
    }
}
