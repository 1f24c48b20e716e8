//! One disk contract, two disks. `env.rs` says the simulator models the real disk exactly;
//! this suite is that sentence as tests: the same checks, over `&dyn Disk`, run on the real
//! disk (in a folder of the system's temporary directory) and on the simulated disk without
//! faults. A difference between the two is a simulator that tests something other than what
//! ships, and fails here naming the check and the disk.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use warden::env::{Disk, Env, LocalBoxFuture};
use warden_sim::env::world::World;

type Check = for<'a> fn(&'a dyn Disk, &'a Path) -> LocalBoxFuture<'a, Result<(), String>>;

/// Every check, by name: each gets a folder of its own that exists and is empty.
const CHECKS: &[(&str, Check)] = &[
    ("append creates, then appends", |disk, root| Box::pin(append_creates_then_appends(disk, root))),
    ("write truncates", |disk, root| Box::pin(write_truncates(disk, root))),
    ("a missing file is NotFound", |disk, root| Box::pin(a_missing_file_is_not_found(disk, root))),
    ("the durable writes write", |disk, root| Box::pin(the_durable_writes_write(disk, root))),
    ("rename replaces its target", |disk, root| Box::pin(rename_replaces_its_target(disk, root))),
    ("remove removes", |disk, root| Box::pin(remove_removes(disk, root))),
    ("listing is sorted, files and folders", |disk, root| Box::pin(listing_is_sorted(disk, root))),
    ("create_dir_all nests and repeats", |disk, root| Box::pin(create_dir_all_nests_and_repeats(disk, root))),
    ("fsync of a file and a folder", |disk, root| Box::pin(fsync_of_a_file_and_a_folder(disk, root))),
    ("a lock is exclusive until dropped", |disk, root| Box::pin(a_lock_is_exclusive_until_dropped(disk, root))),
];

fn expect<T: PartialEq + std::fmt::Debug>(what: &str, found: T, wanted: T) -> Result<(), String> {
    match found == wanted {
        true => Ok(()),
        false => Err(format!("{what}: found {found:?}, wanted {wanted:?}")),
    }
}

fn step<T>(what: &str, result: std::io::Result<T>) -> Result<T, String> {
    result.map_err(|e| format!("{what}: {e}"))
}

async fn append_creates_then_appends(disk: &dyn Disk, root: &Path) -> Result<(), String> {
    let file = root.join("a.log");
    step("append to a new file", disk.append(&file, b"one\n".to_vec()).await)?;
    step("append again", disk.append(&file, b"two\n".to_vec()).await)?;
    expect("the bytes", step("read", disk.read(&file).await)?, b"one\ntwo\n".to_vec())
}

async fn write_truncates(disk: &dyn Disk, root: &Path) -> Result<(), String> {
    let file = root.join("w");
    step("write", disk.write(&file, b"a longer first text".to_vec()).await)?;
    step("write again", disk.write(&file, b"short".to_vec()).await)?;
    expect("the bytes", step("read", disk.read(&file).await)?, b"short".to_vec())
}

async fn a_missing_file_is_not_found(disk: &dyn Disk, root: &Path) -> Result<(), String> {
    let missing = root.join("missing");
    expect("exists", step("exists", disk.exists(&missing).await)?, false)?;
    expect("read's error", disk.read(&missing).await.map_err(|e| e.kind()).err(), Some(ErrorKind::NotFound))?;
    expect("list's error", disk.list(&missing).await.map_err(|e| e.kind()).err(), Some(ErrorKind::NotFound))
}

async fn the_durable_writes_write(disk: &dyn Disk, root: &Path) -> Result<(), String> {
    let file = root.join("new.json");
    step("write_new_durably", disk.write_new_durably(&file, b"{}\n".to_vec()).await)?;
    step("append_durably", disk.append_durably(&file, b"{\"more\":1}\n".to_vec()).await)?;
    expect("exists", step("exists", disk.exists(&file).await)?, true)?;
    expect("the bytes", step("read", disk.read(&file).await)?, b"{}\n{\"more\":1}\n".to_vec())
}

async fn rename_replaces_its_target(disk: &dyn Disk, root: &Path) -> Result<(), String> {
    let (from, to) = (root.join("ledger.tmp"), root.join("ledger"));
    step("write the target", disk.write(&to, b"old".to_vec()).await)?;
    step("write the source", disk.write(&from, b"new".to_vec()).await)?;
    step("rename", disk.rename(&from, &to).await)?;
    expect("the source after", step("exists", disk.exists(&from).await)?, false)?;
    expect("the target's bytes", step("read", disk.read(&to).await)?, b"new".to_vec())
}

async fn remove_removes(disk: &dyn Disk, root: &Path) -> Result<(), String> {
    let file = root.join("gone");
    step("write", disk.write(&file, b"x".to_vec()).await)?;
    step("remove", disk.remove(&file).await)?;
    expect("exists after", step("exists", disk.exists(&file).await)?, false)?;
    expect("a second remove's error", disk.remove(&file).await.map_err(|e| e.kind()).err(), Some(ErrorKind::NotFound))
}

async fn listing_is_sorted(disk: &dyn Disk, root: &Path) -> Result<(), String> {
    for name in ["b.journal", "a.journal", "c"] {
        step("write", disk.write(&root.join(name), Vec::new()).await)?;
    }
    step("create a folder", disk.create_dir_all(&root.join("ab")).await)?;
    let names = step("list", disk.list(root).await)?;
    expect("the names", names, vec!["a.journal".to_string(), "ab".into(), "b.journal".into(), "c".into()])
}

async fn create_dir_all_nests_and_repeats(disk: &dyn Disk, root: &Path) -> Result<(), String> {
    let deep = root.join("tool/ab");
    step("create_dir_all", disk.create_dir_all(&deep).await)?;
    step("create_dir_all again", disk.create_dir_all(&deep).await)?;
    expect("exists", step("exists", disk.exists(&deep).await)?, true)?;
    expect("the parent's entries", step("list", disk.list(&root.join("tool")).await)?, vec!["ab".to_string()])?;
    expect("the new folder's entries", step("list", disk.list(&deep).await)?, Vec::<String>::new())
}

async fn fsync_of_a_file_and_a_folder(disk: &dyn Disk, root: &Path) -> Result<(), String> {
    let file = root.join("f");
    step("write", disk.write(&file, b"x".to_vec()).await)?;
    step("fsync the file", disk.fsync(&file).await)?;
    step("fsync its folder", disk.fsync_dir(root).await)?;
    expect(
        "fsync of a missing file",
        disk.fsync(&root.join("nope")).await.map_err(|e| e.kind()).err(),
        Some(ErrorKind::NotFound),
    )
}

async fn a_lock_is_exclusive_until_dropped(disk: &dyn Disk, root: &Path) -> Result<(), String> {
    let path = root.join("server.lock");
    let held = step("the first lock", disk.try_lock(&path).await)?;
    expect("the first lock is taken", held.is_some(), true)?;
    expect("a second while held", step("the second lock", disk.try_lock(&path).await)?.is_some(), false)?;
    drop(held);
    expect("a third after the drop", step("the third lock", disk.try_lock(&path).await)?.is_some(), true)
}

/// Runs every check on `env`'s disk under `root`, each in a folder of its own.
async fn run_checks(env: Env, root: PathBuf) -> Vec<String> {
    let mut failures = Vec::new();
    for (index, (name, check)) in CHECKS.iter().enumerate() {
        let folder = root.join(format!("check-{index}"));
        if let Err(e) = env.disk.create_dir_all(&folder).await {
            failures.push(format!("{name}: cannot make its folder: {e}"));
            continue;
        }
        if let Err(why) = check(env.disk.as_ref(), &folder).await {
            failures.push(format!("{name}: {why}"));
        }
    }
    failures
}

#[test]
fn the_real_disk_keeps_the_contract() {
    let root = std::env::temp_dir().join(format!("warden-disk-contract-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    let env = warden::io::command_env();
    let failures = warden::io::run(run_checks(env, root.clone()));
    let _ = std::fs::remove_dir_all(&root);
    assert!(failures.is_empty(), "the real disk breaks the contract:\n{}", failures.join("\n"));
}

#[test]
fn the_simulated_disk_keeps_the_contract() {
    let world = World::new(11);
    let root = World::path("contract");
    let outcome = world.start_command(move |env| {
        Box::pin(async move {
            let failures = run_checks(env, root).await;
            match failures.is_empty() {
                true => Ok(String::new()),
                false => Err(failures.join("\n")),
            }
        })
    });
    assert!(outcome.is_ok(), "the simulated disk breaks the contract:\n{}", outcome.unwrap_err());
}
