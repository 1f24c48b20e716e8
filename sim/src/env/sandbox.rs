//! The simulator's sandbox: program executions run in this process, on the executor's
//! blocking path, through the same `program::job::run` a worker process runs. A panic is an
//! abnormal end, as a crashed worker would be. Four faults: an execution that takes virtual
//! time (a program computing before it asks for an action), a wall-clock step while one
//! runs, a run whose every execution crashes the server, and no worker at all.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use warden::env::{blocking_on, LocalBoxFuture, Sandbox, Spawn};
use warden::program::job::{self, Executed, Job, Stopped};

use crate::env::clock::SimClock;

/// Faults of the simulated sandbox, shared by every instance of a world.
#[derive(Default)]
pub struct SandboxFaults {
    /// Virtual milliseconds each execution takes.
    pub execution_ms: Cell<u64>,
    /// No worker can be started (the binary or the machine's processes are gone).
    pub unavailable: Cell<bool>,
    /// The wall clock steps by this much during the next execution (0: it does not).
    pub step_wall_ms: Cell<i64>,
    /// Wall-clock steps taken during executions so far (for honest fault counts).
    pub steps_taken: Cell<u64>,
    /// The next execution's run becomes `poisoned`.
    pub poison_next: Cell<bool>,
    /// A run each execution of which crashes the server.
    pub poisoned: RefCell<Option<String>>,
    /// Crashes a poisoned run caused so far.
    pub poison_crashes: Cell<u64>,
}

impl SandboxFaults {
    /// The faults stop: no run crashes the server any more.
    pub fn disarm(&self) {
        self.poison_next.set(false);
        self.poisoned.take();
        self.step_wall_ms.set(0);
    }
}

pub struct SimSandbox {
    pub spawn: Rc<dyn Spawn>,
    pub clock: Rc<SimClock>,
    pub faults: Rc<SandboxFaults>,
    /// The instance's crash flag, for a poisoned run.
    pub crashed: Rc<Cell<bool>>,
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
        if self.faults.poison_next.replace(false) {
            *self.faults.poisoned.borrow_mut() = Some(job.broker.run.clone());
        }
        if self.faults.poisoned.borrow().as_deref() == Some(job.broker.run.as_str()) {
            // The whole server goes down with it: nothing after this point happens.
            self.faults.poison_crashes.set(self.faults.poison_crashes.get() + 1);
            self.crashed.set(true);
            return Box::pin(std::future::pending());
        }
        let spawn = Rc::clone(&self.spawn);
        let clock = Rc::clone(&self.clock);
        let took = self.faults.execution_ms.get();
        let faults = Rc::clone(&self.faults);
        Box::pin(async move {
            let executed = blocking_on(spawn.as_ref(), move || job::run(job)).await.map_err(Stopped::Abnormal);
            clock.advance(took);
            let step = faults.step_wall_ms.replace(0);
            if step != 0 {
                clock.step_wall(step);
                faults.steps_taken.set(faults.steps_taken.get() + 1);
            }
            executed
        })
    }
}
