//! What the benchmarks share.

use std::path::Path;

use serde_json::json;
use warden::base::layout::RunFiles;
use warden::store::journal::{Binding, EndRecord, JournalRecord, RunOutcome};
use warden::store::ledger::{Event, LEDGER_FILE};
use warden::store::record;

/// The trivial pure program both benchmarks serve as tool `add`.
pub const PROGRAM: &str = r#"
def main(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first.
        b: The second.
    """
    return a + b
"#;

/// Writes a manifest and a journals folder holding `runs` settled runs of tool `add` (each
/// with its journal and run log, and its reserve and settle in the ledger, as a real run
/// leaves them), through the library's own record types. Used by the start-up and console
/// benchmarks; the others take `PROGRAM` alone.
#[allow(dead_code)]
pub fn synthesise(dir: &Path, runs: usize) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("add.star"), PROGRAM).unwrap();
    let manifest = json!({"server": {"name": "bench", "journals": "journals"},
        "tools": [{"name": "add", "program": "add.star", "limits": {"max_steps": 1000}}]});
    std::fs::write(dir.join("manifest.json"), manifest.to_string()).unwrap();
    let journals = dir.join("journals");
    std::fs::create_dir_all(&journals).unwrap();
    let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
    let mut ledger = Vec::new();
    for index in 0..runs {
        let run = format!("{:032x}", (index as u128 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835));
        let at_ms = now_ms - (runs - index) as u64;
        ledger.extend(record::encode(&Event::Reserve {
            run: run.clone(),
            tool: "add".into(),
            at_ms,
            calls: 1,
            money: vec![],
            once: None,
            principal: None,
            tokens: 0,
        }));
        ledger.extend(record::encode(&Event::Settle {
            run: run.clone(),
            at_ms: at_ms + 1,
            charged: vec![],
            outcome: RunOutcome::Done,
            tokens: 0,
        }));
        let files = RunFiles::new(&journals, "add", &run);
        std::fs::create_dir_all(&files.dir).unwrap();
        let binding = Binding { program: "synthetic".into(), config: "synthetic".into(), version: "synthetic".into() };
        let header = JournalRecord::Header {
            run: run.clone(),
            tool: "add".into(),
            binding,
            inputs: "{}".into(),
            at_ms,
            principal: None,
        };
        let end = JournalRecord::End(EndRecord {
            outcome: RunOutcome::Done,
            result: Some(json!(index)),
            message: None,
            usage: json!({}),
            at_ms: at_ms + 1,
        });
        std::fs::write(&files.journal, [record::encode(&header), record::encode(&end)].concat()).unwrap();
        std::fs::write(&files.log, format!("{{\"at_ms\":{at_ms},\"line\":\"settled (done)\"}}\n")).unwrap();
    }
    std::fs::write(journals.join(LEDGER_FILE), ledger).unwrap();
}
