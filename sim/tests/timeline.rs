//! The timeline page in a real browser: headless Chromium loads the HTML of a seed that has
//! everything (faults, crashes, restarts, recovery, an operator's resolution, a violation),
//! runs its script, and the rendered DOM must hold each element: distinct instants on the
//! axis, a lane per run with its actions, labelled faults, crash bands. The page's self-test
//! clicks the violation (the panel shows the server's lines of that instant) and then a run
//! (the panel shows that run's journal, log and answers, and nothing of another run's).
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
/// event: a crash, a restart, a recovery decision and an operator's resolution. A world of one
/// instance: beside peers, the world settles again after its checks' instant, so a violation's
/// instant may hold no log line, which is what the self-test clicks.
fn a_seed_with_everything() -> Report {
    for seed in 0..2000 {
        let mut scenario = plan_for_seed(seed);
        if scenario.world.as_ref().is_some_and(|world| world.peers > 0) {
            continue;
        }
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
        "class=\"lane run",
        "class=\"call answered\"",
        "data-tool=\"",
        "class=\"event fault\"",
        "class=\"fault-label\"",
        "class=\"band crash\"",
        "class=\"event crash\"",
        "class=\"event restart\"",
        "class=\"event recovery\"",
        "class=\"event resolution\"",
        "class=\"event action done\"",
        "class=\"event settled\"",
        "class=\"event violation",
        "id=\"log\"",
    ] {
        assert!(dom.contains(element), "the rendered timeline has no {element}");
    }
    // A crash names the step or disk operation it hit, and what was in flight.
    assert!(dom.contains("in flight"), "crashes are labelled");
    // Each tick names a distinct instant.
    let ticks: Vec<&str> = (dom.split("class=\"tick\"").skip(1))
        .filter_map(|tick| tick.split("</text>").next()?.rsplit('>').next())
        .collect();
    let distinct: std::collections::BTreeSet<&&str> = ticks.iter().collect();
    assert!(ticks.len() > 3 && distinct.len() == ticks.len(), "ticks repeat an instant: {ticks:?}");
    // The self-test clicked the violation: the log panel showed lines of that instant.
    let attribute =
        |name: &str| dom.split(&format!("{name}=\"")).nth(1).and_then(|rest| rest.split('"').next()).unwrap_or("");
    let shown = attribute("data-selftest");
    assert!(shown.parse::<usize>().is_ok_and(|n| n > 0), "the log panel showed {shown:?} lines");
    // Then it clicked the first run: the panel holds that run's lines and no other run's.
    let run_lines = attribute("data-selftest-run");
    assert!(run_lines.parse::<usize>().is_ok_and(|n| n > 0), "the run panel showed {run_lines:?} lines");
    let panel = attribute("data-selftest-panel");
    let first_run = dom.split("data-run=\"").nth(1).and_then(|rest| rest.split('"').next()).unwrap();
    assert!(panel.contains("journal:") && panel.contains(first_run), "{panel}");
    // Its log part holds that run's lines only.
    let log_part = panel.split("log:\n").nth(1).and_then(|rest| rest.split("\n\nanswers:").next()).unwrap_or("");
    assert!(!log_part.trim().is_empty(), "{panel}");
    for line in log_part.lines() {
        assert!(line.contains(first_run), "run {first_run}'s panel shows a line of another: {line}");
    }
}

/// A scenario file is drawn as a seed is, without a browser: the page names its lanes.
#[test]
fn a_scenario_file_s_timeline_has_a_lane_per_run_and_no_empty_heading() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../scenarios/step-5-crash-after-waiting-recorded.json"
    ))
    .unwrap();
    let scenario: warden_faults::Scenario = serde_json::from_str(&text).unwrap();
    let html = warden_sim::timeline::html(&simulate(&scenario));
    assert!(html.contains("class=\"lane run\" data-run=\""), "no run lane");
    assert!(html.contains("class=\"event action"), "no action mark");
    assert!(!html.contains("<h2>violations</h2>"), "a passing scenario has no violations heading");
}
