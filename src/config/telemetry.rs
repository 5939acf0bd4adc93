//! `[telemetry]` → [`Settings`](crate::telemetry::Settings): where OpenTelemetry traces are
//! exported, checked once. Absent `otlp_endpoint` means traces off. Building the exporter
//! is the telemetry module's business; this module only checks the values.

use std::time::Duration;

use serde::Deserialize;

use crate::telemetry::{DEFAULT_EXPORT_TIMEOUT_MS, DEFAULT_SERVICE_NAME, Protocol, Settings};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTelemetry {
    otlp_endpoint: Option<String>,
    otlp_protocol: Option<String>,
    service_name: Option<String>,
    sample_ratio: Option<f64>,
    export_timeout_ms: Option<u64>,
}

type Problems = Vec<(String, &'static str)>;

/// Checks `[telemetry]`: `None` when traces are off; every problem at once, each naming its key.
pub(super) fn settings(raw: &RawTelemetry) -> Result<Option<Settings>, Problems> {
    let mut problems = Vec::new();
    let protocol = match raw.otlp_protocol.as_deref() {
        None | Some("http") => Protocol::Http,
        Some("grpc") => Protocol::Grpc,
        Some(other) => {
            problems.push((
                format!("`telemetry.otlp_protocol` = `{other}` is not a protocol"),
                "use `http` (OTLP/HTTP protobuf, port 4318) or `grpc` (OTLP/gRPC, port 4317)",
            ));
            Protocol::Http
        }
    };
    let service_name = raw
        .service_name
        .clone()
        .unwrap_or_else(|| DEFAULT_SERVICE_NAME.to_owned());
    if service_name.trim().is_empty() || service_name.len() > 256 {
        problems.push((
            "`telemetry.service_name` is empty or longer than 256 bytes".to_owned(),
            "name the service as trace backends should show it, e.g. `toolgate`",
        ));
    }
    let sample_ratio = raw.sample_ratio.unwrap_or(1.0);
    if !(0.0..=1.0).contains(&sample_ratio) {
        problems.push((
            format!("`telemetry.sample_ratio` = {sample_ratio} is out of range"),
            "use a fraction from 0.0 (no new traces) to 1.0 (every request, the default)",
        ));
    }
    let timeout_ms = raw.export_timeout_ms.unwrap_or(DEFAULT_EXPORT_TIMEOUT_MS);
    if !(100..=60_000).contains(&timeout_ms) {
        problems.push((
            format!("`telemetry.export_timeout_ms` = {timeout_ms} is out of range"),
            "use a value from 100 to 60000 (milliseconds)",
        ));
    }
    let endpoint = match raw.otlp_endpoint.as_deref() {
        None => {
            let stray = [
                ("otlp_protocol", raw.otlp_protocol.is_some()),
                ("service_name", raw.service_name.is_some()),
                ("sample_ratio", raw.sample_ratio.is_some()),
                ("export_timeout_ms", raw.export_timeout_ms.is_some()),
            ];
            if let Some((key, _)) = stray.iter().find(|(_, set)| *set) {
                problems.push((
                    format!("`telemetry.{key}` is set but `telemetry.otlp_endpoint` is not"),
                    "set `otlp_endpoint` (e.g. `http://127.0.0.1:4318`) to turn traces on, or remove the section",
                ));
            }
            None
        }
        Some(url) if protocol == Protocol::Grpc && url.starts_with("https:") => {
            // tonic is built without TLS: a gRPC export over TLS could only fail later.
            problems.push((
                format!("`telemetry.otlp_endpoint` = `{url}` is https, which OTLP/gRPC export does not support here"),
                "use `otlp_protocol = \"http\"` with an https endpoint, or a plain `http://` gRPC endpoint (a local collector)",
            ));
            None
        }
        Some(url) => match endpoint(url) {
            Ok(e) => Some(e),
            Err(message) => {
                problems.push((
                    format!(
                        "`telemetry.otlp_endpoint` = `{}` {message}",
                        super::outputs::shown(url)
                    ),
                    "use the receiver's base URL, e.g. `http://127.0.0.1:4318` (http) or `http://127.0.0.1:4317` (grpc); toolgate adds `/v1/traces` for http",
                ));
                None
            }
        },
    };
    if !problems.is_empty() {
        return Err(problems);
    }
    Ok(endpoint.map(|endpoint| Settings {
        endpoint,
        protocol,
        service_name,
        sample_ratio,
        export_timeout: Duration::from_millis(timeout_ms),
    }))
}

/// The endpoint as a base URL without a trailing slash, or what is wrong with it.
fn endpoint(url: &str) -> Result<String, &'static str> {
    let uri: axum::http::Uri = url.parse().map_err(|_| "is not a URL")?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        _ => return Err("must start with `http://` or `https://`"),
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err("names no host");
    }
    if uri.query().is_some() {
        return Err("has a query; give the base URL only");
    }
    if uri.authority().is_some_and(|a| a.as_str().contains('@')) {
        return Err(
            "holds credentials (`user:key@`), which would be logged; send them as headers with OTEL_EXPORTER_OTLP_HEADERS",
        );
    }
    Ok(url.trim_end_matches('/').to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(toml_text: &str) -> RawTelemetry {
        toml::from_str(toml_text).unwrap()
    }

    #[test]
    fn traces_are_off_without_an_endpoint_and_on_with_one() {
        assert_eq!(settings(&RawTelemetry::default()).unwrap(), None);
        let s = settings(&raw("otlp_endpoint = \"http://127.0.0.1:4318/\""))
            .unwrap()
            .unwrap();
        assert_eq!(s.endpoint, "http://127.0.0.1:4318");
        assert_eq!(s.protocol, Protocol::Http);
        assert_eq!(s.service_name, "toolgate");
        assert!((s.sample_ratio - 1.0).abs() < f64::EPSILON);
        let g = settings(&raw(
            "otlp_endpoint = \"http://collector:4317\"\notlp_protocol = \"grpc\"\nsample_ratio = 0.25",
        ))
        .unwrap()
        .unwrap();
        assert_eq!(g.protocol, Protocol::Grpc);
    }

    #[test]
    fn every_bad_value_is_reported_with_its_key() {
        let found = settings(&raw(
            "otlp_endpoint = \"udp://x\"\notlp_protocol = \"thrift\"\nsample_ratio = 2.0\nexport_timeout_ms = 5",
        ))
        .unwrap_err();
        let text: Vec<&str> = found.iter().map(|(m, _)| m.as_str()).collect();
        assert_eq!(found.len(), 4, "{text:?}");
        for key in [
            "otlp_endpoint",
            "otlp_protocol",
            "sample_ratio",
            "export_timeout_ms",
        ] {
            assert!(text.iter().any(|m| m.contains(key)), "{key}: {text:?}");
        }
        let tls = settings(&raw(
            "otlp_endpoint = \"https://collector:4317\"\notlp_protocol = \"grpc\"",
        ))
        .unwrap_err();
        assert!(tls[0].0.contains("https"), "{tls:?}");
        assert!(
            settings(&raw("otlp_endpoint = \"https://collector:4318\""))
                .unwrap()
                .is_some()
        );
        let creds = settings(&raw("otlp_endpoint = \"http://u:hunter2@c:4318\"")).unwrap_err();
        assert!(creds[0].0.contains("credentials"), "{creds:?}");
        assert!(!creds[0].0.contains("hunter2"), "{creds:?}");
        let stray = settings(&raw("otlp_protocol = \"grpc\"")).unwrap_err();
        assert!(stray[0].0.contains("otlp_endpoint"), "{stray:?}");
    }
}
