//! A self-contained HTML timeline of one simulation (inline SVG, CSS and script; no network):
//! the page a developer opens first on a failing seed, drawn from a seed or a scenario file.
//!
//! Time runs left to right. Simulated time stands still while much happens (a call is served
//! in zero virtual time) and then jumps hours, so each instant takes as much room as it has
//! events, in their order, and the quiet stretch between two instants is drawn short: a
//! stretch of a minute or more is a break labelled with its length. Each tick names a distinct
//! instant. Lanes: faults (each labelled in words), the server (crashes and restarts, and a
//! band over every lane from a crash to the restart after it), recovery, the operator, then
//! one lane per run with its calls as bars (sent to answered) and its actions as marks (done,
//! in doubt), its start, resumes, waits, resolution and settle; calls that got no run share a
//! lane; violations last. A click on a run shows that run's journal, log and answers only; a
//! click on another mark shows the server's lines of that instant.

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::report::Report;

/// A run's id as the simulator's events name it (its first characters).
const RUN_PREFIX: usize = 8;
/// The quiet stretch (ms) from which the axis draws a labelled break.
const BREAK_MS: u64 = 60_000;
/// Room (px) for one event; an instant takes as many as it has events.
const STEP: f64 = 14.0;

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// One mark of the timeline: when, on which lane, what it is.
struct Mark {
    at: u64,
    lane: String,
    class: &'static str,
    label: String,
}

/// A call: the marks it was sent and answered at, and the run it started or found.
#[derive(Default)]
struct Call {
    tool: String,
    sent: Option<usize>,
    answered: Option<(usize, String)>,
    run: Option<String>,
}

fn run_lane(run: &str) -> String {
    format!("run {}", &run[..run.len().min(RUN_PREFIX)])
}

/// A server log line about a run (`tool T run R: ...`): its lane and the mark it makes, if any.
fn run_mark(line: &str) -> Option<(String, &'static str, String)> {
    let rest = line.strip_prefix("tool ")?;
    let (_, rest) = rest.split_once(" run ")?;
    let (run, message) = rest.split_once(": ")?;
    let class = match message {
        m if m.starts_with("started") => "started",
        m if m.starts_with("action ") && m.contains(": done") => "action done",
        m if m.starts_with("action ") && m.contains(": in doubt") => "action in-doubt",
        m if m.starts_with("stopped, waiting for an operator") => "waiting",
        m if m.starts_with("resuming after a restart") => "resumed",
        m if m.starts_with("settled (") => "settled",
        _ => return None,
    };
    Some((run_lane(run), class, message.to_string()))
}

/// The lane and class of a recovery decision or a stop, from the server's log.
fn server_mark(line: &str) -> Option<(&'static str, &'static str)> {
    const RECOVERY: &[&str] = &["recovery:", "torn last line", "refusing", "damaged", "halted"];
    if RECOVERY.iter().any(|part| line.contains(part)) {
        return Some(("recovery", "recovery"));
    }
    (line.starts_with("stopping:") || line.starts_with("the server stopped:")).then_some(("server", "restart"))
}

/// An event of the simulation as a mark, or a call's part (`calls`), in order.
fn event_mark(at: u64, lane: &str, label: &str, calls: &mut BTreeMap<String, Call>, index: usize) -> Option<Mark> {
    let mark = |lane: String, class| Some(Mark { at, lane, class, label: label.to_string() });
    if lane.starts_with("call ") {
        let call = calls.entry(lane.to_string()).or_default();
        if let Some(tool) = label.strip_prefix("sent ") {
            (call.tool, call.sent) = (tool.trim_matches('"').to_string(), Some(index));
        } else if let Some(run) = label.strip_prefix("run ").and_then(|rest| rest.strip_suffix(" started")) {
            call.run = Some(run.to_string());
        } else if let Some(text) = label.strip_prefix("answered: ") {
            call.answered = Some((index, text.to_string()));
        }
        return None;
    }
    match lane {
        "faults" => mark("faults".into(), "fault"),
        "checker" => mark("checker".into(), "violation"),
        "operator" => {
            let run = label
                .split_whitespace()
                .find(|word| word.len() == RUN_PREFIX && word.chars().all(|c| c.is_ascii_hexdigit()));
            mark(run.map_or_else(|| "operator".to_string(), run_lane), "resolution")
        }
        _ if label.starts_with("crash") => mark(lane.to_string(), "crash"),
        _ if label.starts_with("restart") || label.starts_with("stopping") => mark(lane.to_string(), "restart"),
        _ => mark(lane.to_string(), "mark"),
    }
}

/// Every mark in time order (the simulation's events, then the log's lines, at each instant),
/// and the calls.
fn marks_and_calls(report: &Report) -> (Vec<Mark>, BTreeMap<String, Call>) {
    let mut timed: Vec<(u64, bool, &str, &str)> =
        report.events.iter().map(|(at, lane, label)| (*at, false, lane.as_str(), label.as_str())).collect();
    timed.extend(report.log.iter().map(|(at, line)| (*at, true, "", line.as_str())));
    timed.sort_by_key(|(at, from_log, _, _)| (*at, *from_log));
    let (mut marks, mut calls) = (Vec::new(), BTreeMap::new());
    for (at, from_log, lane, text) in timed {
        let mark = match from_log {
            false => event_mark(at, lane, text, &mut calls, marks.len()),
            true => match (run_mark(text), server_mark(text)) {
                (Some((lane, class, label)), _) => Some(Mark { at, lane, class, label }),
                (None, Some((lane, class))) => Some(Mark { at, lane: lane.into(), class, label: text.to_string() }),
                (None, None) => None,
            },
        };
        // A call's sending or answer takes a place in time, as a mark would.
        let placeholder = || Mark { at, lane: String::new(), class: "none", label: String::new() };
        match mark {
            Some(mark) => marks.push(mark),
            None if !from_log => marks.push(placeholder()),
            None => {}
        }
    }
    (marks, calls)
}

/// Where things go: a lane per row, an x for every mark, the axis's ticks and breaks.
struct Layout {
    lanes: Vec<String>,
    xs: Vec<f64>,
    /// (x, the instant) of each tick labelled.
    ticks: Vec<(f64, u64)>,
    /// (x from, x to, quiet ms) of each break.
    breaks: Vec<(f64, f64, u64)>,
    left: f64,
    row: f64,
    top: f64,
    width: f64,
    height: f64,
}

impl Layout {
    fn of(marks: &[Mark], calls: &BTreeMap<String, Call>) -> Layout {
        let mut lanes: Vec<String> = vec!["faults".into(), "server".into(), "recovery".into(), "operator".into()];
        let runs = calls.values().filter_map(|call| call.run.as_deref().map(run_lane));
        for lane in marks.iter().map(|mark| mark.lane.clone()).chain(runs) {
            if !lane.is_empty() && lane != "checker" && !lanes.contains(&lane) {
                lanes.push(lane);
            }
        }
        if calls.values().any(|call| call.run.is_none()) {
            lanes.push("calls without a run".into());
        }
        lanes.push("checker".into());
        let (left, row, top) = (190.0, 26.0, 48.0);
        let (mut xs, mut ticks, mut breaks) = (Vec::new(), Vec::new(), Vec::new());
        let mut x = left;
        let mut last: Option<u64> = None;
        for mark in marks {
            let quiet = last.map(|last| mark.at.saturating_sub(last));
            if let Some(quiet) = quiet.filter(|quiet| *quiet > 0) {
                let room = if quiet >= BREAK_MS { 46.0 } else { 6.0 + (quiet as f64).log10() * 3.0 };
                if quiet >= BREAK_MS {
                    breaks.push((x + STEP / 2.0, x + room, quiet));
                }
                x += room;
            }
            x += STEP;
            if quiet != Some(0) && ticks.last().is_none_or(|(tick_x, _): &(f64, u64)| x - tick_x >= 96.0) {
                ticks.push((x, mark.at));
            }
            xs.push(x);
            last = Some(mark.at);
        }
        let width = x + 60.0;
        let height = top + lanes.len() as f64 * row + 24.0;
        Layout { lanes, xs, ticks, breaks, left, row, top, width, height }
    }

    fn y(&self, lane: &str) -> f64 {
        self.top + self.lanes.iter().position(|l| l == lane).unwrap_or(0) as f64 * self.row
    }
}

pub fn html(report: &Report) -> String {
    let (marks, calls) = marks_and_calls(report);
    let layout = Layout::of(&marks, &calls);
    let mut svg = String::new();
    draw_axis(&mut svg, &layout);
    draw_lanes(&mut svg, &layout);
    draw_bands(&mut svg, &layout, &marks);
    draw_calls(&mut svg, &layout, &marks, &calls);
    draw_marks(&mut svg, &layout, &marks);
    page(report, &layout, &svg, &calls)
}

/// The axis: a tick at distinct instants, a break over every quiet stretch of a minute or more.
fn draw_axis(svg: &mut String, layout: &Layout) {
    let _ = write!(
        svg,
        "<g id=\"axis\"><line x1=\"{}\" x2=\"{}\" y1=\"30\" y2=\"30\" stroke=\"#999\"/>",
        layout.left,
        layout.width - 40.0
    );
    for (x, at) in &layout.ticks {
        let _ = write!(
            svg,
            "<g class=\"tick\" data-t=\"{at}\"><line x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"26\" y2=\"{:.1}\" stroke=\"#eee\"/>\
             <text x=\"{x:.1}\" y=\"22\" font-size=\"10\" text-anchor=\"middle\">{}</text></g>",
            layout.height - 20.0,
            clock_text(*at)
        );
    }
    for (from, to, quiet) in &layout.breaks {
        let _ = write!(
            svg,
            "<g class=\"break\"><rect x=\"{from:.1}\" y=\"26\" width=\"{:.1}\" height=\"{:.1}\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" font-size=\"9\" text-anchor=\"middle\">+{}</text></g>",
            to - from,
            layout.height - 46.0,
            (from + to) / 2.0,
            layout.height - 8.0,
            duration_text(*quiet)
        );
    }
    svg.push_str("</g>");
}

/// Each lane's name and guide line; a run's lane is clicked for the run's journal and answers.
fn draw_lanes(svg: &mut String, layout: &Layout) {
    for lane in &layout.lanes {
        let (class, run) = match lane.strip_prefix("run ") {
            Some(run) => ("lane run", format!(" data-run=\"{}\"", escape(run))),
            None => ("lane", String::new()),
        };
        let _ = write!(
            svg,
            "<g class=\"{class}\"{run}><text x=\"4\" y=\"{ty:.1}\" font-size=\"12\">{name}</text>\
             <line x1=\"{left}\" x2=\"{right:.1}\" y1=\"{y:.1}\" y2=\"{y:.1}\" stroke=\"#f0f0f0\"/></g>",
            ty = layout.y(lane) + 4.0,
            name = escape(lane),
            y = layout.y(lane),
            left = layout.left,
            right = layout.width - 40.0,
        );
    }
}

/// A band over every lane from each crash to the restart after it.
fn draw_bands(svg: &mut String, layout: &Layout, marks: &[Mark]) {
    for (index, mark) in marks.iter().enumerate().filter(|(_, mark)| mark.class == "crash") {
        let restart = marks[index..].iter().position(|later| later.class == "restart").map(|at| at + index);
        let from = layout.xs[index] - 3.0;
        let to = restart.map_or(from + 6.0, |at| layout.xs[at] + 3.0);
        let _ = write!(
            svg,
            "<g class=\"band crash\"><rect x=\"{from:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\"/>\
             <title>{}</title></g>",
            layout.top - 12.0,
            (to - from).max(6.0),
            layout.lanes.len() as f64 * layout.row,
            escape(&mark.label)
        );
    }
}

/// Each call as a bar from sent to answered (to the end when never answered) on its run's
/// lane, styled by its outcome.
fn draw_calls(svg: &mut String, layout: &Layout, marks: &[Mark], calls: &BTreeMap<String, Call>) {
    for (name, call) in calls {
        let Some(sent) = call.sent else { continue };
        let end = call.answered.as_ref().map_or(layout.width - 50.0, |(at, _)| layout.xs[*at]);
        let outcome = call.answered.as_ref().map_or("not answered", |(_, text)| text.as_str());
        const FAILED: &[&str] = &["refus", "over the", "busy", "could not", "fail", "stopped"];
        let class = match (&call.answered, FAILED.iter().any(|part| outcome.contains(part))) {
            (None, _) => "call unanswered",
            (Some(_), true) => "call refused",
            (Some(_), false) => "call answered",
        };
        let lane = call.run.as_deref().map_or_else(|| "calls without a run".to_string(), run_lane);
        let x = layout.xs[sent];
        let _ = write!(
            svg,
            "<g class=\"{class}\" data-tool=\"{tool}\" data-t=\"{t}\"><rect x=\"{x0:.1}\" y=\"{y0:.1}\" width=\"{w:.1}\" \
             height=\"6\" rx=\"2\"/><title>{name}: {tool}: {outcome}</title></g>",
            tool = escape(&call.tool),
            t = marks[sent].at,
            x0 = x - 3.0,
            y0 = layout.y(&lane) + 5.0,
            w = (end - x).max(4.0) + 6.0,
            outcome = escape(&outcome.chars().take(160).collect::<String>()),
        );
    }
}

/// Every mark on its lane; a fault says what it is beside its mark, above or below the lane,
/// where the label before it leaves room (its hover text says it always).
fn draw_marks(svg: &mut String, layout: &Layout, marks: &[Mark]) {
    let mut free_from = [0.0f64; 2];
    for (index, mark) in marks.iter().enumerate().filter(|(_, mark)| mark.class != "none") {
        let (x, y) = (layout.xs[index], layout.y(&mark.lane));
        let radius = if mark.class == "violation" { 8 } else { 5 };
        let mut label = String::new();
        if let ("fault", Some(row)) = (mark.class, free_from.iter().position(|free| x >= *free)) {
            let text: String = mark.label.chars().take(36).collect();
            free_from[row] = x + 8.0 + text.chars().count() as f64 * 4.6;
            let dy = if row == 0 { -9.0 } else { 15.0 };
            label = format!(
                "<text class=\"fault-label\" x=\"{:.1}\" y=\"{:.1}\" font-size=\"9\">{}</text>",
                x + 6.0,
                y + dy,
                escape(&text)
            );
        }
        let _ = write!(
            svg,
            "<g class=\"event {}\" data-t=\"{}\"><circle cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"{radius}\"/>{label}\
             <title>{} — {}: {}</title></g>",
            mark.class,
            mark.at,
            clock_text(mark.at),
            escape(&mark.lane),
            escape(&mark.label)
        );
    }
}

/// What a click on a run shows: its journal, its log lines and its calls' answers.
fn runs_json(report: &Report, calls: &BTreeMap<String, Call>) -> serde_json::Value {
    let mut runs: BTreeMap<String, serde_json::Value> = BTreeMap::new();
    for lane in calls.values().filter_map(|call| call.run.as_deref()) {
        runs.entry(lane.to_string()).or_insert_with(|| serde_json::json!({"journal": "", "log": [], "answers": []}));
    }
    for (run, journal) in &report.journals {
        let entry = runs
            .entry(run[..run.len().min(RUN_PREFIX)].to_string())
            .or_insert_with(|| serde_json::json!({"log": [], "answers": []}));
        entry["journal"] = serde_json::json!(journal);
    }
    for (prefix, entry) in runs.iter_mut() {
        let lines: Vec<serde_json::Value> = (report.log.iter())
            .filter(|(_, line)| line.contains(prefix.as_str()))
            .map(|(at, line)| serde_json::json!([at, line]))
            .collect();
        entry["log"] = serde_json::json!(lines);
        let answers: Vec<serde_json::Value> = (calls.iter())
            .filter(|(_, call)| call.run.as_deref() == Some(prefix.as_str()))
            .filter_map(|(name, call)| Some(serde_json::json!([name, call.answered.as_ref()?.1])))
            .collect();
        entry["answers"] = serde_json::json!(answers);
    }
    serde_json::json!(runs)
}

/// The page around the chart: the seed's summary, its violations (when it has any), and the
/// data the script shows on a click.
fn page(report: &Report, layout: &Layout, svg: &str, calls: &BTreeMap<String, Call>) -> String {
    let violations: String = report.violations.iter().map(|v| format!("<li>{}</li>", escape(&v.to_string()))).collect();
    let violations = match violations.is_empty() {
        true => String::new(),
        false => format!("<h2>violations</h2><ul id=\"violations\">{violations}</ul>"),
    };
    let log: Vec<serde_json::Value> = report.log.iter().map(|(at, line)| serde_json::json!([at, line])).collect();
    let data = serde_json::json!({"log": log, "runs": runs_json(report, calls)});
    let data = serde_json::to_string(&data).expect("JSON").replace("</", "<\\/");
    format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>warden-sim seed {seed}</title><style>{STYLE}</style></head>\
         <body><h1>seed {seed}</h1>\
         <p>{calls} calls, {answered} answered, {restarts} restarts, {sim} simulated, trace {trace}. \
         Time runs left to right; a quiet stretch of a minute or more is a grey break labelled with its length. \
         A lane per run: its calls as bars (green answered, grey refused, red outline never answered), its actions \
         as marks (blue done, red in doubt), its start, resumes, wait for an operator and settle. Faults (orange, \
         labelled), crashes (red, with a band to the restart), recovery (teal), resolutions (purple), violations \
         (large red). Hover for detail; click a run for its journal and answers, a mark for the server's lines of that \
         instant.</p>{violations}\
         <div id=\"chart\"><svg width=\"{width:.0}\" height=\"{height:.0}\" xmlns=\"http://www.w3.org/2000/svg\">{svg}</svg></div>\
         <h2 id=\"panel-title\">click a run or a mark</h2><pre id=\"log\"></pre>\
         <script id=\"data\" type=\"application/json\">{data}</script><script>{SCRIPT}</script></body></html>\n",
        seed = report.seed,
        calls = report.calls,
        answered = report.answered,
        restarts = report.restarts,
        sim = duration_text(report.sim_ms),
        trace = report.trace_hash,
        width = layout.width,
        height = layout.height,
    )
}

/// A simulated instant as a clock reading, `hh:mm:ss.mmm` (as `run --verbose` prints it).
fn clock_text(ms: u64) -> String {
    let (h, m, s, milli) = (ms / 3_600_000, ms / 60_000 % 60, ms / 1000 % 60, ms % 1000);
    format!("{h:02}:{m:02}:{s:02}.{milli:03}")
}

fn duration_text(ms: u64) -> String {
    match ms {
        0..1_000 => format!("{ms} ms"),
        1_000..60_000 => format!("{:.1} s", ms as f64 / 1000.0),
        60_000..3_600_000 => format!("{:.1} min", ms as f64 / 60_000.0),
        _ => format!("{:.1} h", ms as f64 / 3_600_000.0),
    }
}

const STYLE: &str = "body{font-family:sans-serif;margin:16px}#chart{overflow-x:auto;border:1px solid #ddd}\
.call rect{fill:#7c7;stroke:#2a2}.call.refused rect{fill:#ccc;stroke:#888}\
.call.unanswered rect{fill:#fff;stroke:#d33;stroke-dasharray:3}\
.event circle{fill:#36c}.fault circle{fill:#e90}.fault-label{fill:#a60}.crash circle{fill:#d33}.restart circle{fill:#999}\
.recovery circle{fill:#1a9}.resolution circle{fill:#a5d}.violation circle{fill:#f00;stroke:#600;stroke-width:2}\
.started circle{fill:#9bd}.settled circle{fill:#2a2}.waiting circle,.in-doubt circle{fill:#d33}\
.band.crash rect{fill:#f33;opacity:.08}.break rect{fill:#eee;opacity:.7}.lane.run{cursor:pointer}\
g[data-t]{cursor:pointer}.selected circle,.selected rect{stroke:#000;stroke-width:2}.lane.selected text{font-weight:bold}\
#log{background:#f7f7f7;padding:8px;max-height:420px;overflow:auto;white-space:pre-wrap}#violations li{color:#c00}";

/// A click on a run's lane shows its journal, log and answers; on a mark, the server's lines
/// of that instant. `#selftest` in the URL clicks the first violation (or call) and then the
/// first run, recording what each showed, for the headless-browser test.
const SCRIPT: &str = r#"
const data = JSON.parse(document.getElementById('data').textContent);
function select(el) {
  document.querySelectorAll('.selected').forEach(e => e.classList.remove('selected'));
  el.classList.add('selected');
}
function show(el) {
  select(el);
  const t = Number(el.dataset.t);
  const shown = data.log.filter(l => l[0] === t);
  document.getElementById('panel-title').textContent = 'the server at ' + t + ' ms';
  document.getElementById('log').textContent = shown.map(l => l[0] + ' ms  ' + l[1]).join('\n') || '(no log line at this instant)';
  return shown.length;
}
function showRun(el) {
  select(el);
  const run = el.dataset.run, of = data.runs[run] || {journal: '', log: [], answers: []};
  const parts = ['journal:\n' + (of.journal || '(none kept)'),
    'log:\n' + of.log.map(l => l[0] + ' ms  ' + l[1]).join('\n'),
    'answers:\n' + of.answers.map(a => a[0] + ': ' + a[1]).join('\n')];
  document.getElementById('panel-title').textContent = 'run ' + run;
  document.getElementById('log').textContent = parts.join('\n\n');
  return of.log.length + of.answers.length;
}
document.querySelectorAll('g[data-t]').forEach(el => el.addEventListener('click', () => show(el)));
document.querySelectorAll('.lane.run').forEach(el => el.addEventListener('click', () => showRun(el)));
if (location.hash === '#selftest') {
  const target = document.querySelector('.violation') || document.querySelector('.call');
  document.body.dataset.selftest = target ? String(show(target)) : 'nothing to click';
  const run = document.querySelector('.lane.run');
  if (run) {
    document.body.dataset.selftestRun = String(showRun(run));
    document.body.dataset.selftestPanel = document.getElementById('log').textContent;
  }
}
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_s_log_lines_make_its_marks() {
        let mark = |line: &str| run_mark(line).map(|(lane, class, _)| (lane, class));
        let run = "tool close run 0123456789abcdef";
        assert_eq!(mark(&format!("{run}: started")), Some(("run 01234567".into(), "started")));
        assert_eq!(
            mark(&format!("{run}: action 0: db.sqlite EXECUTE: done in 0 ms")),
            Some(("run 01234567".into(), "action done"))
        );
        assert_eq!(
            mark(&format!("{run}: stopped, waiting for an operator: x")),
            Some(("run 01234567".into(), "waiting"))
        );
        assert_eq!(mark(&format!("{run}: print: hello")), None);
        assert_eq!(mark("recovery: released 0 run(s)"), None);
    }

    #[test]
    fn a_clock_reading_and_a_duration_in_words() {
        assert_eq!(clock_text(3_723_004), "01:02:03.004");
        assert_eq!(duration_text(90_000), "1.5 min");
    }
}
