//! Traces (OpenTelemetry): Warden's spans (a call, its run, each action, each durable write,
//! each model call) exported over OTLP/HTTP, protobuf or JSON, when an endpoint is given
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
        .with_protocol(protocol()?)
        .with_headers(Default::default());
    let builder = if explicit { builder.with_endpoint(endpoint) } else { builder };
    let exporter = builder.build().map_err(|error| format!("the OTLP exporter for {endpoint}: {error}"))?;
    let resource = opentelemetry_sdk::Resource::builder().with_service_name("warden").build();
    let provider = SdkTracerProvider::builder().with_batch_exporter(exporter).with_resource(resource).build();
    let tracer = provider.tracer("warden");
    opentelemetry::global::set_text_map_propagator(opentelemetry_sdk::propagation::TraceContextPropagator::new());
    Ok((tracing_opentelemetry::layer().with_tracer(tracer), Exporting { provider }))
}

/// An HTTP request's own CLIENT span (below the action's or the model call's), named and
/// described as OpenTelemetry's HTTP client conventions say: the method, the server, and the
/// URL without its query, fragment and user (where a credential could be).
pub fn request_span(method: &str, url: &str) -> tracing::Span {
    let parsed = url::Url::parse(url).ok();
    let host = parsed.as_ref().and_then(|parsed| parsed.host_str().map(str::to_string));
    let port = parsed.as_ref().and_then(url::Url::port_or_known_default).map(i64::from);
    let shown = parsed.map(|mut parsed| {
        parsed.set_query(None);
        parsed.set_fragment(None);
        let _ = parsed.set_username("");
        let _ = parsed.set_password(None);
        parsed.to_string()
    });
    tracing::info_span!(target: "warden", "http.request", otel.name = method, otel.kind = "client",
        otel.status_code = tracing::field::Empty, http.request.method = method, server.address = host,
        server.port = port, url.full = shown, http.response.status_code = tracing::field::Empty)
}

/// The response's status on its request's span: a status of 400 or more is an error of the
/// client's request, as the conventions say.
pub fn describe_response(span: &tracing::Span, status: u16) {
    span.record("http.response.status_code", i64::from(status));
    if status >= 400 {
        span.record("otel.status_code", "ERROR");
    }
}

/// A request that got no answer.
pub fn describe_failure(span: &tracing::Span) {
    span.record("otel.status_code", "ERROR");
}

/// The W3C `traceparent` naming `span`, when traces are exported: what an HTTP request
/// carries to its service, so the service's spans join the caller's trace. None without an
/// exporter (nothing is added to what is sent).
pub fn traceparent_of(span: &tracing::Span) -> Option<String> {
    let context = span.context();
    let span = opentelemetry::trace::TraceContextExt::span(&context);
    let span = span.span_context();
    let flags = span.trace_flags().to_u8();
    span.is_valid().then(|| format!("00-{}-{}-{flags:02x}", span.trace_id(), span.span_id()))
}

/// The OTLP/HTTP encoding: protobuf, the protocol's default, or JSON, as the standard
/// variables say (`OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`, else `OTEL_EXPORTER_OTLP_PROTOCOL`);
/// gRPC is refused, naming what to set.
fn protocol() -> Result<opentelemetry_otlp::Protocol, String> {
    let named = ["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"]
        .into_iter()
        .find_map(|name| std::env::var(name).ok().filter(|value| !value.trim().is_empty()).map(|value| (name, value)));
    match named {
        None => Ok(opentelemetry_otlp::Protocol::HttpBinary),
        Some((_, value)) if value.trim() == "http/protobuf" => Ok(opentelemetry_otlp::Protocol::HttpBinary),
        Some((_, value)) if value.trim() == "http/json" => Ok(opentelemetry_otlp::Protocol::HttpJson),
        Some((name, value)) => Err(format!(
            "{name}={value:?}: Warden exports traces over OTLP/HTTP only; set it to http/protobuf (the default) or \
             http/json"
        )),
    }
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
