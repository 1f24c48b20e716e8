//! A simulated world: one disk and one clock that outlive server instances, and the
//! instances started on them. A crash drops an instance's every task and applies the disk's
//! crash semantics; the next instance recovers through the normal start-up path.

use crate::names::ROOT;
use std::cell::{Cell, RefCell};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};
use serde_json::Value;
use warden::env::{Env, LocalBoxFuture, Point, Probe, Rng};
use warden_faults::Transport;

use crate::env::clock::{SimClock, SimClockHandle};
use crate::env::disk::{SimDisk, SimDiskHandle};
use crate::env::executor::{Executor, Stop};
use crate::env::oracle::Oracle;
use crate::env::services::{Services, SimDb, SimNet, SimProcess};
use crate::env::stdio::{Pipe, SimStdio};

/// Virtual time an instance may run ahead while quiet (timers due within it fire).
pub const HORIZON_MS: u64 = 60_000;
/// Polls one `run` may take before it is called a livelock.
pub const STEPS_MAX: u64 = 5_000_000;

/// Crash when `point` is reached for the `nth` time (1-based), counting across instances.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CrashAt {
    pub point: Point,
    pub nth: u32,
}

#[derive(Default)]
pub struct Probes {
    pub seen: RefCell<Vec<(Point, String)>>,
    pub crash_at: Cell<Option<CrashAt>>,
    pub crashes: RefCell<Vec<Point>>,
    /// A pause armed for the next action's begin (`Fault::PausesAfterActionBegun`), and the
    /// clock it moves; how many fired.
    pub pause_after_begin: Cell<Option<u64>>,
    pub pauses: Cell<u64>,
    pub clock: RefCell<Option<Rc<SimClock>>>,
}

/// A check that watches one server instance's probes: the checks room makes one for each
/// instance (`World::probe_watch`), which this room cannot name.
pub trait ProbeWatch {
    fn reached(&self, point: Point, run: &str);
}

/// Makes a fresh `ProbeWatch` for each instance started.
pub type ProbeWatchFactory = Box<dyn Fn() -> Box<dyn ProbeWatch>>;

struct SimProbe {
    probes: Rc<Probes>,
    crashed: Rc<Cell<bool>>,
    watch: Option<Box<dyn ProbeWatch>>,
}

impl Probe for SimProbe {
    fn reached(&self, point: Point, run: &str) {
        if self.crashed.get() {
            return;
        }
        self.probes.seen.borrow_mut().push((point, run.to_string()));
        if let Some(watch) = &self.watch {
            watch.reached(point, run);
        }
        if point == Point::ActionBegun {
            if let (Some(ms), Some(clock)) = (self.probes.pause_after_begin.get(), self.probes.clock.borrow().as_ref())
            {
                // The process stalls here: no task of it runs, and time passes.
                self.probes.pause_after_begin.set(None);
                self.probes.pauses.set(self.probes.pauses.get() + 1);
                clock.advance(ms);
            }
        }
        if let Some(at) = self.probes.crash_at.get() {
            let count = self.probes.seen.borrow().iter().filter(|(p, _)| *p == point).count() as u32;
            if at.point == point && at.nth == count {
                self.probes.crashes.borrow_mut().push(point);
                self.crashed.set(true);
            }
        }
    }
}

struct SimRng(RefCell<ChaCha8Rng>);

impl Rng for SimRng {
    fn fill(&self, bytes: &mut [u8]) {
        self.0.borrow_mut().fill_bytes(bytes);
    }
}

pub struct World {
    pub seed: u64,
    rng: RefCell<ChaCha8Rng>,
    pub clock: Rc<SimClock>,
    pub disk: Rc<SimDisk>,
    pub crashed: Rc<Cell<bool>>,
    pub probes: Rc<Probes>,
    pub instances: Cell<u32>,
    pub services: Rc<Services>,
    /// Faults of program executions (how long they take; no worker at all).
    pub sandbox: Rc<crate::env::sandbox::SandboxFaults>,
    /// The durability oracle, shared by the services and the protocol stream.
    pub oracle: Rc<Oracle>,
    /// A client that reads the server's lines slowly (a fault).
    pub slow_reader: Rc<crate::env::stdio::SlowReader>,
    /// The live-stream fault, shared by every instance's HTTP bridge.
    pub stream_cut: Rc<crate::env::http::StreamCut>,
    /// How the client reaches each server instance.
    pub transport: Cell<Transport>,
    /// In an OAuth world, the principal each call (by id) was sent as.
    pub principals: Rc<RefCell<std::collections::BTreeMap<i64, &'static str>>>,
    /// The live server's admin channel, which `warden resolve` beside it reaches.
    pub admin: Rc<crate::env::admin::SimAdmin>,
    /// What watches each instance's probes, if anything (the sweep's checks).
    pub probe_watch: RefCell<Option<ProbeWatchFactory>>,
    /// The PostgreSQL database instances keep their shared state in (issue 28).
    pub shared_db: Rc<crate::env::state_db::SharedDb>,
}

pub struct Instance {
    executor: Executor,
    pub pipe: Rc<Pipe>,
    pub exit: Rc<RefCell<Option<Result<(), String>>>>,
    disk: Rc<SimDisk>,
}

impl World {
    pub fn new(seed: u64) -> World {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let crashed = Rc::new(Cell::new(false));
        let clock = SimClock::new();
        let disk = SimDisk::new(ChaCha8Rng::seed_from_u64(rng.next_u64()), Rc::clone(&crashed), Rc::clone(&clock));
        let services = Services::new();
        *services.crashed.borrow_mut() = Some(Rc::clone(&crashed));
        *services.clock.borrow_mut() = Some(Rc::clone(&clock));
        let oracle = Oracle::new(Rc::clone(&disk), World::path("journals"));
        *services.oracle.borrow_mut() = Some(Rc::clone(&oracle));
        *services.disk.borrow_mut() = Some(Rc::clone(&disk));
        let shared_db = crate::env::state_db::SharedDb::new(Rc::clone(&clock));
        *services.shared_db.borrow_mut() = Some(Rc::clone(&shared_db));
        let probes = Rc::new(Probes { clock: RefCell::new(Some(Rc::clone(&clock))), ..Probes::default() });
        // The checker reads the store's records where the files would be (a world on files
        // leaves the store empty, and the overlay shows nothing).
        *disk.overlay.borrow_mut() = Some(crate::env::state_db::StoreFiles::new(&shared_db, World::path("journals")));
        World {
            seed,
            rng: RefCell::new(rng),
            clock,
            disk,
            crashed,
            probes,
            instances: Cell::new(0),
            services,
            sandbox: Rc::new(crate::env::sandbox::SandboxFaults::default()),
            oracle,
            slow_reader: Rc::default(),
            stream_cut: Rc::default(),
            transport: Cell::new(Transport::Stdio),
            principals: Rc::default(),
            admin: Rc::default(),
            probe_watch: RefCell::default(),
            shared_db,
        }
    }

    pub fn path(relative: &str) -> PathBuf {
        Path::new(ROOT).join(relative)
    }

    /// Whether the world's manifest keeps the ledger and the runs' records in the PostgreSQL
    /// store (`server.store`).
    pub fn on_the_store(&self) -> bool {
        let manifest = self.disk.peek(&World::path("manifest.json")).unwrap_or_default();
        let manifest: serde_json::Value = serde_json::from_slice(&manifest).unwrap_or_default();
        manifest["server"].get("store").is_some()
    }

    pub fn install(&self, relative: &str, bytes: &[u8]) {
        self.disk.install(&World::path(relative), bytes);
    }

    pub fn next_u64(&self) -> u64 {
        self.rng.borrow_mut().next_u64()
    }

    fn stdio(&self, executor: &Executor, pipe: &Rc<Pipe>) -> SimStdio {
        SimStdio {
            pipe: Rc::clone(pipe),
            crashed: Rc::clone(&self.crashed),
            oracle: Rc::clone(&self.oracle),
            clock: Rc::clone(&self.clock),
            spawn: executor.spawner(),
        }
    }

    fn env(&self, executor: &Executor, pipe: &Rc<Pipe>, http: Rc<dyn warden::env::HttpServe>) -> Env {
        Env {
            clock: Rc::new(SimClockHandle(Rc::clone(&self.clock))),
            disk: Rc::new(SimDiskHandle(Rc::clone(&self.disk))),
            stdio: Rc::new(self.stdio(executor, pipe)),
            net: Rc::new(SimNet(Rc::clone(&self.services))),
            db: Rc::new(SimDb(Rc::clone(&self.services))),
            state_db: Rc::new(crate::env::state_db::SimStateDb(Rc::clone(&self.shared_db))),
            rng: Rc::new(SimRng(RefCell::new(ChaCha8Rng::seed_from_u64(self.next_u64())))),
            spawn: Rc::new(executor.spawner()),
            sandbox: Rc::new(crate::env::sandbox::SimSandbox {
                spawn: Rc::new(executor.spawner()),
                clock: Rc::clone(&self.clock),
                faults: Rc::clone(&self.sandbox),
                crashed: Rc::clone(&self.crashed),
            }),
            process: Rc::new(SimProcess::new(Rc::clone(&self.services))),
            probe: Rc::new(SimProbe {
                probes: Rc::clone(&self.probes),
                crashed: Rc::clone(&self.crashed),
                watch: self.probe_watch.borrow().as_ref().map(|make| make()),
            }),
            http,
            admin: Rc::new(crate::env::admin::SimAdminHandle(Rc::clone(&self.admin))),
        }
    }

    /// Starts a server instance serving `manifest` (relative to the root).
    pub fn start(&self, manifest: &str) -> Instance {
        self.instances.set(self.instances.get() + 1);
        let executor =
            Executor::new(ChaCha8Rng::seed_from_u64(self.next_u64()), Rc::clone(&self.clock), Rc::clone(&self.crashed));
        let pipe = Pipe::new(Rc::clone(&self.slow_reader));
        let exit = Rc::new(RefCell::new(None));
        let slot = Rc::clone(&exit);
        let manifest = World::path(manifest);
        match self.transport.get() {
            Transport::Stdio => {
                let env = self.env(&executor, &pipe, Rc::new(NoHttp));
                let exited = Rc::clone(&executor.exited);
                executor.spawn(Box::pin(async move {
                    let outcome = warden::commands::serve_mcp(&env, &manifest, None).await;
                    *slot.borrow_mut() = Some(outcome);
                    exited.set(true);
                }));
            }
            Transport::Http | Transport::HttpOauth => {
                let oauth = self.transport.get() == Transport::HttpOauth;
                let http = Rc::new(crate::env::http::SimHttp {
                    handler: Rc::default(),
                    listening: warden::base::sync::Signal::new(),
                    done: warden::base::sync::Signal::new(),
                });
                let bridge = crate::env::http::Bridge::new(
                    Rc::clone(&pipe),
                    Rc::clone(&self.crashed),
                    self.stdio(&executor, &pipe),
                    &http,
                    executor.spawner(),
                    oauth.then(|| Rc::clone(&self.principals)),
                    (Rc::clone(&self.stream_cut), Rc::clone(&self.clock)),
                );
                let env = self.env(&executor, &pipe, http);
                let options = warden::protocol::http::HttpOptions {
                    listen: crate::env::http::ADDRESS.parse().expect("an address"),
                    bearer_token_env: (!oauth).then(|| crate::names::HTTP_TOKEN_ENV.to_string()),
                    oauth: oauth.then(|| warden::protocol::http::OAuthOptions {
                        issuer: crate::names::OAUTH_ISSUER.to_string(),
                        audience: crate::names::OAUTH_AUDIENCE.to_string(),
                        keys: warden::protocol::oauth::KeySource::File(World::path("jwks.json")),
                    }),
                    metrics_listen: None,
                };
                let exited = Rc::clone(&executor.exited);
                executor.spawn(Box::pin(async move {
                    let outcome = warden::commands::serve_http(&env, &manifest, options).await;
                    *slot.borrow_mut() = Some(outcome);
                    exited.set(true);
                }));
                executor.spawn(Box::pin(bridge.run()));
            }
        }
        Instance { executor, pipe, exit, disk: Rc::clone(&self.disk) }
    }

    /// Runs an operator command (`warden resolve`, `warden mcp status`) to its end.
    pub fn start_command<F>(&self, command: F) -> Result<String, String>
    where
        F: FnOnce(Env) -> LocalBoxFuture<'static, Result<String, String>>,
    {
        let executor =
            Executor::new(ChaCha8Rng::seed_from_u64(self.next_u64()), Rc::clone(&self.clock), Rc::clone(&self.crashed));
        let pipe = Pipe::new(Rc::default());
        let env = self.env(&executor, &pipe, Rc::new(NoHttp));
        let outcome = Rc::new(RefCell::new(None));
        let slot = Rc::clone(&outcome);
        let future = command(env);
        executor.spawn(Box::pin(async move {
            *slot.borrow_mut() = Some(future.await);
        }));
        let locks_before = self.disk.held_locks();
        executor.run(HORIZON_MS, STEPS_MAX);
        // The command's process exits: the locks it took are freed, a server's are not.
        self.disk.release_locks_since(&locks_before);
        let result = outcome.borrow_mut().take();
        result.unwrap_or_else(|| Err("the command did not finish".to_string()))
    }

    /// Kills the instance as a power cut would: its tasks are dropped mid-flight, unsynced
    /// data is lost or torn, and its lock is freed.
    pub fn crash(&self, instance: Instance) {
        drop(instance);
        self.clock.clear_timers();
        self.disk.crash();
        self.crashed.set(false);
    }
}

impl Instance {
    pub fn send(&self, message: &Value) {
        let mut line = serde_json::to_vec(message).expect("JSON values serialise");
        line.push(b'\n');
        self.pipe.push(&line);
    }

    pub fn send_raw(&self, bytes: &[u8]) {
        self.pipe.push(bytes);
    }

    pub fn close_stdin(&self) {
        self.pipe.close();
    }

    pub fn run(&self) -> Stop {
        self.executor.run(HORIZON_MS, STEPS_MAX)
    }

    /// Lets `ms` pass with the instance alive (`Executor::run_for`).
    pub fn run_for(&self, ms: u64) -> Stop {
        self.executor.run_for(ms, STEPS_MAX)
    }

    /// Every message written since the last call.
    pub fn outputs(&self) -> Vec<Value> {
        self.pipe
            .take_output()
            .iter()
            .map(|line| serde_json::from_slice(line).expect("the server writes JSON lines"))
            .collect()
    }

    pub fn log(&self) -> Vec<String> {
        self.pipe.log.borrow().clone()
    }

    /// Log lines with the simulated ms each was written at.
    pub fn log_timed(&self) -> Vec<(u64, String)> {
        self.pipe.log_at.borrow().iter().copied().zip(self.pipe.log.borrow().iter().cloned()).collect()
    }

    pub fn exited(&self) -> Option<Result<(), String>> {
        self.exit.borrow().clone()
    }

    pub fn polls(&self) -> u64 {
        self.executor.polls.get()
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        self.disk.release_locks();
    }
}

/// The simulated server speaks stdio only, so far: a listener is refused.
struct NoHttp;

impl warden::env::HttpServe for NoHttp {
    fn serve(
        &self,
        _address: core::net::SocketAddr,
        _limits: warden::env::ListenLimits,
        _handler: warden::env::InboundHandler,
        _ready: Box<dyn FnOnce(core::net::SocketAddr)>,
        _stop: LocalBoxFuture<'static, ()>,
    ) -> LocalBoxFuture<'static, std::io::Result<()>> {
        Box::pin(std::future::ready(Err(std::io::Error::other("the simulator does not listen for HTTP"))))
    }
}
