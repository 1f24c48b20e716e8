//! A sweep over a range of seeds on several cores, with output identical to a serial sweep:
//! workers simulate seeds in any order, and the caller sees each seed's report in seed order.
//!
//! Each seed is a world of its own (its `Rc`s never leave the worker's thread); only the
//! trimmed `Report` crosses. Memory stays bounded: a worker waits before taking a seed more
//! than `WINDOW_PER_JOB * jobs` ahead of the next one to be handed out, so one slow seed
//! cannot make the others pile up behind it.

pub mod summary;

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Condvar, Mutex};

use warden_faults::{Canary, WorldFile};

use crate::plan::plan_in;
use crate::report::Report;
use crate::sweep::simulate;

/// How far ahead of the seed to be handed out next a worker may run, per worker.
const WINDOW_PER_JOB: u64 = 16;

/// Whether the sweep goes on after a seed.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    Continue,
    Stop,
}

/// The seeds handed out and the seed the caller waits for, shared by the workers.
struct Cursor {
    next_to_take: u64,
    next_to_hand_out: u64,
}

/// Simulates every seed of `seeds` (with `canary` planted; in the operator's world `own`, if
/// given) on `jobs` threads and calls `each` with the reports in seed order, until `each` says
/// stop. Each report arrives without its log and events (a sweep keeps counts, not transcripts).
pub fn in_seed_order(
    seeds: Range<u64>,
    jobs: usize,
    (canary, own): (Option<Canary>, Option<&WorldFile>),
    mut each: impl FnMut(Report) -> Flow,
) {
    assert!(jobs >= 1, "at least one job");
    let window = WINDOW_PER_JOB * jobs as u64;
    let cursor = Mutex::new(Cursor { next_to_take: seeds.start, next_to_hand_out: seeds.start });
    let moved = Condvar::new();
    let stop = AtomicBool::new(false);
    let (sender, receiver) = mpsc::channel::<Report>();
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            let sender = sender.clone();
            let (cursor, moved, stop, end) = (&cursor, &moved, &stop, seeds.end);
            scope.spawn(move || {
                while let Some(seed) = take_seed(cursor, moved, stop, end, window) {
                    if sender.send(simulate_trimmed(seed, canary, own)).is_err() {
                        return;
                    }
                }
            });
        }
        drop(sender);
        // However the handing out ends (done, stopped, or a panic in `each`), the workers are
        // told, so none waits for the window forever and the scope can end.
        let _stop = StopOnDrop { cursor: &cursor, moved: &moved, stop: &stop };
        hand_out_in_order(&receiver, seeds.start, &cursor, &moved, &mut each);
    });
}

/// Tells the workers to stop when dropped: the flag is set under the cursor's lock, so a
/// worker cannot check it, miss the change, and then wait for a wake-up already sent.
struct StopOnDrop<'a> {
    cursor: &'a Mutex<Cursor>,
    moved: &'a Condvar,
    stop: &'a AtomicBool,
}

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        let guard = self.cursor.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        self.stop.store(true, Ordering::SeqCst);
        drop(guard);
        self.moved.notify_all();
    }
}

/// The next seed for a worker, once it is within the window; `None` at the end or a stop.
fn take_seed(cursor: &Mutex<Cursor>, moved: &Condvar, stop: &AtomicBool, end: u64, window: u64) -> Option<u64> {
    let mut state = cursor.lock().expect("the cursor");
    loop {
        if stop.load(Ordering::SeqCst) || state.next_to_take >= end {
            return None;
        }
        if state.next_to_take < state.next_to_hand_out + window {
            let seed = state.next_to_take;
            state.next_to_take += 1;
            return Some(seed);
        }
        state = moved.wait(state).expect("the cursor");
    }
}

fn hand_out_in_order(
    receiver: &mpsc::Receiver<Report>,
    first: u64,
    cursor: &Mutex<Cursor>,
    moved: &Condvar,
    each: &mut impl FnMut(Report) -> Flow,
) {
    let mut waiting: BTreeMap<u64, Report> = BTreeMap::new();
    let mut next = first;
    for report in receiver {
        waiting.insert(report.seed, report);
        while let Some(report) = waiting.remove(&next) {
            next += 1;
            cursor.lock().expect("the cursor").next_to_hand_out = next;
            moved.notify_all();
            if each(report) == Flow::Stop {
                return;
            }
        }
    }
}

fn simulate_trimmed(seed: u64, canary: Option<Canary>, own: Option<&WorldFile>) -> Report {
    let mut scenario = plan_in(seed, own);
    scenario.canary = canary;
    let mut report = simulate(&scenario);
    report.log = Vec::new();
    report.events = Vec::new();
    report.journals = BTreeMap::new();
    report.sent_tools = Vec::new();
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_arrive_in_seed_order_and_stop_when_asked() {
        for jobs in [1, 3] {
            let mut seen = Vec::new();
            in_seed_order(5..12, jobs, (None, None), |report| {
                seen.push(report.seed);
                if report.seed == 9 {
                    Flow::Stop
                } else {
                    Flow::Continue
                }
            });
            assert_eq!(seen, vec![5, 6, 7, 8, 9], "{jobs} jobs");
        }
    }

    /// A panic while handing out (a failing shrink, say) ends the sweep instead of leaving the
    /// worker waiting for the window forever.
    #[test]
    fn a_panic_while_handing_out_ends_the_sweep() {
        let range = 0..WINDOW_PER_JOB + 4;
        let outcome =
            std::panic::catch_unwind(|| in_seed_order(range, 1, (None, None), |_| panic!("handing out failed")));
        assert!(outcome.is_err(), "the panic reaches the caller");
    }
}
