//! A self-contained HTML timeline of one simulation (inline SVG, CSS and script; no network):
//! the page a developer opens first on a failing seed.
//!
//! Simulated time often stands still while much happens (a call is served in zero virtual
//! time) and then jumps hours, so the axis is ordinal: each event takes one column, in order,
//! and the axis labels give the simulated time at each tick. Each call is a span from sent to
//! answered, labelled with its tool and outcome; faults, crashes (with the step or disk
//! operation they hit, and what was in flight), restarts, recovery decisions, the operator's
//! resolutions and violations are marks on their own lanes. Hover shows an event's detail;
//! a click shows the server's log lines written at that moment.

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::report::Report;

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// What a mark on the timeline is, from its lane and label.
fn class_of(lane: &str, label: &str) -> &'static str {
    match (lane, label) {
        ("faults", _) => "fault",
        ("checker", _) => "violation",
        ("operator", _) => "resolution",
        ("recovery", _) => "recovery",
        (_, l) if l.starts_with("crash") => "crash",
        (_, l) if l.starts_with("restart") || l.starts_with("stopping") => "restart",
        (_, l) if l.starts_with("run ") => "started",
        _ => "mark",
    }
}

/// One call's span: the columns it was sent and answered at, its tool and outcome.
struct Span {
    sent: usize,
    answered: Option<usize>,
    tool: String,
    outcome: String,
}

/// The lane a server log line is drawn on, if any: recovery's decisions at a start (a torn
/// tail discarded, runs released, resumed or settled, damage refused), and the server's stops.
fn lane_of_log_line(line: &str) -> Option<&'static str> {
    const RECOVERY: &[&str] = &["recovery:", "torn last line", "refusing", "damaged", "halted"];
    if RECOVERY.iter().any(|part| line.contains(part)) {
        return Some("recovery");
    }
    line.starts_with("stopping:").then_some("server")
}

/// Recovery decisions and stops are log lines; they join the events as marks on their lanes.
fn events_with_recovery(report: &Report) -> Vec<(u64, String, String)> {
    let mut events = report.events.clone();
    for (at, line) in &report.log {
        if let Some(lane) = lane_of_log_line(line) {
            events.push((*at, lane.to_string(), line.clone()));
        }
    }
    // Stable: events at the same instant keep the order they happened in.
    events.sort_by_key(|(at, _, _)| *at);
    events
}

fn spans(events: &[(u64, String, String)]) -> BTreeMap<String, Span> {
    let mut spans: BTreeMap<String, Span> = BTreeMap::new();
    for (column, (_, lane, label)) in events.iter().enumerate() {
        if !lane.starts_with("call ") {
            continue;
        }
        if let Some(tool) = label.strip_prefix("sent ") {
            let tool = tool.trim_matches('"').to_string();
            spans.insert(lane.clone(), Span { sent: column, answered: None, tool, outcome: "not answered".into() });
        } else if let (Some(text), Some(span)) = (label.strip_prefix("answered: "), spans.get_mut(lane)) {
            span.answered = Some(column);
            span.outcome = text.to_string();
        }
    }
    spans
}

/// Where things go on the page: a lane per row, a column per event.
struct Layout {
    lanes: Vec<String>,
    left: f64,
    row: f64,
    top: f64,
    step: f64,
    width: f64,
    height: f64,
}

impl Layout {
    /// The fixed lanes first, then each call's in order of appearance, the checker's last.
    fn of(events: &[(u64, String, String)]) -> Layout {
        let mut lanes: Vec<String> = vec!["faults".into(), "server".into(), "recovery".into(), "operator".into()];
        for (_, lane, _) in events {
            if !lanes.contains(lane) && lane != "checker" {
                lanes.push(lane.clone());
            }
        }
        lanes.push("checker".into());
        let (left, row, top) = (170.0, 24.0, 40.0);
        let step = (900.0 / events.len().max(1) as f64).clamp(4.0, 24.0);
        let width = left + step * (events.len() + 2) as f64 + 40.0;
        let height = top + lanes.len() as f64 * row + 20.0;
        Layout { lanes, left, row, top, step, width, height }
    }

    fn x(&self, column: usize) -> f64 {
        self.left + self.step * (column as f64 + 1.0)
    }

    fn y(&self, lane: &str) -> f64 {
        self.top + self.lanes.iter().position(|l| l == lane).unwrap_or(0) as f64 * self.row
    }
}

pub fn html(report: &Report) -> String {
    let events = events_with_recovery(report);
    let layout = Layout::of(&events);
    let mut svg = String::new();
    draw_axis(&mut svg, &layout, &events);
    draw_lanes(&mut svg, &layout);
    draw_spans(&mut svg, &layout, &events);
    draw_marks(&mut svg, &layout, &events);
    page(report, &layout, &svg)
}

/// The axis: a tick every so many columns, labelled with the simulated time there.
fn draw_axis(svg: &mut String, layout: &Layout, events: &[(u64, String, String)]) {
    let left = layout.left;
    let every = (60.0 / layout.step).ceil().max(1.0) as usize;
    let _ = write!(
        svg,
        "<g id=\"axis\"><line x1=\"{left}\" x2=\"{}\" y1=\"22\" y2=\"22\" stroke=\"#999\"/>",
        layout.width - 40.0
    );
    for column in (0..events.len()).step_by(every) {
        let at = events[column].0;
        let _ = write!(
            svg,
            "<g class=\"tick\" data-t=\"{at}\"><line x1=\"{0}\" x2=\"{0}\" y1=\"18\" y2=\"{1}\" stroke=\"#eee\"/>\
             <text x=\"{0}\" y=\"14\" font-size=\"10\" text-anchor=\"middle\">{2}</text></g>",
            layout.x(column),
            layout.height - 20.0,
            time_text(at)
        );
    }
    svg.push_str("</g>");
}

/// Each lane's name and guide line.
fn draw_lanes(svg: &mut String, layout: &Layout) {
    let left = layout.left;
    for lane in &layout.lanes {
        let _ = write!(
            svg,
            "<g class=\"lane\"><text x=\"4\" y=\"{}\" font-size=\"12\">{}</text>\
             <line x1=\"{left}\" x2=\"{}\" y1=\"{2}\" y2=\"{2}\" stroke=\"#f0f0f0\"/></g>",
            layout.y(lane) + 4.0,
            escape(lane),
            layout.y(lane),
        );
    }
}

/// Each call as a span from sent to answered (to the end when never answered), styled by
/// its outcome.
fn draw_spans(svg: &mut String, layout: &Layout, events: &[(u64, String, String)]) {
    for (lane, span) in spans(events) {
        let end = span.answered.unwrap_or(events.len());
        const FAILED: &[&str] = &["refus", "over the", "busy", "could not", "fail", "stopped"];
        let failed = FAILED.iter().any(|part| span.outcome.contains(part));
        let class = match (span.answered, failed) {
            (None, _) => "call unanswered",
            (Some(_), true) => "call refused",
            (Some(_), false) => "call answered",
        };
        let _ = write!(
            svg,
            "<g class=\"{class}\" data-tool=\"{tool}\" data-t=\"{t}\"><rect x=\"{x0}\" y=\"{y0}\" width=\"{w}\" height=\"12\" rx=\"3\"/>\
             <text x=\"{tx}\" y=\"{ty}\" font-size=\"10\">{tool}: {outcome}</text><title>{lane}: {tool} — {outcome}</title></g>",
            tool = escape(&span.tool),
            t = events[span.sent].0,
            x0 = layout.x(span.sent) - 3.0,
            y0 = layout.y(&lane) - 6.0,
            w = (layout.x(end) - layout.x(span.sent)).max(6.0) + 6.0,
            tx = layout.x(span.sent) + 4.0,
            ty = layout.y(&lane) + 4.0,
            outcome = escape(&span.outcome.chars().take(48).collect::<String>()),
        );
    }
}

/// Every other event as a mark on its lane (a violation's larger).
fn draw_marks(svg: &mut String, layout: &Layout, events: &[(u64, String, String)]) {
    for (column, (at, lane, label)) in events.iter().enumerate() {
        let class = class_of(lane, label);
        if lane.starts_with("call ") && class == "mark" {
            continue; // drawn as the call's span
        }
        let radius = if class == "violation" { 8 } else { 5 };
        let _ = write!(
            svg,
            "<g class=\"event {class}\" data-t=\"{at}\"><circle cx=\"{:.1}\" cy=\"{}\" r=\"{radius}\"/>\
             <title>{} — {}: {}</title></g>",
            layout.x(column),
            layout.y(lane),
            time_text(*at),
            escape(lane),
            escape(label)
        );
    }
}

/// The page around the chart: the seed's summary and violations, and the server's log for
/// the script to show.
fn page(report: &Report, layout: &Layout, svg: &str) -> String {
    let violations: String = report.violations.iter().map(|v| format!("<li>{}</li>", escape(&v.to_string()))).collect();
    let log: Vec<serde_json::Value> = report.log.iter().map(|(at, line)| serde_json::json!([at, line])).collect();
    let log_json = serde_json::to_string(&log).expect("JSON").replace("</", "<\\/");
    format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>warden-sim seed {seed}</title><style>{STYLE}</style></head>\
         <body><h1>seed {seed}</h1>\
         <p>{calls} calls, {answered} answered, {restarts} restarts, {sim} simulated, trace {trace}. \
         Spans: calls from sent to answered (green answered, grey refused, red outline never answered). \
         Marks: faults (orange), crashes (red), restarts (grey), recovery (teal), operator (purple), violations (large red). \
         Hover for detail; click for the server's log at that moment.</p>\
         <h2>violations</h2><ul id=\"violations\">{violations}</ul>\
         <div id=\"chart\"><svg width=\"{width:.0}\" height=\"{height:.0}\" xmlns=\"http://www.w3.org/2000/svg\">{svg}</svg></div>\
         <h2>server log <span id=\"at\"></span></h2><pre id=\"log\">click a call or a mark</pre>\
         <script id=\"log-data\" type=\"application/json\">{log_json}</script><script>{SCRIPT}</script></body></html>\n",
        seed = report.seed,
        calls = report.calls,
        answered = report.answered,
        restarts = report.restarts,
        sim = time_text(report.sim_ms),
        trace = report.trace_hash,
        width = layout.width,
        height = layout.height,
    )
}

fn time_text(ms: u64) -> String {
    match ms {
        0..1_000 => format!("{ms} ms"),
        1_000..60_000 => format!("{:.1} s", ms as f64 / 1000.0),
        60_000..3_600_000 => format!("{:.1} min", ms as f64 / 60_000.0),
        _ => format!("{:.1} h", ms as f64 / 3_600_000.0),
    }
}

const STYLE: &str = "body{font-family:sans-serif;margin:16px}#chart{overflow-x:auto;border:1px solid #ddd}\
.call rect{fill:#cfe8cf;stroke:#2a2}.call.refused rect{fill:#e4e4e4;stroke:#888}\
.call.unanswered rect{fill:#fff;stroke:#d33;stroke-dasharray:3}\
.event circle{fill:#36c}.fault circle{fill:#e90}.crash circle{fill:#d33}.restart circle{fill:#999}\
.recovery circle{fill:#1a9}.resolution circle{fill:#a5d}.violation circle{fill:#f00;stroke:#600;stroke-width:2}\
.started circle{fill:#9bd}g[data-t]{cursor:pointer}.selected circle,.selected rect{stroke:#000;stroke-width:2}\
#log{background:#f7f7f7;padding:8px;max-height:320px;overflow:auto}#violations li{color:#c00}";

/// Clicking an element with `data-t` shows the log lines written at that simulated ms (and
/// the few before it). `#selftest` in the URL clicks the first violation, or the first call,
/// and records what the log panel showed, for the headless-browser test.
const SCRIPT: &str = r#"
const lines = JSON.parse(document.getElementById('log-data').textContent);
function show(el) {
  document.querySelectorAll('.selected').forEach(e => e.classList.remove('selected'));
  el.classList.add('selected');
  const t = Number(el.dataset.t);
  const at = lines.map((l, i) => [l, i]).filter(([l]) => l[0] === t).map(([, i]) => i);
  const first = at.length ? Math.max(0, at[0] - 3) : lines.findIndex(l => l[0] > t);
  const shown = at.length ? lines.slice(first, at[at.length - 1] + 1) : lines.slice(Math.max(0, first - 3), Math.max(0, first));
  document.getElementById('at').textContent = 'at ' + t + ' ms';
  document.getElementById('log').textContent = shown.map(l => l[0] + ' ms  ' + l[1]).join('\n') || '(no log line at this moment)';
  return shown.length;
}
document.querySelectorAll('g[data-t]').forEach(el => el.addEventListener('click', () => show(el)));
if (location.hash === '#selftest') {
  const target = document.querySelector('.violation') || document.querySelector('.call');
  document.body.dataset.selftest = target ? String(show(target)) : 'nothing to click';
}
"#;
