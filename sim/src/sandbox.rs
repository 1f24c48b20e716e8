//! The simulator's sandbox: program executions run in this process, on the executor's
//! blocking path, through the same `program::job::run` a worker process runs. A panic is an
//! abnormal end, as a crashed worker would be.

use std::rc::Rc;

use warden::env::{blocking_on, LocalBoxFuture, Sandbox, Spawn};
use warden::program::job::{self, Executed, Job, Stopped};

pub struct SimSandbox(pub Rc<dyn Spawn>);

impl Sandbox for SimSandbox {
    fn execute(&self, job: Job) -> LocalBoxFuture<'static, Result<Executed, Stopped>> {
        if job.load_only {
            // A load probe exists to stop a runaway top level, which in-process cannot be
            // stopped anyway; the catalog compiles the program right after, reporting the same
            // problems. Skipping it halves the cost of the simulator's many restarts.
            return Box::pin(async { Ok(job::loaded()) });
        }
        let spawn = Rc::clone(&self.0);
        Box::pin(async move { blocking_on(spawn.as_ref(), move || job::run(job)).await.map_err(Stopped::Abnormal) })
    }
}
