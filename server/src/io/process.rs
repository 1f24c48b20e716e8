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

    fn usage(&self) -> Option<crate::env::ProcessUsage> {
        process_usage()
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

/// This process's use of the machine, read from `/proc` (Linux): CPU time and start time from
/// `/proc/self/stat` (in clock ticks; the start after boot, `btime` in `/proc/stat`), resident
/// pages from `/proc/self/statm`, open descriptors from `/proc/self/fd`.
fn process_usage() -> Option<crate::env::ProcessUsage> {
    // SAFETY: sysconf has no preconditions.
    let (ticks, page) = unsafe { (libc::sysconf(libc::_SC_CLK_TCK), libc::sysconf(libc::_SC_PAGESIZE)) };
    let (ticks, page) = (u64::try_from(ticks).ok().filter(|t| *t > 0)?, u64::try_from(page).ok()?);
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The command name may hold spaces and parentheses: the fields follow its last `)`.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<u64>().ok());
    let (utime, stime, started) = (field(14)?, field(15)?, field(22)?);
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let resident: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    let boot: u64 = std::fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|line| line.strip_prefix("btime ")?.trim().parse().ok())?;
    let open_fds = std::fs::read_dir("/proc/self/fd").ok()?.count() as u64;
    Some(crate::env::ProcessUsage {
        cpu_seconds: utime.saturating_add(stime) as f64 / ticks as f64,
        resident_memory_bytes: resident.saturating_mul(page),
        open_fds,
        start_time_seconds: boot as f64 + started as f64 / ticks as f64,
    })
}
