//! Traces (OpenTelemetry): Warden's spans (a call, its run, each action, each durable write,
//! each model call) exported over OTLP/HTTP as JSON when an endpoint is given
//! (`--otlp-endpoint`, or the standard `OTEL_EXPORTER_OTLP_ENDPOINT`); off otherwise. The
//! SDK exports in batches on its own thread, never on the server's.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The longest `traceparent` read (the W3C form is 55 characters).
const TRACEPARENT_BYTES_MAX: usize = 128;

/// The exporter while the process lives: dropped at exit, it sends what is still buffered.
pub struct Exporting {
    provider: SdkTracerProvider,
}

impl Drop for Exporting {
    fn drop(&mut self) {
        let _ = self.provider.shutdown();
    }
}

/// The OTLP endpoint to export to: `--otlp-endpoint` (a base URL; `/v1/traces` is added), else
/// `OTEL_EXPORTER_OTLP_ENDPOINT` (read by the exporter the standard way); none: no traces.
pub fn endpoint(flag: Option<&str>) -> Option<String> {
    match flag {
        Some(base) => Some(format!("{}/v1/traces", base.trim_end_matches('/'))),
        None => std::env::var("OTEL_EXPORTER_OTLP_ENDPOINT").ok().filter(|value| !value.trim().is_empty()),
    }
}

/// A `tracing` layer turning Warden's spans into OpenTelemetry spans exported to `endpoint`.
pub fn layer<S>(endpoint: &str, explicit: bool) -> Result<(impl tracing_subscriber::Layer<S>, Exporting), String>
where
    S: tracing::Subscriber + for<'span> tracing_subscriber::registry::LookupSpan<'span>,
{
    let builder = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(opentelemetry_otlp::Protocol::HttpJson)
        .with_headers(Default::default());
    let builder = if explicit { builder.with_endpoint(endpoint) } else { builder };
    let exporter = builder.build().map_err(|error| format!("the OTLP exporter for {endpoint}: {error}"))?;
    let resource = opentelemetry_sdk::Resource::builder().with_service_name("warden").build();
    let provider = SdkTracerProvider::builder().with_batch_exporter(exporter).with_resource(resource).build();
    let tracer = provider.tracer("warden");
    opentelemetry::global::set_text_map_propagator(opentelemetry_sdk::propagation::TraceContextPropagator::new());
    Ok((tracing_opentelemetry::layer().with_tracer(tracer), Exporting { provider }))
}

/// Makes `span` continue the trace a W3C `traceparent` names (one that does not parse starts
/// a trace of its own, as the standard says).
pub fn continue_trace(span: &tracing::Span, traceparent: &str) {
    if traceparent.len() > TRACEPARENT_BYTES_MAX {
        return;
    }
    let carrier = std::collections::HashMap::from([("traceparent".to_string(), traceparent.to_string())]);
    let parent = opentelemetry::global::get_text_map_propagator(|propagator| propagator.extract(&carrier));
    let _ = span.set_parent(parent);
}
