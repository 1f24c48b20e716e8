//! Faults in words, for people: the simulator's output, its timeline and its summaries say
//! `the clock steps forward 8 min 28 s`, not `StepClock { ms: 508095 }`.

use std::fmt;

use crate::{CrashPoint, DamagedFile, Fault, NetworkFault};

/// A duration in milliseconds as a person reads it: `350 ms`, `12.5 s`, `8 min 28 s`,
/// `3 h 5 min`, `2 d 4 h`.
pub fn duration(ms: u64) -> String {
    const SECOND: u64 = 1_000;
    const MINUTE: u64 = 60 * SECOND;
    const HOUR: u64 = 60 * MINUTE;
    const DAY: u64 = 24 * HOUR;
    match ms {
        0..SECOND => format!("{ms} ms"),
        SECOND..MINUTE if ms % SECOND == 0 => format!("{} s", ms / SECOND),
        SECOND..MINUTE => format!("{:.1} s", ms as f64 / SECOND as f64),
        MINUTE..HOUR => pair(ms / MINUTE, "min", (ms % MINUTE) / SECOND, "s"),
        HOUR..DAY => pair(ms / HOUR, "h", (ms % HOUR) / MINUTE, "min"),
        _ => pair(ms / DAY, "d", (ms % DAY) / HOUR, "h"),
    }
}

fn pair(major: u64, major_unit: &str, minor: u64, minor_unit: &str) -> String {
    if minor == 0 {
        format!("{major} {major_unit}")
    } else {
        format!("{major} {major_unit} {minor} {minor_unit}")
    }
}

/// A signed clock step: `forward 8 min 28 s` or `back 3 s`.
fn step(ms: i64) -> String {
    let direction = if ms < 0 { "back" } else { "forward" };
    format!("{direction} {}", duration(ms.unsigned_abs()))
}

/// `1 time`, `3 times`.
fn times(count: u64) -> String {
    if count == 1 {
        "once".into()
    } else {
        format!("{count} times")
    }
}

impl CrashPoint {
    /// The durable step, as the design names it.
    pub fn words(self) -> &'static str {
        match self {
            CrashPoint::Reserved => "the reservation is durable (step 1)",
            CrashPoint::InputsKept => "the inputs are durable (step 2)",
            CrashPoint::JournalCreated => "the journal is created (step 3)",
            CrashPoint::RunRecorded => "the run is recorded (step 4)",
            CrashPoint::WaitingRecorded => "the waiting record is durable (step 5)",
            CrashPoint::Settled => "the settlement is durable (step 6)",
            CrashPoint::Answered => "the answer is written (step 7)",
            CrashPoint::ActionBegun => "an action's begin record is durable (inside step 4)",
            CrashPoint::Resumed => "a resumed run has journaled its resumption (inside step 4)",
        }
    }
}

impl DamagedFile {
    fn words(self) -> &'static str {
        match self {
            DamagedFile::Ledger => "the ledger",
            DamagedFile::Journal => "an unfinished run's journal",
        }
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::CrashAtPoint { point } => write!(f, "the server crashes once {}", point.words()),
            Fault::CrashAtDiskOperation { after } => {
                write!(f, "the server crashes at its disk operation {after} from now (unsynced data lost or torn)")
            }
            Fault::FailFsync => write!(f, "the next fsync fails"),
            Fault::FillDisk => write!(f, "the disk is full for the next write"),
            Fault::StepClock { ms } => write!(f, "the wall clock steps {}", step(*ms)),
            Fault::StepClockDuringRun { ms } => write!(f, "the wall clock steps {} inside a run", step(*ms)),
            Fault::PoisonRun => write!(f, "the next run crashes the server each time it executes"),
            Fault::AdvanceTime { ms } => write!(f, "{} pass", duration(*ms)),
            Fault::SlowDisk { ms, ops } => write!(f, "the next {ops} disk operations take {} each", duration(*ms)),
            Fault::SlowReader { ms, lines } => {
                write!(f, "the client reads the next {lines} lines {} apart", duration(*ms))
            }
            Fault::DriftClock { ppm } => {
                let pace = if *ppm < 0 { "slow" } else { "fast" };
                write!(f, "the wall clock runs {pace} by {} parts per million", ppm.unsigned_abs())
            }
            Fault::Network { url, kind } => write!(f, "the next request to {url}: {kind}"),
            Fault::NotifyFails { times: count } => write!(f, "the notify command fails {}", times(u64::from(*count))),
            Fault::NotifyHangs { times: count } => write!(f, "the notify command hangs {}", times(u64::from(*count))),
            Fault::OversizedLine => write!(f, "a line over the 4 MiB limit arrives"),
            Fault::MalformedLine => write!(f, "a malformed line arrives"),
            Fault::Cancel => write!(f, "the client cancels the call right after sending it"),
            Fault::Flood { calls } => write!(f, "the client floods the server with {calls} status calls"),
            Fault::ClientGone => write!(f, "the client goes away mid-call, then sends again"),
            Fault::StreamCut { after, stalls: false } => {
                write!(f, "the next live stream breaks after {after} events, and the client resumes it")
            }
            Fault::StreamCut { after, stalls: true } => write!(
                f,
                "the client stops reading the next live stream after {after} events until it is cut off, then resumes it"
            ),
            Fault::RefusableCalls => {
                write!(f, "the client sends the call again with an unknown argument, and with a secret")
            }
            Fault::Shutdown { after_ms } => write!(f, "a shutdown signal {} after the call", duration(*after_ms)),
            Fault::RotByte { file, at } => write!(f, "a durable byte of {} rots (byte {at})", file.words()),
            Fault::FlipLedgerRead { at } => write!(f, "a read of the ledger returns byte {at} flipped"),
            Fault::MisdirectLedgerAppend { at } => {
                write!(f, "the next ledger append lands {} bytes early", 1 + at % 64)
            }
            Fault::StoreRefuses { times: count } => {
                write!(f, "the PostgreSQL store refuses the next connection {}", times(u64::from(*count)))
            }
            Fault::StoreLosesCommitAnswer => {
                write!(f, "the PostgreSQL store commits the next write and its answer is lost")
            }
            Fault::StoreRestarts => {
                write!(f, "the PostgreSQL store restarts before its next operation, ending every connection")
            }
            Fault::PausesAfterActionBegun { ms } => {
                write!(f, "the server pauses for {} right after the next action's begin is durable", duration(*ms))
            }
            Fault::StoreLosesCommit => {
                write!(f, "the next write's COMMIT never reaches the PostgreSQL store, and no answer comes")
            }
        }
    }
}

impl fmt::Display for NetworkFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NetworkFault::Refuse => write!(f, "the connection is refused"),
            NetworkFault::LoseResponse => write!(f, "the service acts, and its answer is lost"),
            NetworkFault::CrashAfterActing => write!(f, "the service acts, then the server crashes"),
            NetworkFault::Slow { ms } => write!(f, "the service acts at once and answers {} later", duration(*ms)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_people_write_them() {
        let cases = [
            (0, "0 ms"),
            (999, "999 ms"),
            (1_000, "1 s"),
            (12_500, "12.5 s"),
            (60_000, "1 min"),
            (508_095, "8 min 28 s"),
            (3_600_000, "1 h"),
            (11_100_000, "3 h 5 min"),
            (187_200_000, "2 d 4 h"),
            (u64::MAX, "213503982334 d 14 h"),
        ];
        for (ms, words) in cases {
            assert_eq!(duration(ms), words, "{ms} ms");
        }
    }

    #[test]
    fn faults_read_as_words() {
        assert_eq!(Fault::StepClock { ms: 508_095 }.to_string(), "the wall clock steps forward 8 min 28 s");
        assert_eq!(Fault::StepClock { ms: -3_000 }.to_string(), "the wall clock steps back 3 s");
        let crash = Fault::CrashAtPoint { point: CrashPoint::Settled };
        assert_eq!(crash.to_string(), "the server crashes once the settlement is durable (step 6)");
        let slow = Fault::Network { url: "payments".into(), kind: NetworkFault::Slow { ms: 40_000 } };
        assert_eq!(slow.to_string(), "the next request to payments: the service acts at once and answers 40 s later");
        assert_eq!(Fault::NotifyFails { times: 1 }.to_string(), "the notify command fails once");
    }
}
