//! Program executions in worker processes: `warden exec-program` reads one job on stdin and
//! writes its reply on stdout. The worker's address space is limited (`RLIMIT_AS`), so an
//! allocation past the limit ends the worker, not the server; a worker past its wall-clock
//! limit is killed. Either way the run ends as `budget` and the server keeps serving.

use std::io::{self, Read, Write};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::env::{LocalBoxFuture, Sandbox};
use crate::program::job::{self, Executed, Job, Stopped, EXECUTION_MEMORY_BYTES_MAX, REPLY_BYTES_MAX};

/// The hidden subcommand a worker runs as.
pub const WORKER_COMMAND: &str = "exec-program";
/// The largest job a worker reads (a program, its inputs and the journal's completed actions).
const JOB_BYTES_MAX: u64 = 256 * 1024 * 1024;

pub struct WorkerSandbox;

impl Sandbox for WorkerSandbox {
    fn execute(&self, job: Job) -> LocalBoxFuture<'static, Result<Executed, Stopped>> {
        Box::pin(async move {
            let ms = job.time_ms;
            let input = serde_json::to_vec(&job).map_err(|e| Stopped::Abnormal(format!("encoding the job: {e}")))?;
            if input.len() as u64 > JOB_BYTES_MAX {
                return Err(Stopped::Abnormal(format!(
                    "the execution's job (its program, inputs and journaled results) is {} bytes, over {JOB_BYTES_MAX}",
                    input.len()
                )));
            }
            let mut child = spawn_worker(ms)?;
            let mut stdin = child.stdin.take().expect("piped");
            let mut stdout = child.stdout.take().expect("piped");
            let talk = async {
                // Write and read together: a large job and a large reply must not deadlock.
                let write = async {
                    let written = stdin.write_all(&input).await;
                    drop(stdin);
                    written
                };
                let mut reply = Vec::new();
                let mut bounded = (&mut stdout).take(REPLY_BYTES_MAX as u64 + 1);
                let read = bounded.read_to_end(&mut reply);
                let (written, read) = tokio::join!(write, read);
                if reply.len() > REPLY_BYTES_MAX {
                    // The worker may be blocked writing the rest: stop it rather than wait.
                    let _ = child.kill().await;
                    return Err(Stopped::Abnormal(format!("a reply over {REPLY_BYTES_MAX} bytes")));
                }
                let status = child.wait().await;
                Ok((written, read, status, reply))
            };
            let (written, read, status, reply) = match tokio::time::timeout(Duration::from_millis(ms), talk).await {
                Ok(done) => done?,
                Err(_) => return Err(Stopped::TimedOut { ms }),
            };
            let status = status.map_err(|e| Stopped::Unavailable(format!("waiting for a worker: {e}")))?;
            if !status.success() {
                return Err(Stopped::Abnormal(describe(status)));
            }
            written.map_err(|e| Stopped::Abnormal(format!("sending the job: {e}")))?;
            read.map_err(|e| Stopped::Abnormal(format!("reading the reply: {e}")))?;
            serde_json::from_slice(&reply).map_err(|e| Stopped::Abnormal(format!("an unreadable reply: {e}")))
        })
    }
}

/// Starts a worker with its limits. The binary is `/proc/self/exe` where there is one: it
/// still runs this process's binary after an upgrade replaced the file on disk.
fn spawn_worker(ms: u64) -> Result<tokio::process::Child, Stopped> {
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
    // SAFETY: between fork and exec, only async-signal-safe setrlimit calls.
    unsafe {
        command.pre_exec(move || {
            limit(libc::RLIMIT_AS, EXECUTION_MEMORY_BYTES_MAX)?;
            limit(libc::RLIMIT_CORE, 0)?;
            limit(libc::RLIMIT_CPU, ms.div_ceil(1000) + 1)
        });
    }
    command.spawn().map_err(|e| Stopped::Unavailable(format!("starting a worker: {e}")))
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

fn describe(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("the worker exited with status {code}"),
        (None, Some(signal)) => format!("the worker was ended by signal {signal}"),
        (None, None) => "the worker ended without a status".to_string(),
    }
}

/// `warden exec-program`: one job from stdin, its reply to stdout.
pub fn worker_main() -> Result<(), String> {
    let mut input = Vec::new();
    io::stdin().take(JOB_BYTES_MAX).read_to_end(&mut input).map_err(|e| format!("reading the job: {e}"))?;
    let job: Job = serde_json::from_slice(&input).map_err(|e| format!("the job does not parse: {e}"))?;
    let reply = serde_json::to_vec(&job::run(job)).map_err(|e| format!("encoding the reply: {e}"))?;
    let mut stdout = io::stdout().lock();
    stdout.write_all(&reply).and_then(|()| stdout.flush()).map_err(|e| format!("writing the reply: {e}"))
}
