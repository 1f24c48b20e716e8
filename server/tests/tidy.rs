//! The seam is sacred (DESIGN.md section 3): outside `server/src/io/` (and the thin
//! binaries), no code reads the clock, touches files, sockets, processes, threads, tokio,
//! stdout or OS randomness. This test fails the build when one does, naming file and line.

mod common;

use std::path::{Path, PathBuf};

/// What may not appear in core code, and why.
const FORBIDDEN: &[(&str, &str)] = &[
    ("std::fs", "files go through Env::disk"),
    ("std::time", "time goes through Env::clock"),
    ("SystemTime", "time goes through Env::clock"),
    ("Instant::now", "time goes through Env::clock"),
    ("tokio", "the runtime is reached through Env::spawn and Env's futures"),
    ("std::thread", "threads go through Env::spawn"),
    ("thread::spawn", "threads go through Env::spawn"),
    ("std::process", "processes go through Env::process"),
    ("Command::new", "processes go through Env::process"),
    ("std::net", "the network goes through Env::net"),
    ("reqwest", "the network goes through Env::net"),
    ("rusqlite", "SQLite goes through Env::db"),
    ("std::env::var", "the process environment goes through Env::process"),
    ("env::var(", "the process environment goes through Env::process"),
    ("getrandom", "randomness goes through Env::rng"),
    ("OsRng", "randomness goes through Env::rng"),
    ("thread_rng", "randomness goes through Env::rng"),
    ("/dev/urandom", "randomness goes through Env::rng"),
    ("libc::", "system calls belong in server/src/io/"),
    ("println!", "stdout is the protocol stream; log through Env::stdio"),
    ("print!(", "stdout is the protocol stream; log through Env::stdio"),
    ("eprintln!", "log through Env::stdio"),
    ("eprint!(", "log through Env::stdio"),
    ("io::stdout", "stdout is the protocol stream"),
    ("io::stderr", "log through Env::stdio"),
    ("io::stdin", "the protocol stream goes through Env::stdio"),
    ("dbg!", "log through Env::stdio"),
];

/// Single tokens a file may use, and why.
const ALLOWED: &[(&str, &str, &str)] = &[
    (
        "sim/src/services.rs",
        "rusqlite",
        "the simulated world's SQLite is in memory and deterministic: it is the service side of Env::db",
    ),
    ("sim/src/fuzzing.rs", "std::fs", "the fuzz properties read the official MCP schema fixture once; not server code"),
];

/// Files allowed to touch the outside world: the real Env and the binaries' `main`.
fn exempt(path: &Path) -> bool {
    let text = path.to_string_lossy();
    text.contains("/server/src/io/") || text.ends_with("/src/main.rs")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Violations in one file's text, as `line: token (why)`. Comments are skipped.
fn violations(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut in_tests = false;
    for (index, line) in text.lines().enumerate() {
        let code = line.split("//").next().unwrap_or("");
        if code.trim_start().starts_with("#[cfg(test)]") {
            // Unit tests at the end of a file may use std freely; they never ship.
            in_tests = true;
        }
        if in_tests {
            continue;
        }
        let grouped = code.contains("use std::{")
            && ["fs", "time", "thread", "process", "net"]
                .iter()
                .any(|m| code.split(|c: char| !c.is_alphanumeric() && c != '_').any(|word| word == *m));
        if grouped {
            found.push(format!("{}: a grouped `use std::{{..}}` of an I/O module", index + 1));
        }
        for (token, why) in FORBIDDEN {
            if code.contains(token) {
                found.push(format!("{}: `{token}` ({why})", index + 1));
            }
        }
    }
    found
}

#[test]
fn core_code_reaches_the_world_only_through_env() {
    let root = common::repo_root();
    let mut files = Vec::new();
    for crate_dir in ["server/src", "faults/src", "sim/src"] {
        rust_files(&root.join(crate_dir), &mut files);
    }
    files.sort();
    assert!(files.len() > 10, "the tidy scan found too few files: {files:?}");
    let mut report = Vec::new();
    for file in files.iter().filter(|f| !exempt(f)) {
        let text = std::fs::read_to_string(file).unwrap();
        let relative = file.strip_prefix(&root).unwrap().display().to_string();
        for violation in violations(&text) {
            let allowed =
                ALLOWED.iter().any(|(path, token, _)| relative == *path && violation.contains(&format!("`{token}`")));
            if !allowed {
                report.push(format!("{relative}:{violation}"));
            }
        }
    }
    assert!(report.is_empty(), "code outside server/src/io/ bypasses the Env seam:\n{}", report.join("\n"));
}

#[test]
fn the_scan_finds_what_it_must() {
    let planted = "fn f() {\n    let t = std::time::SystemTime::now(); // read the clock\n    println!(\"hi\");\n}\nuse std::{fs, io};\n";
    let found = violations(planted);
    assert!(found.iter().any(|v| v.starts_with("2: `std::time`")), "{found:?}");
    assert!(found.iter().any(|v| v.starts_with("3: `println!`")), "{found:?}");
    assert!(found.iter().any(|v| v.starts_with("5: a grouped")), "{found:?}");
    assert!(violations("// std::fs in a comment is fine\n").is_empty());
    assert!(exempt(Path::new("/x/server/src/io/disk.rs")));
    assert!(!exempt(Path::new("/x/server/src/ledger.rs")));
}
