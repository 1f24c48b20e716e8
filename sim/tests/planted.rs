//! The planted-bug table of `docs/RELIABILITY.md` agrees with the patches of `mutants/` (issue
//! 45 item 9): every patch has its row, and the invariant a patch names on its `Invariant:` line
//! (what `scripts/mutants.sh` requires the sweep to break) is the one its row says caught it.

use std::collections::BTreeMap;
use std::path::Path;

fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// The table's rows: mutant number -> what caught it.
fn table() -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(root().join("docs/RELIABILITY.md")).unwrap();
    let start = text.find("| mutant | seeds to detection").expect("the planted-bug table");
    let rows = text[start..].lines().skip(2).take_while(|line| line.starts_with("| "));
    rows.filter_map(|row| {
        let cells: Vec<&str> = row.trim_matches('|').split(" | ").map(str::trim).collect();
        let number = cells.first()?.get(..2)?.to_string();
        Some((number, cells.get(2)?.to_string()))
    })
    .collect()
}

#[test]
fn every_planted_bug_has_its_row_and_names_the_invariant_its_row_says() {
    let table = table();
    let mut patches = 0;
    for entry in std::fs::read_dir(root().join("mutants")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|extension| extension != "patch") {
            continue;
        }
        patches += 1;
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let caught = table.get(&name[..2]).unwrap_or_else(|| panic!("{name} has no row in the planted-bug table"));
        let text = std::fs::read_to_string(&path).unwrap();
        let named = text.lines().find_map(|line| line.strip_prefix("Invariant: "));
        if let Some(invariant) = named {
            assert!(
                caught.starts_with(&format!("invariant {invariant}")),
                "{name} names invariant {invariant}, its row says: {caught}"
            );
        }
    }
    assert!(patches >= 64, "only {patches} patches found");
}
