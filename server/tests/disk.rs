//! A full disk and a read-only journal directory, for real: a small tmpfs and a read-only bind
//! mount (failing where this process may not mount, unless told to skip on purpose). The server refuses or stops
//! with a clear message, and loses nothing already recorded.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{fixture, private_copy, Era, Wire};
use serde_json::json;

struct Mount(PathBuf);

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

fn mount(args: &[&str], target: &Path) -> Option<Mount> {
    let status = Command::new("mount").args(args).arg(target).status().ok()?;
    status.success().then(|| Mount(target.to_path_buf()))
}

/// Where this process may not mount (not root), the test cannot run: that fails it, unless
/// `WARDEN_TESTS_WITHOUT_MOUNTS=1` says so on purpose (a developer's machine). CI runs as
/// root, so a test that could not mount there is a failure, never a silent pass.
fn cannot_mount(what: &str) {
    let allowed = std::env::var("WARDEN_TESTS_WITHOUT_MOUNTS").is_ok_and(|value| value == "1");
    assert!(allowed, "this process may not {what} (not root?); set WARDEN_TESTS_WITHOUT_MOUNTS=1 to skip on purpose");
    println!("SKIPPED on purpose (WARDEN_TESTS_WITHOUT_MOUNTS=1): this process may not {what}");
}

/// The wire fixture with its journals at an absolute path of our choosing.
fn folder_with_journals(journals: &Path) -> tempfile::TempDir {
    let dir = private_copy(&fixture("wire"));
    let manifest = dir.path().join("manifest.json");
    let text = std::fs::read_to_string(&manifest)
        .unwrap()
        .replace("\"journals\": \"journals\"", &format!("\"journals\": {:?}", journals.display().to_string()));
    std::fs::write(&manifest, text).unwrap();
    dir
}

fn echo(wire: &mut Wire, id: i64, text: &str) -> serde_json::Value {
    wire.request(Era::Modern, json!(id), "tools/call", json!({"name": "echo", "arguments": {"text": text}}))
}

fn settled_runs(journals: &Path) -> usize {
    std::fs::read_to_string(journals.join("server.ledger")).unwrap_or_default().matches("\"event\":\"settle\"").count()
}

#[test]
fn a_full_disk_stops_the_server_with_a_clear_message_and_loses_nothing() {
    let place = tempfile::tempdir().unwrap();
    let journals = place.path().join("journals");
    std::fs::create_dir_all(&journals).unwrap();
    let Some(_mounted) = mount(&["-t", "tmpfs", "-o", "size=256k", "tmpfs"], &journals) else {
        cannot_mount("mount a tmpfs");
        return;
    };
    let dir = folder_with_journals(&journals);
    let mut wire = Wire::start_dir(dir, &[]);
    for n in 0..3 {
        assert_eq!(echo(&mut wire, n, &format!("before-{n}"))["result"]["isError"], json!(false));
    }
    // Fill what is left of the file system.
    let filler = journals.join("filler");
    let _ = Command::new("dd").args(["if=/dev/zero", &format!("of={}", filler.display()), "bs=4k"]).output();
    let refused = echo(&mut wire, 10, "after");
    assert_eq!(refused["result"]["isError"], json!(true), "{refused}");
    let text = refused["result"]["content"][0]["text"].as_str().unwrap().to_string();
    assert!(text.contains("could not") && text.contains("durabl"), "{text}");
    let status = wire.wait_exit(Duration::from_secs(20));
    assert!(!status.success(), "the server went on after a failed write");
    let stderr = wire.stderr();
    assert!(stderr.contains("stopping:") && (stderr.contains("No space left") || stderr.contains("space")), "{stderr}");
    // Space again: everything recorded before is intact, and the server serves.
    std::fs::remove_file(&filler).unwrap();
    assert_eq!(settled_runs(&journals), 3);
    let dir = std::mem::replace(&mut wire.dir, tempfile::tempdir().unwrap());
    drop(wire);
    let mut again = Wire::start_dir(dir, &[]);
    assert_eq!(echo(&mut again, 20, "later")["result"]["isError"], json!(false));
    assert_eq!(settled_runs(&journals), 4);
}

#[test]
fn a_read_only_journal_directory_refuses_to_start_and_loses_nothing() {
    let place = tempfile::tempdir().unwrap();
    let journals = place.path().join("journals");
    std::fs::create_dir_all(&journals).unwrap();
    let dir = folder_with_journals(&journals);
    let mut wire = Wire::start_dir(dir, &[]);
    assert_eq!(echo(&mut wire, 1, "recorded")["result"]["isError"], json!(false));
    wire.close_stdin();
    assert!(wire.wait_exit(Duration::from_secs(20)).success());
    let dir = std::mem::replace(&mut wire.dir, tempfile::tempdir().unwrap());
    drop(wire);
    let source = journals.display().to_string();
    let Some(bound) = mount(&["--bind", &source], &journals) else {
        cannot_mount("bind-mount");
        return;
    };
    if !Command::new("mount").args(["-o", "remount,bind,ro"]).arg(&journals).status().unwrap().success() {
        cannot_mount("remount read-only");
        return;
    }
    let manifest = dir.path().join("manifest.json");
    let output = Command::new(env!("CARGO_BIN_EXE_warden")).arg("mcp").arg(&manifest).output().unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("server.lock") && stderr.contains("Read-only file system"), "{stderr}");
    assert!(output.stdout.is_empty());
    drop(bound);
    assert_eq!(settled_runs(&journals), 1, "nothing recorded was lost");
    let mut again = Wire::start_dir(dir, &[]);
    assert_eq!(echo(&mut again, 2, "writable again")["result"]["isError"], json!(false));
}
