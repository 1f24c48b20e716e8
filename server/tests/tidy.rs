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
        "sim/src/env/services.rs",
        "rusqlite",
        "the simulated world's SQLite is in memory and deterministic: it is the service side of Env::db",
    ),
    ("sim/src/fuzzing.rs", "std::fs", "the fuzz properties read the official MCP schema fixture once; not server code"),
    (
        "sim/src/workload/own.rs",
        "std::fs",
        "`explore --manifest` reads the operator's files once, before any world is simulated; not server code",
    ),
    (
        "sim/src/workload/own.rs",
        "rusqlite",
        "`explore --manifest` runs each `init` file once at load, in a database of its own; not server code",
    ),
    (
        "sim/src/explore/mod.rs",
        "std::thread",
        "a sweep runs whole seeds on threads, each seed's simulated world on one thread; not server code",
    ),
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
    assert!(!exempt(Path::new("/x/server/src/store/ledger.rs")));
}

/// The longest a function may be (TigerBeetle's tidy rule): one screen, one idea.
const FUNCTION_LINES_MAX: usize = 70;

/// Functions allowed past `FUNCTION_LINES_MAX`, and why. The first two are long by nature;
/// the rest were long when the gate came and are to be split (each line removed as it is).
const LONG_FUNCTIONS: &[(&str, &str, &str)] = &[
    ("server/src/program/capability.rs", "capability_methods", "the Starlark module container: one item per method"),
    ("server/src/run/machine.rs", "step", "the transition table: one arm per (state, event) cell"),
];

/// Every function with a body in `text` (outside its unit tests) longer than the limit, as
/// (name, first line, lines): from its `fn` line to the `}` at the same indentation.
fn long_functions(text: &str) -> Vec<(String, usize, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    for (index, line) in lines.iter().enumerate() {
        if line.trim_start().starts_with("#[cfg(test)]") {
            break;
        }
        let trimmed = line.trim_start();
        let indent = &line[..line.len() - trimmed.len()];
        let after_qualifiers = ["pub(crate) ", "pub(super) ", "pub ", "async ", "const ", "unsafe "]
            .iter()
            .fold(trimmed, |rest, qualifier| rest.strip_prefix(qualifier).unwrap_or(rest));
        let Some(signature) = after_qualifiers.strip_prefix("fn ") else { continue };
        let name: String = signature.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        // A declaration without a body (a trait's) ends with `;` before any `{`.
        let head: String = lines[index..].iter().take_while(|l| !l.contains('{')).copied().collect();
        if head.contains(';') {
            continue;
        }
        let closing = format!("{indent}}}");
        let end =
            (index..lines.len()).find(|&at| lines[at] == closing || (at == index && line.trim_end().ends_with('}')));
        let length = end.map_or(0, |end| end - index + 1);
        if length > FUNCTION_LINES_MAX {
            found.push((name, index + 1, length));
        }
    }
    found
}

#[test]
fn no_function_is_longer_than_the_limit_unless_listed() {
    let root = common::repo_root();
    let mut files = Vec::new();
    for crate_dir in ["server/src", "faults/src", "sim/src"] {
        rust_files(&root.join(crate_dir), &mut files);
    }
    let mut report = Vec::new();
    let mut still_long = Vec::new();
    for file in &files {
        let relative = file.strip_prefix(&root).unwrap().display().to_string();
        if relative.ends_with("/tests.rs") {
            continue;
        }
        for (name, line, length) in long_functions(&std::fs::read_to_string(file).unwrap()) {
            match LONG_FUNCTIONS.iter().find(|(path, listed, _)| relative == *path && name == *listed) {
                Some(listed) => still_long.push(listed),
                None => {
                    report.push(format!("{relative}:{line}: `{name}` is {length} lines, over {FUNCTION_LINES_MAX}"))
                }
            }
        }
    }
    // The list stays true: an entry whose function was split (or renamed) goes.
    for listed in LONG_FUNCTIONS.iter().filter(|listed| !still_long.contains(listed)) {
        report.push(format!("{}: `{}` is listed in LONG_FUNCTIONS but is not over the limit", listed.0, listed.1));
    }
    assert!(
        report.is_empty(),
        "split these functions (or list one in LONG_FUNCTIONS with why):\n{}",
        report.join("\n")
    );
}

#[test]
fn the_function_scan_measures_what_it_must() {
    let body = "    x += 1;\n".repeat(FUNCTION_LINES_MAX);
    let long = format!(
        "pub async fn long(a: u8) -> u8 {{\n{body}}}\nfn short() {{}}\ntrait T {{\n    fn declared(&self);\n}}\n"
    );
    assert_eq!(long_functions(&long), vec![("long".to_string(), 1, FUNCTION_LINES_MAX + 2)]);
}

/// The sans-IO core: these modules, and every module they reach through `crate::` or
/// `super::` paths, do no I/O: none names `Env`, declares an `async fn` or awaits. The machine
/// is a pure function of (state, event); the record formats and the ledger's state are pure
/// over bytes and events; framing is pure over a stream's bytes.
const PURE: &[&str] = &[
    "server/src/run/machine.rs",
    "server/src/store/journal.rs",
    "server/src/store/record.rs",
    "server/src/store/ledger/state.rs",
    "server/src/protocol/framing.rs",
];

/// The file of module `path` (`crate::a::b` as ["a", "b"]), if there is one.
fn module_file(src: &Path, path: &[&str]) -> Option<PathBuf> {
    let joined = path.join("/");
    [src.join(format!("{joined}.rs")), src.join(&joined).join("mod.rs")].into_iter().find(|file| file.exists())
}

/// The module files `text` (the file `file`, outside its unit tests) refers to.
fn referenced_modules(src: &Path, file: &Path, text: &str) -> Vec<PathBuf> {
    let code = text.split("#[cfg(test)]").next().unwrap_or("");
    let mut found = Vec::new();
    let word = |c: char| c.is_alphanumeric() || c == '_';
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        let path_text: String = rest.chars().take_while(|&c| word(c) || c == ':').collect();
        let path: Vec<&str> = path_text.split("::").filter(|part| !part.is_empty()).collect();
        // The longest prefix that is a module; `crate::a::{b, c}` names a's children too.
        if let Some(file) = (1..=path.len()).rev().find_map(|k| module_file(src, &path[..k])) {
            found.push(file);
        }
        if let Some(group) = rest[path_text.len()..].strip_prefix('{') {
            for item in group.split('}').next().unwrap_or("").split(',') {
                let name = item.trim().split(|c: char| !word(c)).next().unwrap_or("");
                let child: Vec<&str> = path.iter().copied().chain([name]).collect();
                found.extend(module_file(src, &child));
            }
        }
    }
    if code.contains("super::") {
        let dir = file.parent().unwrap();
        let parent = if file.ends_with("mod.rs") { dir.parent().unwrap().join("mod.rs") } else { dir.join("mod.rs") };
        found.extend(parent.exists().then_some(parent));
    }
    found
}

fn does_io(text: &str) -> Option<&'static str> {
    let before_tests = text.split("#[cfg(test)]").next().unwrap_or("");
    let code: String =
        before_tests.lines().map(|line| line.split("//").next().unwrap_or("")).collect::<Vec<_>>().join("\n");
    let names_env = code.split(|c: char| !(c.is_alphanumeric() || c == '_')).any(|word| word == "Env");
    let awaits = code
        .match_indices(".await")
        .any(|(at, _)| !code[at + ".await".len()..].starts_with(|c: char| c.is_alphanumeric() || c == '_'));
    match (names_env, code.contains("async fn"), awaits) {
        (true, ..) => Some("names `Env`"),
        (_, true, _) => Some("declares an `async fn`"),
        (.., true) => Some("awaits"),
        _ => None,
    }
}

#[test]
fn the_sans_io_core_reaches_no_module_that_does_io() {
    let root = common::repo_root();
    let src = root.join("server/src");
    let mut report = Vec::new();
    for pure in PURE {
        let mut seen: Vec<PathBuf> = Vec::new();
        let mut stack = vec![root.join(pure)];
        while let Some(file) = stack.pop() {
            if seen.contains(&file) {
                continue;
            }
            let text = std::fs::read_to_string(&file).unwrap();
            if let Some(why) = does_io(&text) {
                let relative = file.strip_prefix(&root).unwrap().display().to_string();
                report.push(format!("{pure} reaches {relative}, which {why}"));
            }
            stack.extend(referenced_modules(&src, &file, &text));
            seen.push(file);
        }
    }
    report.sort();
    report.dedup();
    assert!(report.is_empty(), "the sans-IO core reaches I/O:\n{}", report.join("\n"));
}

#[test]
fn the_reach_scan_finds_what_it_must() {
    let src = common::repo_root().join("server/src");
    let machine = src.join("run/machine.rs");
    let reached =
        referenced_modules(&src, &machine, "use crate::run::{perform, Action};\nfn f() { crate::call::x(); }\n");
    assert!(reached.contains(&src.join("run/perform.rs")), "{reached:?}");
    assert!(reached.contains(&src.join("call/mod.rs")), "{reached:?}");
    assert_eq!(does_io("async fn f() {}"), Some("declares an `async fn`"));
    assert_eq!(does_io("fn f(e: &Env) {}"), Some("names `Env`"));
    assert_eq!(does_io("fn f() { x.awaiting_round() }"), None);
    assert_eq!(does_io("fn f() { x.await }"), Some("awaits"));
}

/// The rooms of `server/src`, in dependency order (as `lib.rs` declares them): a room may use
/// the rooms before it, never one after, so no cycle runs between rooms. `io` implements the
/// seam and may use what the seam's types name; `commands` wires the rooms together.
const ROOMS: &[(&str, &str)] = &[
    ("base", "imports nothing from the crate"),
    ("limits", "imports nothing from the crate"),
    ("manifest", "the operator's configuration, read and range-checked"),
    ("broker", "does no I/O: grants checked, narrowed, replayed, scrubbed"),
    ("program", "Starlark programs: load, check inputs, execute against the broker"),
    ("env", "the seam: every clock, disk, socket, process and random byte"),
    ("io", "the seam's production side"),
    ("store", "knows nothing of calls, runs or protocols"),
    ("catalog", "what is loaded at start"),
    ("run", "a run from its header to its settle"),
    ("call", "what a client asks for, in either era"),
    ("protocol", "the only room that knows JSON-RPC and HTTP"),
    ("operator", "the operator's view of runs and the admin channel"),
    ("commands", "the binary's commands, wiring the rooms"),
];

/// Leaf rooms may import nothing from the crate at all.
const LEAF_ROOMS: &[&str] = &["base", "limits"];

/// The simulator's rooms, in dependency order (as its `lib.rs` declares them).
const SIM_ROOMS: &[(&str, &str)] = &[
    ("names", "the world's fixed names: imports nothing from the crate"),
    ("report", "what a simulation found"),
    ("env", "the simulated Env and the world behind it"),
    ("checks", "the invariants over the simulated disk and the services' records"),
    ("workload", "generated worlds, the client and the operator"),
    ("plan", "fault plans, faults fired, crash windows"),
    ("sweep", "one seeded simulation"),
    ("fuzzing", "the fuzz targets' properties"),
    ("shrink", "a failing scenario made small"),
    ("timeline", "the HTML timeline"),
    ("explore", "a sweep over many seeds, in parallel, and its summary"),
];

/// The rooms of `rooms` that `code` names through `crate::`.
fn rooms_named(code: &str, rooms: &[(&'static str, &str)]) -> Vec<&'static str> {
    let word = |c: char| c.is_alphanumeric() || c == '_';
    code.match_indices("crate::")
        .filter_map(|(at, _)| {
            let name: String = code[at + "crate::".len()..].chars().take_while(|&c| word(c)).collect();
            rooms.iter().map(|(room, _)| *room).find(|room| *room == name)
        })
        .collect()
}

fn code_outside_tests(text: &str) -> String {
    let before_tests = text.split("#[cfg(test)]").next().unwrap_or("");
    before_tests.lines().map(|line| line.split("//").next().unwrap_or("")).collect::<Vec<_>>().join("\n")
}

/// Every import in `src` that names a later room (or, from a leaf room, any room).
fn room_violations(src: &Path, rooms: &[(&'static str, &str)], leaves: &[&str]) -> Vec<String> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut report = Vec::new();
    for file in &files {
        let relative = file.strip_prefix(src).unwrap();
        let first = relative.components().next().unwrap().as_os_str().to_string_lossy();
        let own = first.trim_end_matches(".rs");
        let Some(rank) = rooms.iter().position(|(room, _)| *room == own) else {
            assert!(["lib", "main"].contains(&own), "{}: in no room; add it to the rooms", relative.display());
            continue;
        };
        let code = code_outside_tests(&std::fs::read_to_string(file).unwrap());
        for named in rooms_named(&code, rooms) {
            let named_rank = rooms.iter().position(|(room, _)| *room == named).unwrap();
            if named != own && (named_rank > rank || leaves.contains(&own)) {
                report.push(format!("{} (room `{own}`: {}) uses `crate::{named}`", relative.display(), rooms[rank].1));
            }
        }
    }
    report
}

#[test]
fn rooms_import_only_the_rooms_before_them() {
    let root = common::repo_root();
    let mut report = room_violations(&root.join("server/src"), ROOMS, LEAF_ROOMS);
    report.extend(room_violations(&root.join("sim/src"), SIM_ROOMS, &["names"]));
    report.sort();
    report.dedup();
    assert!(report.is_empty(), "imports that break the rooms' order:\n{}", report.join("\n"));
}

/// A crate's top level holds its rooms, `lib.rs` and `main.rs`, and `lib.rs` declares the
/// rooms in their order.
fn assert_top_level_is_rooms(src: &Path, rooms: &[(&str, &str)]) {
    let mut entries: Vec<String> = std::fs::read_dir(src)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    entries.sort();
    let mut expected: Vec<String> = rooms
        .iter()
        .map(|(room, _)| if src.join(room).is_dir() { room.to_string() } else { format!("{room}.rs") })
        .chain(["lib.rs".to_string(), "main.rs".to_string()])
        .collect();
    expected.sort();
    assert_eq!(entries, expected, "{}: the rooms, lib.rs and main.rs; a new module goes into a room", src.display());
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    let declared: Vec<&str> = lib.lines().filter_map(|line| line.strip_prefix("pub mod ")?.strip_suffix(';')).collect();
    let order: Vec<&str> = rooms.iter().map(|(room, _)| *room).collect();
    assert_eq!(declared, order, "{}: lib.rs declares the rooms in their dependency order", src.display());
}

#[test]
fn the_top_level_is_the_rooms() {
    let root = common::repo_root();
    assert_top_level_is_rooms(&root.join("server/src"), ROOMS);
    assert_top_level_is_rooms(&root.join("sim/src"), SIM_ROOMS);
}

#[test]
fn the_room_scan_finds_what_it_must() {
    let code = code_outside_tests(
        "use crate::run::machine; // crate::call\nfn f() { crate::base::json::hex(b\"\"); }\n#[cfg(test)]\nuse crate::protocol;\n",
    );
    assert_eq!(rooms_named(&code, ROOMS), vec!["run", "base"]);
}

/// Entry lines of the codemap's tree (`## Codemap`'s first fenced block): an entry is indented
/// two spaces per level (less than `DESCRIPTION_COLUMN`), a description continues further in.
/// Returns each entry's path from the repository root.
fn codemap_paths(architecture: &str) -> Vec<String> {
    const DESCRIPTION_COLUMN: usize = 20;
    let section = architecture.split("## Codemap").nth(1).expect("ARCHITECTURE.md has a Codemap section");
    let block = section.split("```").nth(1).expect("the codemap is a fenced block");
    let mut parents: Vec<String> = Vec::new();
    let mut paths = Vec::new();
    for line in block.lines().skip(1).filter(|line| !line.trim().is_empty()) {
        let indent = line.len() - line.trim_start().len();
        if indent >= DESCRIPTION_COLUMN {
            continue;
        }
        let level = indent / 2;
        let name = line.split_whitespace().next().unwrap();
        parents.truncate(level);
        let path = format!("{}{name}", parents.concat());
        if name.ends_with('/') {
            parents.push(name.to_string());
        }
        paths.push(path);
    }
    paths
}

#[test]
fn the_codemap_names_every_module_and_only_what_exists() {
    let root = common::repo_root();
    let architecture = std::fs::read_to_string(root.join("docs/ARCHITECTURE.md")).unwrap();
    let named = codemap_paths(&architecture);
    let missing: Vec<&String> = named.iter().filter(|path| !root.join(path.as_str()).exists()).collect();
    assert!(missing.is_empty(), "docs/ARCHITECTURE.md's codemap names paths that do not exist: {missing:?}");
    let mut unnamed = Vec::new();
    for crate_dir in ["server/src", "sim/src"] {
        let mut files = Vec::new();
        rust_files(&root.join(crate_dir), &mut files);
        for file in files {
            let relative = file.strip_prefix(&root).unwrap().display().to_string();
            if !named.contains(&relative) {
                unnamed.push(relative);
            }
        }
    }
    unnamed.sort();
    assert!(unnamed.is_empty(), "modules docs/ARCHITECTURE.md's codemap does not name: {unnamed:?}");
}

#[test]
fn the_codemap_parse_follows_the_indentation() {
    let text = "## Codemap\n\n```\nCargo.toml        x\nserver/           y\n  src/\n    a.rs            z\n                    more\n    b/\n      c.rs\nsim/\n```\n";
    assert_eq!(
        codemap_paths(text),
        ["Cargo.toml", "server/", "server/src/", "server/src/a.rs", "server/src/b/", "server/src/b/c.rs", "sim/"]
    );
}

/// Every planted bug in `mutants/` still applies to the code it plants into: a move or an
/// edit that breaks one is found here, at the commit, not by the planted-bug run in CI.
#[test]
fn every_planted_bug_still_applies() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace");
    let mut patches: Vec<PathBuf> = std::fs::read_dir(root.join("mutants"))
        .expect("mutants/")
        .map(|entry| entry.expect("an entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "patch"))
        .collect();
    patches.sort();
    assert!(patches.len() > 40, "the planted bugs are found ({})", patches.len());
    let stale: Vec<String> = patches
        .iter()
        .filter(|patch| {
            let checked = std::process::Command::new("git")
                .current_dir(root)
                .args(["apply", "--check"])
                .arg(patch)
                .output()
                .expect("git runs");
            !checked.status.success()
        })
        .map(|patch| patch.display().to_string())
        .collect();
    assert!(stale.is_empty(), "planted bugs that no longer apply (regenerate them): {stale:?}");
}
