//! The timeline page in a real browser: headless Chromium loads the HTML of a seed that has
//! everything (faults, crashes, restarts, recovery, an operator's resolution, a violation),
//! runs its script, and the rendered DOM must hold each element; the page's self-test clicks
//! the violation and the log panel must show the server's lines of that moment.
//!
//! Ignored by plain `cargo test` (it needs Chromium): `scripts/test-all.sh` installs Chromium
//! when missing and runs it with `--ignored`.

use std::path::PathBuf;
use std::process::Command;

use warden_faults::Canary;
use warden_sim::plan::plan_for_seed;
use warden_sim::report::Report;
use warden_sim::sweep::simulate;

fn chromium() -> PathBuf {
    let path = std::env::var_os("WARDEN_CHROMIUM").map(PathBuf::from).unwrap_or_else(|| "/usr/bin/chromium".into());
    assert!(path.exists(), "{} is missing: install Chromium (scripts/test-all.sh does)", path.display());
    path
}

/// The DOM after the page's scripts ran.
fn rendered(html: &str) -> String {
    let dir = std::env::temp_dir().join(format!("warden-timeline-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let page = dir.join("timeline.html");
    std::fs::write(&page, html).unwrap();
    let output = Command::new(chromium())
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run"])
        .args(["--disable-background-networking", "--disable-component-update", "--disable-sync"])
        .arg(format!("--user-data-dir={}", dir.join("profile").display()))
        .arg("--dump-dom")
        .arg(format!("file://{}#selftest", page.display()))
        .output()
        .expect("Chromium runs");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(output.status.success(), "chromium failed: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).unwrap()
}

/// The first seed whose simulation (with a canary, so there is a violation) has every kind of
/// event: a crash, a restart, a recovery decision and an operator's resolution.
fn a_seed_with_everything() -> Report {
    for seed in 0..2000 {
        let mut scenario = plan_for_seed(seed);
        scenario.canary = Some(Canary::IgnoreIdempotencyKeys);
        let report = simulate(&scenario);
        let has = |lane: &str, start: &str| report.events.iter().any(|(_, l, e)| l == lane && e.starts_with(start));
        let recovered = report.log.iter().any(|(_, line)| line.contains("recovery:"));
        let everything = has("operator", "") && has("server", "crash") && has("server", "restart") && recovered;
        if everything && !report.violations.is_empty() {
            return report;
        }
    }
    panic!("no seed below 2000 has every kind of event");
}

#[test]
#[ignore = "needs Chromium: scripts/test-all.sh installs it and runs this test"]
fn the_timeline_renders_every_kind_of_event_and_shows_the_log_of_a_clicked_one() {
    let report = a_seed_with_everything();
    let dom = rendered(&warden_sim::timeline::html(&report));
    for element in [
        "id=\"axis\"",
        "class=\"tick\"",
        "class=\"call answered\"",
        "data-tool=\"",
        "class=\"event fault\"",
        "class=\"event crash\"",
        "class=\"event restart\"",
        "class=\"event recovery\"",
        "class=\"event resolution\"",
        "class=\"event violation",
        "id=\"log\"",
    ] {
        assert!(dom.contains(element), "the rendered timeline has no {element}");
    }
    // A crash names the step or disk operation it hit, and what was in flight.
    assert!(dom.contains("in flight"), "crashes are labelled");
    // The self-test clicked the violation: the log panel shows lines of that moment.
    let shown = dom.split("data-selftest=\"").nth(1).and_then(|rest| rest.split('"').next()).unwrap_or("");
    assert!(shown.parse::<usize>().is_ok_and(|n| n > 0), "the log panel showed {shown:?} lines");
    assert!(dom.contains(" ms  "), "log lines carry their simulated time");
    assert!(dom.contains("class=\"event violation selected\""), "the clicked violation is selected");
}
