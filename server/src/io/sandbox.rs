//! Program executions in worker processes (`warden exec-program`). A worker reads jobs from
//! stdin and writes replies to stdout, each a frame (an 8-byte little-endian length, then the
//! JSON), and keeps the programs it compiled. Its address space is limited (`RLIMIT_AS`), so an
//! allocation past the limit ends the worker, not the server; a worker past a job's wall-clock
//! limit is killed. Either way the run ends as `budget` and the server keeps serving. Workers
//! that finished a job cleanly wait in a small pool for the next one: starting a process per
//! execution would cost more than the execution.

use std::cell::RefCell;
use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::process::Stdio;
use std::rc::Rc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStdin, ChildStdout};

use crate::env::{LocalBoxFuture, Sandbox};
use crate::program::job::{self, Executed, Job, Stopped, EXECUTION_MEMORY_BYTES_MAX, REPLY_BYTES_MAX};
use crate::program::Program;

/// The hidden subcommand a worker runs as.
pub const WORKER_COMMAND: &str = "exec-program";
/// The largest job a worker reads (a program, its inputs and the journal's completed actions).
const JOB_BYTES_MAX: u64 = 256 * 1024 * 1024;
/// Idle workers kept for the next job; more are stopped.
const IDLE_WORKERS_MAX: usize = 8;
/// Jobs one worker runs before it is replaced (bounds what a long life can accumulate).
const JOBS_PER_WORKER_MAX: u64 = 1000;
/// Compiled programs one worker keeps.
const PROGRAMS_CACHED_MAX: usize = 64;

struct Worker {
    /// Dropping the child kills the process (`kill_on_drop`).
    _child: Child,
    stdin: ChildStdin,
    stdout: ChildStdout,
    jobs: u64,
}

#[derive(Default)]
pub struct WorkerSandbox {
    idle: Rc<RefCell<Vec<Worker>>>,
}

impl Sandbox for WorkerSandbox {
    fn execute(&self, job: Job) -> LocalBoxFuture<'static, Result<Executed, Stopped>> {
        let idle = Rc::clone(&self.idle);
        Box::pin(async move {
            let ms = job.time_ms;
            let input = serde_json::to_vec(&job).map_err(|e| Stopped::Abnormal(format!("encoding the job: {e}")))?;
            if input.len() as u64 > JOB_BYTES_MAX {
                return Err(Stopped::Abnormal(format!(
                    "the execution's job (its program, inputs and journaled results) is {} bytes, over {JOB_BYTES_MAX}",
                    input.len()
                )));
            }
            let (mut worker, pooled) = match live_idle_worker(&idle) {
                Some(worker) => (worker, true),
                None => (spawn_worker()?, false),
            };
            let exchanged = tokio::time::timeout(Duration::from_millis(ms), async {
                match exchange(&mut worker, &input).await {
                    // A pooled worker that died since its last job (the OOM killer's pick)
                    // never got this one: it goes to a fresh worker, and the run is not blamed.
                    Err(Failed::Undelivered(_)) if pooled => {
                        worker = spawn_worker().map_err(Failed::NoWorker)?;
                        exchange(&mut worker, &input).await
                    }
                    other => other,
                }
            });
            let reply = match exchanged.await {
                Ok(Ok(reply)) => reply,
                // No worker could take the job: the server's machinery, never the run's fault.
                Ok(Err(Failed::NoWorker(stopped))) => return Err(stopped),
                Ok(Err(failed)) => return Err(ended(worker, failed.into_problem()).await),
                // Dropping the worker kills it.
                Err(_) => return Err(Stopped::TimedOut { ms }),
            };
            worker.jobs += 1;
            if worker.jobs < JOBS_PER_WORKER_MAX && idle.borrow().len() < IDLE_WORKERS_MAX {
                idle.borrow_mut().push(worker);
            }
            serde_json::from_slice(&reply).map_err(|e| Stopped::Abnormal(format!("an unreadable reply: {e}")))
        })
    }
}

/// The newest idle worker still alive; dead ones found on the way are dropped.
fn live_idle_worker(idle: &RefCell<Vec<Worker>>) -> Option<Worker> {
    loop {
        let mut worker = idle.borrow_mut().pop()?;
        if matches!(worker._child.try_wait(), Ok(None)) {
            return Some(worker);
        }
    }
}

/// How an exchange with a worker failed.
enum Failed {
    /// The job could not be written: the worker was gone before it read it.
    Undelivered(String),
    /// The worker took the job and then failed (died, or answered wrongly).
    During(String),
    /// No fresh worker could be started for a job a dead one never got.
    NoWorker(Stopped),
}

impl Failed {
    fn into_problem(self) -> String {
        match self {
            Failed::Undelivered(problem) | Failed::During(problem) => problem,
            Failed::NoWorker(stopped) => stopped.to_string(),
        }
    }
}

/// Sends one job frame and reads its reply frame.
async fn exchange(worker: &mut Worker, input: &[u8]) -> Result<Vec<u8>, Failed> {
    // The worker reads a whole job before it writes anything, so writing then reading cannot
    // deadlock on full pipes. A write to a worker that is gone fails at once (EPIPE).
    let undelivered = |e: io::Error| Failed::Undelivered(format!("sending the job: {e}"));
    worker.stdin.write_all(&(input.len() as u64).to_le_bytes()).await.map_err(undelivered)?;
    worker.stdin.write_all(input).await.map_err(undelivered)?;
    worker.stdin.flush().await.map_err(undelivered)?;
    let during = |e: io::Error| Failed::During(format!("reading the reply: {e}"));
    let mut length = [0u8; 8];
    worker.stdout.read_exact(&mut length).await.map_err(during)?;
    let length = u64::from_le_bytes(length);
    if length > REPLY_BYTES_MAX as u64 {
        return Err(Failed::During(format!("a reply of {length} bytes, over {REPLY_BYTES_MAX}")));
    }
    let mut reply = vec![0u8; length as usize];
    worker.stdout.read_exact(&mut reply).await.map_err(during)?;
    Ok(reply)
}

/// A worker that failed mid-job: how it ended, for the run's message. It is not reused.
async fn ended(worker: Worker, problem: String) -> Stopped {
    let mut child = worker._child;
    let status = match tokio::time::timeout(Duration::from_millis(1000), child.wait()).await {
        Ok(Ok(status)) if ended_by_a_drain_signal(status) => {
            // Someone else's signal (a worker ignores these), not the program's doing: the run
            // resumes at the next start, as after a crash.
            return Stopped::Unavailable(format!("{}, a signal the server drains on", describe(status)));
        }
        Ok(Ok(status)) => describe(status),
        _ => {
            let _ = child.kill().await;
            problem
        }
    };
    Stopped::Abnormal(status)
}

/// Starts a worker with its memory limit. The binary is `/proc/self/exe` where there is one:
/// it still runs this process's binary after an upgrade replaced the file on disk.
fn spawn_worker() -> Result<Worker, Stopped> {
    let exe = match std::path::Path::new("/proc/self/exe").exists() {
        true => std::path::PathBuf::from("/proc/self/exe"),
        false => {
            std::env::current_exe().map_err(|e| Stopped::Unavailable(format!("finding the warden binary: {e}")))?
        }
    };
    let mut command = tokio::process::Command::new(exe);
    command
        .arg(WORKER_COMMAND)
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    // SAFETY: between fork and exec, only async-signal-safe calls (setrlimit, sigaction
    // through signal). No CPU limit: it would add up over a worker's jobs; the wall-clock
    // limit stops a spinning job. A worker ignores SIGINT, SIGTERM and SIGHUP (a terminal's
    // Ctrl-C, a supervisor's stop and a closed terminal reach the whole group): the server
    // drains, and its workers
    // end when it closes their stdin; a server killed outright takes them with it
    // (PR_SET_PDEATHSIG), since no one else would enforce their time limit.
    unsafe {
        command.pre_exec(|| {
            limit(libc::RLIMIT_AS, EXECUTION_MEMORY_BYTES_MAX)?;
            limit(libc::RLIMIT_CORE, 0)?;
            libc::signal(libc::SIGINT, libc::SIG_IGN);
            libc::signal(libc::SIGTERM, libc::SIG_IGN);
            libc::signal(libc::SIGHUP, libc::SIG_IGN);
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = command.spawn().map_err(|e| Stopped::Unavailable(format!("starting a worker: {e}")))?;
    let stdin = child.stdin.take().expect("piped");
    let stdout = child.stdout.take().expect("piped");
    Ok(Worker { _child: child, stdin, stdout, jobs: 0 })
}

fn limit(resource: libc::__rlimit_resource_t, value: u64) -> io::Result<()> {
    let limit = libc::rlimit { rlim_cur: value, rlim_max: value };
    // SAFETY: setrlimit reads the struct passed by reference.
    if unsafe { libc::setrlimit(resource, &limit) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn ended_by_a_drain_signal(status: std::process::ExitStatus) -> bool {
    use std::os::unix::process::ExitStatusExt;
    matches!(status.signal(), Some(libc::SIGHUP | libc::SIGINT | libc::SIGTERM))
}

fn describe(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("the worker exited with status {code}"),
        (None, Some(signal)) => format!("the worker was ended by signal {signal}"),
        (None, None) => "the worker ended without a status".to_string(),
    }
}

/// `warden exec-program`: jobs from stdin, each reply to stdout, until stdin closes.
pub fn worker_main() -> Result<(), String> {
    let mut stdin = io::stdin().lock();
    let mut stdout = io::stdout().lock();
    let mut programs: HashMap<String, Program> = HashMap::new();
    loop {
        let mut length = [0u8; 8];
        match stdin.read_exact(&mut length) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(format!("reading a job: {e}")),
        }
        let length = u64::from_le_bytes(length);
        if length > JOB_BYTES_MAX {
            return Err(format!("a job of {length} bytes, over {JOB_BYTES_MAX}"));
        }
        let mut input = vec![0u8; length as usize];
        stdin.read_exact(&mut input).map_err(|e| format!("reading a job: {e}"))?;
        let mut job: Job = serde_json::from_slice(&input).map_err(|e| format!("a job does not parse: {e}"))?;
        job.compiled = cached(&mut programs, &job);
        let executed = job::run(job);
        let reply = serde_json::to_vec(&executed).map_err(|e| format!("encoding a reply: {e}"))?;
        stdout.write_all(&(reply.len() as u64).to_le_bytes()).map_err(|e| format!("writing a reply: {e}"))?;
        stdout.write_all(&reply).and_then(|()| stdout.flush()).map_err(|e| format!("writing a reply: {e}"))?;
    }
}

/// The job's program compiled, from this worker's cache or compiled now (a program that does
/// not compile is left to `job::run`, which reports it).
fn cached(programs: &mut HashMap<String, Program>, job: &Job) -> Option<Program> {
    let key = format!("{}\u{0}{}\u{0}{}", job.entry, job.grant_names.join(","), job.source);
    if let Some(program) = programs.get(&key) {
        return Some(program.clone());
    }
    let program = Program::load(&job.path, &job.source, &job.entry, &job.grant_names).ok()?;
    if programs.len() >= PROGRAMS_CACHED_MAX {
        programs.clear();
    }
    programs.insert(key, program.clone());
    Some(program)
}
