//! The simulator's sandbox: program executions run in this process, on the executor's
//! blocking path, through the same `program::job::run` a worker process runs. A panic is an
//! abnormal end, as a crashed worker would be. Two faults: an execution that takes virtual
//! time (a program computing before it asks for an action), and no worker at all.

use std::cell::Cell;
use std::rc::Rc;

use warden::env::{blocking_on, LocalBoxFuture, Sandbox, Spawn};
use warden::program::job::{self, Executed, Job, Stopped};

use crate::clock::SimClock;

/// Faults of the simulated sandbox, shared by every instance of a world.
#[derive(Default)]
pub struct SandboxFaults {
    /// Virtual milliseconds each execution takes.
    pub execution_ms: Cell<u64>,
    /// No worker can be started (the binary or the machine's processes are gone).
    pub unavailable: Cell<bool>,
}

pub struct SimSandbox {
    pub spawn: Rc<dyn Spawn>,
    pub clock: Rc<SimClock>,
    pub faults: Rc<SandboxFaults>,
}

impl Sandbox for SimSandbox {
    fn execute(&self, job: Job) -> LocalBoxFuture<'static, Result<Executed, Stopped>> {
        if self.faults.unavailable.get() {
            return Box::pin(async { Err(Stopped::Unavailable("simulated: no worker can start".into())) });
        }
        if job.load_only {
            // A load probe exists to stop a runaway top level, which in-process cannot be
            // stopped anyway; the catalog compiles the program right after, reporting the same
            // problems. Skipping it halves the cost of the simulator's many restarts.
            return Box::pin(async { Ok(job::loaded()) });
        }
        let spawn = Rc::clone(&self.spawn);
        let clock = Rc::clone(&self.clock);
        let took = self.faults.execution_ms.get();
        Box::pin(async move {
            let executed = blocking_on(spawn.as_ref(), move || job::run(job)).await.map_err(Stopped::Abnormal);
            clock.advance(took);
            executed
        })
    }
}
