//! The server's log through `tracing`: each `LogLine` is an event (level, message, and the
//! fields run, tool, principal, action, status), written to stderr by `tracing-subscriber` as
//! text (the default) or as JSON lines, filtered by `RUST_LOG` (default `info`). Only Warden's
//! own events are written: a library's debug output could carry a request's credentials.

use std::io::Write;

use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::FormatTime;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::Layer;

use crate::env::{Level, LogLine};

/// The target of every event Warden writes.
const TARGET: &str = "warden";

/// How log lines are written (`--log-format`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    /// `2026-12-03T08:35:12.345Z  INFO warden: tool T run R: message principal=P`
    Text,
    /// One JSON object a line: timestamp, level, message and each field.
    Json,
}

/// Installs the process's log writer, and the trace exporter when `otlp_endpoint` (or the
/// standard variable) names one; once, before anything logs. A `RUST_LOG` that does not parse
/// is refused, naming it. The exporter returned sends what it holds when dropped.
pub fn init(format: LogFormat, otlp_endpoint: Option<&str>) -> Result<Option<crate::io::trace::Exporting>, String> {
    let _ = CHOSEN.set(format);
    let filter = match std::env::var("RUST_LOG") {
        Ok(text) if !text.trim().is_empty() => tracing_subscriber::EnvFilter::try_new(&text)
            .map_err(|error| format!("RUST_LOG={text:?} is not a filter ({error}); try info, debug or warden=warn"))?,
        _ => tracing_subscriber::EnvFilter::new("info"),
    };
    // The log writes events only: were spans let through to it, every span (a call, a run, each
    // durable write) would be built and recorded even with no exporter, a tenth of a pure
    // call's time. With the exporter off, nothing wants them, so `tracing` skips them at once.
    let own = tracing_subscriber::filter::filter_fn(|metadata| metadata.target() == TARGET && metadata.is_event());
    let layer = tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_ansi(false).with_timer(UtcMillis);
    let layer = match format {
        LogFormat::Text => layer.event_format(TextLine).boxed(),
        LogFormat::Json => layer.json().flatten_event(true).with_current_span(false).with_span_list(false).boxed(),
    };
    let (traces, exporting) = match crate::io::trace::endpoint(otlp_endpoint) {
        Some(endpoint) => {
            let (layer, exporting) = crate::io::trace::layer(&endpoint, otlp_endpoint.is_some())?;
            let own_spans = tracing_subscriber::filter::filter_fn(|metadata| metadata.target() == TARGET);
            (Some(layer.with_filter(own_spans)), Some(exporting))
        }
        None => (None, None),
    };
    tracing_subscriber::registry()
        .with(layer.with_filter(filter).with_filter(own))
        .with(traces)
        .try_init()
        .map_err(|error| format!("the log cannot be set up: {error}"))?;
    Ok(exporting)
}

/// The format `init` installed, for the lines written after the log's own (`exit_line`).
static CHOSEN: std::sync::OnceLock<LogFormat> = std::sync::OnceLock::new();

/// The line a server exits with (why it stopped): in JSON logs an error event like every other
/// line, so a pipeline reads the most important line of a stop; in text as it always was.
pub fn exit_line(line: &str) {
    match CHOSEN.get() {
        Some(LogFormat::Json) => emit(&LogLine { level: Level::Error, message: line, fields: &[] }),
        _ => eprintln!("warden: {line}"),
    }
}

/// Writes one line: an event when `init` ran, else plain text on stderr (a library user's
/// process, a test).
pub fn emit(line: &LogLine<'_>) {
    if !tracing::dispatcher::has_been_set() {
        let stamp = crate::base::time::utc_timestamp(now_ms());
        // One write per line (stderr is unbuffered); a failed log write has nowhere to go.
        let _ = std::io::stderr().lock().write_all(format!("{stamp} warden: {}\n", line.text()).as_bytes());
        return;
    }
    macro_rules! event_at {
        ($level:expr) => {
            tracing::event!(
                target: TARGET,
                $level,
                run = line.field("run"),
                tool = line.field("tool"),
                principal = line.field("principal"),
                // Numbers as numbers in JSON lines (an action's number, an HTTP status): both
                // are written from integers, so each parses.
                action = line.field("action").and_then(|action| action.parse::<u64>().ok()),
                status = line.field("status").and_then(|status| status.parse::<u64>().ok()),
                "{}",
                line.message
            )
        };
    }
    match line.level {
        Level::Error => event_at!(tracing::Level::ERROR),
        Level::Warn => event_at!(tracing::Level::WARN),
        Level::Info => event_at!(tracing::Level::INFO),
        Level::Debug => event_at!(tracing::Level::DEBUG),
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// RFC 3339 UTC with milliseconds, as every Warden log line has begun.
struct UtcMillis;

impl FormatTime for UtcMillis {
    fn format_time(&self, writer: &mut Writer<'_>) -> std::fmt::Result {
        write!(writer, "{}", crate::base::time::utc_timestamp(now_ms()))
    }
}

/// The text line: timestamp, level, `warden:`, then the line as `LogLine::text` renders it.
struct TextLine;

impl<S, N> tracing_subscriber::fmt::FormatEvent<S, N> for TextLine
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> tracing_subscriber::fmt::FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _context: &tracing_subscriber::fmt::FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let named: Vec<(&'static str, &str)> =
            fields.named.iter().map(|(name, value)| (*name, value.as_str())).collect();
        let line = LogLine { level: Level::Info, message: &fields.message, fields: &named };
        UtcMillis.format_time(&mut writer)?;
        writeln!(writer, " {:>5} warden: {}", event.metadata().level(), line.text())
    }
}

/// An event's message and named fields, as recorded.
#[derive(Default)]
struct Fields {
    message: String,
    named: Vec<(&'static str, String)>,
}

impl tracing::field::Visit for Fields {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        match field.name() {
            "message" => self.message = value.to_string(),
            name => self.named.push((name, value.to_string())),
        }
    }

    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        match field.name() {
            "message" => self.message = format!("{value:?}"),
            name => self.named.push((name, format!("{value:?}"))),
        }
    }
}
