//! Instances beside the first on one PostgreSQL store (issue 28): a world on the store may
//! run one or two more instances (`WorldFile::peers`), each a process of its own on the shared
//! clock, its wall clock skewed, with a client of its own sending calls to it. The sweep runs
//! them interleaved with the first instance (`Cluster`), and does to them what happens to
//! replicas: a kill (its lease runs out, and another instance takes its runs over), a stall
//! at an action's begin longer than the lease (the others run on meanwhile: its runs are
//! taken over, and what it writes on waking is fenced off), a pause at rest longer than the
//! lease. Every invariant is checked across them: the services' truth and the shared ledger
//! are the world's; each client's answers are checked as the first client's are.

use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};
use warden_faults::WorldFile;

use crate::env::world::{Instance, World};
use crate::report::Report;
use crate::workload::client::{generated_call, Client};

/// Ids of a peer's client start at this many times its number, apart from the first's.
pub const PEER_IDS_APART: i64 = 1_000_000;
/// Chances, in per mille at each call of the workload, of what happens to each peer.
const KILL_PER_MILLE: u64 = 50;
const STALL_AT_BEGIN_PER_MILLE: u64 = 80;
const PAUSE_AT_REST_PER_MILLE: u64 = 40;
const CALL_PER_MILLE: u64 = 450;
/// How far a peer's wall clock is off the first's, at most (ms, either way).
const SKEW_MS_MAX: u64 = 3_000;

/// What the sweep keeps of the peers of one world.
pub struct Peers {
    list: Vec<Peer>,
    draws: ChaCha8Rng,
    lease_ms: u64,
    /// Counts for the report: kills, stalls armed and fired, pauses at rest, restarts.
    pub kills: u64,
    pub stalls: u64,
    pub pauses: u64,
    pub restarts: u64,
}

struct Peer {
    number: usize,
    instance: Option<Instance>,
    client: Client,
    calls: ChaCha8Rng,
    /// Killed: started again before this call of the workload.
    down_until: u32,
    /// Paused at rest for the calls settling now.
    paused: bool,
}

impl Peers {
    /// Starts the world's peers, each with a client like the first's (`client`, made for the
    /// world) that takes ids of its own and stays plain.
    pub fn start(world: &World, file: Option<&WorldFile>, client: impl Fn() -> Client, seed: u64) -> Peers {
        let count = file.map_or(0, |file| file.peers);
        // Refused where a scenario file is read (`read_scenario`); generated worlds draw below it.
        assert!(count <= warden_faults::PEERS_MAX, "a world of {count} peers, over {}", warden_faults::PEERS_MAX);
        let count = count as usize;
        let mut draws = ChaCha8Rng::seed_from_u64(seed ^ 0x7065_6572_5f73);
        let list = (1..=count)
            .map(|number| {
                let mut client = Peer::client(client(), number);
                let instance = start_peer(world, &mut draws);
                client.connect(&instance);
                let calls = ChaCha8Rng::seed_from_u64(seed ^ (0x6361_6c6c << number));
                Peer { number, instance: Some(instance), client, calls, down_until: 0, paused: false }
            })
            .collect();
        Peers { list, draws, lease_ms: lease_ms(world), kills: 0, stalls: 0, pauses: 0, restarts: 0 }
    }

    pub fn count(&self) -> u32 {
        self.list.len() as u32
    }

    pub fn any(&self) -> bool {
        !self.list.is_empty()
    }

    pub fn clients(&self) -> impl Iterator<Item = &Client> {
        self.list.iter().map(|peer| &peer.client)
    }

    /// Before call `index` of the workload: peers killed earlier start again, and what happens
    /// to each next is drawn: a kill, a stall armed for its next action's begin, a pause at rest
    /// while the calls sent now settle.
    pub fn before_call(&mut self, world: &World, index: u32, report: &mut Report) {
        for peer in &mut self.list {
            if peer.instance.is_none() && index >= peer.down_until {
                peer.start_again(world, &mut self.draws, report);
                self.restarts += 1;
            }
            let Some(instance) = &peer.instance else { continue };
            let draw = self.draws.next_u64() % 1000;
            if draw < KILL_PER_MILLE {
                super::stopped_on_a_bug(instance, report);
                report.events.push((world.clock.now(), peer.name(), "killed (kill -9)".into()));
                report.log.extend(peer.log_lines());
                peer.instance = None;
                peer.down_until = index + 1 + (self.draws.next_u64() % 3) as u32;
                self.kills += 1;
            } else if draw < KILL_PER_MILLE + STALL_AT_BEGIN_PER_MILLE {
                // Longer than the lease: its runs are taken over while it stands still.
                let ms = self.lease_ms + 1_000 + self.draws.next_u64() % self.lease_ms;
                instance.stall_at_next_begin(ms);
                self.stalls += 1;
            } else if draw < KILL_PER_MILLE + STALL_AT_BEGIN_PER_MILLE + PAUSE_AT_REST_PER_MILLE {
                report.events.push((world.clock.now(), peer.name(), "paused while the calls settle".into()));
                instance.set_paused(true);
                peer.paused = true;
                self.pauses += 1;
            }
        }
    }

    /// Sends some calls of the workload to the peers beside call `index`.
    pub fn send_calls(&mut self, world: &World, index: u32, file: &WorldFile, report: &mut Report) {
        for peer in &mut self.list {
            let Some(instance) = &peer.instance else { continue };
            if peer.paused || self.draws.next_u64() % 1000 >= CALL_PER_MILLE {
                continue;
            }
            let message = generated_call(&mut peer.calls, &mut peer.client, index, file, None);
            instance.send(&message);
            peer.client.sent_now(message["id"].as_i64().unwrap_or(0), world.clock.now());
            let tool = message["params"]["name"].as_str().unwrap_or_default().to_string();
            report.events.push((
                world.clock.now(),
                format!("call {}", message["id"]),
                format!("sent {tool} to {}", peer.name()),
            ));
            report.sent_tools.push(tool);
        }
    }

    /// After the calls settled: what each peer wrote is read by its client; a paused one
    /// wakes; one that stopped (its lease or slot lost, the store away) starts again and its
    /// client sends again what it must. Whether one woke or started again (then the world
    /// settles again before it is checked at rest: a start recovers what its slot left).
    pub fn after_settle(&mut self, world: &World, report: &mut Report) -> bool {
        let mut moved = false;
        for peer in &mut self.list {
            let Some(instance) = &peer.instance else { continue };
            // One paused wakes and runs on with its lease ended: it finds out as it renews or
            // writes, in the next settling.
            let woke = std::mem::take(&mut peer.paused);
            if woke {
                instance.set_paused(false);
                moved = true;
            }
            instance.pipe.deliver_unread();
            peer.client.read(instance, report, world.clock.now());
            // One whose lease ended writes nothing more: it is stopping (or will on its next
            // write), so its process is ended here rather than left draining past the settling.
            let registration = instance.registration.borrow().clone();
            let lease_ended = !woke && registration.is_some_and(|registered| !world.shared_db.holds_lease(&registered));
            let why = match instance.exited() {
                _ if instance.crashed() => "crashed (a fault after a service acted)".to_string(),
                Some(exit) => exit.err().unwrap_or_else(|| "it exited".into()),
                None if lease_ended => "its lease ended: it writes nothing more, and is ended".to_string(),
                None => continue,
            };
            super::stopped_on_a_bug(instance, report);
            report.events.push((world.clock.now(), peer.name(), format!("stopped: {why}")));
            peer.start_again(world, &mut self.draws, report);
            self.restarts += 1;
            moved = true;
        }
        moved
    }

    /// The liveness phase begins: nothing more happens to the peers; every one is up.
    pub fn calm(&mut self, world: &World, report: &mut Report) {
        for peer in &mut self.list {
            if let Some(instance) = &peer.instance {
                instance.set_paused(false);
                instance.stall_at_next_begin(0);
                peer.paused = false;
                continue;
            }
            peer.start_again(world, &mut self.draws, report);
            self.restarts += 1;
        }
    }

    /// Whether a peer's client still waits for an answer.
    pub fn waiting(&self) -> bool {
        self.list.iter().any(|peer| !peer.client.unanswered.is_empty())
    }

    /// Every peer's client sends again what is unanswered (the liveness phase's resend).
    pub fn resend(&mut self) {
        for peer in &mut self.list {
            if let Some(instance) = &peer.instance {
                peer.client.resend_after_restart(instance);
            }
        }
    }

    /// The seed ends: the peers' logs go in the report, and they stop.
    pub fn end(&mut self, report: &mut Report) {
        for peer in &mut self.list {
            if let Some(instance) = &peer.instance {
                super::stopped_on_a_bug(instance, report);
            }
            report.log.extend(peer.log_lines());
            peer.instance = None;
        }
    }
}

impl Peer {
    fn client(mut client: Client, number: usize) -> Client {
        client.next_id = PEER_IDS_APART * number as i64;
        client.plain = true;
        client.task_tools.clear();
        client
    }

    fn name(&self) -> String {
        format!("peer {}", self.number)
    }

    fn log_lines(&self) -> Vec<(u64, String)> {
        let lines = self.instance.as_ref().map(Instance::log_timed).unwrap_or_default();
        lines.into_iter().map(|(at, line)| (at, format!("[{}] {line}", self.name()))).collect()
    }

    /// A new process in the peer's place (the old one, if any, is gone): its client connects
    /// and sends again what it must.
    fn start_again(&mut self, world: &World, draws: &mut ChaCha8Rng, report: &mut Report) {
        report.log.extend(self.log_lines());
        self.instance = None;
        let instance = start_peer(world, draws);
        report.events.push((world.clock.now(), self.name(), "started".into()));
        self.client.connect(&instance);
        self.client.resend_after_restart(&instance);
        self.instance = Some(instance);
    }
}

fn start_peer(world: &World, draws: &mut ChaCha8Rng) -> Instance {
    let skew_ms = (draws.next_u64() % (2 * SKEW_MS_MAX + 1)) as i64 - SKEW_MS_MAX as i64;
    world.start_peer("manifest.json", skew_ms, draws)
}

/// The store's lease in the world's manifest (its default when unset).
fn lease_ms(world: &World) -> u64 {
    let manifest = world.disk.peek(&World::path("manifest.json")).unwrap_or_default();
    let manifest: serde_json::Value = serde_json::from_slice(&manifest).unwrap_or_default();
    let lease = &manifest["server"]["store"]["postgres"]["lease"];
    let seconds = lease.as_str().and_then(|text| text.strip_suffix('s')).and_then(|n| n.parse::<u64>().ok());
    seconds.map_or(warden::manifest::STORE_LEASE_MS_DEFAULT, |seconds| seconds * 1_000)
}
