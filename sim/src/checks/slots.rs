//! Runs in progress against `max_concurrent_runs`, the tool's and the server's (seed 000
//! section 5: a call over either is answered busy, never queued). The server's slots are its
//! own count, so the checker keeps a lower bound of its own, taken each time a run's reserve
//! becomes durable: the runs this server instance reserved that the ledger holds open, that
//! did not stop to wait for a person and do not wait for input. Each of those holds its slot
//! (a slot is taken before the reserve and given back after the settle), so a count over a
//! limit is a violation; runs resumed at start and prompts also hold slots and are not
//! counted, which keeps the bound low, never high. A stop (a failed write, a shutdown's drain)
//! ends runs without a mark the checker sees, giving their slots back while the ledger holds
//! them open: so an instance is counted only until the first write fault (of its disk or of
//! the PostgreSQL store) or shutdown signal in its life. A resource's read is a run of its own name and holds a slot like a tool's.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

use serde_json::Value;
use warden::base::layout::RunFiles;
use warden::env::Point;
use warden::store::ledger::LEDGER_FILE;

use crate::checks::{journal_reader, ledger_reader};
use crate::env::disk::SimDisk;
use crate::env::oracle::Oracle;
use crate::env::world::{ProbeWatch, World};
use crate::report::Violation;

/// The limits a manifest sets, read by the checker itself, and the names of its tools and
/// resources (each a run's tool).
#[derive(Debug, Default)]
struct Limits {
    server: u64,
    tools: BTreeMap<String, u64>,
    names: BTreeSet<String>,
}

/// One server instance's runs, watched from its probes.
pub struct SlotWatch {
    disk: Rc<SimDisk>,
    limits: Limits,
    reserved: RefCell<Vec<String>>,
    stopped: RefCell<BTreeSet<String>>,
    /// Where violations go: the oracle's list, which the sweep reports.
    oracle: Rc<Oracle>,
    /// Write faults and shutdown signals so far, and how many there were when it began.
    stops: Box<dyn Fn() -> u64>,
    stops_at_start: u64,
}

impl SlotWatch {
    /// A watch for an instance serving the world's manifest as it is now on the disk.
    pub fn new(disk: Rc<SimDisk>, oracle: Rc<Oracle>, stops: Box<dyn Fn() -> u64>) -> SlotWatch {
        let manifest = (disk.peek(&World::path("manifest.json")))
            .and_then(|bytes| serde_json::from_slice::<Value>(&bytes).ok())
            .unwrap_or_default();
        let server = manifest["server"]["max_concurrent_runs"].as_u64().unwrap_or(SERVER_DEFAULT);
        let (tools, resources) = (manifest["tools"].as_array(), manifest["resources"].as_array());
        let declared = tools.into_iter().flatten().chain(resources.into_iter().flatten());
        let tools = (declared.clone())
            .filter_map(|tool| Some((tool["name"].as_str()?.to_string(), tool["max_concurrent_runs"].as_u64()?)))
            .collect();
        let names = declared.filter_map(|tool| tool["name"].as_str().map(str::to_string)).collect();
        let limits = Limits { server, tools, names };
        let stops_at_start = stops();
        let (reserved, stopped) = (RefCell::default(), RefCell::default());
        SlotWatch { disk, limits, reserved, stopped, oracle, stops, stops_at_start }
    }

    /// The factory the sweep gives a world: a fresh watch for each instance.
    pub fn for_each_instance(world: &World) -> crate::env::world::ProbeWatchFactory {
        let (disk, oracle, services) = (Rc::clone(&world.disk), Rc::clone(&world.oracle), Rc::clone(&world.services));
        let store = Rc::clone(&world.shared_db);
        Box::new(move || {
            let (counted_disk, services, store) = (Rc::clone(&disk), Rc::clone(&services), Rc::clone(&store));
            let stops = move || {
                let injected = counted_disk.injected.borrow();
                let faults: u64 = ["fsync failure", "write failure", "disk full"]
                    .iter()
                    .map(|kind| injected.get(kind).copied().unwrap_or(0))
                    .sum();
                // A world on the store stops on the store's failures as a world on files on its
                // disk's (every fault the simulated store injects fails a write or a read).
                let on_the_store: u64 = store.injected.borrow().values().sum();
                faults + on_the_store + services.shutdowns_sent.get()
            };
            Box::new(SlotWatch::new(Rc::clone(&disk), Rc::clone(&oracle), Box::new(stops)))
        })
    }
}

impl ProbeWatch for SlotWatch {
    fn reached(&self, point: Point, run: &str) {
        match point {
            Point::Reserved => {
                self.reserved.borrow_mut().push(run.to_string());
                self.check();
            }
            Point::WaitingRecorded => _ = self.stopped.borrow_mut().insert(run.to_string()),
            _ => {}
        }
    }
}

impl SlotWatch {
    /// Counts the runs in progress now, by tool and in all, against their limits.
    fn check(&self) {
        if (self.stops)() != self.stops_at_start {
            return; // the instance may be stopping: its interrupted runs hold no slot
        }
        let journals = World::path("journals");
        let bytes = self.disk.peek(&journals.join(LEDGER_FILE)).unwrap_or_default();
        let Ok(ledger) = ledger_reader::read(&bytes) else { return };
        let (stopped, reserved) = (self.stopped.borrow(), self.reserved.borrow());
        let mut by_tool: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for run in reserved.iter().filter(|run| !stopped.contains(*run)) {
            let open = ledger.runs.get(run).filter(|entry| entry.ended.is_none());
            let Some(entry) = open.filter(|entry| self.limits.names.contains(&entry.tool)) else { continue };
            if !self.awaits_input(&journals, &entry.tool, run) {
                by_tool.entry(&entry.tool).or_default().push(run);
            }
        }
        let total: usize = by_tool.values().map(Vec::len).sum();
        let mut found = Vec::new();
        if total as u64 > self.limits.server {
            found.push(format!(
                "{total} runs in progress at once, over `server.max_concurrent_runs` of {}",
                self.limits.server
            ));
        }
        for (tool, runs) in &by_tool {
            let max = self.limits.tools.get(*tool).copied().unwrap_or(self.limits.server);
            if runs.len() as u64 > max {
                found.push(format!(
                    "{} runs of `{tool}` in progress at once, over its `max_concurrent_runs` of {max}: {runs:?}",
                    runs.len()
                ));
            }
        }
        let mut violations = self.oracle.violations.borrow_mut();
        violations.extend(found.into_iter().map(|message| Violation { invariant: 4, message }));
    }

    /// Whether `run`'s journal ends with an input round not answered (its call was answered
    /// `input_required` and gave its slot back).
    fn awaits_input(&self, journals: &std::path::Path, tool: &str, run: &str) -> bool {
        let path = RunFiles::new(journals, tool, run).journal;
        let Some(bytes) = self.disk.peek(&path) else { return false };
        journal_reader::read(&bytes).is_ok_and(|journal| journal.rounds.last() == Some(&false))
    }
}

/// `server.max_concurrent_runs` when the manifest leaves it out (the server's default).
const SERVER_DEFAULT: u64 = 8;
