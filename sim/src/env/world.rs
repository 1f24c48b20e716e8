//! A simulated world: one disk and one clock that outlive server instances, and the
//! instances started on them. A crash drops an instance's every task and applies the disk's
//! crash semantics; the next instance recovers through the normal start-up path.

use crate::names::ROOT;
use std::cell::{Cell, RefCell};
use std::path::{Path, PathBuf};
use std::rc::{Rc, Weak};

use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};
use serde_json::Value;
use warden::env::{Env, LocalBoxFuture, Point, Probe, Rng};
use warden_faults::Transport;

use crate::env::clock::{SimClock, SimClockHandle};
use crate::env::disk::{SimDisk, SimDiskHandle};
use crate::env::executor::{Executor, Process, Stop};
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
    /// An instance beside the first: a pause armed for its next action's begin stalls it
    /// alone while the others run (`Cluster::stall`).
    beside: Option<(Rc<Cluster>, Weak<Process>)>,
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
        if let (Point::ActionBegun, Some((cluster, process))) = (point, &self.beside) {
            if let (Some(ms), Some(process)) = (self.probes.pause_after_begin.take(), process.upgrade()) {
                self.probes.pauses.set(self.probes.pauses.get() + 1);
                cluster.stall(&process, ms);
            }
            return;
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
    /// The instances serving at once: the first, and those beside it on the same store.
    pub cluster: Rc<Cluster>,
}

/// The processes of a world's instances: the first one's (which the sweep runs, crashes and
/// restarts) and the peers beside it on the same store, run interleaved with it.
#[derive(Default)]
pub struct Cluster {
    first: RefCell<Weak<Process>>,
    pub peers: RefCell<Vec<Rc<Process>>>,
}

impl Cluster {
    fn peers(&self) -> Vec<Rc<Process>> {
        self.peers.borrow().clone()
    }

    /// The instances that run while an operator's command does: none in a world of one
    /// instance; every live one beside peers.
    fn beside_a_command(&self) -> Vec<Rc<Process>> {
        let peers = self.peers();
        if peers.is_empty() {
            return peers;
        }
        self.first.borrow().upgrade().into_iter().chain(peers).collect()
    }

    /// Stalls `process` for `ms` of virtual time while the other instances run on: a pause
    /// of one process (a stall, a partition) from where it stands.
    pub fn stall(&self, process: &Process, ms: u64) {
        // With the first instance stopped, nothing would run meanwhile: no stall.
        let first = self.first.borrow().upgrade().filter(|first| first.runs());
        let Some(first) = first else { return };
        process.paused.set(true);
        first.executor.run_for_beside(ms, STEPS_MAX, &self.peers());
        process.paused.set(false);
    }
}

pub struct Instance {
    process: Rc<Process>,
    pub pipe: Rc<Pipe>,
    pub exit: Rc<RefCell<Option<Result<(), String>>>>,
    disk: Rc<SimDisk>,
    cluster: Rc<Cluster>,
    /// An instance beside the first one: its own probes (no crash point of the plan fires in
    /// it), and it leaves the cluster when dropped (a kill).
    pub peer: Option<Rc<Probes>>,
    /// The name and epoch it registered as on the store, once it has.
    pub registration: crate::env::state_db::Registration,
    /// The simulated store, read (as the checker reads it, not as the server says) for which
    /// instance owns a run.
    shared_db: Rc<crate::env::state_db::SharedDb>,
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
            cluster: Rc::default(),
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

    fn stdio(&self, executor: &Executor, pipe: &Rc<Pipe>, own: &Own) -> SimStdio {
        SimStdio {
            pipe: Rc::clone(pipe),
            crashed: Rc::clone(&own.stdio_crashed),
            oracle: Rc::clone(&self.oracle),
            clock: Rc::clone(&self.clock),
            spawn: executor.spawner(),
        }
    }

    fn env(&self, executor: &Executor, pipe: &Rc<Pipe>, http: Rc<dyn warden::env::HttpServe>, own: &Own) -> Env {
        let registration = Rc::clone(&own.registration);
        let clock = SimClockHandle(Rc::clone(&self.clock));
        let clock: Rc<dyn warden::env::Clock> = match own.skew_ms {
            0 => Rc::new(clock),
            skew_ms => Rc::new(crate::env::clock::PeerClockHandle { clock, skew_ms }),
        };
        Env {
            clock,
            disk: Rc::new(SimDiskHandle(Rc::clone(&self.disk), own.peer_crashed.clone())),
            stdio: Rc::new(self.stdio(executor, pipe, own)),
            net: Rc::new(SimNet(Rc::clone(&self.services), Rc::clone(&registration), own.peer_crashed.clone())),
            db: Rc::new(SimDb(Rc::clone(&self.services), own.peer_crashed.clone())),
            state_db: Rc::new(crate::env::state_db::SimStateDb(Rc::clone(&self.shared_db), registration)),
            rng: Rc::new(SimRng(RefCell::new(ChaCha8Rng::seed_from_u64(own.rng_seed)))),
            spawn: Rc::new(executor.spawner()),
            sandbox: Rc::new(crate::env::sandbox::SimSandbox {
                spawn: Rc::new(executor.spawner()),
                clock: Rc::clone(&self.clock),
                faults: Rc::clone(&self.sandbox),
                crashed: own.peer_crashed.clone().unwrap_or_else(|| Rc::clone(&self.crashed)),
            }),
            process: Rc::new(match &own.peer_crashed {
                Some(crashed) => SimProcess::beside(Rc::clone(&self.services), Rc::clone(crashed)),
                None => SimProcess::new(Rc::clone(&self.services)),
            }),
            probe: Rc::new(SimProbe {
                probes: Rc::clone(&own.probes),
                crashed: Rc::clone(&self.crashed),
                watch: self.probe_watch.borrow().as_ref().map(|make| make()),
                beside: own.beside.clone(),
            }),
            http,
            admin: Rc::new(crate::env::admin::SimAdminHandle(Rc::clone(&self.admin))),
            log_secrets: Rc::default(),
        }
    }

    /// What is the first instance's own: the world's probes and crash flag, its clock.
    fn own_of_the_first(&self) -> Own {
        Own {
            probes: Rc::clone(&self.probes),
            stdio_crashed: Rc::clone(&self.crashed),
            skew_ms: 0,
            beside: None,
            rng_seed: 0,
            peer_crashed: None,
            registration: Rc::default(),
        }
    }

    /// Starts a server instance serving `manifest` (relative to the root).
    pub fn start(&self, manifest: &str) -> Instance {
        self.instances.set(self.instances.get() + 1);
        let executor =
            Executor::new(ChaCha8Rng::seed_from_u64(self.next_u64()), Rc::clone(&self.clock), Rc::clone(&self.crashed));
        let process = Rc::new(Process { executor, paused: Cell::new(false) });
        *self.cluster.first.borrow_mut() = Rc::downgrade(&process);
        let own = Own { rng_seed: self.next_u64(), ..self.own_of_the_first() };
        self.launch(manifest, process, &own, None)
    }

    /// Starts an instance beside the first on the same store (a second machine): its own
    /// probes, no crash point of the plan, its wall clock off by `skew_ms`; drawn from `rng`,
    /// so starting it changes no draw of the first instance.
    pub fn start_peer(&self, manifest: &str, skew_ms: i64, rng: &mut ChaCha8Rng) -> Instance {
        self.instances.set(self.instances.get() + 1);
        let crashed = Rc::new(Cell::new(false));
        let executor =
            Executor::new(ChaCha8Rng::seed_from_u64(rng.next_u64()), Rc::clone(&self.clock), Rc::clone(&crashed));
        let process = Rc::new(Process { executor, paused: Cell::new(false) });
        let probes = Rc::new(Probes::default());
        let own = Own {
            probes: Rc::clone(&probes),
            stdio_crashed: Rc::clone(&crashed),
            skew_ms,
            beside: Some((Rc::clone(&self.cluster), Rc::downgrade(&process))),
            rng_seed: rng.next_u64(),
            peer_crashed: Some(crashed),
            registration: Rc::default(),
        };
        self.cluster.peers.borrow_mut().push(Rc::clone(&process));
        self.launch(manifest, process, &own, Some(probes))
    }

    fn launch(&self, manifest: &str, process: Rc<Process>, own: &Own, peer: Option<Rc<Probes>>) -> Instance {
        let executor = &process.executor;
        let pipe = Pipe::new(Rc::clone(&self.slow_reader));
        let exit = Rc::new(RefCell::new(None));
        let slot = Rc::clone(&exit);
        let manifest = World::path(manifest);
        match self.transport.get() {
            Transport::Stdio => {
                let env = self.env(executor, &pipe, Rc::new(NoHttp), own);
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
                    Rc::clone(&own.stdio_crashed),
                    self.stdio(executor, &pipe, own),
                    &http,
                    executor.spawner(),
                    oauth.then(|| Rc::clone(&self.principals)),
                    (Rc::clone(&self.stream_cut), Rc::clone(&self.clock)),
                );
                let manifest_text = self.disk.peek(&World::path("manifest.json")).unwrap_or_default();
                *bridge.param_headers.borrow_mut() = crate::env::http::param_headers(&manifest_text);
                let env = self.env(executor, &pipe, http, own);
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
        let registration = Rc::clone(&own.registration);
        Instance {
            process,
            pipe,
            exit,
            disk: Rc::clone(&self.disk),
            cluster: Rc::clone(&self.cluster),
            peer,
            registration,
            shared_db: Rc::clone(&self.shared_db),
        }
    }

    /// Runs an operator command (`warden resolve`, `warden mcp status`) to its end.
    pub fn start_command<F>(&self, command: F) -> Result<String, String>
    where
        F: FnOnce(Env) -> LocalBoxFuture<'static, Result<String, String>>,
    {
        let executor =
            Executor::new(ChaCha8Rng::seed_from_u64(self.next_u64()), Rc::clone(&self.clock), Rc::clone(&self.crashed));
        let pipe = Pipe::new(Rc::default());
        let own = Own { rng_seed: self.next_u64(), ..self.own_of_the_first() };
        let env = self.env(&executor, &pipe, Rc::new(NoHttp), &own);
        let outcome = Rc::new(RefCell::new(None));
        let slot = Rc::clone(&outcome);
        let future = command(env);
        executor.spawn(Box::pin(async move {
            *slot.borrow_mut() = Some(future.await);
        }));
        let locks_before = self.disk.held_locks();
        // Beside peers, the instances run on while the command does (their leases renewed), as
        // processes of their own would; alone, the server waits, as it always did here.
        executor.run_beside(HORIZON_MS, STEPS_MAX, &self.cluster.beside_a_command());
        // The command's process exits: the locks it took are freed, a server's are not.
        self.disk.release_locks_since(&locks_before);
        let result = outcome.borrow_mut().take();
        result.unwrap_or_else(|| Err("the command did not finish".to_string()))
    }

    /// Kills the instance as a power cut would: its tasks are dropped mid-flight, unsynced
    /// data is lost or torn, and its lock is freed.
    pub fn crash(&self, instance: Instance) {
        drop(instance);
        // The instances beside it run on: their timers stay (the crashed one's went with its
        // tasks).
        if self.cluster.peers.borrow().is_empty() {
            self.clock.clear_timers();
        }
        self.disk.crash();
        self.crashed.set(false);
    }
}

impl Instance {
    /// Whether another instance owns open run `run` on the simulated store now: a request for
    /// it that reached this one is refused by design (a client must reach the run's owner;
    /// `docs/DEFERRED.md`), not a defect.
    pub fn another_owns(&self, run: &str) -> bool {
        let me = self.registration.borrow().as_ref().map(|(name, _)| name.clone());
        matches!((me, self.shared_db.owner_of(run)), (Some(me), Some(owner)) if me != owner)
    }

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

    /// Runs the instance, and the peers beside it, until quiet.
    pub fn run(&self) -> Stop {
        self.process.executor.run_beside(HORIZON_MS, STEPS_MAX, &self.cluster.peers())
    }

    /// Lets `ms` pass with the instance (and its peers) alive (`Executor::run_for_beside`).
    pub fn run_for(&self, ms: u64) -> Stop {
        self.process.executor.run_for_beside(ms, STEPS_MAX, &self.cluster.peers())
    }

    /// Arms (or, with 0, disarms) a stall of an instance beside the first at its next action's
    /// begin: it stands still for `ms` while the others run (`Cluster::stall`).
    pub fn stall_at_next_begin(&self, ms: u64) {
        if let Some(probes) = &self.peer {
            probes.pause_after_begin.set((ms > 0).then_some(ms));
        }
    }

    /// Pauses or resumes an instance beside the first (it stands still while time passes).
    pub fn set_paused(&self, paused: bool) {
        self.process.paused.set(paused);
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

    /// Whether the instance crashed (a peer's own crash, a service's fault after acting).
    pub fn crashed(&self) -> bool {
        self.process.executor.crashed.get()
    }

    pub fn exited(&self) -> Option<Result<(), String>> {
        self.exit.borrow().clone()
    }

    pub fn polls(&self) -> u64 {
        self.process.executor.polls.get()
    }
}

impl Drop for Instance {
    /// The first instance's end frees every lock, as a power cut does; a peer's end (a kill)
    /// leaves the cluster, and its locks go with its tasks.
    fn drop(&mut self) {
        match self.peer {
            None => self.disk.release_locks(),
            Some(_) => self.cluster.peers.borrow_mut().retain(|p| !Rc::ptr_eq(p, &self.process)),
        }
    }
}

/// What one instance has of its own in the world: its probes, the flag its output obeys, its
/// wall clock's skew, whether it stands beside the first, its RNG's seed.
struct Own {
    probes: Rc<Probes>,
    stdio_crashed: Rc<Cell<bool>>,
    skew_ms: i64,
    beside: Option<(Rc<Cluster>, Weak<Process>)>,
    rng_seed: u64,
    /// A peer's own crash flag: its services' and disk's crash faults are its own.
    peer_crashed: Option<Rc<Cell<bool>>>,
    /// The name and epoch it registered as on the store (its services' witness reads it).
    registration: crate::env::state_db::Registration,
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
