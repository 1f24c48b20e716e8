//! A self-contained HTML timeline of one simulation (inline SVG, no network): one lane per
//! call and for the server and the operator, events on the simulated time axis.

use crate::sweep::Report;

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

pub fn html(report: &Report) -> String {
    let mut lanes: Vec<String> = Vec::new();
    for (_, lane, _) in &report.events {
        if !lanes.contains(lane) {
            lanes.push(lane.clone());
        }
    }
    let end = report.events.iter().map(|(t, _, _)| *t).max().unwrap_or(0).max(1);
    let (width, row) = (1100.0, 22.0);
    let x = |t: u64| 160.0 + (t as f64 / end as f64) * (width - 200.0);
    let mut svg = String::new();
    for (index, lane) in lanes.iter().enumerate() {
        let y = 30.0 + index as f64 * row;
        svg.push_str(&format!("<text x=\"4\" y=\"{}\" font-size=\"12\">{}</text>", y + 4.0, escape(lane)));
        svg.push_str(&format!("<line x1=\"160\" x2=\"{}\" y1=\"{y}\" y2=\"{y}\" stroke=\"#ddd\"/>", width - 40.0));
    }
    for (order, (t, lane, label)) in report.events.iter().enumerate() {
        let y = 30.0 + lanes.iter().position(|l| l == lane).unwrap_or(0) as f64 * row;
        let colour = if label.starts_with("crash") {
            "#d33"
        } else if label.starts_with("answered") {
            "#2a2"
        } else if label.starts_with("resolved") {
            "#a5d"
        } else {
            "#36c"
        };
        // Events at the same instant are spread a little, in order, so none hides another.
        let cx = x(*t) + (order % 5) as f64 * 2.0;
        svg.push_str(&format!(
            "<circle cx=\"{cx:.1}\" cy=\"{y}\" r=\"5\" fill=\"{colour}\"><title>{} ms: {}</title></circle>",
            t,
            escape(label)
        ));
    }
    let height = 60.0 + lanes.len() as f64 * row;
    let violations: String = report.violations.iter().map(|v| format!("<li>{}</li>", escape(&v.to_string()))).collect();
    format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>warden-sim seed {seed}</title></head>\
         <body style=\"font-family:sans-serif\"><h1>seed {seed}</h1>\
         <p>{calls} calls, {answered} answered, {restarts} restarts, {sim} ms simulated, trace {trace}. \
         Blue: sent or started; green: answered; red: crash; purple: operator.</p>\
         <svg width=\"{width}\" height=\"{height}\" xmlns=\"http://www.w3.org/2000/svg\">{svg}</svg>\
         <h2>violations</h2><ul>{violations}</ul></body></html>\n",
        seed = report.seed,
        calls = report.calls,
        answered = report.answered,
        restarts = report.restarts,
        sim = report.sim_ms,
        trace = report.trace_hash,
    )
}
