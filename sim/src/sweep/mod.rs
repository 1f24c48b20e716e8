//! One seeded simulation: a workload of tool calls from a client model, a fault plan (from
//! the seed, swarm-style, or from a scenario file), crashes and restarts, an operator who
//! resolves waiting runs from the services' truth, and the checker of DESIGN.md section 7's
//! invariants against that truth. Everything is a function of the seed and the plan.

use std::collections::{BTreeMap, BTreeSet};

use crate::checks::limits::ToolLimits;
use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};
use serde_json::json;
use warden::store::ledger::{RunPhase, State};
use warden_faults::{DamagedFile, Fault, Scenario};

use crate::checks::check;
use crate::checks::truth;
use crate::env::executor::Stop;
use crate::env::world::{Instance, World};
use crate::plan::arm;
use crate::plan::coverage;
use crate::plan::fired::Pending;
use crate::report::{Report, Violation};
use crate::workload::client::{generated_call, workload_call, Client};
use crate::workload::fixture::{install, SECRETS};
use crate::workload::operator::{operator, resolved_runs_moved_on, waiting_records};
use peers::Peers;
use serde_json::Value;
use warden::base::layout::RunFiles;
use warden::run::store::FatalCause;
use warden::store::ledger::QuotaLimit;

pub mod peers;

/// Restarts one run may take before the checker calls it a livelock.
pub const RESTARTS_MAX: u32 = 200;
/// Times the world settles again after the calls did, while a peer wakes or starts again.
const PEER_SETTLES_MAX: u32 = 4;

/// Counts the crash against the step it followed, and its window (before the disk's crash
/// semantics apply, so what was in flight is still there to see).
fn count_crash(world: &World, report: &mut Report, stop: Stop, before: CrashesBefore) {
    let by_point = world.probes.crashes.borrow().len();
    let point = match by_point > report.crashes[1..].iter().sum::<u64>() as usize {
        true => world.probes.crashes.borrow().last().copied(),
        false => None,
    };
    report.crashes[point.map_or(0, |p| p.step() as usize)] += 1;
    let at_disk_operation = disk_crashes(world) > before.disk;
    let at_execution = world.sandbox.poison_crashes.get() > before.poison;
    let place = match (point, at_disk_operation, stop) {
        (Some(point), _, _) => point.name(),
        (None, true, _) => "a disk operation",
        (None, false, _) if at_execution => "a program's execution",
        (None, false, Stop::Crashed) => "a service's answer (the server crashed after it acted)",
        (None, false, _) => "a stop (a failed write, a refused start)",
    };
    let in_flight = coverage::in_flight(world);
    *report.windows.entry(coverage::window(place, in_flight)).or_insert(0) += 1;
    let at = match point {
        Some(point) => format!("after step {} ({})", point.step(), point.name()),
        None => format!("at {place}"),
    };
    report.events.push((world.clock.now(), "server".into(), format!("crash {at}, with {in_flight} in flight")));
}

/// Crashes counted before an instance ran, to tell where its crash landed.
#[derive(Clone, Copy)]
struct CrashesBefore {
    disk: u64,
    poison: u64,
}

fn disk_crashes(world: &World) -> u64 {
    world.disk.injected.borrow().get("crash at a disk operation").copied().unwrap_or(0)
}

fn restart(world: &World, instance: Instance, report: &mut Report) -> Instance {
    report.log.extend(instance.log_timed());
    // A start refused (a damaged file, a manifest the server will not serve) says why.
    if let Some(Err(why)) = instance.exited() {
        report.log.push((world.clock.now(), format!("the server stopped: {why}")));
    }
    report.log.push((world.clock.now(), "---- crash ----".into()));
    world.crash(instance);
    world.probes.crash_at.set(None);
    world.disk.crash_at_operation.set(None);
    world.disk.faults.borrow_mut().capacity_bytes = None;
    report.restarts += 1;
    report.events.push((world.clock.now(), "server".into(), "restart".into()));
    world.start("manifest.json")
}

/// Runs the instance until it is quiet, restarting it after every crash or stop; the client
/// resends what was not answered after each restart.
fn settle_down(world: &World, mut instance: Instance, client: &mut Client, report: &mut Report) -> Instance {
    // Why the server last stopped by itself: a start refused again and again is that reason.
    let mut last_stop = None;
    for _ in 0..RESTARTS_MAX {
        let flips = world.disk.injected.borrow().get("flipped read").copied().unwrap_or(0);
        let before = CrashesBefore { disk: disk_crashes(world), poison: world.sandbox.poison_crashes.get() };
        let signals = world.services.shutdowns_sent.get();
        let stop = instance.run();
        if let Some(Err(why)) = instance.exited() {
            last_stop = Some(why);
        }
        stopped_on_a_bug(&instance, report);
        every_store_write_fenced(world, report);
        drained_leaves_nothing_new_in_doubt(world, &instance, signals, report);
        flipped_read_refused(world, &instance, flips, report);
        if world.disk.misdirected.borrow().is_some() {
            // The caller sees whether the damage lasts; a restart now would meet it.
            return instance;
        }
        // What the durability oracle saw comes first: a lost fsync explains what follows.
        report.violations.append(&mut world.oracle.violations.borrow_mut());
        let stopped = instance.exited().is_some();
        if stop != Stop::Quiet || stopped {
            instance.pipe.deliver_unread();
        }
        client.read(&instance, report, world.clock.now());
        match stop {
            Stop::Quiet if !stopped => return instance,
            Stop::StepBudget => {
                report
                    .violations
                    .push(Violation { invariant: 10, message: "the server did not go quiet (livelock)".into() });
                return instance;
            }
            _ => {}
        }
        if instance.exited() != Some(Ok(())) {
            count_crash(world, report, stop, before);
        }
        instance = restart(world, instance, report);
        client.connect(&instance);
        client.resend_after_restart(&instance);
    }
    let why = last_stop.map(|why| format!("; the server's last stop: {why}")).unwrap_or_default();
    report
        .violations
        .push(Violation { invariant: 10, message: format!("no progress after {RESTARTS_MAX} restarts{why}") });
    instance
}

/// 2: a server that drained after a shutdown signal (and exited cleanly) left no action begun
/// and not done, but in a run that already waits for a person (its waiting record written):
/// a drain never cuts an action.
fn drained_leaves_nothing_new_in_doubt(world: &World, instance: &Instance, signals_before: u64, report: &mut Report) {
    if world.services.shutdowns_sent.get() == signals_before || instance.exited() != Some(Ok(())) {
        return;
    }
    let journals = World::path("journals");
    let Ok(state) = check::ledger_state(&world.disk, &journals) else { return };
    // Another instance's runs (a peer serving beside it on the store) are not this drain's.
    let drained = instance.registration.borrow().as_ref().map(|(name, _)| name.clone());
    let others = |run: &str| world.shared_db.owner_of(run).is_some_and(|owner| Some(owner) != drained);
    for entry in state.runs.values().filter(|entry| entry.is_open() && !others(&entry.run)) {
        let Some(Ok(journal)) = check::journal(&world.disk, &journals, &entry.tool, &entry.run) else { continue };
        let Some(op) = journal.begun_op() else { continue };
        let waiting = warden::base::layout::RunFiles::new(&journals, &entry.tool, &entry.run).waiting;
        if world.disk.peek(&waiting).is_none() {
            let message = format!("a drained server left action {op} of run {} begun and not done", entry.run);
            report.violations.push(Violation { invariant: 2, message });
        }
    }
}

/// 6: every write a serving instance makes to the PostgreSQL store is fenced by its lease, so
/// the store refuses it once the lease ended or a later start took it.
/// And the action rule: no write reaches a service while the sending instance's lease has ended
/// (an action it might no longer own).
fn every_store_write_fenced(world: &World, report: &mut Report) {
    let unfenced = world.shared_db.unfenced_writes.replace(0);
    if unfenced > 0 {
        let message = format!("{unfenced} write(s) reached the PostgreSQL store without a lease's fence");
        report.violations.push(Violation { invariant: 6, message });
    }
    let unleased = world.shared_db.sends_without_a_lease.replace(0);
    if unleased > 0 {
        let message = format!("{unleased} write action(s) reached a service after the sender's lease ended");
        report.violations.push(Violation { invariant: 6, message });
    }
}

/// A server may stop because its disk failed or programs cannot run; never because its own
/// code broke an invariant (`FatalCause::Bug`).
pub(crate) fn stopped_on_a_bug(instance: &Instance, report: &mut Report) {
    if let Some(Err(message)) = instance.exited() {
        if FatalCause::of_exit(&message) == Some(FatalCause::Bug) {
            report
                .violations
                .push(Violation { invariant: 0, message: format!("the server stopped on a bug: {message}") });
        }
    }
}

/// 4: a call refused by a quota names, as a type, a limit its tool's quota has: a refusal
/// naming another (or none the tool has) means admission counted against the wrong limit.
fn refusals_name_a_limit_of_the_tool(limits: &BTreeMap<String, ToolLimits>, client: &Client, report: &mut Report) {
    for (id, answer) in &client.answers {
        let Some(named) = answer["_meta"][warden::call::answer::META_REFUSED].as_str() else { continue };
        // Refused because the server was stopping (its stdin closed): not a quota's doing.
        if named == warden::call::answer::REFUSED_STOPPING {
            continue;
        }
        let quota = client.tools.get(id).and_then(|tool| limits.get(tool)).and_then(|t| t.quota.as_ref());
        let has = |limit: QuotaLimit| match limit {
            QuotaLimit::Calls => quota.is_some_and(|q| q.calls.is_some()),
            QuotaLimit::Money => quota.is_some_and(|q| q.money.is_some()),
            QuotaLimit::Tokens => quota.is_some_and(|q| q.tokens.is_some()),
        };
        let limit = [QuotaLimit::Calls, QuotaLimit::Money, QuotaLimit::Tokens].into_iter().find(|l| l.name() == named);
        if !limit.is_some_and(has) {
            let tool = client.tools.get(id).map_or("?", String::as_str);
            let message = format!("call {id} of `{tool}` was refused on `{named}`, a limit its quota does not have");
            report.violations.push(Violation { invariant: 4, message });
        }
    }
}

/// A byte flipped in a read of the ledger (during this instance's run) must have stopped the
/// start that read it, naming the ledger.
fn flipped_read_refused(world: &World, instance: &Instance, flips_before: u64, report: &mut Report) {
    let flips = world.disk.injected.borrow().get("flipped read").copied().unwrap_or(0);
    if flips == flips_before {
        return;
    }
    let ledger = World::path("journals").join(warden::store::ledger::LEDGER_FILE);
    match instance.exited() {
        Some(Err(message)) if message.contains(&format!("{}:", ledger.display())) && message.contains("damaged") => {}
        other => report.violations.push(Violation {
            invariant: 6,
            message: format!("a byte flipped in a read of the ledger went unreported: {other:?}"),
        }),
    }
}

/// After a misdirected write: with the server stopped, if the damage is durable the next
/// start must refuse naming its line (and the seed ends); if the crash took it away, the
/// seed goes on with a new instance.
fn misdirected(world: &World, instance: Instance, report: &mut Report) -> Result<Instance, SeedEnded> {
    world.crash(instance);
    disarm_disk_faults(world);
    let damage = world.disk.misdirected.borrow_mut().take().expect("called after a misdirected write");
    let bytes = world.disk.peek(&damage.0).unwrap_or_default();
    if warden::store::record::parse_file::<serde_json::Value>(&bytes).is_ok() {
        report.events.push((world.clock.now(), "server".into(), "the misdirected write was lost in the crash".into()));
        return Ok(world.start("manifest.json"));
    }
    *report = damage_reported(world, damage, std::mem::take(report));
    Err(SeedEnded)
}

/// Runs one scenario; a panic anywhere in the server (a broken assertion, a double borrow) is
/// reported as a violation (invariant 0) instead of ending the sweep.
pub fn simulate(scenario: &Scenario) -> Report {
    let disks_before = crate::env::disk::live_disks();
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| simulate_unguarded(scenario)));
    let mut report = outcome.unwrap_or_else(|panic| {
        let message = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "a panic with no message".into());
        Report {
            seed: scenario.seed,
            calls: scenario.calls,
            violations: vec![Violation { invariant: 0, message: format!("the server panicked: {message}") }],
            ..Report::default()
        }
    });
    world_freed(disks_before, &mut report);
    report
}

/// The seed's world must be gone once it ends: a world kept alive (a reference cycle between
/// an instance's tasks and what the world lends them) keeps its disk, services and every
/// instance, and a sweep's memory then grows with the seeds swept.
fn world_freed(disks_before: u64, report: &mut Report) {
    let kept = crate::env::disk::live_disks().saturating_sub(disks_before);
    if kept > 0 {
        let message = format!("the seed's simulated world was not freed when it ended ({kept} disk(s) still alive)");
        report.violations.push(Violation { invariant: 0, message });
    }
}

/// The seed's phases: the world installed and its manifest checked, the workload (which
/// durable damage may end early), the liveness phase, and the final checks.
fn simulate_unguarded(scenario: &Scenario) -> Report {
    let mut report = Report { seed: scenario.seed, calls: scenario.calls, ..Report::default() };
    let world = World::new(scenario.seed);
    install(&world, scenario.world.as_ref(), scenario.canary);
    *world.probe_watch.borrow_mut() = Some(crate::checks::slots::SlotWatch::for_each_instance(&world));
    report.over_http = world.transport.get() != warden_faults::Transport::Stdio;
    report.with_principals = world.transport.get() == warden_faults::Transport::HttpOauth;
    report.on_the_store = world.on_the_store();
    if let Err(problem) = truth::manifest(&world) {
        let message = format!("the world's manifest does not pass `warden check`: {problem}");
        report.violations.push(Violation { invariant: 0, message });
        return report;
    }
    // The checker's limits, read by the simulator itself (`limits.rs`).
    let limits = crate::checks::limits::of_world(&world);
    let mut sim = Sim {
        scenario,
        world: &world,
        limits: &limits,
        client: client_for(scenario, &limits),
        pending: Pending::default(),
        verified: BTreeSet::new(),
        draws: Draws::of(scenario.seed),
        report,
        peers: None,
    };
    let instance = world.start("manifest.json");
    sim.client.connect(&instance);
    let beside = Peers::start(&world, scenario.world.as_ref(), || client_for(scenario, &limits), scenario.seed);
    sim.report.peers = beside.count();
    sim.peers = Some(beside).filter(Peers::any);
    let Ok(instance) = sim.workload(instance) else { return sim.report };
    let instance = sim.liveness(instance);
    sim.finish(instance)
}

/// One simulation under way: what every phase reads (the scenario, the world, the checker's
/// limits) and what the phases build up together (the client model, the faults armed, the
/// report), so each phase is a method instead of a function of a dozen arguments.
struct Sim<'a> {
    scenario: &'a Scenario,
    world: &'a World,
    limits: &'a BTreeMap<String, ToolLimits>,
    client: Client,
    /// Faults armed and not yet seen to fire.
    pending: Pending,
    /// Settled runs already found to agree with their journals (`check::at_rest_since`).
    verified: BTreeSet<String>,
    draws: Draws,
    report: Report,
    /// The instances beside the first on the store, if the world runs any.
    peers: Option<Peers>,
}

/// The seed ended early: durable damage was found and checked; it waits for a person, so
/// neither the rest of the workload nor the liveness phase runs.
struct SeedEnded;

/// The seed's random streams for its workload, each seeded apart.
struct Draws {
    /// Which call comes next, and whether it arrives with the one after.
    calls: ChaCha8Rng,
    /// Reads of the world's prompt and resource beside the workload.
    reads: ChaCha8Rng,
    /// How the client answers the calls that ask for input.
    asks: ChaCha8Rng,
}

impl Draws {
    fn of(seed: u64) -> Draws {
        Draws {
            calls: ChaCha8Rng::seed_from_u64(seed ^ 0x00c1_1e47),
            reads: ChaCha8Rng::seed_from_u64(seed ^ 0x4ead_5001),
            asks: ChaCha8Rng::seed_from_u64(seed ^ 0x6173_6b01),
        }
    }
}

/// What the world's manifest lets the workload do beside its calls, and how often its calls
/// come together.
struct Shape {
    generated: bool,
    /// How often a call arrives with the next one (swarm-style, per seed): then they run
    /// concurrently, and small slot and quota limits are contended.
    burst_per_cent: u64,
    serves_prompt: bool,
    /// The URI template of the world's resource, if it serves one.
    resource_template: Option<&'static str>,
    /// In an operator's world: the resource URIs and prompt calls the client picks from.
    own_reads: Option<(Vec<String>, Vec<(String, serde_json::Value)>)>,
}

impl Shape {
    fn of(scenario: &Scenario) -> Shape {
        // The fixed world keeps its workload of earlier sessions (its scenario files replay it):
        // one call in three arrives with the next.
        let generated = scenario.world.is_some();
        let burst_per_cent = if generated { [33, 33, 60, 85][(scenario.seed % 4) as usize] } else { 0 };
        let serves_prompt = scenario.world.as_ref().is_some_and(|file| file.manifest.contains("\"prompts\""));
        let resource_template = scenario.world.as_ref().and_then(|file| {
            let manifest: serde_json::Value = serde_json::from_str(&file.manifest).ok()?;
            let template = manifest["resources"][0]["uri"].as_str()?.to_string();
            [crate::workload::generate::RESOURCE_TICKETS, crate::workload::generate::RESOURCE_INTENTS]
                .into_iter()
                .find(|t| *t == template)
        });
        let own_reads = (scenario.world.as_ref().and_then(|file| file.own.as_ref()))
            .map(|own| (own.resource_uris.clone(), own.prompt_calls.clone()));
        Shape { generated, burst_per_cent, serves_prompt, resource_template, own_reads }
    }
}

/// What the faults armed before a call have the client itself do around it.
#[derive(Default)]
struct ClientFaults {
    malformed: bool,
    oversized: bool,
    cancel: bool,
    gone: bool,
    /// Status calls sent ahead of the call.
    flood: u32,
    /// Calls to refuse, sent behind it (`workload/refusable.rs`).
    refusable: bool,
}

impl ClientFaults {
    fn add(&mut self, fault: &Fault) {
        self.malformed |= *fault == Fault::MalformedLine;
        self.oversized |= *fault == Fault::OversizedLine;
        self.cancel |= *fault == Fault::Cancel;
        self.gone |= *fault == Fault::ClientGone;
        self.refusable |= *fault == Fault::RefusableCalls;
        if let Fault::Flood { calls } = *fault {
            self.flood += calls;
        }
    }
}

/// The client model for this world: it resends unanswered calls to the tools that say so
/// (those with `once`), holds every other tool with a deadline to it, and in some generated
/// worlds sends most calls to one tool.
fn client_for(scenario: &Scenario, limits: &BTreeMap<String, ToolLimits>) -> Client {
    let mut client = Client { next_id: 1, ..Client::default() };
    client.resend = match &scenario.world {
        Some(file) => file.tools.iter().filter(|t| t.resend).map(|t| t.name.clone()).collect(),
        None => ["echo", "refund", "close"].iter().map(|t| t.to_string()).collect(),
    };
    client.run_deadlines =
        limits.iter().filter_map(|(tool, tool_limits)| Some((tool.clone(), tool_limits.deadline_ms?))).collect();
    client.deadlines = (limits.iter())
        .filter(|(tool, tool_limits)| tool_limits.once_keep_ms.is_none() && !client.resend.contains(*tool))
        .filter_map(|(tool, tool_limits)| Some((tool.clone(), tool_limits.deadline_ms?)))
        .collect();
    if let Some(file) = &scenario.world {
        let manifest: Value = serde_json::from_str(&file.manifest).unwrap_or(Value::Null);
        client.task_tools = (manifest["tools"].as_array().into_iter().flatten())
            .filter(|tool| tool.get("task").is_some())
            .filter_map(|tool| tool["name"].as_str().map(str::to_string))
            .collect();
        let tools = manifest["tools"].as_array().into_iter().flatten();
        client.task_required = (tools.clone())
            .filter(|tool| tool["task"] == "required")
            .filter_map(|tool| tool["name"].as_str().map(str::to_string))
            .collect();
        client.requires = tools
            .filter_map(|tool| {
                let needs: Vec<String> =
                    tool["requires"].as_array()?.iter().filter_map(|c| c.as_str().map(str::to_string)).collect();
                Some((tool["name"].as_str()?.to_string(), needs))
            })
            .collect();
        client.principals = file.transport == warden_faults::Transport::HttpOauth;
        client.own_world = file.own.is_some();
    }
    let mut draws = ChaCha8Rng::seed_from_u64(scenario.seed ^ 0x4075_7001);
    let generated = scenario.world.is_some();
    client.hot_tool = (generated && draws.next_u64() % 2 == 0).then(|| draws.next_u64() as usize);
    client
}

/// How long a tool's `once` keys hold, for the checker (no `once`: forever, never checked).
fn once_keep_ms(limits: &BTreeMap<String, ToolLimits>, tool: &str) -> u64 {
    limits.get(tool).and_then(|t| t.once_keep_ms).unwrap_or(u64::MAX)
}

/// Counts each fault kind in `kinds` as fired once more.
fn count_fired(report: &mut Report, kinds: Vec<&'static str>) {
    for kind in kinds {
        *report.fired.entry(kind).or_insert(0) += 1;
    }
}

/// The lines the armed faults have the client send ahead of the call: a malformed line, a
/// flood of status calls, a line over the limit.
fn send_fault_lines(instance: &Instance, faults: &ClientFaults) {
    if faults.malformed {
        instance.send_raw(b"{\"jsonrpc\":\"2.0\",\"id\":\n");
    }
    for n in 0..faults.flood {
        // String ids: their answers are not the workload's (the client model counts
        // integer ids); an unknown run's status is answered without touching a run.
        let run = format!("{n:032x}");
        instance.send(&json!({"jsonrpc": "2.0", "id": format!("flood-{n}"), "method": "tools/call",
            "params": {"name": warden::manifest::RUN_STATUS_TOOL, "arguments": {"run": run}}}));
    }
    if faults.oversized {
        let mut line = vec![b' '; warden::limits::LINE_BYTES_MAX + 1];
        line[0] = b'{';
        line.push(b'\n');
        instance.send_raw(&line);
    }
}

/// Reads of the world's prompt and resource, now and then, beside the workload (their
/// answers are not the workload's; the runs they make are checked like any other).
fn read_beside(instance: &Instance, index: u32, shape: &Shape, reads: &mut ChaCha8Rng) {
    if let Some((uris, prompts)) = &shape.own_reads {
        return read_beside_own(instance, index, (uris, prompts), reads);
    }
    if shape.serves_prompt && reads.next_u64() % 100 < 10 {
        let ticket = format!("{}", reads.next_u64() % 30);
        instance.send(&json!({"jsonrpc": "2.0", "id": format!("prompt-{index}"), "method": "prompts/get",
            "params": {"name": crate::workload::generate::PROMPT_NAME, "arguments": {"ticket": ticket}}}));
    }
    if let Some(template) = shape.resource_template.filter(|_| reads.next_u64() % 100 < 15) {
        let uri = crate::workload::generate::resource_uri(template, reads);
        instance.send(&json!({"jsonrpc": "2.0", "id": format!("read-{index}"), "method": "resources/read",
            "params": {"uri": uri, "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}}}}));
    }
}

/// The same in an operator's world: one of its prompts or resources, with the arguments its
/// manifest offers as completions (else its program's examples).
fn read_beside_own(instance: &Instance, index: u32, reads_of: (&[String], &[(String, Value)]), reads: &mut ChaCha8Rng) {
    let (uris, prompts) = reads_of;
    if !prompts.is_empty() && reads.next_u64() % 100 < 10 {
        let (name, arguments) = &prompts[(reads.next_u64() % prompts.len() as u64) as usize];
        instance.send(&json!({"jsonrpc": "2.0", "id": format!("prompt-{index}"), "method": "prompts/get",
            "params": {"name": name, "arguments": arguments}}));
    }
    if !uris.is_empty() && reads.next_u64() % 100 < 15 {
        let uri = &uris[(reads.next_u64() % uris.len() as u64) as usize];
        instance.send(&json!({"jsonrpc": "2.0", "id": format!("read-{index}"), "method": "resources/read",
            "params": {"uri": uri, "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}}}}));
    }
}

/// Every fault left armed is disarmed, so the liveness phase runs on a world that works.
fn disarm_all_faults(world: &World) {
    disarm_disk_faults(world);
    world.services.faults.borrow_mut().clear();
    world.services.notify_failures.set(0);
    world.services.notify_hangs.set(0);
    world.clock.set_drift_ppm(0);
    world.sandbox.disarm();
    world.disk.slow.set((0, 0));
    world.slow_reader.armed.set((0, 0));
    world.probes.pause_after_begin.set(None);
}

impl Sim<'_> {
    /// The workload: before each call the faults planned for it are armed; calls that arrive
    /// together are sent, then the server runs until quiet and the checker looks at rest. The
    /// first violation ends the workload (the liveness phase still runs).
    fn workload(&mut self, mut instance: Instance) -> Result<Instance, SeedEnded> {
        let shape = Shape::of(self.scenario);
        for index in 0..self.scenario.calls {
            if let Some(peers) = &mut self.peers {
                peers.before_call(self.world, index, &mut self.report);
            }
            let (armed, faults) = self.arm_faults(index, instance)?;
            instance = armed;
            send_fault_lines(&instance, &faults);
            let message = self.send_call(&instance, index);
            if let (Some(peers), Some(file)) = (&mut self.peers, &self.scenario.world) {
                peers.send_calls(self.world, index, file, &mut self.report);
            }
            read_beside(&instance, index, &shape, &mut self.draws.reads);
            self.client_faults(&instance, &faults, &message);
            self.note_sent(&message);
            let together = self.arrives_with_next(&shape);
            if index + 1 < self.scenario.calls && together {
                continue;
            }
            instance = self.settle_calls(instance)?;
            if !self.report.violations.is_empty() {
                break;
            }
        }
        Ok(instance)
    }

    /// Arms the faults planned before call `index` and gathers those the client carries out
    /// itself. A rotted byte is applied at once (it stops the server).
    fn arm_faults(&mut self, index: u32, mut instance: Instance) -> Result<(Instance, ClientFaults), SeedEnded> {
        let mut faults = ClientFaults::default();
        let scenario = self.scenario;
        for (position, planned) in scenario.faults.iter().enumerate().filter(|(_, p)| p.before_call == index) {
            if let Fault::RotByte { file, at } = &planned.fault {
                instance = self.rot_byte(position, &planned.fault, *file, *at, instance)?;
                continue;
            }
            let sends_a_line = arm(self.world, &planned.fault, &mut self.report);
            self.pending.arm(self.world, position, &planned.fault);
            if sends_a_line {
                faults.add(&planned.fault);
            }
        }
        Ok((instance, faults))
    }

    /// A rotted byte: the server stops and the byte flips; the seed ends once the next start
    /// is checked to report it. With nothing to rot, the fault never fires and the server
    /// starts again.
    fn rot_byte(
        &mut self,
        position: usize,
        fault: &Fault,
        file: DamagedFile,
        at: u64,
        instance: Instance,
    ) -> Result<Instance, SeedEnded> {
        *self.report.faults.entry(fault.kind()).or_insert(0) += 1;
        // Beside peers, the damaged run may be another instance's, which the next start
        // neither reads nor reports: damage is checked in worlds of one instance.
        if self.peers.is_some() {
            self.pending.never.push((position, fault.kind()));
            return Ok(instance);
        }
        let state = coverage::window(fault.kind(), coverage::in_flight(self.world));
        *self.report.fault_states.entry(state).or_insert(0) += 1;
        // Damage ends the seed: what happened before it is checked first.
        ground_truth(self.world, self.limits, &mut self.report);
        let Some(damage) = rot(self.world, instance, file, at) else {
            self.pending.never.push((position, fault.kind()));
            let instance = self.world.start("manifest.json");
            self.client.connect(&instance);
            return Ok(instance);
        };
        *self.report.fired.entry(fault.kind()).or_insert(0) += 1;
        self.report = damage_reported(self.world, damage, std::mem::take(&mut self.report));
        Err(SeedEnded)
    }

    /// Sends the workload's call `index` (generated for a generated world, from the fixed
    /// world's mix otherwise).
    fn send_call(&mut self, instance: &Instance, index: u32) -> serde_json::Value {
        let scenario = self.scenario;
        let message = match &scenario.world {
            Some(file) => generated_call(&mut self.draws.calls, &mut self.client, index, file, scenario.tools.as_ref()),
            None => workload_call(&mut self.draws.calls, &mut self.client, index, scenario.tools.as_ref()),
        };
        instance.send(&message);
        let id = message["id"].as_i64().unwrap_or(0);
        self.client.sent_now(id, self.world.clock.now());
        let tool = message["params"]["name"].as_str().unwrap_or_default();
        if self.limits.get(tool).is_some_and(|limits| limits.once_keep_ms.is_some()) {
            let ledger = World::path("journals").join(warden::store::ledger::LEDGER_FILE);
            let bytes = self.world.disk.peek(&ledger).unwrap_or_default();
            let durable = &bytes[..self.world.disk.surviving_len(&ledger).min(bytes.len())];
            self.client.sent_floor.insert(id, crate::checks::ledger_reader::latest_stamp(durable));
        }
        message
    }

    /// The client's own faults on the call just sent: calls made from it that the server must
    /// refuse, then it goes away, or cancels the call.
    fn client_faults(&mut self, instance: &Instance, faults: &ClientFaults, message: &serde_json::Value) {
        if faults.refusable {
            let secret = crate::workload::refusable::manifest_secrets(self.world).into_iter().next();
            let scoped = self.world.transport.get() == warden_faults::Transport::HttpOauth;
            for call in crate::workload::refusable::calls_from(message, secret.as_deref(), scoped) {
                instance.send(&call);
            }
        }
        if faults.gone {
            instance.pipe.broken.set(true);
            instance.close_stdin();
        }
        if faults.cancel {
            instance.send(&json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": message["id"], "reason": "sim"}}));
            // A cancelled call may get no answer; the client does not wait for one.
            self.client.unanswered.remove(&message["id"].as_i64().unwrap_or(0));
        }
    }

    /// Puts the call just sent in the report and on the timeline.
    fn note_sent(&mut self, message: &serde_json::Value) {
        self.report.sent_tools.push(message["params"]["name"].as_str().unwrap_or_default().to_string());
        self.report.events.push((
            self.world.clock.now(),
            format!("call {}", message["id"]),
            format!("sent {}", message["params"]["name"]),
        ));
    }

    /// Whether the next call arrives with this one: calls often arrive together, and then
    /// they run concurrently, interleaved at every await.
    fn arrives_with_next(&mut self, shape: &Shape) -> bool {
        match shape.generated {
            true => self.draws.calls.next_u64() % 100 < shape.burst_per_cent,
            false => self.draws.calls.next_u64() % 3 == 0,
        }
    }

    /// After the calls sent together: the server runs until quiet, the calls that asked for
    /// input are answered, and the checker looks at the journals at rest.
    fn settle_calls(&mut self, instance: Instance) -> Result<Instance, SeedEnded> {
        let known = self.report.violations.len();
        let mut instance = self.settle(instance);
        // The calls that asked for input are answered (their retries run with the next calls),
        // and the tasks asked about.
        self.client.answer_asked(&instance, &mut self.draws.asks, self.world.clock.now());
        self.client.follow_tasks(&instance, &mut self.draws.asks);
        count_fired(&mut self.report, self.pending.fired(self.world));
        if self.world.disk.misdirected.borrow().is_some() {
            instance = self.after_misdirected_write(instance)?;
        }
        self.report.violations.append(&mut self.world.oracle.violations.borrow_mut());
        count_fired(&mut self.report, self.pending.fired(self.world));
        let limits = self.limits;
        let once_keep_ms = |tool: &str| once_keep_ms(limits, tool);
        let journals = World::path("journals");
        let violations = check::at_rest_since(&self.world.disk, &journals, &once_keep_ms, &mut self.verified);
        self.report.violations.extend(violations);
        writes_bounded(self.world, &mut self.report);
        note_violations(self.world, &mut self.report, known);
        Ok(instance)
    }

    /// A misdirected write: what happened before it is checked, then the server is stopped;
    /// if the damage lasts the seed ends, else the calls go on with a new instance.
    fn after_misdirected_write(&mut self, instance: Instance) -> Result<Instance, SeedEnded> {
        self.report.violations.append(&mut self.world.oracle.violations.borrow_mut());
        self.client.read(&instance, &mut self.report, self.world.clock.now());
        ground_truth(self.world, self.limits, &mut self.report);
        let instance = misdirected(self.world, instance, &mut self.report)?;
        self.client.connect(&instance);
        self.client.resend_after_restart(&instance);
        Ok(self.settle(instance))
    }

    /// Liveness: faults stop; the operator resolves what waits; every call ends answered.
    fn liveness(&mut self, instance: Instance) -> Instance {
        count_fired(&mut self.report, self.pending.close(self.world));
        self.report.never_fired = self.pending.never.clone();
        disarm_all_faults(self.world);
        if let Some(peers) = &mut self.peers {
            peers.calm(self.world, &mut self.report);
        }
        let instance = self.operator_resolves(instance);
        self.client.resend_after_restart(&instance);
        let instance = self.settle(instance);
        let instance = self.answer_the_asking(instance);
        let instance = self.follow_the_tasks(instance);
        let instance = self.wait_out_expiries(instance);
        let instance = self.peers_answered(instance);
        let instance = self.follow_the_tasks(instance);
        self.operator_resolves_late(instance)
    }

    /// A run halted by a restart while the world settled, after the operator's pass (a server
    /// that crashed at its stop and started again, say), waits for the operator too: the
    /// operator looks again, and the calls it answers are sent again (seed 385939).
    fn operator_resolves_late(&mut self, instance: Instance) -> Instance {
        if waiting_records(self.world).is_empty() {
            return instance;
        }
        let instance = self.operator_resolves(instance);
        self.client.resend_after_restart(&instance);
        let instance = self.settle(instance);
        self.follow_the_tasks(instance)
    }

    /// The instance settles (`settle_down`), then the peers' clients read what theirs wrote;
    /// while a peer woke or started again, the world settles once more (a few times at most).
    fn settle(&mut self, mut instance: Instance) -> Instance {
        for _ in 0..PEER_SETTLES_MAX {
            instance = settle_down(self.world, instance, &mut self.client, &mut self.report);
            let moved = self.peers.as_mut().is_some_and(|peers| peers.after_settle(self.world, &mut self.report));
            if !moved {
                return instance;
            }
        }
        // A peer moved at the last turn: it settles once more before anything is checked.
        settle_down(self.world, instance, &mut self.client, &mut self.report)
    }

    /// The peers' clients send again what is still unanswered, a few times, as the first
    /// client does after a restart: a run another instance took over answers once settled.
    fn peers_answered(&mut self, mut instance: Instance) -> Instance {
        for _ in 0..4 {
            match &mut self.peers {
                Some(peers) if peers.waiting() => peers.resend(),
                _ => break,
            }
            instance = self.settle(instance);
        }
        instance
    }

    /// Every task is asked about until it ends (its rounds answered as they come).
    fn follow_the_tasks(&mut self, mut instance: Instance) -> Instance {
        for _ in 0..8 {
            if self.client.tasks_open().is_empty() && self.client.task_updates.is_empty() {
                break;
            }
            self.client.follow_tasks(&instance, &mut self.draws.asks);
            instance = self.settle(instance);
        }
        instance
    }

    /// While runs wait for a person (a few times at most): the operator resolves them beside
    /// the live server (its admin channel resumes each at once); what still waits then, it
    /// resolves with the server stopped, and restarts it.
    fn operator_resolves(&mut self, mut instance: Instance) -> Instance {
        for _ in 0..3 {
            if waiting_records(self.world).is_empty() {
                break;
            }
            let resolved = operator(self.world, &mut self.report);
            instance = self.settle(instance);
            resolved_runs_moved_on(self.world, &resolved, &mut self.report);
            if waiting_records(self.world).is_empty() {
                break;
            }
            // A run kept in the PostgreSQL store is resolved only beside its running server
            // (through its admin channel): the operator asks again, with the server up.
            if self.world.on_the_store() {
                continue;
            }
            self.report.log.extend(instance.log_timed());
            self.report.log.push((
                self.world.clock.now(),
                "---- the operator stops the server, resolves, and restarts it ----".into(),
            ));
            drop(instance);
            operator(self.world, &mut self.report);
            instance = self.world.start("manifest.json");
            self.client.connect(&instance);
            instance = self.settle(instance);
        }
        instance
    }

    /// Calls still asking are answered; a round the client leaves ends its run at its expiry.
    fn answer_the_asking(&mut self, mut instance: Instance) -> Instance {
        for _ in 0..4 {
            if self.client.asked.is_empty() {
                break;
            }
            self.client.answer_asked(&instance, &mut self.draws.asks, self.world.clock.now());
            instance = self.settle(instance);
        }
        self.client.asked.clear();
        instance
    }

    /// Runs left open expire. Expiry is by the wall clock, which a step back may have put
    /// behind: a few waits.
    fn wait_out_expiries(&mut self, mut instance: Instance) -> Instance {
        for _ in 0..3 {
            if check::open_runs(&self.world.disk, &World::path("journals")).is_empty() {
                break;
            }
            // Time passes with the server up: it renews its lease on the store meanwhile.
            instance.run_for(warden::limits::INPUT_WAIT_MS + 1_000);
            instance = self.settle(instance);
        }
        instance
    }

    /// The final checks, then what the report sums up: the simulated time, the services'
    /// counts, and the hash of the trace (what the client read and the effects the services saw).
    fn finish(mut self, instance: Instance) -> Report {
        self.report.violations.append(&mut self.world.oracle.violations.borrow_mut());
        let known = self.report.violations.len();
        final_checks(self.world, self.limits, &self.client, &mut self.report);
        for client in self.peers.iter().flat_map(Peers::clients) {
            client_checks(self.world, self.limits, client, &mut self.report);
        }
        note_violations(self.world, &mut self.report, known);
        self.report.log.extend(instance.log_timed());
        drop(instance);
        if let Some(peers) = &mut self.peers {
            peers.end(&mut self.report);
        }
        takeover_windows(self.world, &mut self.report);
        let logged = no_secret_logged(self.world, &self.report.log);
        self.report.violations.extend(logged);
        if self.world.services.own_world.get() {
            self.report.findings = crate::checks::own::findings(self.world, &self.report.log, self.limits);
            let calls = crate::checks::own::Calls {
                tools: &self.client.tools,
                answers: &self.client.answers,
                runs: &self.client.runs_ever,
            };
            self.report.findings.extend(crate::checks::own::quota_spent_on_resends(self.world, &calls));
            self.report.tool_outcomes = crate::checks::own::tool_outcomes(&self.client.tools, &self.client.answers);
            crate::checks::own::add_read_outcomes(&mut self.report.tool_outcomes, &self.client.read_answers);
        }
        self.report.journals = kept_journals(self.world);
        let (world, mut report) = (self.world, self.report);
        report.sim_ms = world.clock.now();
        report.model_requests = world.services.effects_of("model") as u64;
        report.postgres_statements = world.services.postgres_statements.get();
        let mut trace = self.client.trace.clone();
        for effect in world.services.effects.borrow().iter() {
            trace.extend(format!("{effect:?}").bytes());
        }
        report.trace_hash = warden::base::json::sha256_hex(&trace)[..16].to_string();
        report
    }
}

/// The windows of a takeover the seed hit (`coverage::TAKEOVER_WINDOWS`).
fn takeover_windows(world: &World, report: &mut Report) {
    let injected = world.shared_db.injected.borrow();
    for (witness, place, in_flight) in coverage::TAKEOVER_WINDOWS {
        if let Some(count) = injected.get(witness).copied().filter(|count| *count > 0) {
            *report.windows.entry(coverage::window(place, in_flight)).or_insert(0) += count;
        }
    }
}

/// The runs' journals on the simulated disk at the end, bounded (for the timeline).
fn kept_journals(world: &World) -> BTreeMap<String, String> {
    let files = world.disk.files();
    let journals = files.iter().filter(|path| path.extension().is_some_and(|e| e == "journal"));
    journals
        .take(crate::report::JOURNALS_KEPT_MAX)
        .filter_map(|path| {
            let run = path.file_stem()?.to_str()?.to_string();
            let mut bytes = world.disk.peek(path)?;
            bytes.truncate(crate::report::JOURNAL_KEPT_BYTES_MAX);
            Some((run, String::from_utf8_lossy(&bytes).into_owned()))
        })
        .collect()
}

/// A client that reads slowly must slow the server down, not make it hold ever more answers
/// it cannot write: the writes waiting at once stay within what calls in progress allow.
fn writes_bounded(world: &World, report: &mut Report) {
    let peak = world.slow_reader.waiting_peak.take();
    let max = crate::checks::limits::writes_waiting_max(world);
    if peak > max {
        let message = format!(
            "{peak} writes waited at once on a client reading slowly, over {max} (one per call in progress, one more): \
             the server kept taking requests it could not answer"
        );
        report.violations.push(Violation { invariant: 10, message });
    }
}

/// Whether `text` holds `secret` in a form a reader would decode: as it is, or escaped (a
/// JSON `\/` or `\u003c`, every character as `\u00XX`, escaped again inside a string): its
/// runs of five or more letters and digits survive every such escape.
fn leaks(text: &str, secret: &str) -> bool {
    let runs = secret.split(|c: char| !c.is_ascii_alphanumeric()).filter(|run| run.len() >= 5);
    let unicode: String = secret.chars().map(|c| format!("u{:04x}", c as u32)).collect();
    text.contains(secret) || runs.into_iter().any(|run| text.contains(run)) || text.replace('\\', "").contains(&unicode)
}

/// Stops the server (a crash: unsynced bytes go), then flips one durable byte of the ledger
/// or of an unfinished run's journal, before its last newline (a flipped final newline reads
/// as a torn tail and cannot be told from one). Returns the file and the line damaged.
fn rot(world: &World, instance: Instance, file: DamagedFile, at: u64) -> Option<(std::path::PathBuf, usize)> {
    world.crash(instance);
    disarm_disk_faults(world);
    if world.on_the_store() {
        return rot_in_the_store(world, file, at);
    }
    let journals = World::path("journals");
    let path = match file {
        DamagedFile::Ledger => journals.join(warden::store::ledger::LEDGER_FILE),
        DamagedFile::Journal => {
            let state = check::ledger_state(&world.disk, &journals).ok()?;
            let open: Vec<_> = state.runs.values().filter(|e| e.is_open()).collect();
            let entry = open.get((at % open.len().max(1) as u64) as usize)?;
            warden::base::layout::RunFiles::new(&journals, &entry.tool, &entry.run).journal
        }
    };
    let mut bytes = world.disk.peek(&path)?;
    let last_newline = bytes.iter().rposition(|&b| b == b'\n').filter(|&n| n > 0)?;
    let position = (at % last_newline as u64) as usize;
    bytes[position] ^= 0x01;
    let line = 1 + bytes[..position].iter().filter(|&&b| b == b'\n').count();
    world.disk.corrupt(&path, bytes);
    Some((path, line))
}

/// `rot` in a world on the store: one bit of a committed line of the store's ledger or of an
/// unfinished run's journal (damage under the database); named as the server names it.
fn rot_in_the_store(world: &World, file: DamagedFile, at: u64) -> Option<(std::path::PathBuf, usize)> {
    match file {
        DamagedFile::Ledger => {
            let line = world.shared_db.rot(None, at)?;
            Some((warden::store::ledger::SHARED_LEDGER_NAME.into(), line))
        }
        DamagedFile::Journal => {
            let state = check::ledger_state(&world.disk, &World::path("journals")).ok()?;
            let open: Vec<_> = state.runs.values().filter(|e| e.is_open()).collect();
            let entry = open.get((at % open.len().max(1) as u64) as usize)?;
            let line = world.shared_db.rot(Some(&entry.run), at)?;
            Some((format!("run {}'s journal in the PostgreSQL store", entry.run).into(), line))
        }
    }
}

/// Faults armed for the coming call would strike the start that must report damage.
fn disarm_disk_faults(world: &World) {
    world.probes.crash_at.set(None);
    world.disk.crash_at_operation.set(None);
    world.disk.fail_next_fsync.set(false);
    world.disk.faults.borrow_mut().capacity_bytes = None;
    world.disk.flip_next_read_of.borrow_mut().take();
    world.disk.misdirect_next_append_to.borrow_mut().take();
    world.shared_db.refuse_next.set(0);
    world.shared_db.lose_commit_answers.set(0);
    world.shared_db.lose_commits.set(0);
    world.shared_db.restart_next.set(false);
}

/// After durable damage (a rotted byte, a misdirected write): the next start must refuse,
/// naming the file and line. The seed ends: damage waits for a person.
fn damage_reported(world: &World, (path, line): (std::path::PathBuf, usize), mut report: Report) -> Report {
    let instance = world.start("manifest.json");
    instance.run();
    let named = format!("{}:{line}:", path.display());
    match instance.exited() {
        Some(Err(message)) if message.contains(&named) => {}
        other => report.violations.push(Violation {
            invariant: 6,
            message: format!("{named} was damaged on disk and the server's start did not report it: {other:?}"),
        }),
    }
    report.log.extend(instance.log_timed());
    report.sim_ms = world.clock.now();
    report
}

/// Puts the violations found since the first `known` on the timeline, at this moment.
fn note_violations(world: &World, report: &mut Report, known: usize) {
    let found: Vec<String> = report.violations[known..].iter().map(|v| v.to_string()).collect();
    report.events.extend(found.into_iter().map(|v| (world.clock.now(), "checker".to_string(), v)));
}

/// Invariants 1, 2, 4 and 5 against the services' records: valid at any moment the server
/// is at rest (an action in doubt may or may not have happened).
fn ground_truth(world: &World, limits: &BTreeMap<String, ToolLimits>, report: &mut Report) {
    let Ok(state) = check::ledger_state(&world.disk, &World::path("journals")) else { return };
    let ops = truth::write_ops(world, &state);
    report.violations.extend(truth::journals_match_services(world, &ops));
    report.violations.extend(truth::limits_kept(world, limits, &state, &ops));
    report.violations.extend(truth::completions_are_the_providers(world, &state));
}

/// The checks at the end of the seed, after the liveness phase: the ground truth and the
/// journals at rest once more, nothing left undone, every answer backed by its run, and no
/// secret written.
fn final_checks(world: &World, limits: &BTreeMap<String, ToolLimits>, client: &Client, report: &mut Report) {
    ground_truth(world, limits, report);
    let journals = World::path("journals");
    let open = check::open_runs(&world.disk, &journals);
    if !open.is_empty() {
        report.violations.push(Violation {
            invariant: 10,
            message: format!("reservations still held after the liveness phase: {open:?}"),
        });
    }
    // 3 and 6 once more: runs made by calls resent in the liveness phase are checked too.
    let once_keep_ms = |tool: &str| once_keep_ms(limits, tool);
    report.violations.extend(check::at_rest_with(&world.disk, &journals, &once_keep_ms));
    client_checks(world, limits, client, report);
}

/// The checks of one client's answers after the liveness phase (the first instance's, and
/// each peer's): nothing left undone, every answer backed by its run, no secret written.
fn client_checks(world: &World, limits: &BTreeMap<String, ToolLimits>, client: &Client, report: &mut Report) {
    refusals_name_a_limit_of_the_tool(limits, client, report);
    let journals = World::path("journals");
    nothing_left_undone(world, client, report);
    if let Ok(state) = check::ledger_state(&world.disk, &journals) {
        report.violations.extend(answers_backed_by_settled_runs(client, &state));
        report.violations.extend(tasks_told_as_their_runs_ended(world, client, &state));
        report.violations.extend(runs_are_their_callers(world, limits, client, &state));
        report.violations.extend(repeats_get_their_runs_answer(world, client, &state));
        report.violations.extend(repeats_within_once_keep(limits, client, &state));
    }
    report.violations.extend(no_secret_written(world, client));
    report.violations.extend(crate::workload::refusable::not_refused(&client.refusable_answers));
}

/// 10 and 3 after the liveness phase: every call of `client` was answered, some retry of each
/// input round was served, and every task was told ended.
fn nothing_left_undone(world: &World, client: &Client, report: &mut Report) {
    let mut push = |invariant: u8, message: String| report.violations.push(Violation { invariant, message });
    if !client.unanswered.is_empty() {
        push(
            10,
            format!(
                "calls never answered after the liveness phase: {:?}",
                client.unanswered.keys().collect::<Vec<_>>()
            ),
        );
    }
    let journals = World::path("journals");
    let answered = |tool: &str, run: &str, round: u64| {
        matches!(check::journal(&world.disk, &journals, tool, run),
            Some(Ok(journal)) if journal.rounds.get(round as usize).is_some_and(|r| r.answered.is_some()))
    };
    for round in client.rounds_refused(&answered) {
        push(3, format!("every retry of an input round was refused, none served: {round}"));
    }
    let tasks = client.tasks_open();
    if !tasks.is_empty() {
        push(10, format!("tasks never told ended after the liveness phase: {tasks:?}"));
    }
}

/// 7: every answer naming a result is backed by a settled run.
/// 3: a task is told ended as its run ended: completed for a result (a tool's error too),
/// cancelled for a run its client cancelled, failed for a run that could not finish or never
/// started. A task told ended whose run is still open was told too soon.
fn tasks_told_as_their_runs_ended(world: &World, client: &Client, state: &State) -> Vec<Violation> {
    use warden::program::FailureKind;
    use warden::store::journal::RunOutcome;
    let mut found = Vec::new();
    for (call, followed) in &client.tasks {
        // A task the server came to call unknown: only a run released, or one whose records
        // retention took, may be.
        if followed.lost {
            let entry = state.run(&followed.task);
            let journal = entry.and_then(|e| check::journal(&world.disk, &World::path("journals"), &e.tool, &e.run));
            let kept = matches!(entry.map(|e| &e.phase), Some(RunPhase::Open))
                || (matches!(entry.map(|e| &e.phase), Some(RunPhase::Settled { .. })) && journal.is_some());
            if kept && world.disk.peek(&journal_path(entry)).is_some() {
                found.push(Violation {
                    invariant: 3,
                    message: format!("call {call}'s task {} was said unknown while its run is kept", followed.task),
                });
            }
            continue;
        }
        let Some(told) = &followed.ended else { continue };
        let expected = match state.run(&followed.task).map(|entry| &entry.phase) {
            None => continue,
            Some(RunPhase::Released { .. }) => "failed",
            Some(RunPhase::Open) => "open",
            Some(RunPhase::Settled { outcome, .. }) => match outcome {
                RunOutcome::Failed(FailureKind::Cancelled) => "cancelled",
                RunOutcome::Failed(FailureKind::Budget | FailureKind::Deadline | FailureKind::Internal) => "failed",
                _ => "completed",
            },
        };
        if told != expected {
            found.push(Violation {
                invariant: 3,
                message: format!("call {call}'s task {} was told {told}, but its run is {expected}", followed.task),
            });
        }
    }
    found
}

/// Where a run's journal is (nowhere for a run the ledger does not hold).
fn journal_path(entry: Option<&warden::store::ledger::RunEntry>) -> std::path::PathBuf {
    match entry {
        Some(entry) => warden::base::layout::RunFiles::new(&World::path("journals"), &entry.tool, &entry.run).journal,
        None => std::path::PathBuf::new(),
    }
}

fn answers_backed_by_settled_runs(client: &Client, state: &State) -> Vec<Violation> {
    let mut found = Vec::new();
    for (id, answer) in &client.answers {
        let Some(run) = client.runs.get(id).and_then(|runs| runs.last()) else { continue };
        let stopped = answer["_meta"]["dev.warden/run"]["status"] == json!("waiting_for_operator");
        let internal =
            answer["content"][0]["text"].as_str().is_some_and(|t| t.contains("could not be recorded durably"));
        if stopped || internal {
            continue;
        }
        match state.run(run).map(|e| &e.phase) {
            Some(RunPhase::Settled { .. }) => {}
            other => found.push(Violation {
                invariant: 7,
                message: format!("call {id} was answered from run {run}, which the ledger holds as {other:?}"),
            }),
        }
    }
    found
}

/// 3 (seed 000 section 5): a `once` repeat of a settled run gets that run's answer. Every
/// answer naming a settled run says the same; and a repeat is never told the run's journal is
/// no longer kept, or holds no answer, while the journal is still on the disk with its end
/// (retention only deletes).
fn repeats_get_their_runs_answer(world: &World, client: &Client, state: &State) -> Vec<Violation> {
    let mut found = Vec::new();
    let mut first_answer: BTreeMap<&str, (i64, Value)> = BTreeMap::new();
    for (id, run) in &client.answered_by {
        let Some(answer) = client.answers.get(id) else { continue };
        let settled = matches!(state.run(run).map(|entry| &entry.phase), Some(RunPhase::Settled { .. }));
        // An answer from a run's end names its outcome (others: waiting, interrupted).
        let ended = !answer["_meta"][warden::call::answer::META_RUN]["outcome"].is_null();
        if !settled || !ended {
            continue;
        }
        let said = json!([answer["content"], answer["structuredContent"], answer["isError"]]);
        match first_answer.get(run.as_str()) {
            Some((first, earlier)) if earlier != &said => found.push(Violation {
                invariant: 3,
                message: format!("calls {first} and {id} were both answered from run {run}, differently"),
            }),
            Some(_) => {}
            None => _ = first_answer.insert(run, (*id, said)),
        }
    }
    found.extend(repeats_keep_their_runs_arguments(client));
    for (id, answer) in &client.answers {
        let text = answer["content"][0]["text"].as_str().unwrap_or_default();
        let Some(run) = text.strip_prefix("run ").and_then(|rest| rest.split(' ').next()) else { continue };
        let (gone, endless) =
            (text.contains("its journal is no longer kept"), text.contains("journal holds no answer"));
        let Some(entry) = state.run(run).filter(|_| gone || endless) else { continue };
        let path = RunFiles::new(&World::path("journals"), &entry.tool, run).journal;
        let Some(bytes) = world.disk.peek(&path) else { continue };
        let has_end = || crate::checks::journal_reader::read(&bytes).is_ok_and(|journal| journal.end.is_some());
        if gone || has_end() {
            let told = if gone { "is no longer kept" } else { "holds no answer" };
            found.push(Violation {
                invariant: 3,
                message: format!("call {id} was told run {run}'s journal {told}, and it is on the disk whole"),
            });
        }
    }
    found
}

/// 3 (seed 000 section 5): a `once` key stops holding `keep` after its run ends, so a call is
/// not answered from a run whose key had expired by the time it was sent. That time is the
/// checker's own lower bound on the server's: the latest stamp of the ledger's durable bytes
/// then (the server decides no earlier, whatever its wall clock does; `sent_floor`).
fn repeats_within_once_keep(limits: &BTreeMap<String, ToolLimits>, client: &Client, state: &State) -> Vec<Violation> {
    let mut found = Vec::new();
    for (id, run) in &client.answered_by {
        let (Some(&sent), Some(entry)) = (client.sent_floor.get(id), state.run(run)) else { continue };
        let RunPhase::Settled { at_ms: settled, .. } = entry.phase else { continue };
        let Some(keep) = limits.get(&entry.tool).and_then(|tool| tool.once_keep_ms) else { continue };
        let made_here = client.runs.get(id).is_some_and(|runs| runs.contains(run));
        let expired_at = settled.saturating_add(keep);
        if !made_here && !client.retries.contains_key(id) && sent >= expired_at {
            found.push(Violation {
                invariant: 3,
                message: format!(
                    "call {id} was answered from run {run}, whose `once` key expired {} ms before it was sent",
                    sent - expired_at
                ),
            });
        }
    }
    found
}

/// 3 (seed 000 section 5): a call answered from a run another call made repeated that call's
/// arguments, and a call refused for differing from a run's arguments differed from them.
fn repeats_keep_their_runs_arguments(client: &Client) -> Vec<Violation> {
    let made_by: BTreeMap<&str, i64> =
        client.runs.iter().flat_map(|(id, runs)| runs.iter().map(move |run| (run.as_str(), *id))).collect();
    let arguments_of = |id: &i64| client.arguments.get(id).unwrap_or(&Value::Null);
    let mut found = Vec::new();
    for (id, run) in &client.answered_by {
        let Some(maker) = made_by.get(run.as_str()).filter(|maker| *maker != id) else { continue };
        if arguments_of(id) != arguments_of(maker) {
            found.push(Violation {
                invariant: 3,
                message: format!("call {id} was answered from run {run}, which call {maker} made with other arguments"),
            });
        }
    }
    for (id, answer) in &client.answers {
        let text = answer["content"][0]["text"].as_str().unwrap_or_default();
        let Some(rest) = text.strip_prefix("refused: run ").filter(|_| text.contains("with different arguments"))
        else {
            continue;
        };
        let run = rest.split(' ').next().unwrap_or_default();
        let Some(maker) = made_by.get(run) else { continue };
        if arguments_of(id) == arguments_of(maker) {
            found.push(Violation {
                invariant: 3,
                message: format!("call {id} was refused for differing from run {run}'s arguments, which it repeats"),
            });
        }
    }
    found
}

/// 4: in an OAuth world each run is for the principal whose call made it (a shared
/// `once` may answer one principal from another's run, by design).
fn runs_are_their_callers(
    world: &World,
    limits: &BTreeMap<String, ToolLimits>,
    client: &Client,
    state: &State,
) -> Vec<Violation> {
    let principals = world.principals.borrow();
    let shared_once = |id: &i64| {
        let tool = client.tools.get(id).and_then(|tool| limits.get(tool));
        tool.is_some_and(|tool| tool.once_keep_ms.is_some() && !tool.once_per_principal)
    };
    let mut found = Vec::new();
    let mut push = |message: String| found.push(Violation { invariant: 4, message });
    for (id, made) in &client.runs {
        let Some(&principal) = principals.get(id) else { continue };
        if shared_once(id) {
            continue;
        }
        let answering = client.answered_by.get(id).into_iter();
        for run in made.iter().chain(answering) {
            let recorded = state.run(run).and_then(|e| e.principal.as_deref());
            if recorded.is_some_and(|recorded| recorded != principal) {
                push(format!("call {id}, made as {principal}, was run or answered as {recorded:?} (run {run})"));
            }
        }
    }
    // The same for answers from runs the call did not start (a `once` repeat's).
    for (id, run) in &client.answered_by {
        let (Some(&principal), false) = (principals.get(id), client.runs.contains_key(id)) else { continue };
        if shared_once(id) {
            continue;
        }
        let recorded = state.run(run).and_then(|e| e.principal.as_deref());
        if recorded.is_some_and(|recorded| recorded != principal) {
            push(format!("call {id}, made as {principal}, was answered from {recorded:?}'s run {run}"));
        }
    }
    found
}

/// 9: no secret in any line a server logged, the first instance's and every peer's.
fn no_secret_logged(world: &World, log: &[(u64, String)]) -> Vec<Violation> {
    let everything: String = log.iter().map(|(_, line)| format!("{line}\n")).collect();
    (secrets_of(world).iter())
        .filter(|secret| leaks(&everything, secret))
        .map(|secret| Violation {
            invariant: 9,
            message: format!("the secret {}... appears in a line of the server's log", &secret[..3]),
        })
        .collect()
}

/// Every secret of the world: the generated worlds' own, and the ones an operator's world
/// made up (`own.rs`).
fn secrets_of(world: &World) -> Vec<String> {
    let own = (world.services.variables.borrow().values())
        .filter(|value| value.starts_with(crate::workload::own::OWN_SECRET_PREFIX))
        .cloned()
        .collect::<Vec<String>>();
    SECRETS.iter().map(|secret| secret.to_string()).chain(own).collect()
}

/// 9: no secret in any byte written (the protocol stream, the disk; the log: `no_secret_logged`).
fn no_secret_written(world: &World, client: &Client) -> Vec<Violation> {
    let mut everything = client.trace.clone();
    for path in world.disk.files() {
        everything.extend(world.disk.peek(&path).unwrap_or_default());
    }

    let everything = String::from_utf8_lossy(&everything);
    (secrets_of(world).iter())
        .filter(|secret| leaks(&everything, secret))
        .map(|secret| Violation {
            invariant: 9,
            message: format!("the secret {}... appears in a byte the server wrote", &secret[..3]),
        })
        .collect()
}
