//! Honest fault counts: a planned fault is counted when it fires, not when it is armed. Each
//! armed fault keeps a witness of the world's state when it was armed; after every call the
//! witnesses are checked. A fault of a kind that holds one setting (a crash point, a disk
//! operation to crash at, a full disk, notify failures) that is armed again before firing is
//! overwritten: it never fired, and is reported so.

use warden_faults::Fault;

use crate::env::services::NetFault;
use crate::env::world::World;

/// What firing would change, as the world stood when the fault was armed.
#[derive(Debug)]
enum Witness {
    /// It fires as it is armed (clock, time, lines and cancellations the client sends).
    Now,
    CrashAtPoint {
        crashes: usize,
    },
    CrashAtDiskOperation {
        crashes: u64,
    },
    FailFsync {
        failures: u64,
    },
    FillDisk {
        full: u64,
    },
    Network {
        url: String,
        kind: NetFault,
        pending: usize,
    },
    NotifyFails,
    NotifyHangs,
    ClockStepDuringRun {
        before: u64,
    },
    PoisonRun {
        before: u64,
    },
    PauseAfterBegin {
        before: u64,
    },
    SlowReader {
        before: u64,
    },
    Shutdown {
        before: u64,
    },
    StreamCut {
        before: u64,
    },
    Injected {
        kind: &'static str,
        before: u64,
    },
}

#[derive(Debug)]
struct Armed {
    /// The fault's position in the plan.
    index: usize,
    kind: &'static str,
    witness: Witness,
}

/// The armed faults not yet seen to fire.
#[derive(Debug, Default)]
pub struct Pending {
    armed: Vec<Armed>,
    /// (plan index, kind) of faults that never fired.
    pub never: Vec<(usize, &'static str)>,
}

fn injected(world: &World, kind: &str) -> u64 {
    let on_disk = world.disk.injected.borrow().get(kind).copied().unwrap_or(0);
    on_disk + world.shared_db.injected.borrow().get(kind).copied().unwrap_or(0)
}

fn network_pending(world: &World, url: &str, kind: NetFault) -> usize {
    world.services.faults.borrow().iter().filter(|(u, k)| u == url && *k == kind).count()
}

impl Pending {
    /// Records `fault` (plan position `index`) as armed just now.
    pub fn arm(&mut self, world: &World, index: usize, fault: &Fault) {
        let witness = match fault {
            Fault::CrashAtPoint { .. } => Witness::CrashAtPoint { crashes: world.probes.crashes.borrow().len() },
            Fault::CrashAtDiskOperation { .. } => {
                Witness::CrashAtDiskOperation { crashes: injected(world, "crash at a disk operation") }
            }
            Fault::FailFsync => Witness::FailFsync { failures: injected(world, "fsync failure") },
            Fault::FillDisk => Witness::FillDisk { full: injected(world, "disk full") },
            Fault::Network { url, kind } => {
                let kind = crate::plan::net_fault(*kind);
                // Armed already: the pending count includes this one.
                Witness::Network { url: url.clone(), kind, pending: network_pending(world, url, kind) }
            }
            Fault::NotifyFails { .. } => Witness::NotifyFails,
            Fault::NotifyHangs { .. } => Witness::NotifyHangs,
            Fault::StepClockDuringRun { .. } => Witness::ClockStepDuringRun { before: world.sandbox.steps_taken.get() },
            Fault::PoisonRun => Witness::PoisonRun { before: world.sandbox.poison_crashes.get() },
            Fault::PausesAfterActionBegun { .. } => Witness::PauseAfterBegin { before: world.probes.pauses.get() },
            Fault::SlowReader { .. } => Witness::SlowReader { before: world.slow_reader.lines_read.get() },
            Fault::Shutdown { .. } => Witness::Shutdown { before: world.services.shutdowns_sent.get() },
            Fault::StreamCut { .. } => Witness::StreamCut { before: world.stream_cut.cuts.get() },
            Fault::SlowDisk { .. } => {
                Witness::Injected { kind: "slow operation", before: injected(world, "slow operation") }
            }
            Fault::FlipLedgerRead { .. } => {
                Witness::Injected { kind: "flipped read", before: injected(world, "flipped read") }
            }
            Fault::MisdirectLedgerAppend { .. } => {
                Witness::Injected { kind: "misdirected write", before: injected(world, "misdirected write") }
            }
            Fault::StoreRefuses { .. }
            | Fault::StoreLosesCommitAnswer
            | Fault::StoreLosesCommit
            | Fault::StoreRestarts => Witness::Injected { kind: fault.kind(), before: injected(world, fault.kind()) },
            _ => Witness::Now,
        };
        // One setting per kind: an earlier one of the same kind not yet fired is overwritten.
        let overwrites = !matches!(witness, Witness::Now | Witness::Network { .. });
        if overwrites {
            let kind = fault.kind();
            let (gone, kept): (Vec<Armed>, Vec<Armed>) = self.armed.drain(..).partition(|a| a.kind == kind);
            self.never.extend(gone.iter().map(|a| (a.index, a.kind)));
            self.armed = kept;
        }
        self.armed.push(Armed { index, kind: fault.kind(), witness });
    }

    /// Moves the faults that fired out; returns their kinds.
    pub fn fired(&mut self, world: &World) -> Vec<&'static str> {
        let (fired, waiting): (Vec<Armed>, Vec<Armed>) = self.armed.drain(..).partition(|a| has_fired(world, a));
        self.armed = waiting;
        fired.iter().map(|a| a.kind).collect()
    }

    /// The faults phase is over: whatever has not fired never will.
    pub fn close(&mut self, world: &World) -> Vec<&'static str> {
        let fired = self.fired(world);
        self.never.extend(self.armed.drain(..).map(|a| (a.index, a.kind)));
        fired
    }
}

fn has_fired(world: &World, armed: &Armed) -> bool {
    match &armed.witness {
        Witness::Now => true,
        Witness::CrashAtPoint { crashes } => world.probes.crashes.borrow().len() > *crashes,
        Witness::CrashAtDiskOperation { crashes } => injected(world, "crash at a disk operation") > *crashes,
        Witness::FailFsync { failures } => injected(world, "fsync failure") > *failures,
        Witness::FillDisk { full } => injected(world, "disk full") > *full,
        Witness::Network { url, kind, pending } => network_pending(world, url, *kind) < *pending,
        Witness::NotifyFails => world.services.notify_failures.get() == 0,
        Witness::NotifyHangs => world.services.notify_hangs.get() == 0,
        Witness::ClockStepDuringRun { before } => world.sandbox.steps_taken.get() > *before,
        Witness::PoisonRun { before } => world.sandbox.poison_crashes.get() > *before,
        Witness::PauseAfterBegin { before } => world.probes.pauses.get() > *before,
        Witness::SlowReader { before } => world.slow_reader.lines_read.get() > *before,
        Witness::Shutdown { before } => world.services.shutdowns_sent.get() > *before,
        Witness::StreamCut { before } => world.stream_cut.cuts.get() > *before,
        Witness::Injected { kind, before } => injected(world, kind) > *before,
    }
}
