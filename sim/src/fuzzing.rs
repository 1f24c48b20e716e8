//! The properties the fuzz targets check, as plain functions over bytes, so the cargo-fuzz
//! targets (nightly, `fuzz/`) and the stable replay test (`sim/tests/fuzz_replay.rs`) run
//! exactly the same code. Each panics when its property is broken.

use std::path::Path;
use std::sync::OnceLock;

use serde_json::{json, Value};
use warden::manifest::Manifest;
use warden::program::Program;
use warden::protocol::framing::{Frame, LineSplitter};
use warden::protocol::jsonrpc::{classify, Incoming};
use warden::store::journal::Journal;
use warden::store::ledger::{self, Event, MoneyRecord, OnceRecord};
use warden::store::record;
use warden_faults::{CrashPoint, Fault, NetworkFault, Planned, Scenario};

use crate::env::executor::Stop;
use crate::env::world::World;

/// Every fuzz target's name (its folder under `fuzz/corpus/`) and property, for the tests
/// that replay or time the committed inputs.
pub const TARGETS: &[(&str, fn(&[u8]))] = &[
    ("framing", framing),
    ("stream", stream),
    ("ledger", ledger),
    ("journal", journal),
    ("manifest", manifest),
    ("inputs", inputs),
    ("sim", sim),
    ("canary", canary),
];

/// Bytes a fuzz input may hold; longer inputs are cut (the framing limit is tested by the
/// end-to-end tests, not by making every input 4 MiB).
pub const INPUT_BYTES_MAX: usize = 64 * 1024;

const PURE_MANIFEST: &str = r#"{ "server": { "name": "fuzz", "journals": "journals" },
  "tools": [ { "name": "echo", "program": "echo.star", "limits": { "max_steps": 10000 } } ] }"#;
const ECHO: &str = "def main(text: str = \"\") -> str:\n    \"\"\"Echo.\n\n    Args:\n        text: The text.\n    \"\"\"\n    return text\n";

fn schema_validators() -> &'static [(jsonschema::Validator, jsonschema::Validator)] {
    static VALIDATORS: OnceLock<Vec<(jsonschema::Validator, jsonschema::Validator)>> = OnceLock::new();
    VALIDATORS.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/mcp-schema");
        ["2025-11-25", "2026-07-28"]
            .iter()
            .map(|era| {
                let text = std::fs::read_to_string(root.join(era).join("schema.json")).expect("the official schema");
                let base: Value = serde_json::from_str(&text).expect("the schema is JSON");
                let compile = |definition: &str| {
                    let mut schema = base.clone();
                    schema["$ref"] = json!(format!("#/$defs/{definition}"));
                    jsonschema::validator_for(&schema).expect("the schema compiles")
                };
                (compile("JSONRPCMessage"), compile("JSONRPCErrorResponse"))
            })
            .collect()
    })
}

/// `framing`: the protocol's framing and classification, called directly (no server, so
/// thousands of inputs a second). Arbitrary bytes fed in chunks whose sizes the input draws
/// give the same frames as fed whole; each frame is the input's line, carriage return
/// stripped, or `TooLong`; every frame classifies without a panic, and every error the
/// server would answer with is a JSON-RPC error valid under an era's official schema.
/// (`stream` runs the same bytes through a whole simulated server.)
pub fn framing(data: &[u8]) {
    let data = &data[..data.len().min(INPUT_BYTES_MAX)];
    let whole = frames_of(data, &[data.len().max(1)]);
    let sizes: Vec<usize> = data.iter().rev().take(8).map(|b| 1 + *b as usize % 97).collect();
    assert_eq!(frames_of(data, &sizes), whole, "the frames depend on how the input was chunked");
    let mut lines = data.split(|b| *b == b'\n').collect::<Vec<_>>();
    lines.pop(); // The unterminated last line is no message.
    let expected: Vec<&[u8]> = (lines.into_iter())
        .map(|line| line.strip_suffix(b"\r").unwrap_or(line))
        .filter(|line| !line.iter().all(u8::is_ascii_whitespace))
        .collect();
    assert_eq!(whole.len(), expected.len(), "a line was lost or invented");
    for (frame, line) in whole.iter().zip(&expected) {
        assert_eq!(frame, &Frame::Line(line.to_vec()), "a frame is not its line");
        match classify(frame) {
            Incoming::Invalid(error) => {
                let message = error.to_value();
                let valid = schema_validators().iter().any(|(_, error_schema)| error_schema.is_valid(&message));
                assert!(valid, "an error answer valid in neither era: {message}");
            }
            Incoming::Request(request) => {
                assert!(request.id.is_string() || request.id.is_i64() || request.id.is_u64(), "a request's id");
            }
            Incoming::Notification(_) | Incoming::Response { .. } => {}
        }
    }
}

/// The frames a splitter gives for `data` fed in chunks of `sizes` (cycled).
fn frames_of(data: &[u8], sizes: &[usize]) -> Vec<Frame> {
    let mut splitter = LineSplitter::new();
    let mut rest = data;
    for size in sizes.iter().cycle() {
        if rest.is_empty() {
            break;
        }
        let (chunk, after) = rest.split_at((*size).min(rest.len()));
        splitter.feed(chunk);
        rest = after;
    }
    let frames = std::iter::from_fn(|| splitter.next_frame()).collect();
    splitter.finish();
    frames
}

/// `stream`: arbitrary bytes on the protocol stream of a whole simulated server, then one
/// good request. Every line written is one JSON-RPC message valid under an era's official
/// schema, and the good request is answered whatever came before it.
pub fn stream(data: &[u8]) {
    let data = &data[..data.len().min(INPUT_BYTES_MAX)];
    let world = World::new(0);
    world.install("manifest.json", PURE_MANIFEST.as_bytes());
    world.install("echo.star", ECHO.as_bytes());
    let instance = world.start("manifest.json");
    instance.send_raw(data);
    instance.send_raw(b"\n");
    instance
        .send(&json!({"jsonrpc": "2.0", "id": "probe-after-fuzz", "method": "server/discover", "params": {"_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}}}));
    instance.close_stdin();
    let stop = instance.run();
    assert_eq!(stop, Stop::Quiet, "the server did not go quiet");
    assert!(instance.exited().is_some(), "the server did not exit at EOF");
    let mut probe_answered = false;
    for line in instance.pipe.take_output() {
        assert_eq!(line.last(), Some(&b'\n'), "a message without its newline");
        assert!(!line[..line.len() - 1].contains(&b'\n'), "a message with an embedded newline");
        let message: Value = serde_json::from_slice(&line).expect("every line written is JSON");
        let valid = schema_validators().iter().any(|(message_schema, _)| message_schema.is_valid(&message));
        assert!(valid, "a message valid in neither era: {message}");
        if message.get("id") == Some(&json!("probe-after-fuzz")) {
            probe_answered = true;
        }
    }
    assert!(probe_answered, "a good line after the fuzz input was not answered");
}

/// Events derived from bytes, for building valid ledgers.
fn events_from(data: &[u8]) -> Vec<Event> {
    let mut events = Vec::new();
    let mut open: Vec<String> = Vec::new();
    // once key -> the run holding it, and whether that run has settled (its key forgettable).
    let mut holders: std::collections::BTreeMap<String, (String, bool)> = std::collections::BTreeMap::new();
    // Sixteen events hold every pattern the properties need (reserves with and without money
    // and keys, settles, releases, forgets, interleaved); more only made each input slower to
    // check.
    for (index, chunk) in data.chunks(3).enumerate().take(16) {
        let run = format!("{:032x}", index as u128 + 1);
        let choice = chunk[0] % 4;
        let forgettable = holders.iter().find(|(_, (_, settled))| *settled).map(|(key, _)| key.clone());
        if let (3, Some(key)) = (choice, &forgettable) {
            let (run, _) = holders.remove(key).expect("found above");
            events.push(Event::Forget { run, at_ms: index as u64, by: None });
        } else if choice == 0 || open.is_empty() {
            events.push(reserve_from(chunk, &run, index as u64));
            if let Event::Reserve { once: Some(once), .. } = events.last().expect("pushed") {
                holders.insert(once.key.clone(), (run.clone(), false));
            }
            open.push(run);
        } else {
            let run = open.remove(chunk[0] as usize % open.len());
            let key = holders.iter().find(|(_, (holder, _))| *holder == run).map(|(key, _)| key.clone());
            events.push(if choice == 1 {
                holders.entry(key.unwrap_or_default()).and_modify(|(_, settled)| *settled = true);
                let outcome = warden::store::journal::RunOutcome::Done;
                Event::Settle { run, at_ms: index as u64, charged: vec![], outcome, tokens: 0 }
            } else {
                holders.remove(&key.unwrap_or_default());
                Event::Release { run, at_ms: index as u64 }
            });
        }
    }
    events
}

/// A reserve of `run` drawn from `chunk`: with money, a `once` key or a principal, or not.
fn reserve_from(chunk: &[u8], run: &str, at_ms: u64) -> Event {
    let money = if chunk.get(1).is_some_and(|b| b % 2 == 0) {
        vec![MoneyRecord { amount: format!("{}.00", chunk.get(2).copied().unwrap_or(1)), currency: "USD".into() }]
    } else {
        vec![]
    };
    let once = chunk.get(1).filter(|b| **b > 200).map(|b| OnceRecord { key: format!("k{b}"), arguments: "a".into() });
    Event::Reserve {
        run: run.to_string(),
        tool: "t".into(),
        at_ms,
        calls: 1,
        money,
        once,
        principal: chunk.get(2).filter(|b| **b > 220).map(|b| format!("p{b}")),
        tokens: chunk.get(3).map_or(0, |b| u64::from(*b)),
    }
}

/// `ledger`: arbitrary bytes as `server.ledger` give a state or a typed damage error, never a
/// panic; a valid ledger with a torn tail recovers to the state without the tail; damage
/// anywhere but the tail is always reported.
pub fn ledger(data: &[u8]) {
    let data = &data[..data.len().min(INPUT_BYTES_MAX)];
    let file = Path::new("server.ledger");
    if let Ok((state, parsed)) = ledger::parse(file, data) {
        let (again, _) = ledger::parse(file, &data[..parsed.intact_len]).expect("the intact prefix parses");
        assert_eq!(state, again, "the intact prefix recovers a different state");
    }
    let events = events_from(data);
    let lines: Vec<Vec<u8>> = events.iter().map(record::encode).collect();
    let whole: Vec<u8> = lines.concat();
    let (state, _) = ledger::parse(file, &whole).expect("a ledger of valid events parses");
    if let Some(last) = lines.last() {
        let cut = data.first().copied().unwrap_or(0) as usize % last.len();
        let torn = &whole[..whole.len() - last.len() + cut];
        // The state without the last event, applied directly (parsing it again cost a third).
        let mut without = ledger::State::default();
        for event in &events[..events.len() - 1] {
            without.apply(event).expect("events_from makes a valid ledger");
        }
        let (recovered, parsed) = ledger::parse(file, torn).expect("a torn tail is not damage");
        assert_eq!(recovered, without, "a torn tail changed the state");
        assert_eq!(parsed.torn_tail_bytes, cut);
    }
    if lines.len() >= 2 {
        let line = data.get(1).copied().unwrap_or(0) as usize % (lines.len() - 1);
        let start: usize = lines[..line].iter().map(Vec::len).sum();
        let offset = data.get(2).copied().unwrap_or(0) as usize % lines[line].len();
        let mut damaged = whole.clone();
        damaged[start + offset] ^= 1 << (data.get(3).copied().unwrap_or(0) % 8);
        match ledger::parse(file, &damaged) {
            Err(ledger::LedgerError::Damaged { line: reported, .. }) => {
                assert!(reported <= line + 2, "damage reported at the wrong line")
            }
            Err(other) => panic!("damage reported as {other}"),
            Ok((damaged_state, _)) => panic!(
                "damage at line {} went unreported ({} runs, was {})",
                line + 1,
                damaged_state.runs.len(),
                state.runs.len()
            ),
        }
    }
}

/// `journal`: the same discipline for journals.
pub fn journal(data: &[u8]) {
    let data = &data[..data.len().min(INPUT_BYTES_MAX)];
    let file = Path::new("run.journal");
    if let Ok(journal) = Journal::parse(file, data) {
        let again = Journal::parse(file, &data[..journal.intact_len]).expect("the intact prefix parses");
        assert_eq!(journal.ops, again.ops);
        assert_eq!(journal.end, again.end);
        assert_eq!(journal.prints, again.prints);
    }
}

/// `manifest`: arbitrary bytes as a manifest give a manifest or problems that each name the
/// file, never a panic.
pub fn manifest(data: &[u8]) {
    let data = &data[..data.len().min(INPUT_BYTES_MAX)];
    match Manifest::parse(Path::new("fuzz.json"), data) {
        Ok(manifest) => assert!(manifest.tools.len() <= warden::manifest::TOOLS_MAX),
        Err(error) => {
            assert!(!error.problems.is_empty(), "a refusal with no problem named");
            assert!(
                error.problems.iter().all(|p| p.starts_with("fuzz.json: ")),
                "a problem that does not name the file"
            );
        }
    }
}

const TYPED: &str = r#"
def main(s: str, i: int, f: float = 1.5, b: bool = False, m: None | money = None, l: list[str] = [], d: dict[str, int] = {}, n: None | list[dict[str, float]] = None) -> str:
    """Every input type.

    Args:
        s: A string.
        i: An integer.
        f: A float.
        b: A boolean.
        m: Money.
        l: Strings.
        d: Integers by name.
        n: Nested.
    """
    return s
"#;

fn typed_program() -> &'static (Program, jsonschema::Validator) {
    static PROGRAM: OnceLock<(Program, jsonschema::Validator)> = OnceLock::new();
    PROGRAM.get_or_init(|| {
        let program = Program::load(Path::new("typed.star"), TYPED, "main", &[]).expect("the typed program loads");
        let validator = jsonschema::validator_for(&program.input_schema()).expect("the input schema compiles");
        (program, validator)
    })
}

/// `inputs`: whatever Warden's input check accepts, a JSON Schema validator also accepts
/// under the advertised `inputSchema` (the schema informs; the check decides).
pub fn inputs(data: &[u8]) {
    let Ok(arguments) = serde_json::from_slice::<Value>(&data[..data.len().min(INPUT_BYTES_MAX)]) else { return };
    let Some(arguments) = arguments.as_object() else { return };
    let (program, validator) = typed_program();
    if let Ok(normalised) = program.check_inputs(arguments) {
        assert!(
            validator.is_valid(&Value::Object(arguments.clone())),
            "accepted by the check, refused by the schema: {arguments:?}"
        );
        assert!(
            validator.is_valid(&Value::Object(normalised.clone())),
            "the normalised inputs break the schema: {normalised:?}"
        );
    }
}

/// A scenario built from fuzzer bytes: the seed, the size of the workload and the faults.
pub fn scenario_from(data: &[u8]) -> Scenario {
    let mut seed_bytes = [0u8; 8];
    for (i, b) in data.iter().take(8).enumerate() {
        seed_bytes[i] = *b;
    }
    let seed = u64::from_le_bytes(seed_bytes);
    let rest = data.get(8..).unwrap_or(&[]);
    let calls = 1 + rest.first().copied().unwrap_or(4) as u32 % 12;
    let mut faults = Vec::new();
    for chunk in rest.get(1..).unwrap_or(&[]).chunks(3).take(24) {
        let at = chunk[0] as u32 % calls;
        let param = chunk.get(2).copied().unwrap_or(0);
        let fault = match chunk.get(1).copied().unwrap_or(0) % 9 {
            0 => Fault::CrashAtPoint { point: CrashPoint::ALL[param as usize % CrashPoint::ALL.len()] },
            1 => Fault::CrashAtDiskOperation { after: 1 + param as u64 % 40 },
            2 => Fault::Network { url: "notes.sim".into(), kind: NetworkFault::LoseResponse },
            3 => Fault::Network { url: "refunds".into(), kind: NetworkFault::CrashAfterActing },
            4 => Fault::StepClock { ms: (param as i64 - 128) * 60_000 },
            5 => Fault::AdvanceTime { ms: param as u64 * 60_000 },
            6 => Fault::FailFsync,
            7 => Fault::Cancel,
            _ => Fault::MalformedLine,
        };
        faults.push(Planned { before_call: at, fault });
    }
    Scenario::passing("from fuzzer bytes".into(), seed, calls, faults)
}

/// `sim`: the simulator driven by fuzzer bytes instead of a seed: every invariant must hold.
pub fn sim(data: &[u8]) {
    let scenario = scenario_from(data);
    let report = crate::sweep::simulate(&scenario);
    assert!(
        report.violations.is_empty(),
        "{:?}\nscenario: {}",
        report.violations,
        serde_json::to_string(&scenario).unwrap_or_default()
    );
}

/// `canary`: a planted bug the fuzzer must find, proving the set-up finds things: an input
/// starting with `WARD` panics. Each byte is its own branch, so coverage guides the fuzzer to
/// it in seconds (as TigerBeetle's canary fuzzer does).
pub fn canary(data: &[u8]) {
    if data.first() == Some(&b'W')
        && data.get(1) == Some(&b'A')
        && data.get(2) == Some(&b'R')
        && data.get(3) == Some(&b'D')
    {
        panic!("the canary's planted bug was found, as it must be");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ledger target's events include forgets of settled keyed runs, each valid where it
    /// stands (the target's properties hold for them).
    #[test]
    fn the_ledger_targets_events_forget_a_settled_runs_key() {
        let data = [0, 201, 0, 1, 0, 0, 3, 0, 0, 0, 201, 0];
        let events = events_from(&data);
        assert!(matches!(events[2], Event::Forget { .. }), "{events:?}");
        let mut state = warden::store::ledger::State::default();
        events.iter().for_each(|event| state.apply(event).unwrap());
        ledger(&data);
    }
}
