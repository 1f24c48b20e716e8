//! The production side of the seam: the only code in the server that touches tokio, the
//! filesystem, sockets, processes, the clock or OS randomness (DESIGN.md section 3).

mod admin;
pub mod db;
mod disk;
mod http_server;
pub mod log;
mod net;
mod postgres;
mod process;
pub mod sandbox;
pub mod state_db;
mod stdio;
pub mod trace;

use std::future::Future;
use std::io;
use std::rc::Rc;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::env::{Clock, Env, LocalBoxFuture, Point, Probe, Rng, Spawn};

pub use stdio::{protect_stdio, ProtectedStdio};

/// Runs `main` on a tokio current-thread runtime with a local task set, so `!Send` tasks
/// can be spawned. Tasks still running when `main` returns are dropped.
pub fn run<F: Future>(main: F) -> F::Output {
    let runtime =
        tokio::runtime::Builder::new_current_thread().enable_all().build().expect("building the tokio runtime");
    let local = tokio::task::LocalSet::new();
    let output = local.block_on(&runtime, main);
    drop(local);
    // A read of stdin may still be parked on a blocking thread; do not wait for it.
    runtime.shutdown_background();
    output
}

/// Asks a person at a terminal: `question` on stderr, the answer a line of stdin (yes
/// starting with `y`). `None` when stdin is no terminal: a script answers with flags.
pub fn confirm(question: &str) -> Option<bool> {
    use std::io::{IsTerminal, Write};
    if !std::io::stdin().is_terminal() {
        return None;
    }
    eprint!("{question}");
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    // An answer that cannot be read is no "yes".
    if std::io::stdin().read_line(&mut answer).is_err() {
        return Some(false);
    }
    Some(answer.trim_start().starts_with(['y', 'Y']))
}

/// The real Env over the given protocol stream.
pub fn real_env(stdio: ProtectedStdio) -> Env {
    Env {
        clock: Rc::new(RealClock),
        disk: Rc::new(disk::RealDisk),
        stdio: Rc::new(stdio),
        net: Rc::new(net::RealNet),
        db: Rc::new(db::RealDb),
        state_db: Rc::new(state_db::RealStateDb),
        rng: Rc::new(RealRng),
        spawn: Rc::new(RealSpawn),
        process: Rc::new(process::RealProcess::default()),
        probe: Rc::new(RealProbe::from_environment()),
        sandbox: Rc::new(sandbox::WorkerSandbox::default()),
        http: Rc::new(http_server::RealHttp),
        admin: Rc::new(admin::RealAdmin),
        log_secrets: Rc::default(),
    }
}

/// Crash points for tests of the real binary, with tikv's `fail` crate: in a build with the
/// `crash-points` feature, `FAILPOINTS="reserved=return"` (or `"action-begun=1*off->return"`,
/// and so on, named by `Point::name`) makes the process abort right after that durable step,
/// as a power cut would. A build without the feature has no failpoints at all.
struct RealProbe {
    #[cfg(feature = "crash-points")]
    _scenario: fail::FailScenario<'static>,
}

impl RealProbe {
    fn from_environment() -> RealProbe {
        RealProbe {
            #[cfg(feature = "crash-points")]
            _scenario: fail::FailScenario::setup(),
        }
    }
}

impl Probe for RealProbe {
    #[allow(unused_variables)]
    fn reached(&self, point: Point, run: &str) {
        #[cfg(feature = "crash-points")]
        fail::eval(point.name(), |_| {
            eprintln!("warden: crash point `{}` reached for run {run}; aborting", point.name());
            std::process::abort()
        });
    }
}

/// An Env for commands that do not speak the protocol (`check`, `schema`, `status`): its
/// protocol stream reads nothing and writes to stdout.
pub fn command_env() -> Env {
    real_env(ProtectedStdio::for_command())
}

struct RealClock;

impl Clock for RealClock {
    fn now_ms(&self) -> u64 {
        SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
    }

    fn monotonic_ms(&self) -> u64 {
        self.monotonic_us() / 1000
    }

    fn monotonic_us(&self) -> u64 {
        static ORIGIN: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        ORIGIN.get_or_init(std::time::Instant::now).elapsed().as_micros() as u64
    }

    fn sleep(&self, ms: u64) -> LocalBoxFuture<'static, ()> {
        Box::pin(tokio::time::sleep(std::time::Duration::from_millis(ms)))
    }
}

struct RealRng;

impl Rng for RealRng {
    /// The kernel's random bytes through getrandom(2): no file descriptor, so it works when
    /// every descriptor is taken (a flood of connections).
    fn fill(&self, bytes: &mut [u8]) {
        let mut filled = 0;
        while filled < bytes.len() {
            let rest = &mut bytes[filled..];
            // SAFETY: the kernel writes at most `rest.len()` bytes into `rest`.
            let got = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
            if got > 0 {
                filled += got as usize;
            } else {
                let error = std::io::Error::last_os_error();
                assert!(error.kind() == std::io::ErrorKind::Interrupted, "getrandom failed: {error}");
            }
        }
    }
}

struct RealSpawn;

impl Spawn for RealSpawn {
    fn spawn(&self, task: LocalBoxFuture<'static, ()>) {
        tokio::task::spawn_local(task);
    }

    fn run_blocking(&self, job: Box<dyn FnOnce() + Send>) -> LocalBoxFuture<'static, ()> {
        Box::pin(async move {
            // A panic inside the job is caught by `Env::blocking`; a join error here can
            // only be cancellation at shutdown.
            let _ = tokio::task::spawn_blocking(job).await;
        })
    }
}

/// Runs blocking filesystem or library work off the reactor.
pub(crate) async fn off_reactor<T: Send + 'static>(
    job: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> io::Result<T> {
    match tokio::task::spawn_blocking(job).await {
        Ok(result) => result,
        Err(error) => Err(io::Error::other(format!("blocking task failed: {error}"))),
    }
}
