//! A deterministic single-threaded executor. The next ready task is chosen by the seeded
//! RNG; when nothing is ready, virtual time jumps to the next timer. Dropping the executor
//! drops every task: that is how a simulated crash kills a server instance.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

use rand_chacha::ChaCha8Rng;
use rand_core::RngCore;
use warden::env::{LocalBoxFuture, Spawn};

use crate::env::clock::SimClock;

/// The most tasks one instance may hold: a bound, so a runaway spawner is a failure.
pub const TASKS_MAX: usize = 100_000;

struct TaskWaker {
    id: u64,
    ready: Arc<Mutex<BTreeSet<u64>>>,
}

impl Wake for TaskWaker {
    fn wake(self: Arc<Self>) {
        self.ready.lock().expect("ready set").insert(self.id);
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.ready.lock().expect("ready set").insert(self.id);
    }
}

#[derive(Default)]
struct Spawned {
    queue: RefCell<Vec<LocalBoxFuture<'static, ()>>>,
}

/// What stopped `run`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// No task is ready and no timer is due within the horizon.
    Quiet,
    /// The instance crashed (a fault fired).
    Crashed,
    /// The step budget ran out: a livelock or an unbounded loop.
    StepBudget,
}

pub struct Executor {
    tasks: RefCell<BTreeMap<u64, LocalBoxFuture<'static, ()>>>,
    ready: Arc<Mutex<BTreeSet<u64>>>,
    spawned: Rc<Spawned>,
    next_id: Cell<u64>,
    rng: RefCell<ChaCha8Rng>,
    clock: Rc<SimClock>,
    pub crashed: Rc<Cell<bool>>,
    /// The process exited (its main task returned): as a real exit, no task of it runs again.
    pub exited: Rc<Cell<bool>>,
    pub polls: Cell<u64>,
}

/// The `Spawn` half of the seam, handed to the server.
pub struct SimSpawn {
    spawned: Rc<Spawned>,
}

impl Spawn for SimSpawn {
    fn spawn(&self, task: LocalBoxFuture<'static, ()>) {
        self.spawned.queue.borrow_mut().push(task);
    }

    fn run_blocking(&self, job: Box<dyn FnOnce() + Send>) -> LocalBoxFuture<'static, ()> {
        // Inline: the simulator has one thread, and Starlark is deterministic.
        let mut job = Some(job);
        Box::pin(std::future::poll_fn(move |_| {
            if let Some(job) = job.take() {
                job();
            }
            Poll::Ready(())
        }))
    }
}

impl Executor {
    pub fn new(rng: ChaCha8Rng, clock: Rc<SimClock>, crashed: Rc<Cell<bool>>) -> Executor {
        Executor {
            tasks: RefCell::new(BTreeMap::new()),
            ready: Arc::new(Mutex::new(BTreeSet::new())),
            spawned: Rc::new(Spawned::default()),
            next_id: Cell::new(0),
            rng: RefCell::new(rng),
            clock,
            crashed,
            exited: Rc::default(),
            polls: Cell::new(0),
        }
    }

    pub fn spawner(&self) -> SimSpawn {
        SimSpawn { spawned: Rc::clone(&self.spawned) }
    }

    pub fn spawn(&self, task: LocalBoxFuture<'static, ()>) {
        self.spawned.queue.borrow_mut().push(task);
    }

    fn admit_spawned(&self) {
        let new: Vec<_> = self.spawned.queue.borrow_mut().drain(..).collect();
        for task in new {
            let id = self.next_id.get();
            self.next_id.set(id + 1);
            self.tasks.borrow_mut().insert(id, task);
            self.ready.lock().expect("ready set").insert(id);
        }
        assert!(self.tasks.borrow().len() <= TASKS_MAX, "more than {TASKS_MAX} tasks in one instance");
    }

    pub fn task_count(&self) -> usize {
        self.tasks.borrow().len() + self.spawned.queue.borrow().len()
    }

    /// Lets `ms` of virtual time pass with the instance alive: its timers due meanwhile fire in
    /// order (a lease renewed as each renewal falls due), then the clock reaches the end. Time
    /// passing is not a pause: `Fault::AdvanceTime` is one.
    pub fn run_for(&self, ms: u64, steps: u64) -> Stop {
        self.run_for_beside(ms, steps, &[])
    }

    /// `run_for`, with the instances beside this one running too (`run_beside`).
    pub fn run_for_beside(&self, ms: u64, steps: u64, beside: &[Rc<Process>]) -> Stop {
        let until = self.clock.now().saturating_add(ms);
        let stop = self.run_beside(ms, steps, beside);
        if stop == Stop::Quiet && self.clock.now() < until {
            self.clock.advance(until - self.clock.now());
        }
        stop
    }

    /// Runs until quiet, crashed, or `steps` polls. Timers due within `horizon_ms` of the
    /// current virtual time fire (time jumps to them); later ones wait for the next run.
    pub fn run(&self, horizon_ms: u64, steps: u64) -> Stop {
        self.run_beside(horizon_ms, steps, &[])
    }

    /// Runs this executor and, interleaved with it, the instances beside it (`beside`, the
    /// other instances of a world on one store) that are not paused: the next task is drawn
    /// from every ready one, so the instances run concurrently on the one clock. Alone, the
    /// draws are this executor's own, as they always were.
    pub fn run_beside(&self, horizon_ms: u64, steps: u64, beside: &[Rc<Process>]) -> Stop {
        let until = self.clock.now().saturating_add(horizon_ms);
        for _ in 0..steps {
            if self.crashed.get() {
                return Stop::Crashed;
            }
            if self.exited.get() {
                return Stop::Quiet;
            }
            self.admit_spawned();
            // Beside others, an executor whose every task ended (a command's) is done.
            if !beside.is_empty() && self.task_count() == 0 {
                return Stop::Quiet;
            }
            let running: Vec<&Executor> = beside.iter().filter(|p| p.runs()).map(|p| &p.executor).collect();
            running.iter().for_each(|peer| peer.admit_spawned());
            let Some(next) = self.draw_ready(&running) else {
                // An executor with no task left (a command's, once it finished) fires no timer:
                // the timers are another executor's, and firing them here would move the shared
                // clock past them while that one is not run (a server's lease renewals).
                let idle = self.task_count() == 0 && beside.iter().all(|p| p.executor.task_count() == 0);
                if idle {
                    return Stop::Quiet;
                }
                if self.clock.fire_next_timer(until) {
                    continue;
                }
                return Stop::Quiet;
            };
            next.poll_ready(next.pick_ready());
        }
        Stop::StepBudget
    }

    /// The executor whose task runs next: this one alone draws as it always did; beside peers,
    /// one ready task is drawn among all of them.
    fn draw_ready<'a>(&'a self, running: &[&'a Executor]) -> Option<&'a Executor> {
        let mine = self.ready.lock().expect("ready set").len() as u64;
        if running.is_empty() {
            return (mine > 0).then_some(self);
        }
        let counts: Vec<u64> = running.iter().map(|peer| peer.ready.lock().expect("ready set").len() as u64).collect();
        let total = mine + counts.iter().sum::<u64>();
        if total == 0 {
            return None;
        }
        let mut draw = self.rng.borrow_mut().next_u64() % total;
        if draw < mine {
            return Some(self);
        }
        draw -= mine;
        for (peer, count) in running.iter().zip(counts) {
            if draw < count {
                return Some(peer);
            }
            draw -= count;
        }
        unreachable!("the draw is below the total")
    }

    /// One of this executor's ready tasks, drawn by its own RNG.
    fn pick_ready(&self) -> u64 {
        let ready = self.ready.lock().expect("ready set");
        let index = (self.rng.borrow_mut().next_u64() % ready.len() as u64) as usize;
        ready.iter().nth(index).copied().expect("a ready task")
    }

    /// Polls task `id` once.
    fn poll_ready(&self, id: u64) {
        self.ready.lock().expect("ready set").remove(&id);
        let task = self.tasks.borrow_mut().remove(&id);
        let Some(mut task) = task else { return };
        let waker = Waker::from(Arc::new(TaskWaker { id, ready: Arc::clone(&self.ready) }));
        let mut context = Context::from_waker(&waker);
        self.polls.set(self.polls.get() + 1);
        if task.as_mut().poll(&mut context).is_pending() {
            self.tasks.borrow_mut().insert(id, task);
        }
    }
}

/// A server instance's process: its executor, and whether it is paused. The instances beside
/// a world's first one (several instances on one store) are run interleaved with it.
pub struct Process {
    pub executor: Executor,
    /// Paused: none of its tasks runs (a stall, a stopped process), while time passes.
    pub paused: Cell<bool>,
}

impl Process {
    /// Neither paused, exited nor crashed.
    pub fn runs(&self) -> bool {
        !self.paused.get() && !self.executor.exited.get() && !self.executor.crashed.get()
    }
}

impl Drop for Executor {
    /// Drops every task, including those spawned but never polled: a queued task holds an
    /// `Env`, whose spawner holds the queue, so leaving it would be a reference cycle.
    fn drop(&mut self) {
        self.tasks.borrow_mut().clear();
        let queued: Vec<_> = self.spawned.queue.borrow_mut().drain(..).collect();
        drop(queued);
    }
}
