//! One seeded simulation: a workload of tool calls from a client model, a fault plan (from
//! the seed, swarm-style, or from a scenario file), crashes and restarts, an operator who
//! resolves waiting runs from the services' truth, and the checker of DESIGN.md section 7's
//! invariants against that truth. Everything is a function of the seed and the plan.

use std::collections::BTreeMap;

use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};
use serde_json::{json, Value};
use warden::env::Point;
use warden::journal::WAITING_DIR;
use warden::ledger::RunPhase;
use warden_faults::{Canary, Fault, NetworkFault, Planned, Scenario, POINTS};

use crate::check::{self, Violation};
use crate::executor::Stop;
use crate::services::NetFault;
use crate::world::{CrashAt, Instance, World};

pub const SECRET: &str = "sk_test_SIMSECRET_7c1e";
/// Restarts one run may take before the checker calls it a livelock.
pub const RESTARTS_MAX: u32 = 200;
/// The most calls a generated workload holds.
pub const CALLS_MAX: u32 = 40;

pub const MANIFEST: &str = r#"{
  "server": { "name": "sim", "journals": "journals", "max_concurrent_runs": 4, "notify": ["notify"] },
  "tools": [
    { "name": "echo", "program": "echo.star", "limits": { "max_steps": 10000 }, "once": { "by": ["text"], "keep": "1d" } },
    { "name": "refund", "program": "refund.star", "net": { "timeout_ms": 1000, "connect_timeout_ms": 1000 },
      "grants": { "pay": { "cap": "payments.stripe.refund", "each": { "amount": "50.00", "currency": "USD" }, "uses": 1,
        "needs": { "get": { "cap": "net.http.get", "only": ["https://payments.sim/v1/payment_intents/*"] },
                   "post": { "cap": "net.http.post", "only": ["https://payments.sim/v1/refunds"], "idempotency_key": true },
                   "key": { "env": "STRIPE_SECRET_KEY" } } } },
      "once": { "by": ["order"], "keep": "1d" },
      "quota": { "window": "24h", "calls": 30, "money": { "amount": "400.00", "currency": "USD" } } },
    { "name": "note", "program": "note.star", "net": { "timeout_ms": 1000, "connect_timeout_ms": 1000 },
      "grants": { "notes": { "cap": "net.http.post", "only": ["https://notes.sim/notes"] } } },
    { "name": "note_safe", "program": "note.star", "net": { "timeout_ms": 1000, "connect_timeout_ms": 1000 },
      "grants": { "notes": { "cap": "net.http.post", "only": ["https://notes.sim/notes"], "idempotency_key": true } } },
    { "name": "close", "program": "close.star", "once": { "by": ["ticket"], "keep": "1d" },
      "grants": { "db": { "cap": "db.sqlite", "path": "desk.db", "mode": "write" } } }
  ]
}"#;

const ECHO: &str = "def main(text: str) -> dict:\n    \"\"\"Echo.\n\n    Args:\n        text: The text.\n    \"\"\"\n    print(\"echo\", text)\n    return {\"echo\": text}\n";
const REFUND: &str = "def main(pay, order: str, amount: money) -> dict:\n    \"\"\"Refund.\n\n    Args:\n        order: The intent.\n        amount: How much.\n    \"\"\"\n    intent = pay.get(\"https://payments.sim/v1/payment_intents/\" + order)\n    if intent.get(\"status\") != 200:\n        fail(\"no such order\")\n    r = pay.refund(order, amount)\n    return {\"status\": r.get(\"status\"), \"amount\": amount.amount}\n";
const NOTE: &str = "def main(notes, text: str) -> dict:\n    \"\"\"Save a note.\n\n    Args:\n        text: The note.\n    \"\"\"\n    r = notes.post(\"https://notes.sim/notes\", json = {\"text\": text})\n    return {\"status\": r.get(\"status\"), \"error\": r.get(\"error\")}\n";
const CLOSE: &str = "def main(db, ticket: int) -> dict:\n    \"\"\"Close a ticket.\n\n    Args:\n        ticket: The ticket.\n    \"\"\"\n    return {\"changes\": db.execute(\"UPDATE tickets SET open = 0 WHERE id = ? AND open = 1\", [ticket])[\"changes\"]}\n";

/// What one simulation did and found.
#[derive(Debug, Default, Clone)]
pub struct Report {
    pub seed: u64,
    pub calls: u32,
    pub answered: u32,
    /// Crashes by the step they followed (index 1 to 7), and at disk operations (index 0).
    pub crashes: [u64; 8],
    pub faults: BTreeMap<&'static str, u64>,
    pub violations: Vec<Violation>,
    pub trace_hash: String,
    pub sim_ms: u64,
    pub restarts: u32,
    /// (simulated ms, lane, label) for the timeline.
    pub events: Vec<(u64, String, String)>,
    /// Every server log line, all instances, for `--verbose`.
    pub log: Vec<String>,
}

/// The fault plan a seed implies: each fault kind is switched on for some seeds only
/// (swarm testing), at its own rate.
pub fn plan_for_seed(seed: u64) -> Scenario {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed_fa17);
    let mut chance = |per_mille: u64| rng.next_u64() % 1000 < per_mille;
    let calls = 8 + (seed % (CALLS_MAX as u64 - 8)) as u32;
    let kinds = 13;
    let enabled: Vec<bool> = (0..kinds).map(|_| chance(500)).collect();
    let rates: Vec<u64> = (0..kinds).map(|k| 30 + (seed.rotate_left(k as u32 * 7) % 250)).collect();
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xfa17_5eed);
    let mut faults = Vec::new();
    for call in 0..calls {
        for kind in 0..kinds {
            if !enabled[kind] || rng.next_u64() % 1000 >= rates[kind] {
                continue;
            }
            // A 4 MiB line costs real time to build and scan: keep it rare.
            if kind == 11 && rng.next_u64() % 10 != 0 {
                continue;
            }
            let fault = match kind {
                0 => Fault::CrashAtPoint { point: POINTS[(rng.next_u64() % POINTS.len() as u64) as usize].to_string() },
                1 => Fault::CrashAtDiskOperation { after: 1 + rng.next_u64() % 40 },
                2 => Fault::Network {
                    url: if rng.next_u64() % 2 == 0 { "notes.sim".into() } else { "refunds".into() },
                    kind: [NetworkFault::Refuse, NetworkFault::LoseResponse, NetworkFault::CrashAfterActing]
                        [(rng.next_u64() % 3) as usize],
                },
                3 => Fault::StepClock { ms: (rng.next_u64() % 7_200_000) as i64 - 3_600_000 },
                4 => Fault::AdvanceTime { ms: rng.next_u64() % 3_600_000 },
                5 => Fault::MalformedLine,
                6 => Fault::Cancel,
                7 => Fault::FailFsync,
                8 => Fault::FillDisk,
                9 => Fault::DriftClock { ppm: (rng.next_u64() % 200_001) as i64 - 100_000 },
                10 => Fault::NotifyHangs { times: 1 + (rng.next_u64() % 2) as u32 },
                11 => Fault::OversizedLine,
                _ => Fault::NotifyFails { times: (rng.next_u64() % 3) as u32 },
            };
            faults.push(Planned { before_call: call, fault });
        }
    }
    Scenario {
        description: format!("seed {seed}"),
        seed,
        calls,
        faults,
        canary: None,
        tools: None,
        expect: warden_faults::Expect::Pass,
    }
}

fn point_named(name: &str) -> Option<Point> {
    Point::ALL.iter().copied().find(|p| p.name() == name)
}

struct Client {
    next_id: i64,
    /// id -> the call message, for calls not yet answered.
    unanswered: BTreeMap<i64, Value>,
    answers: BTreeMap<i64, Value>,
    /// id -> run ids its progress notifications named, in order.
    runs: BTreeMap<i64, Vec<String>>,
    /// (id, tool) of every call sent.
    tools: BTreeMap<i64, String>,
    trace: Vec<u8>,
}

impl Client {
    /// A new connection: the client opens a 2025-11-25 session too, so each call can use
    /// either era on the same connection.
    fn connect(&mut self, instance: &Instance) {
        instance.send(&json!({"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "sim-client", "version": "1"}}}));
        instance.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    }

    fn call(&mut self, tool: &str, arguments: Value, legacy: bool) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let meta = if legacy {
            json!({"progressToken": id})
        } else {
            json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}, "progressToken": id})
        };
        let message = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": arguments, "_meta": meta}});
        self.unanswered.insert(id, message.clone());
        self.tools.insert(id, tool.to_string());
        message
    }

    /// After a restart the client sends again what was not answered, for tools with `once`
    /// (the same logical operation); a call to a tool without it would be a new run, so
    /// the client gives it up (its run, if it started, is still followed to its end).
    fn resend_after_restart(&mut self, instance: &Instance) {
        let tools = &self.tools;
        self.unanswered.retain(|id, _| matches!(tools.get(id).map(String::as_str), Some("echo" | "refund" | "close")));
        for (id, message) in &self.unanswered {
            // A resent call starts afresh: a run named before the crash does not answer it.
            self.runs.remove(id);
            instance.send(message);
        }
    }

    /// Reads the server's output; returns stream violations (invariant 8).
    fn read(&mut self, instance: &Instance, report: &mut Report, now: u64) {
        for line in instance.pipe.take_output() {
            self.trace.extend_from_slice(&line);
            let message: Value = match serde_json::from_slice(&line) {
                Ok(message) => message,
                Err(e) => {
                    report
                        .violations
                        .push(Violation { invariant: 8, message: format!("a stdout line is not JSON: {e}") });
                    continue;
                }
            };
            if message.get("jsonrpc") != Some(&json!("2.0"))
                || line.last() != Some(&b'\n')
                || line[..line.len() - 1].contains(&b'\n')
            {
                report.violations.push(Violation { invariant: 8, message: format!("not a JSON-RPC line: {message}") });
            }
            if message["method"] == json!("notifications/progress") {
                let id = message["params"]["progressToken"].as_i64().unwrap_or(-1);
                let run = message["params"]["message"]
                    .as_str()
                    .unwrap_or("")
                    .trim_start_matches("run ")
                    .trim_end_matches(" started")
                    .to_string();
                report.events.push((now, format!("call {id}"), format!("run {} started", &run[..8.min(run.len())])));
                self.runs.entry(id).or_default().push(run);
                continue;
            }
            if let Some(id) = message.get("id").and_then(Value::as_i64) {
                if message.get("error").is_some() && self.tools.contains_key(&id) {
                    report.violations.push(Violation {
                        invariant: 8,
                        message: format!("a tool call got a protocol error: {message}"),
                    });
                }
                if self.unanswered.remove(&id).is_some() {
                    report.answered += 1;
                    let text = message["result"]["content"][0]["text"]
                        .as_str()
                        .unwrap_or("")
                        .chars()
                        .take(60)
                        .collect::<String>();
                    report.events.push((now, format!("call {id}"), format!("answered: {text}")));
                    self.answers.insert(id, message["result"].clone());
                }
            }
        }
    }
}

fn install(world: &World, canary: Option<Canary>) {
    world.install("manifest.json", MANIFEST.as_bytes());
    for (name, text) in [("echo.star", ECHO), ("refund.star", REFUND), ("note.star", NOTE), ("close.star", CLOSE)] {
        world.install(name, text.as_bytes());
    }
    world.services.variables.borrow_mut().insert("STRIPE_SECRET_KEY".into(), SECRET.into());
    for n in 0..20 {
        world.services.intents.borrow_mut().insert(format!("pi_{}", 2000 + n), (100_000, "usd".into()));
    }
    let db = World::path("desk.db");
    world.services.sql(&db, "CREATE TABLE tickets (id INTEGER PRIMARY KEY, open INTEGER)");
    for n in 1..=20 {
        world.services.sql(&db, &format!("INSERT INTO tickets (id, open) VALUES ({n}, 1)"));
    }
    match canary {
        Some(Canary::LyingFsync) => world.disk.faults.borrow_mut().lying_fsync = true,
        Some(Canary::IgnoreIdempotencyKeys) => world.services.ignore_idempotency_keys.set(true),
        None => {}
    }
}

fn workload_call(rng: &mut ChaCha8Rng, client: &mut Client, index: u32, tools: Option<&Vec<String>>) -> Value {
    let legacy = rng.next_u64() % 3 == 0;
    let mut pick = rng.next_u64() % 100;
    if let Some(tools) = tools.filter(|t| !t.is_empty()) {
        pick = match tools[index as usize % tools.len()].as_str() {
            "echo" => 0,
            "refund" => 20,
            "note" => 50,
            "note_safe" => 65,
            _ => 80,
        };
    }
    match pick {
        0..=19 => {
            let text = if index > 0 && rng.next_u64() % 4 == 0 {
                format!("e{}", rng.next_u64() % index as u64)
            } else {
                format!("e{index}")
            };
            client.call("echo", json!({"text": text}), legacy)
        }
        20..=49 => {
            let order = format!("pi_{}", 2000 + rng.next_u64() % 20);
            let cents = 100 + rng.next_u64() % 5400;
            client.call("refund", json!({"order": order, "amount": {"amount": format!("{}.{:02}", cents / 100, cents % 100), "currency": "USD"}}), legacy)
        }
        50..=64 => client.call("note", json!({"text": format!("n{index}")}), legacy),
        65..=79 => client.call("note_safe", json!({"text": format!("s{index}")}), legacy),
        _ => client.call("close", json!({"ticket": 1 + rng.next_u64() % 20}), legacy),
    }
}

/// Arms one planned fault for the coming call. Returns lines the client sends first.
fn arm(world: &World, fault: &Fault, report: &mut Report) -> bool {
    *report.faults.entry(fault.kind()).or_insert(0) += 1;
    match fault {
        Fault::CrashAtPoint { point } => {
            if let Some(point) = point_named(point) {
                let seen = world.probes.seen.borrow().iter().filter(|(p, _)| *p == point).count() as u32;
                world.probes.crash_at.set(Some(CrashAt { point, nth: seen + 1 }));
            }
        }
        Fault::CrashAtDiskOperation { after } => {
            world.disk.crash_at_operation.set(Some(world.disk.operations.get() + after))
        }
        Fault::FailFsync => world.disk.fail_next_fsync.set(true),
        Fault::FillDisk => world.disk.faults.borrow_mut().capacity_bytes = Some(world.disk.used()),
        Fault::StepClock { ms } => world.clock.step_wall(*ms),
        Fault::AdvanceTime { ms } => world.clock.advance(*ms),
        Fault::Network { url, kind } => world.services.fault_next(
            url,
            match kind {
                NetworkFault::Refuse => NetFault::Refuse,
                NetworkFault::LoseResponse => NetFault::LoseResponse,
                NetworkFault::CrashAfterActing => NetFault::CrashAfterActing,
            },
        ),
        Fault::NotifyFails { times } => world.services.notify_failures.set(*times),
        Fault::NotifyHangs { times } => world.services.notify_hangs.set(*times),
        Fault::DriftClock { ppm } => world.clock.set_drift_ppm(*ppm),
        Fault::MalformedLine | Fault::Cancel | Fault::OversizedLine => return true,
    }
    false
}

/// Counts the crash against the step it followed.
fn count_crash(world: &World, report: &mut Report) {
    let by_point = world.probes.crashes.borrow().len();
    let index = if by_point > report.crashes[1..].iter().sum::<u64>() as usize {
        world.probes.crashes.borrow().last().map(|p| p.step() as usize).unwrap_or(0)
    } else {
        0
    };
    report.crashes[index] += 1;
}

fn restart(world: &World, instance: Instance, report: &mut Report) -> Instance {
    report.log.extend(instance.log());
    report.log.push("---- crash ----".into());
    world.crash(instance);
    world.probes.crash_at.set(None);
    world.disk.crash_at_operation.set(None);
    world.disk.faults.borrow_mut().capacity_bytes = None;
    report.restarts += 1;
    report.events.push((world.clock.now(), "server".into(), "crash, restart".into()));
    world.start("manifest.json")
}

/// Runs the instance until it is quiet, restarting it after every crash or stop; the client
/// resends what was not answered after each restart.
fn settle_down(world: &World, mut instance: Instance, client: &mut Client, report: &mut Report) -> Instance {
    for _ in 0..RESTARTS_MAX {
        let stop = instance.run();
        client.read(&instance, report, world.clock.now());
        let stopped = instance.exited().is_some();
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
        count_crash(world, report);
        instance = restart(world, instance, report);
        client.connect(&instance);
        client.resend_after_restart(&instance);
    }
    report.violations.push(Violation { invariant: 10, message: format!("no progress after {RESTARTS_MAX} restarts") });
    instance
}

/// The waiting records on disk.
fn waiting_records(world: &World) -> Vec<std::path::PathBuf> {
    let waiting_dir = World::path("journals").join(WAITING_DIR);
    world.disk.files().into_iter().filter(|p| p.parent() == Some(waiting_dir.as_path())).collect()
}

/// The operator follows the runbook with the server stopped (resolve refuses beside a live
/// one): for each waiting run, look at the service's own records and resolve.
fn operator(world: &World, report: &mut Report) {
    let records = waiting_records(world);
    for path in &records {
        let bytes = world.disk.peek(path).unwrap_or_default();
        let line = bytes.strip_suffix(b"\n").unwrap_or(&bytes);
        let Ok(record) = warden::record::decode::<warden::runs::WaitingRecord>(line) else {
            report.violations.push(Violation { invariant: 6, message: format!("{} does not parse", path.display()) });
            continue;
        };
        if record.halted {
            // A halted run: the runbook says resume it again once the server is back.
            let journal = std::path::PathBuf::from(&record.journal);
            let outcome = world.start_command(move |env| {
                Box::pin(async move { warden::commands::resume_halted(&env, &journal).await })
            });
            if let Err(problem) = outcome {
                report.violations.push(Violation {
                    invariant: 10,
                    message: format!("the operator could not resume halted run {}: {problem}", record.run),
                });
            }
            report.events.push((world.clock.now(), "operator".into(), format!("resumed halted {}", &record.run[..8])));
            continue;
        }
        let body = record.action["body"].as_str().unwrap_or("").to_string();
        let happened = world.services.effects.borrow().iter().any(|e| e.kind == "note" && e.detail == body);
        let journal = std::path::PathBuf::from(&record.journal);
        let op = record.op;
        let answer = happened.then(|| r#"{"status": 201, "json": {"saved": true}}"#.to_string());
        let outcome = world.start_command(move |env| {
            Box::pin(async move { warden::commands::resolve(&env, &journal, op, answer.as_deref()).await })
        });
        if let Err(problem) = outcome {
            report.violations.push(Violation {
                invariant: 10,
                message: format!("the operator could not resolve {}: {problem}", record.run),
            });
        }
        report.events.push((
            world.clock.now(),
            "operator".into(),
            format!("resolved {} as {}", &record.run[..8], if happened { "happened" } else { "not happened" }),
        ));
    }
}

/// Runs one scenario; a panic anywhere in the server (a broken assertion, a double borrow) is
/// reported as a violation (invariant 0) instead of ending the sweep.
pub fn simulate(scenario: &Scenario) -> Report {
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| simulate_unguarded(scenario)));
    outcome.unwrap_or_else(|panic| {
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
    })
}

fn simulate_unguarded(scenario: &Scenario) -> Report {
    let mut report = Report { seed: scenario.seed, calls: scenario.calls, ..Report::default() };
    let world = World::new(scenario.seed);
    install(&world, scenario.canary);
    let mut rng = ChaCha8Rng::seed_from_u64(scenario.seed ^ 0xc11e_47);
    let mut client = Client {
        next_id: 1,
        unanswered: BTreeMap::new(),
        answers: BTreeMap::new(),
        runs: BTreeMap::new(),
        tools: BTreeMap::new(),
        trace: Vec::new(),
    };
    let mut instance = world.start("manifest.json");
    client.connect(&instance);
    for index in 0..scenario.calls {
        let mut malformed = false;
        let mut oversized = false;
        let mut cancel = false;
        for planned in scenario.faults.iter().filter(|p| p.before_call == index) {
            if arm(&world, &planned.fault, &mut report) {
                malformed |= planned.fault == Fault::MalformedLine;
                oversized |= planned.fault == Fault::OversizedLine;
                cancel |= planned.fault == Fault::Cancel;
            }
        }
        if malformed {
            instance.send_raw(b"{\"jsonrpc\":\"2.0\",\"id\":\n");
        }
        if oversized {
            let mut line = vec![b' '; warden::protocol::framing::LINE_BYTES_MAX + 1];
            line[0] = b'{';
            line.push(b'\n');
            instance.send_raw(&line);
        }
        let message = workload_call(&mut rng, &mut client, index, scenario.tools.as_ref());
        instance.send(&message);
        if cancel {
            instance.send(&json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": message["id"], "reason": "sim"}}));
            // A cancelled call may get no answer; the client does not wait for one.
            client.unanswered.remove(&message["id"].as_i64().unwrap_or(0));
        }
        report.events.push((
            world.clock.now(),
            format!("call {}", message["id"]),
            format!("sent {}", message["params"]["name"]),
        ));
        // Calls often arrive together: then they run concurrently, interleaved at every await.
        if index + 1 < scenario.calls && rng.next_u64() % 3 == 0 {
            continue;
        }
        instance = settle_down(&world, instance, &mut client, &mut report);
        let violations = check::at_rest_with_once_keep(&world.disk, &World::path("journals"), 24 * 3600 * 1000);
        report.violations.extend(violations);
        if !report.violations.is_empty() {
            break;
        }
    }
    // Liveness: faults stop; the operator resolves what waits; every call ends answered.
    world.probes.crash_at.set(None);
    world.disk.crash_at_operation.set(None);
    world.disk.faults.borrow_mut().capacity_bytes = None;
    world.disk.fail_next_fsync.set(false);
    world.services.faults.borrow_mut().clear();
    world.services.notify_failures.set(0);
    world.services.notify_hangs.set(0);
    world.clock.set_drift_ppm(0);
    for _ in 0..3 {
        if waiting_records(&world).is_empty() {
            break;
        }
        report.log.extend(instance.log());
        report.log.push("---- the operator stops the server, resolves, and restarts it ----".into());
        drop(instance);
        operator(&world, &mut report);
        instance = world.start("manifest.json");
        client.connect(&instance);
        instance = settle_down(&world, instance, &mut client, &mut report);
    }
    client.resend_after_restart(&instance);
    instance = settle_down(&world, instance, &mut client, &mut report);
    final_checks(&world, &client, &mut report);
    report.log.extend(instance.log());
    drop(instance);
    report.sim_ms = world.clock.now();
    let mut trace = client.trace.clone();
    for effect in world.services.effects.borrow().iter() {
        trace.extend(format!("{effect:?}").bytes());
    }
    report.trace_hash = warden::runs::sha256_hex(&trace)[..16].to_string();
    report
}

fn final_checks(world: &World, client: &Client, report: &mut Report) {
    let journals = World::path("journals");
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
    let open = check::open_runs(&world.disk, &journals);
    if !open.is_empty() {
        push(10, format!("reservations still held after the liveness phase: {open:?}"));
    }
    // 2 and 5: each action reached the world at most once.
    let mut notes: BTreeMap<String, u32> = BTreeMap::new();
    let mut refund_keys: BTreeMap<String, u32> = BTreeMap::new();
    for effect in world.services.effects.borrow().iter() {
        match effect.kind.as_str() {
            "note" => *notes.entry(effect.detail.clone()).or_insert(0) += 1,
            "refund" => *refund_keys.entry(effect.key.clone().unwrap_or_default()).or_insert(0) += 1,
            _ => {}
        }
    }
    for (note, times) in notes.iter().filter(|(_, t)| **t > 1) {
        push(2, format!("note {note} reached the service {times} times"));
    }
    for (key, times) in refund_keys.iter().filter(|(_, t)| **t > 1) {
        push(2, format!("refund with key {key} was made {times} times"));
    }
    // 1 and 4: every refund within its grant; money charged within the quota.
    let refunds: Vec<i64> =
        world.services.effects.borrow().iter().filter(|e| e.kind == "refund").map(|e| e.minor).collect();
    if let Some(over) = refunds.iter().find(|&&minor| minor > 5000) {
        push(1, format!("a refund of {over} minor units exceeded `each` (5000)"));
    }
    let total: i64 = refunds.iter().sum();
    if total > 40_000 {
        push(4, format!("the payment service refunded {total} minor units, over the quota of 40000"));
    }
    if let Ok(state) = check::ledger_state(&world.disk, &journals) {
        let reserved =
            state.runs.values().filter(|e| e.tool == "refund" && !matches!(e.phase, RunPhase::Released { .. })).count();
        if reserved > 30 {
            push(4, format!("{reserved} refund calls reserved, over the quota of 30"));
        }
        // 7: every answer naming a result is backed by a settled run.
        for (id, answer) in &client.answers {
            let Some(run) = client.runs.get(id).and_then(|runs| runs.last()) else { continue };
            let stopped = answer["structuredContent"]["status"] == json!("waiting_for_operator");
            let internal =
                answer["content"][0]["text"].as_str().is_some_and(|t| t.contains("could not be recorded durably"));
            if stopped || internal {
                continue;
            }
            match state.run(run).map(|e| &e.phase) {
                Some(RunPhase::Settled { .. }) => {}
                other => push(7, format!("call {id} was answered from run {run}, which the ledger holds as {other:?}")),
            }
        }
    }
    // 9: no secret in any byte written.
    let mut everything = client.trace.clone();
    for path in world.disk.files() {
        everything.extend(world.disk.peek(&path).unwrap_or_default());
    }
    if String::from_utf8_lossy(&everything).contains(SECRET) {
        push(9, "the secret appears in a byte the server wrote".into());
    }
}
