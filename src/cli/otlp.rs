//! `subtask serve`'s trace export: every task's span (`subtask::runtime`,
//! `span.rs`) sent over OTLP/HTTP (protobuf) when an endpoint is
//! configured, by a `tracing-opentelemetry` layer next to the log layer
//! (docs/operations.md, "Traces").
//!
//! Off unless `--otlp-endpoint`, `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or
//! `OTEL_EXPORTER_OTLP_ENDPOINT` is set; then the log subscriber is the
//! same as without it. This module must not export anything but the
//! runtime's task spans (and the events inside them): the layer's filter
//! passes the `subtask` targets only, so the HTTP stack's own spans (and
//! the exporter's) never become part of a task's trace.

use std::time::Duration;

use opentelemetry::trace::{
    SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState, TracerProvider,
};
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Level, Subscriber};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;

/// The trace flags of `subtask serve`.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct OtlpArgs {
    /// Export every task as a span over OTLP/HTTP (protobuf, no TLS) to
    /// this collector base URL: spans are POSTed to `URL/v1/traces` (e.g.
    /// `http://127.0.0.1:4318`, Jaeger's or the OpenTelemetry Collector's
    /// OTLP/HTTP port). Without it, `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`
    /// (used as is) or `OTEL_EXPORTER_OTLP_ENDPOINT` (a base URL) turn
    /// export on; with none of them set, nothing is exported.
    #[arg(long = "otlp-endpoint", value_name = "URL")]
    pub(crate) otlp_endpoint: Option<String>,
}

/// Where spans go: the full `…/v1/traces` URL and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Endpoint {
    pub(crate) url: String,
    pub(crate) from: &'static str,
}

/// The OTLP/HTTP traces URL from the flag or the standard variables (the
/// OTLP exporter spec's rules: a base URL gets `v1/traces` appended, the
/// per-signal variable is used as is), or `None` when export is off.
///
/// # Errors
///
/// A URL that is not `http://`: this build has no TLS (as the client's
/// transport; a collector on the same host or network forwards over TLS).
pub(crate) fn resolve_endpoint(
    flag: Option<&str>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Option<Endpoint>, String> {
    let non_empty = |v: Option<String>| v.filter(|v| !v.trim().is_empty());
    let found = if let Some(base) = flag {
        Some((with_traces_path(base), "--otlp-endpoint"))
    } else if let Some(url) = non_empty(env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")) {
        Some((url.trim().to_owned(), "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
    } else {
        non_empty(env("OTEL_EXPORTER_OTLP_ENDPOINT"))
            .map(|base| (with_traces_path(&base), "OTEL_EXPORTER_OTLP_ENDPOINT"))
    };
    let Some((url, from)) = found else {
        return Ok(None);
    };
    if !url.starts_with("http://") {
        return Err(format!(
            "{from}: {url:?} is not an http:// URL (OTLP/HTTP without TLS, e.g. http://127.0.0.1:4318; \
             this build has no TLS: send to a local collector that forwards to your backend)"
        ));
    }
    Ok(Some(Endpoint { url, from }))
}

/// `base` with the traces path appended (one slash between).
fn with_traces_path(base: &str) -> String {
    format!("{}/v1/traces", base.trim().trim_end_matches('/'))
}

/// The service name spans are reported under: `OTEL_SERVICE_NAME`, or
/// `subtask`.
pub(crate) fn service_name(env: impl Fn(&str) -> Option<String>) -> String {
    env("OTEL_SERVICE_NAME")
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "subtask".to_owned())
}

/// A running exporter: flush it before the process exits.
pub(crate) struct Exporter {
    provider: SdkTracerProvider,
    endpoint: Endpoint,
    service: String,
}

impl Exporter {
    /// Builds the exporter for `args` and the environment, `None` when no
    /// endpoint is configured. Call before any async runtime exists (the
    /// exporter's blocking HTTP client runs on the batch processor's own
    /// thread).
    ///
    /// # Errors
    ///
    /// A bad URL, or an exporter that cannot be built.
    pub(crate) fn from_args(args: &OtlpArgs) -> Result<Option<Exporter>, String> {
        let env = |k: &str| std::env::var(k).ok();
        let Some(endpoint) = resolve_endpoint(args.otlp_endpoint.as_deref(), env)? else {
            return Ok(None);
        };
        let service = service_name(env);
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(endpoint.url.clone())
            .build()
            .map_err(|e| format!("cannot set up the OTLP exporter for {}: {e}", endpoint.url))?;
        let resource = Resource::builder()
            .with_service_name(service.clone())
            .with_attribute(opentelemetry::KeyValue::new(
                "service.version",
                env!("CARGO_PKG_VERSION"),
            ))
            .build();
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource)
            .build();
        Ok(Some(Exporter {
            provider,
            endpoint,
            service,
        }))
    }

    /// Sends every ended span still queued and stops the exporter, waiting
    /// at most `timeout`. Spans of tasks still running are not sent.
    pub(crate) fn shutdown(&self, timeout: Duration) {
        if let Err(e) = self.provider.shutdown_with_timeout(timeout) {
            eprintln!("subtask: the OTLP exporter did not flush its spans: {e}");
        }
    }
}

/// The log filter: `RUST_LOG`, or `info`.
fn log_filter() -> EnvFilter {
    EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"))
}

/// The log layer: human-readable lines on stderr, colored only on a
/// terminal (a host that launches `serve --stdio` keeps stderr in a log file).
fn log_layer<S: Subscriber + for<'a> LookupSpan<'a>>() -> impl Layer<S> {
    use std::io::IsTerminal;
    tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
}

/// Installs the process's subscriber: logs to stderr, plus, with an
/// exporter, the OTLP layer. Without one the subscriber is exactly the log
/// subscriber `subtask` always had (one global filter), so no span or event
/// costs more than before.
pub(crate) fn init_tracing(exporter: Option<&Exporter>) {
    let Some(exporter) = exporter else {
        tracing_subscriber::registry()
            .with(log_filter())
            .with(log_layer())
            .init();
        return;
    };
    // The task spans (`subtask` targets at INFO, with the events inside
    // them) and the runtime's exporter fields (`STATUS_TARGET` at TRACE).
    let tasks = || {
        Targets::new()
            .with_target("subtask", Level::INFO)
            .with_target(subtask::runtime::STATUS_TARGET, Level::TRACE)
    };
    let tracer = exporter.provider.tracer("subtask");
    let otel = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_location(false)
        .with_threads(false)
        .with_target(false)
        .with_level(false);
    tracing_subscriber::registry()
        // Before the OpenTelemetry layer: a root's remote parent is set
        // before that layer starts the root's span (on its first enter).
        .with(RemoteParent.with_filter(tasks()))
        .with(otel.with_filter(tasks()))
        .with(log_layer().with_filter(log_filter()))
        .init();
    tracing::info!(
        endpoint = %exporter.endpoint.url,
        from = exporter.endpoint.from,
        service = %exporter.service,
        "exporting task spans over OTLP/HTTP"
    );
}

/// Makes a root task's span a child of the W3C trace context its request
/// carried (`_meta.traceparent`, recorded on the span as `traceparent`):
/// the parsed context is kept in the span's extensions and set as the
/// OpenTelemetry parent on the span's first enter, before the
/// OpenTelemetry layer (the next layer) starts the span.
struct RemoteParent;

/// A remote parent waiting for the span's first enter.
struct PendingParent(SpanContext);

/// Reads `traceparent` from a span's fields.
#[derive(Default)]
struct TraceparentField(Option<SpanContext>);

impl Visit for TraceparentField {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "traceparent" {
            self.0 = parse_traceparent(value);
        }
    }

    fn record_debug(&mut self, _: &Field, _: &dyn std::fmt::Debug) {}
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for RemoteParent {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut field = TraceparentField::default();
        attrs.record(&mut field);
        if let (Some(parent), Some(span)) = (field.0, ctx.span(id)) {
            span.extensions_mut().insert(PendingParent(parent));
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let mut field = TraceparentField::default();
        values.record(&mut field);
        if let (Some(parent), Some(span)) = (field.0, ctx.span(id)) {
            span.extensions_mut().replace(PendingParent(parent));
        }
    }

    fn on_enter(&self, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else {
            return;
        };
        let Some(PendingParent(parent)) = span.extensions_mut().remove::<PendingParent>() else {
            return;
        };
        // The registry has made this span current before calling the layers.
        let current = tracing::Span::current();
        if current.id().as_ref() == Some(id) {
            let cx = opentelemetry::Context::new().with_remote_span_context(parent);
            if let Err(e) = current.set_parent(cx) {
                tracing::debug!(error = %e, "the remote parent came too late for this span");
            }
        }
    }
}

/// A W3C `traceparent` (`00-<32 hex trace id>-<16 hex parent id>-<2 hex
/// flags>`; a later version's extra fields are ignored), or `None` when it
/// is malformed or names the invalid all-zero ids (the trace context spec
/// says to ignore such a header, so the root starts a new trace).
pub(crate) fn parse_traceparent(value: &str) -> Option<SpanContext> {
    let mut parts = value.trim().split('-');
    let (version, trace, span, flags) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let hex =
        |s: &str, len: usize| s.len() == len && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    if !hex(version, 2) || version == "ff" || !hex(trace, 32) || !hex(span, 16) || !hex(flags, 2) {
        return None;
    }
    if version == "00" && parts.next().is_some() {
        return None;
    }
    let trace_id = TraceId::from_hex(trace).ok()?;
    let span_id = SpanId::from_hex(span).ok()?;
    if trace_id == TraceId::INVALID || span_id == SpanId::INVALID {
        return None;
    }
    let flags = TraceFlags::new(u8::from_str_radix(flags, 16).ok()? & 1);
    Some(SpanContext::new(
        trace_id,
        span_id,
        flags,
        true,
        TraceState::default(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| (*v).to_owned())
    }

    #[test]
    fn the_flag_is_a_base_url_and_wins_over_the_environment() {
        let got = resolve_endpoint(
            Some("http://127.0.0.1:4318/"),
            env(&[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://other:1/x")]),
        );
        assert_eq!(
            got.unwrap().unwrap(),
            Endpoint {
                url: "http://127.0.0.1:4318/v1/traces".into(),
                from: "--otlp-endpoint"
            }
        );
    }

    #[test]
    fn the_traces_variable_is_used_as_is_and_the_generic_one_gets_the_path() {
        let traces = env(&[
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://c:4318/custom"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://b:4318"),
        ]);
        assert_eq!(
            resolve_endpoint(None, traces).unwrap().unwrap().url,
            "http://c:4318/custom"
        );
        let generic = env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://b:4318/base")]);
        assert_eq!(
            resolve_endpoint(None, generic).unwrap().unwrap().url,
            "http://b:4318/base/v1/traces"
        );
    }

    #[test]
    fn nothing_set_means_no_export_and_a_bad_url_is_an_error() {
        assert_eq!(resolve_endpoint(None, env(&[])).unwrap(), None);
        assert_eq!(
            resolve_endpoint(None, env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", " ")])).unwrap(),
            None
        );
        let e = resolve_endpoint(Some("127.0.0.1:4318"), env(&[])).unwrap_err();
        assert!(e.contains("--otlp-endpoint") && e.contains("http://"), "{e}");
        let e =
            resolve_endpoint(None, env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "https://b:4318")])).unwrap_err();
        assert!(
            e.contains("OTEL_EXPORTER_OTLP_ENDPOINT") && e.contains("no TLS"),
            "{e}"
        );
    }

    #[test]
    fn the_service_name_defaults_to_subtask() {
        assert_eq!(service_name(env(&[])), "subtask");
        assert_eq!(service_name(env(&[("OTEL_SERVICE_NAME", "ops-a")])), "ops-a");
    }

    #[test]
    fn traceparent_is_parsed_per_w3c_trace_context() {
        let sc = parse_traceparent("00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01").unwrap();
        assert_eq!(sc.trace_id().to_string(), "0af7651916cd43dd8448eb211c80319c");
        assert_eq!(sc.span_id().to_string(), "00f067aa0ba902b7");
        assert!(sc.is_sampled() && sc.is_remote());
        for bad in [
            "",
            "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
            "ff-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01",
            "00-0AF7651916CD43DD8448EB211C80319C-00f067aa0ba902b7-01",
            "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01-extra",
        ] {
            assert!(parse_traceparent(bad).is_none(), "{bad:?}");
        }
        // A later version may add fields.
        assert!(parse_traceparent("01-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01-x").is_some());
    }
}
