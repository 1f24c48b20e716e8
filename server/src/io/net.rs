//! HTTP through reqwest (rustls), with the manifest's connect and total timeouts; each
//! request described on its caller's span and carrying its `traceparent` when traces are
//! exported.

use std::time::Duration;

use crate::env::{HttpRequest, HttpResponse, LocalBoxFuture, Net, NetError};

pub struct RealNet;

impl Net for RealNet {
    fn request(&self, request: HttpRequest) -> LocalBoxFuture<'static, Result<HttpResponse, NetError>> {
        // Made while the caller's span (the action's, the model call's) is the current one:
        // the request's span is its child.
        let span = crate::io::trace::request_span(&request.method, &request.url);
        let traceparent = crate::io::trace::traceparent_of(&span);
        let described = span.clone();
        let sending = async move {
            let not_sent = |message: String| NetError { may_have_been_sent: false, message };
            let client = reqwest::Client::builder()
                .connect_timeout(Duration::from_millis(request.connect_timeout_ms))
                .timeout(Duration::from_millis(request.timeout_ms))
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .map_err(|e| not_sent(format!("building the HTTP client: {e}")))?;
            let method = reqwest::Method::from_bytes(request.method.as_bytes())
                .map_err(|_| not_sent(format!("`{}` is not an HTTP method", request.method)))?;
            let mut builder = client.request(method, &request.url).body(request.body.clone());
            for (name, value) in &request.headers {
                builder = builder.header(name, value);
            }
            // The service's spans join the action's trace (W3C Trace Context), unless the
            // program set its own.
            let set_by_program = request.headers.iter().any(|(name, _)| name.eq_ignore_ascii_case("traceparent"));
            if let Some(traceparent) = traceparent.filter(|_| !set_by_program) {
                builder = builder.header("traceparent", traceparent);
            }
            let classify = |e: reqwest::Error| NetError {
                // Only a failure to connect proves the request was never sent.
                may_have_been_sent: !(e.is_connect() || e.is_builder()),
                message: e.without_url().to_string(),
            };
            let response = builder.send().await.map_err(|error| {
                crate::io::trace::describe_failure(&described);
                classify(error)
            })?;
            let status = response.status().as_u16();
            crate::io::trace::describe_response(&described, status);
            let headers = response
                .headers()
                .iter()
                .map(|(k, v)| (k.as_str().to_string(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
                .collect();
            // Read at most one byte past the limit: enough for the caller to see it is over,
            // without holding a body of any size a service chooses to send.
            let mut response = response;
            let mut body = Vec::new();
            while let Some(chunk) = response.chunk().await.map_err(classify)? {
                let room = (request.body_bytes_max + 1).saturating_sub(body.len());
                body.extend_from_slice(&chunk[..chunk.len().min(room)]);
                if body.len() > request.body_bytes_max {
                    break;
                }
            }
            Ok(HttpResponse { status, headers, body })
        };
        Box::pin(tracing::Instrument::instrument(sending, span))
    }
}
