//! Issue 26 item 1: `explore --manifest` tests an operator's own manifest under faults. The
//! bundled examples as shipped come out clean (no violation, no finding); a copy of the shop
//! without `once` is told that a resent call refunded one order twice, naming `once`; a copy
//! whose refunds carry no idempotency key is told that a refund in doubt waited for a person,
//! naming `idempotency_key`; a copy whose program refunds before it reads the intent is told that
//! the payment service refused a refund of more than was paid, with the seed's scenario. Item 2:
//! `--from-journals` starts every seed from the journals a real `kill -9` of the support desk
//! left (`scripts/killed-journals.sh` makes them).

use std::path::{Path, PathBuf};

use warden_sim::explore::{in_seed_order, Flow};
use warden_sim::report::Report;
use warden_sim::workload::own;

const SEEDS: std::ops::Range<u64> = 0..120;

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples").join(name)
}

/// Every report of `SEEDS` in the world of `manifest`.
fn sweep(manifest: &Path) -> Vec<Report> {
    sweep_world(&own::load(manifest).unwrap_or_else(|problem| panic!("{problem}")))
}

fn sweep_world(world: &warden_faults::WorldFile) -> Vec<Report> {
    let mut reports = Vec::new();
    in_seed_order(SEEDS, 2, (None, Some(world)), |report| {
        reports.push(report);
        Flow::Continue
    });
    reports
}

/// A private copy of the shop example with `edit` applied to its manifest's text.
fn shop_edited(edit: impl Fn(String) -> String) -> tempfile::TempDir {
    shop_with(edit, |program| program)
}

/// A private copy of the shop example with its manifest's and its program's texts edited.
fn shop_with(manifest: impl Fn(String) -> String, program: impl Fn(String) -> String) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (file, edit) in [("manifest.json", &manifest as &dyn Fn(String) -> String), ("refund.star", &program)] {
        let text = std::fs::read_to_string(example("shop").join(file)).unwrap();
        std::fs::write(dir.path().join(file), edit(text)).unwrap();
    }
    dir
}

#[test]
fn the_examples_as_shipped_keep_every_invariant_and_raise_no_finding() {
    for name in ["shop", "support-desk", "ticket-summary", "toolbox"] {
        let reports = sweep(&example(name).join("manifest.json"));
        let calls: u32 = reports.iter().map(|report| report.answered).sum();
        assert!(calls > 1000, "{name}: only {calls} calls answered");
        // A quarter of the seeds serve the tools over Streamable HTTP.
        let over_http: u32 = reports.iter().filter(|report| report.over_http).map(|report| report.answered).sum();
        assert!(over_http > 100, "{name}: only {over_http} calls answered over HTTP");
        let mut outcomes: std::collections::BTreeMap<String, warden_sim::report::ToolOutcome> = Default::default();
        for report in &reports {
            assert!(report.violations.is_empty(), "{name} seed {}: {:?}", report.seed, report.violations);
            assert!(report.findings.is_empty(), "{name} seed {}: {:?}", report.seed, report.findings);
            report
                .tool_outcomes
                .iter()
                .for_each(|(tool, outcome)| outcomes.entry(tool.clone()).or_default().add(outcome));
        }
        // The desk's resource and prompt are read beside the calls, and count as tools do.
        if name == "support-desk" {
            assert!(outcomes.contains_key("resources/read") && outcomes.contains_key("prompts/get"), "{outcomes:?}");
        }
        // Every tool is exercised, and succeeds but the one that fails by design (a warning).
        for (tool, outcome) in &outcomes {
            let warned = warden_sim::checks::own::never_succeeded(tool, outcome);
            assert_eq!(warned.is_some(), tool == "always_fails", "{name} {tool}: {outcome:?}");
        }
    }
}

#[test]
fn a_shop_without_once_is_told_a_resent_call_refunded_an_order_twice() {
    let copy = shop_edited(|text| text.replace(r#""once": { "by": ["order"], "keep": "30d" },"#, ""));
    let reports = sweep(&copy.path().join("manifest.json"));
    let finding = reports.iter().flat_map(|report| &report.findings).find(|finding| finding.kind == "done twice");
    let finding = finding.expect("a refund made twice is found");
    assert_eq!(finding.tool, "refund_order");
    assert!(finding.message.contains("`refund_order` has no `once`"), "{}", finding.message);
    assert!(finding.message.contains(r#"Add `"once": {"by": [...]}`"#), "{}", finding.message);
    assert!(reports.iter().all(|report| report.violations.is_empty()), "a finding is not a violation of Warden's");
    // The finding is written shrunk: a seed with faults comes down to fewer, and still finds it.
    let world = own::load(&copy.path().join("manifest.json")).unwrap();
    let seed = (reports.iter())
        .filter(|report| report.findings.iter().any(|finding| finding.kind == "done twice"))
        .map(|report| report.seed)
        .find(|seed| !warden_sim::plan::plan_in(*seed, Some(&world)).faults.is_empty())
        .expect("a seed with faults finds it");
    let scenario = warden_sim::plan::plan_in(seed, Some(&world));
    let shrunk = warden_sim::shrink::shrink_finding(scenario.clone(), "done twice", "refund_order");
    let size = |s: &warden_faults::Scenario| s.calls as usize + s.faults.len();
    assert!(size(&shrunk) < size(&scenario), "seed {seed}");
    let replayed = warden_sim::sweep::simulate(&shrunk);
    assert!(replayed.findings.iter().any(|finding| finding.kind == "done twice"), "seed {seed}");
}

/// The shop's manifest with a quota of six calls a day.
fn six_calls_a_day(text: String) -> String {
    text.replace(r#""quota": { "window": "24h", "calls": 100,"#, r#""quota": { "window": "24h", "calls": 6,"#)
}

#[test]
fn a_shop_without_once_is_told_its_quota_paid_for_resent_calls() {
    let copy = shop_edited(|text| six_calls_a_day(text.replace(r#""once": { "by": ["order"], "keep": "30d" },"#, "")));
    let reports = sweep(&copy.path().join("manifest.json"));
    let found = reports.iter().flat_map(|report| &report.findings);
    let finding = found.clone().find(|finding| finding.kind == "quota spent on resends").expect("found");
    assert_eq!(finding.tool, "refund_order");
    assert!(finding.message.contains("refused over its quota"), "{}", finding.message);
    assert!(finding.message.contains(r#"Add `"once": {"by": [...]}`"#), "{}", finding.message);
    assert!(reports.iter().all(|report| report.violations.is_empty()), "a finding is not a violation of Warden's");
    // With `once`, the same tight quota refuses calls too, and pays for no resend.
    let with_once = shop_edited(six_calls_a_day);
    let reports = sweep(&with_once.path().join("manifest.json"));
    let refused = |report: &Report| report.tool_outcomes.values().any(|outcome| outcome.answered > outcome.succeeded);
    assert!(reports.iter().any(refused), "the quota of six refuses some calls");
    assert!(reports.iter().flat_map(|report| &report.findings).all(|finding| finding.kind != "quota spent on resends"));
}

#[test]
fn refunds_without_an_idempotency_key_are_told_to_wait_for_a_person() {
    let copy = shop_edited(|text| text.replace(r#", "idempotency_key": true"#, ""));
    let reports = sweep(&copy.path().join("manifest.json"));
    let found = reports.iter().flat_map(|report| &report.findings);
    let finding = found.clone().find(|finding| finding.kind == "waited for a person");
    let finding = finding.expect("a refund in doubt is found");
    assert_eq!(finding.tool, "refund_order");
    // Which doubt comes first depends on the faults the seeds draw: a crash after the begin,
    // or an answer lost after sending.
    let in_doubt = ["may have happened", "may have reached the service"];
    assert!(in_doubt.iter().any(|words| finding.message.contains(words)), "{}", finding.message);
    assert!(finding.message.contains(r#"`"idempotency_key": true` on its grant"#), "{}", finding.message);
}

/// The shop's program with its body replaced: it refunds at once, before reading the intent
/// (whether it exists, what was paid on it) and narrowing its grant to it.
fn refunding_before_reading(program: String) -> String {
    let (docstring, _) = program.split_once("    intent = ").expect("the shop reads the intent first");
    format!(
        "{docstring}    refund = pay.refund(order, amount)\n    if refund.get(\"status\") != 200:\n        \
         fail(\"the payment provider refused the refund: %s\" % refund.get(\"body\", refund.get(\"error\")))\n    \
         return {{\"order\": order, \"refund\": refund[\"json\"][\"id\"]}}\n"
    )
}

#[test]
fn a_shop_refunding_before_it_reads_the_intent_is_told_the_service_refused_a_refund() {
    let copy = shop_with(|manifest| manifest, refunding_before_reading);
    let reports = sweep(&copy.path().join("manifest.json"));
    let found = reports.iter().flat_map(|report| report.findings.iter().map(move |finding| (report.seed, finding)));
    let (seed, finding) = found.clone().find(|(_, finding)| finding.kind == "refused by the service").expect("found");
    assert_eq!(finding.tool, "refund_order");
    assert!(finding.message.contains("greater than the amount paid"), "{}", finding.message);
    assert!(finding.message.contains("read what it acts on"), "{}", finding.message);
    assert!(reports.iter().all(|report| report.violations.is_empty()), "a finding is not a violation of Warden's");
    // The finding comes with its seed's scenario: replayed, it finds the same.
    let scenario = warden_sim::plan::plan_in(seed, Some(&own::load(&copy.path().join("manifest.json")).unwrap()));
    let replayed = warden_sim::sweep::simulate(&scenario);
    assert!(replayed.findings.iter().any(|finding| finding.kind == "refused by the service"), "seed {seed}");
}

#[test]
fn a_manifest_that_does_not_load_is_refused_naming_its_file() {
    let dir = tempfile::tempdir().unwrap();
    let manifest = dir.path().join("manifest.json");
    std::fs::write(
        &manifest,
        r#"{"server": {"name": "x", "journals": "journals"}, "tools": [{"name": "t", "program": "missing.star"}]}"#,
    )
    .unwrap();
    let problem = own::load(&manifest).expect_err("a missing program is refused");
    assert!(problem.contains("missing.star"), "{problem}");
}

#[test]
fn a_journals_directory_a_real_kill_left_is_explored_from() {
    let journals = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/killed-support-desk/journals");
    let mut world = own::load(&example("support-desk").join("manifest.json")).unwrap();
    own::with_journals(&mut world, &journals).unwrap();
    // The runs the kill left unfinished: reserved in the ledger, never settled.
    let ledger = &world.own.as_ref().unwrap().files["journals/server.ledger"];
    let events: Vec<serde_json::Value> = ledger.lines().filter_map(|line| serde_json::from_str(line).ok()).collect();
    let runs_of = |event: &str| -> Vec<String> {
        let of = events.iter().filter(|line| line["rec"]["event"] == event);
        of.filter_map(|line| line["rec"]["run"].as_str().map(str::to_string)).collect()
    };
    let settled = runs_of("settle");
    let unfinished: Vec<String> = runs_of("reserve").into_iter().filter(|run| !settled.contains(run)).collect();
    assert!(!unfinished.is_empty(), "the fixture holds unfinished runs");
    for report in sweep_world(&world) {
        assert!(report.violations.is_empty(), "seed {}: {:?}", report.seed, report.violations);
        assert!(report.findings.is_empty(), "seed {}: {:?}", report.seed, report.findings);
    }
    let report = warden_sim::sweep::simulate(&warden_sim::plan::plan_in(0, Some(&world)));
    for run in &unfinished {
        let ended = report.log.iter().any(|(_, line)| line.contains(run.as_str()) && line.contains(": settled ("));
        assert!(ended, "run {run} of the killed server was not finished after the restart");
    }
}

/// Found by attacking `--manifest` (kept): an HTTP write was recorded under another name than
/// the checker gave its journal record (a false invariant 2 on every such tool), and a tool
/// with only a read grant was blamed for a write made twice. Here a webhook without `once` is
/// told it posted twice, and the read-only tool is not named.
#[test]
fn a_webhook_without_once_is_told_it_posted_twice_and_a_reader_is_not_blamed() {
    let reports = sweep(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/own-hooks/manifest.json"));
    for report in &reports {
        assert!(report.violations.is_empty(), "seed {}: {:?}", report.seed, report.violations);
        assert!(report.findings.iter().all(|finding| finding.tool == "post_message"), "{:?}", report.findings);
    }
    let twice = reports.iter().flat_map(|report| &report.findings).find(|finding| finding.kind == "done twice");
    assert!(
        twice
            .expect("a post made twice")
            .message
            .contains("an HTTP write of POST https://hooks.example.com/services/T000/B000 {\"text\":"),
        "{twice:?}"
    );
}

/// What the simulator cannot serve is refused at load, once, saying what to do.
#[test]
fn what_the_simulator_cannot_serve_is_refused_at_load() {
    let dir = tempfile::tempdir().unwrap();
    let copy = |from: &str| std::fs::copy(example("ticket-summary").join(from), dir.path().join(from)).unwrap();
    copy("summarize_ticket.star");
    copy("desk.sql");
    let text = std::fs::read_to_string(example("ticket-summary").join("manifest.json")).unwrap();
    let manifest = dir.path().join("manifest.json");
    std::fs::write(&manifest, text.replace("\"anthropic\"", "\"openai\"").replace("claude-haiku-4-5", "gpt-4o"))
        .unwrap();
    let problem = own::load(&manifest).expect_err("an OpenAI provider is refused");
    assert!(problem.contains("models Anthropic's API only"), "{problem}");
    std::fs::write(&manifest, text).unwrap();
    std::fs::write(dir.path().join("desk.sql"), "CREATE TABLE").unwrap();
    let problem = own::load(&manifest).expect_err("init SQL that does not run is refused");
    assert!(problem.contains("desk.sql: the init SQL does not run"), "{problem}");
    let mut world = own::load(&example("support-desk").join("manifest.json")).unwrap();
    let problem = own::with_journals(&mut world, dir.path()).expect_err("a folder without a ledger is refused");
    assert!(problem.contains("name the journals directory itself"), "{problem}");
}

/// Issue 45 item 7: a ledger line that is well formed (its checksum right) but holds an
/// impossible time or count is refused where `--from-journals` reads it, naming the file, the
/// line and the limit; before, the simulator panicked on it (exit 101), as if Warden had.
#[test]
fn a_ledger_line_with_an_impossible_time_or_count_is_refused_where_it_is_read() {
    let line = |record: serde_json::Value| String::from_utf8(warden::store::record::encode(&record)).unwrap();
    let run = "86e4c1a44c690708fc873172cd784d0e";
    for (field, value) in [("at_ms", u64::MAX - 1), ("calls", u64::MAX)] {
        let dir = tempfile::tempdir().unwrap();
        let mut reserve = serde_json::json!({"event": "reserve", "run": run, "tool": "search_tickets",
            "at_ms": 1_796_661_554_600_u64, "calls": 1, "money": [], "once": null});
        reserve[field] = value.into();
        std::fs::write(dir.path().join("server.ledger"), line(reserve)).unwrap();
        let mut world = own::load(&example("support-desk").join("manifest.json")).unwrap();
        let refused = own::with_journals(&mut world, dir.path());
        let problem = refused.expect_err("an impossible number is refused where it is read");
        assert!(problem.contains("server.ledger") && problem.contains(field), "{problem}");
    }
}

/// Issue 45 item 7: journals a real server left with a run waiting for an operator
/// (`scripts/waiting-journals.sh`: a webhook whose service never answered). Its waiting record
/// names the journal where that server kept it; the simulated operator resolves the same run
/// in the simulated journals (before, every seed failed invariant 10, the operator handed the
/// other machine's path). The manifest's own findings (no `once`, no key) stay findings.
#[test]
fn a_run_waiting_for_an_operator_in_real_journals_is_resolved() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/waiting-hooks");
    let mut world = own::load(&fixture.join("manifest.json")).unwrap();
    own::with_journals(&mut world, &fixture.join("journals")).unwrap();
    let waiting = world.own.as_ref().unwrap().files.keys().filter(|name| name.contains("/waiting/")).count();
    assert_eq!(waiting, 1, "the fixture holds a run waiting for an operator");
    for report in sweep_world(&world) {
        assert!(report.violations.is_empty(), "seed {}: {:?}", report.seed, report.violations);
    }
}

/// Issue 45 item 7: a write made twice without a key is told of the tool whose grant can
/// make it (its `only` allows the URL), not of every tool that may post; and a tool with
/// `once` is not told "the calls differed in an argument outside `once.by`" as a certainty,
/// since which runs made a keyless write is not known.
#[test]
fn a_write_made_twice_is_told_of_the_tool_that_can_make_it() {
    let dir = tempfile::tempdir().unwrap();
    let hooks = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/own-hooks");
    for file in ["post.star", "get.star"] {
        std::fs::copy(hooks.join(file), dir.path().join(file)).unwrap();
    }
    let alert = std::fs::read_to_string(hooks.join("post.star"))
        .unwrap()
        .replace("https://hooks.example.com/services/T000/B000", "https://alerts.example.com/v1/page")
        .replace("Post a message to the team channel.", "Page the person on call.");
    std::fs::write(dir.path().join("alert.star"), alert).unwrap();
    let mut manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(hooks.join("manifest.json")).unwrap()).unwrap();
    let mut paging = manifest["tools"][0].clone();
    paging["name"] = "page_on_call".into();
    paging["program"] = "alert.star".into();
    paging["grants"]["hook"]["only"] = serde_json::json!(["https://alerts.example.com/v1/*"]);
    paging["once"] = serde_json::json!({"by": ["message"], "keep": "1m"});
    manifest["tools"].as_array_mut().unwrap().push(paging);
    std::fs::write(dir.path().join("manifest.json"), manifest.to_string()).unwrap();
    let reports = sweep(&dir.path().join("manifest.json"));
    let twice: Vec<_> =
        reports.iter().flat_map(|report| &report.findings).filter(|finding| finding.kind == "done twice").collect();
    assert!(!twice.is_empty(), "some write was made twice");
    for finding in twice {
        let posts_hooks = finding.message.contains("https://hooks.example.com/");
        assert_eq!(posts_hooks, finding.tool == "post_message", "{finding:?}");
        assert!(!finding.message.contains(": the calls differed in an argument outside"), "{finding:?}");
    }
}

/// Issue 45 item 7: `explore --manifest` says what it takes each keyed service to do. The
/// payments API honours keys, as Stripe documents.
#[test]
fn the_assumption_about_keyed_services_is_said() {
    let world = own::load(&example("shop").join("manifest.json")).unwrap();
    let said = own::assumptions(&world);
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(said[0].contains("`refund_order` grant `pay.needs.post`"), "{said:?}");
    assert!(
        said[0].contains("https://api.stripe.com/v1/refunds") && said[0].contains("as Stripe documents"),
        "{said:?}"
    );
}

/// Issue 45 item 7: where a service's behaviour is unknown (a webhook given an idempotency
/// key), the sweep explores both: half the seeds take the service to ignore keys, and there a
/// keyed write Warden sent again after a lost answer is made twice. That is told as what
/// depends on the service (with the grant to change if it ignores keys), never as a violation
/// of Warden's, and never in a seed whose service honours keys.
#[test]
fn a_keyed_webhook_is_explored_with_a_service_that_honours_keys_and_one_that_ignores_them() {
    let dir = tempfile::tempdir().unwrap();
    let hooks = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/own-hooks");
    for file in ["post.star", "get.star"] {
        std::fs::copy(hooks.join(file), dir.path().join(file)).unwrap();
    }
    let mut manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(hooks.join("manifest.json")).unwrap()).unwrap();
    manifest["tools"][0]["grants"]["hook"]["idempotency_key"] = true.into();
    manifest["tools"][0]["once"] = serde_json::json!({"by": ["message"], "keep": "1d"});
    std::fs::write(dir.path().join("manifest.json"), manifest.to_string()).unwrap();
    let world = own::load(&dir.path().join("manifest.json")).unwrap();
    let said = own::assumptions(&world);
    assert!(said.len() == 1 && said[0].starts_with("explored both: `post_message` grant `hook`"), "{said:?}");

    let reports = sweep_world(&world);
    let mut relied = 0;
    for report in &reports {
        assert!(report.violations.is_empty(), "seed {}: {:?}", report.seed, report.violations);
        let ignored =
            warden_sim::plan::plan_in(report.seed, Some(&world)).world.unwrap().own.unwrap().services_ignore_keys;
        for finding in &report.findings {
            assert_eq!(finding.kind, warden_sim::checks::own::RELIES_ON_KEYS, "seed {}: {finding:?}", report.seed);
            assert!(ignored, "seed {}: told with keys honoured: {finding:?}", report.seed);
            assert!(finding.message.contains("take `idempotency_key` off the grant"), "{finding:?}");
            relied += 1;
        }
    }
    let ignoring = (reports.iter())
        .filter(|report| {
            warden_sim::plan::plan_in(report.seed, Some(&world)).world.unwrap().own.unwrap().services_ignore_keys
        })
        .count();
    assert!(ignoring > reports.len() / 4 && ignoring < reports.len() * 3 / 4, "{ignoring} of {} seeds", reports.len());
    assert!(relied > 0, "no seed of {} made a keyed write twice with keys ignored", reports.len());
}

/// Found by the sweep with faults aimed at the operator's own services: a keyed refund still
/// unanswered at its run's deadline waits for a person by the design's rule, which no setting
/// prevents; the shop was told to add the idempotency key its grant already had.
#[test]
fn a_keyed_write_unanswered_at_its_deadline_is_no_finding_of_the_manifests() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../scenarios/found-world-a-keyed-refund-unanswered-at-its-deadline-is-no-finding.json");
    let scenario: warden_faults::Scenario = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let report = warden_sim::sweep::simulate(&scenario);
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    assert!(
        report.log.iter().any(|(_, line)| line.contains("with the same key, without an answer")),
        "the case is met"
    );
    assert!(report.findings.is_empty(), "{:?}", report.findings);
}

/// Issue 45's done-means: an operator's manifest using `headers` (mirrored in `Mcp-Param-*`
/// over HTTP), `requires` (a client capability the simulated client does not declare), a
/// required task and an unkeyed webhook is explored without a violation (its findings and
/// warnings are the manifest's to hear).
#[test]
fn a_manifest_with_headers_requires_tasks_and_an_unkeyed_webhook_keeps_every_invariant() {
    let dir = tempfile::tempdir().unwrap();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures");
    std::fs::copy(fixtures.join("own-hooks/post.star"), dir.path().join("post.star")).unwrap();
    std::fs::copy(fixtures.join("tasks/must_task.star"), dir.path().join("must_task.star")).unwrap();
    let manifest = serde_json::json!({
        "server": {"name": "mixed", "journals": "journals"},
        "tools": [
            {"name": "post_message", "program": "post.star", "headers": {"message": "Message"},
             "net": {"timeout_ms": 2000, "connect_timeout_ms": 1000},
             "grants": {"hook": {"cap": "net.http.post", "only": ["https://hooks.example.com/services/*/*"]}}},
            {"name": "must_task", "program": "must_task.star", "task": "required"},
            {"name": "needs_sampling", "program": "must_task.star", "requires": ["sampling"]}
        ]
    });
    std::fs::write(dir.path().join("manifest.json"), manifest.to_string()).unwrap();
    let reports = sweep(&dir.path().join("manifest.json"));
    assert!(reports.iter().any(|report| report.tool_outcomes.get("post_message").is_some_and(|o| o.succeeded > 0)));
    for report in &reports {
        assert!(report.violations.is_empty(), "seed {}: {:?}", report.seed, report.violations);
    }
}
