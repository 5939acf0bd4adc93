//! OpenTelemetry traces: the `[telemetry]` settings once checked, the OTLP exporter and the
//! `tracing` layer that feeds it, the spans the front ends and the pipeline open, and W3C
//! trace context (`traceparent`) in and out.
//!
//! Off by default, at no cost: without `[telemetry] otlp_endpoint` no layer is installed and
//! no exporter exists, so the spans opened here (all of target [`TARGET`]) are disabled at
//! their call sites and their fields are never computed. The log output never shows them
//! either way (the log layer filters them out).
//!
//! Export never decides anything: spans are queued and sent in batches from the SDK's own
//! thread; a full queue or a receiver that is down drops spans, and the SDK logs it (as
//! `opentelemetry*` log lines). A call is decided and answered the same with or without a
//! receiver.
//!
//! Owns: [`Settings`], [`install`], span names and attributes ([`spans`]), [`Parent`] (an
//! incoming `traceparent`) and [`current`] (the context to send on and to record). Does not
//! own: where spans are opened (the front ends and `gateway`), nor the log layer (`cli`).

mod context;
pub mod spans;

pub use context::{Parent, TraceContext, current, within};

use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{Sampler, SdkTracer, SdkTracerProvider};
use tracing::Subscriber;
use tracing_subscriber::registry::LookupSpan;

/// The `tracing` target of every span meant for OpenTelemetry (and only those).
pub const TARGET: &str = "toolgate::otel";

/// Default `[telemetry] service_name`.
pub const DEFAULT_SERVICE_NAME: &str = "toolgate";
/// Default `[telemetry] export_timeout_ms`.
pub const DEFAULT_EXPORT_TIMEOUT_MS: u64 = 10_000;

/// How spans are sent to the receiver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// OTLP over HTTP, protobuf bodies, `POST <endpoint>/v1/traces` (usually port 4318).
    Http,
    /// OTLP over gRPC (usually port 4317).
    Grpc,
}

impl Protocol {
    /// The name in the config file.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Http => "http",
            Protocol::Grpc => "grpc",
        }
    }
}

/// Validated `[telemetry]`: present only when traces are on.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// The receiver's base URL (`http://host:port`, no trailing slash); for HTTP the SDK
    /// posts to `<endpoint>/v1/traces`.
    pub endpoint: String,
    /// HTTP or gRPC.
    pub protocol: Protocol,
    /// The `service.name` resource attribute.
    pub service_name: String,
    /// Fraction of new traces kept, 0 to 1 (a request with an incoming `traceparent` follows
    /// its sampled flag instead).
    pub sample_ratio: f64,
    /// How long one export may take before the batch is dropped.
    pub export_timeout: Duration,
}

/// Why the exporter could not be built.
#[derive(Debug, thiserror::Error)]
#[error("cannot start the OTLP {protocol} exporter for `{endpoint}`: {reason}")]
pub struct InstallError {
    protocol: &'static str,
    endpoint: String,
    reason: String,
}

/// The running exporter: keep it for the life of the process. Dropping it flushes the spans
/// still queued (bounded by the export timeout) and stops the exporter.
pub struct Exporter {
    provider: SdkTracerProvider,
    /// How long the flush at shutdown may take (`export_timeout_ms`).
    flush_timeout: Duration,
    /// gRPC only: tonic's connection lives on a runtime of its own (one thread), so the
    /// exporter works whatever runtime, if any, the rest of the process uses.
    runtime: Option<tokio::runtime::Runtime>,
}

impl Drop for Exporter {
    fn drop(&mut self) {
        if let Err(e) = self.provider.shutdown_with_timeout(self.flush_timeout) {
            tracing::warn!(error = %e, "traces not flushed at shutdown");
        }
        // Dropping a runtime waits for its blocking tasks (a DNS lookup) without a bound.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// The layer that turns this crate's spans into OpenTelemetry spans, already filtered to
/// them (target [`TARGET`]; no log event becomes a span event).
pub type SpanLayer<S> = tracing_subscriber::filter::Filtered<
    tracing_opentelemetry::OpenTelemetryLayer<S, SdkTracer>,
    tracing_subscriber::filter::FilterFn,
    S,
>;

/// Whether `meta` is one of the spans for OpenTelemetry (the log layer leaves these out).
pub fn is_ours(meta: &tracing::Metadata<'_>) -> bool {
    meta.is_span() && meta.target() == TARGET
}

/// Builds the exporter and the layer for `settings`. Nothing is sent until a span ends; a
/// receiver that is down is not an error here (its spans are dropped and logged later).
pub fn install<S>(settings: &Settings) -> Result<(SpanLayer<S>, Exporter), InstallError>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    use tracing_subscriber::Layer as _;
    let failed = |reason: String| InstallError {
        protocol: settings.protocol.as_str(),
        endpoint: settings.endpoint.clone(),
        reason,
    };
    // An `https` endpoint: rustls with ring, the provider the rest of the sidecar uses (the
    // HTTP client cannot be built without one).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let (exporter, runtime) = match settings.protocol {
        Protocol::Http => {
            let exporter = opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                .with_endpoint(format!("{}/v1/traces", settings.endpoint))
                .with_timeout(settings.export_timeout)
                .build()
                .map_err(|e| failed(e.to_string()))?;
            (exporter, None)
        }
        Protocol::Grpc => {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name("toolgate-otlp")
                .enable_all()
                .build()
                .map_err(|e| failed(format!("its runtime: {e}")))?;
            let exporter = {
                let _entered = runtime.enter();
                opentelemetry_otlp::SpanExporter::builder()
                    .with_tonic()
                    .with_endpoint(settings.endpoint.clone())
                    .with_timeout(settings.export_timeout)
                    .build()
                    .map_err(|e| failed(e.to_string()))?
            };
            (exporter, Some(runtime))
        }
    };
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
            settings.sample_ratio,
        ))))
        .with_resource(
            Resource::builder()
                .with_service_name(settings.service_name.clone())
                .build(),
        )
        .build();
    let tracer = provider.tracer("toolgate");
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_location(false)
        .with_threads(false)
        .with_target(false)
        .with_level(false)
        .with_tracked_inactivity(false)
        .with_filter(
            tracing_subscriber::filter::filter_fn(is_ours as fn(&tracing::Metadata<'_>) -> bool)
                .with_max_level_hint(tracing::level_filters::LevelFilter::INFO),
        );
    Ok((
        layer,
        Exporter {
            provider,
            flush_timeout: settings.export_timeout,
            runtime,
        },
    ))
}
