//! Where spans go and which are kept: the `[telemetry]` section of the
//! server's configuration file, `--otlp-endpoint`, and the standard
//! `OTEL_*` environment variables (`docs/observability.md` lists them).
//!
//! Precedence, highest first: rdq's own setting (`--otlp-endpoint`,
//! `RDQ_OTLP_ENDPOINT`, `[telemetry]`), then the `OTEL_*` variables, which
//! are often set for every process of a deployment at once. `OTEL_SDK_DISABLED=true`
//! switches tracing off whatever else is set.

use std::time::Duration;

use serde::Deserialize;

use crate::context::{SpanContext, TraceId};

/// Why a telemetry configuration was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TelemetryError {
    /// A setting has a value rdq cannot use.
    #[error("telemetry: {0}")]
    Invalid(String),
}

impl TelemetryError {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        "INVALID_CONFIG"
    }
}

/// The `[telemetry]` section of the server's configuration file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TelemetrySettings {
    /// The OTLP/HTTP collector's base URL, e.g. `http://127.0.0.1:4318`;
    /// spans are POSTed to `{endpoint}/v1/traces`. Unset: tracing is off
    /// unless an `OTEL_EXPORTER_OTLP_*ENDPOINT` variable is set.
    pub otlp_endpoint: Option<String>,
    /// The `service.name` resource attribute [default: `rdq`].
    pub service_name: Option<String>,
}

/// Which traces are recorded (`OTEL_TRACES_SAMPLER`, `OTEL_TRACES_SAMPLER_ARG`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Sampler {
    /// Every trace.
    AlwaysOn,
    /// No trace.
    AlwaysOff,
    /// A fraction of the traces, decided by the trace id (so every span of
    /// a trace gets the same answer, in every process).
    TraceIdRatio(f64),
    /// The submitter's decision (the `traceparent` sampled flag) where there
    /// is one; the inner sampler for new traces.
    ParentBased(RootSampler),
}

/// The sampler for traces that start at rdq, under [`Sampler::ParentBased`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RootSampler {
    /// Every new trace.
    AlwaysOn,
    /// No new trace.
    AlwaysOff,
    /// A fraction of the new traces.
    TraceIdRatio(f64),
}

impl Sampler {
    /// Whether a span of `trace` under `parent` (the submitter's context, if
    /// any) is recorded.
    pub fn sampled(&self, parent: Option<&SpanContext>, trace: TraceId) -> bool {
        match self {
            Self::AlwaysOn => true,
            Self::AlwaysOff => false,
            Self::TraceIdRatio(r) => ratio(*r, trace),
            Self::ParentBased(root) => match parent {
                Some(p) => p.is_sampled(),
                None => match root {
                    RootSampler::AlwaysOn => true,
                    RootSampler::AlwaysOff => false,
                    RootSampler::TraceIdRatio(r) => ratio(*r, trace),
                },
            },
        }
    }

    fn parse(name: &str, arg: Option<&str>) -> Result<Self, TelemetryError> {
        let ratio_arg = || -> Result<f64, TelemetryError> {
            match arg {
                None => Ok(1.0),
                Some(a) => match a.trim().parse::<f64>() {
                    Ok(r) if (0.0..=1.0).contains(&r) => Ok(r),
                    _ => Err(TelemetryError::Invalid(format!(
                        "OTEL_TRACES_SAMPLER_ARG {a:?}: must be a number from 0 to 1"
                    ))),
                },
            }
        };
        Ok(match name.trim() {
            "always_on" => Self::AlwaysOn,
            "always_off" => Self::AlwaysOff,
            "traceidratio" => Self::TraceIdRatio(ratio_arg()?),
            "parentbased_always_on" => Self::ParentBased(RootSampler::AlwaysOn),
            "parentbased_always_off" => Self::ParentBased(RootSampler::AlwaysOff),
            "parentbased_traceidratio" => {
                Self::ParentBased(RootSampler::TraceIdRatio(ratio_arg()?))
            }
            other => {
                return Err(TelemetryError::Invalid(format!(
                    "OTEL_TRACES_SAMPLER {other:?}: rdq knows always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off, parentbased_traceidratio"
                )));
            }
        })
    }
}

/// The trace-id-ratio decision: the trace id's last 8 bytes (its random
/// part under W3C Trace Context level 2) against the ratio of `u64::MAX`.
fn ratio(r: f64, trace: TraceId) -> bool {
    if r >= 1.0 {
        return true;
    }
    if r <= 0.0 {
        return false;
    }
    let mut low = [0u8; 8];
    low.copy_from_slice(&trace.0[8..]);
    let x = u64::from_be_bytes(low) >> 11; // 53 bits: exact in an f64
    (x as f64) < r * (1u64 << 53) as f64
}

/// A resolved configuration: tracing is on.
#[derive(Debug, Clone, PartialEq)]
pub struct TelemetryConfig {
    /// The full URL spans are POSTed to (`…/v1/traces`).
    pub traces_url: String,
    /// `service.name`.
    pub service_name: String,
    /// Extra resource attributes (`OTEL_RESOURCE_ATTRIBUTES`).
    pub resource: Vec<(String, String)>,
    /// Extra request headers (`OTEL_EXPORTER_OTLP_HEADERS`).
    pub headers: Vec<(String, String)>,
    /// Which traces are recorded.
    pub sampler: Sampler,
    /// Most finished spans waiting for export; more are dropped and counted.
    pub max_queue: usize,
    /// Most spans in one export request.
    pub max_batch: usize,
    /// Longest a span waits before its batch is sent.
    pub schedule_delay: Duration,
    /// One export request's timeout.
    pub export_timeout: Duration,
}

impl TelemetryConfig {
    /// Resolves the settings, reading the environment through `env`:
    /// `Ok(None)` when tracing is off (no endpoint anywhere, or
    /// `OTEL_SDK_DISABLED=true`).
    pub fn resolve(
        settings: &TelemetrySettings,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Option<Self>, TelemetryError> {
        let var = |name: &str| env(name).filter(|v| !v.trim().is_empty());
        if var("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
            return Ok(None);
        }
        if var("OTEL_TRACES_EXPORTER").is_some_and(|v| v.trim() == "none") {
            return Ok(None);
        }
        let protocol = var("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
            .or_else(|| var("OTEL_EXPORTER_OTLP_PROTOCOL"));
        if let Some(p) = &protocol
            && !matches!(p.trim(), "http/json" | "http/protobuf")
        {
            return Err(TelemetryError::Invalid(format!(
                "OTEL_EXPORTER_OTLP_PROTOCOL {p:?}: rdq exports OTLP over HTTP (JSON), which every collector's HTTP receiver (port 4318) accepts; use http/json"
            )));
        }
        let traces_url = if let Some(base) = settings.otlp_endpoint.as_deref() {
            traces_url(base.trim())
        } else if let Some(url) = var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
            // The signal-specific variable is the full URL, used as given.
            url.trim().to_owned()
        } else if let Some(base) = var("OTEL_EXPORTER_OTLP_ENDPOINT") {
            traces_url(base.trim())
        } else {
            return Ok(None);
        };
        check_url(&traces_url)?;
        let resource = var("OTEL_RESOURCE_ATTRIBUTES")
            .map(|v| key_values(&v, "OTEL_RESOURCE_ATTRIBUTES"))
            .transpose()?
            .unwrap_or_default();
        let service_name = settings
            .service_name
            .clone()
            .or_else(|| var("OTEL_SERVICE_NAME"))
            .or_else(|| {
                resource
                    .iter()
                    .find(|(k, _)| k == "service.name")
                    .map(|(_, v)| v.clone())
            })
            .unwrap_or_else(|| "rdq".to_owned());
        let mut headers = Vec::new();
        for name in [
            "OTEL_EXPORTER_OTLP_HEADERS",
            "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
        ] {
            if let Some(v) = var(name) {
                for (k, v) in key_values(&v, name)? {
                    headers.retain(|(h, _): &(String, String)| !h.eq_ignore_ascii_case(&k));
                    headers.push((k, v));
                }
            }
        }
        let sampler = match var("OTEL_TRACES_SAMPLER") {
            Some(name) => Sampler::parse(&name, var("OTEL_TRACES_SAMPLER_ARG").as_deref())?,
            None => Sampler::ParentBased(RootSampler::AlwaysOn),
        };
        let number = |name: &str, default: u64, min: u64| -> Result<u64, TelemetryError> {
            match var(name) {
                None => Ok(default),
                Some(v) => match v.trim().parse::<u64>() {
                    Ok(n) if n >= min => Ok(n),
                    _ => Err(TelemetryError::Invalid(format!(
                        "{name} {v:?}: must be a whole number of at least {min}"
                    ))),
                },
            }
        };
        let max_queue = number("OTEL_BSP_MAX_QUEUE_SIZE", 2048, 1)?;
        let max_batch = number("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512, 1)?.min(max_queue);
        let schedule_delay = number("OTEL_BSP_SCHEDULE_DELAY", 5000, 1)?;
        let timeout = match var("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT") {
            Some(_) => number("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", 10_000, 1)?,
            None => number("OTEL_EXPORTER_OTLP_TIMEOUT", 10_000, 1)?,
        };
        Ok(Some(Self {
            traces_url,
            service_name,
            resource,
            headers,
            sampler,
            max_queue: usize::try_from(max_queue).unwrap_or(usize::MAX),
            max_batch: usize::try_from(max_batch).unwrap_or(usize::MAX),
            schedule_delay: Duration::from_millis(schedule_delay),
            export_timeout: Duration::from_millis(timeout),
        }))
    }
}

/// `{base}/v1/traces`, unless `base` already ends there.
fn traces_url(base: &str) -> String {
    let base = base.trim_end_matches('/');
    if base.ends_with("/v1/traces") {
        base.to_owned()
    } else {
        format!("{base}/v1/traces")
    }
}

fn check_url(url: &str) -> Result<(), TelemetryError> {
    match reqwest::Url::parse(url) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => Ok(()),
        Ok(_) => Err(TelemetryError::Invalid(format!(
            "OTLP endpoint {url:?}: must be an http:// or https:// URL"
        ))),
        Err(e) => Err(TelemetryError::Invalid(format!(
            "OTLP endpoint {url:?}: {e}"
        ))),
    }
}

/// `k=v,k2=v2` with percent-encoded values, as the `OTEL_*` variables write lists.
fn key_values(text: &str, name: &str) -> Result<Vec<(String, String)>, TelemetryError> {
    let mut out = Vec::new();
    for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let Some((k, v)) = item.split_once('=') else {
            return Err(TelemetryError::Invalid(format!(
                "{name}: {item:?} is not key=value"
            )));
        };
        let k = k.trim();
        if k.is_empty() {
            return Err(TelemetryError::Invalid(format!("{name}: an empty key")));
        }
        out.push((k.to_owned(), percent_decode(v.trim())));
    }
    Ok(out)
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let (Some(h), Some(l)) = (
                (bytes[i + 1] as char).to_digit(16),
                (bytes[i + 2] as char).to_digit(16),
            )
        {
            out.push((h * 16 + l) as u8);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn resolve(
        settings: &TelemetrySettings,
        vars: &[(&str, &str)],
    ) -> Result<Option<TelemetryConfig>, TelemetryError> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        TelemetryConfig::resolve(settings, &|k| map.get(k).cloned())
    }

    fn with_endpoint(e: &str) -> TelemetrySettings {
        TelemetrySettings {
            otlp_endpoint: Some(e.into()),
            service_name: None,
        }
    }

    #[test]
    fn tracing_is_off_unless_an_endpoint_is_configured() {
        assert_eq!(resolve(&TelemetrySettings::default(), &[]), Ok(None));
        assert_eq!(
            resolve(
                &with_endpoint("http://127.0.0.1:4318"),
                &[("OTEL_SDK_DISABLED", "true")]
            ),
            Ok(None)
        );
        let c = resolve(&with_endpoint("http://127.0.0.1:4318/"), &[])
            .unwrap()
            .unwrap();
        assert_eq!(c.traces_url, "http://127.0.0.1:4318/v1/traces");
        assert_eq!(c.service_name, "rdq");
        assert_eq!(c.sampler, Sampler::ParentBased(RootSampler::AlwaysOn));
    }

    #[test]
    fn the_otel_variables_are_read_in_their_order() {
        let none = TelemetrySettings::default();
        let c = resolve(&none, &[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318")])
            .unwrap()
            .unwrap();
        assert_eq!(c.traces_url, "http://c:4318/v1/traces");
        let c = resolve(
            &none,
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
                ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://t:9999/custom"),
                ("OTEL_SERVICE_NAME", "queue-a"),
                (
                    "OTEL_RESOURCE_ATTRIBUTES",
                    "deployment.environment=prod,x=a%20b",
                ),
                ("OTEL_EXPORTER_OTLP_HEADERS", "api-key=one"),
                ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "API-KEY=two"),
                ("OTEL_TRACES_SAMPLER", "traceidratio"),
                ("OTEL_TRACES_SAMPLER_ARG", "0.25"),
            ],
        )
        .unwrap()
        .unwrap();
        assert_eq!(c.traces_url, "http://t:9999/custom");
        assert_eq!(c.service_name, "queue-a");
        assert_eq!(c.resource[1], ("x".to_owned(), "a b".to_owned()));
        assert_eq!(c.headers, vec![("API-KEY".to_owned(), "two".to_owned())]);
        assert_eq!(c.sampler, Sampler::TraceIdRatio(0.25));
        // rdq's own setting wins over the ambient variables.
        let c = resolve(
            &TelemetrySettings {
                otlp_endpoint: Some("http://mine:4318".into()),
                service_name: Some("mine".into()),
            },
            &[
                ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://t:9999/custom"),
                ("OTEL_SERVICE_NAME", "queue-a"),
            ],
        )
        .unwrap()
        .unwrap();
        assert_eq!(c.traces_url, "http://mine:4318/v1/traces");
        assert_eq!(c.service_name, "mine");
    }

    #[test]
    fn bad_values_are_refused_with_the_variable_named() {
        let e = with_endpoint("http://c:4318");
        for (vars, needle) in [
            (
                vec![("OTEL_TRACES_SAMPLER", "sometimes")],
                "OTEL_TRACES_SAMPLER",
            ),
            (
                vec![
                    ("OTEL_TRACES_SAMPLER", "traceidratio"),
                    ("OTEL_TRACES_SAMPLER_ARG", "2"),
                ],
                "OTEL_TRACES_SAMPLER_ARG",
            ),
            (vec![("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")], "PROTOCOL"),
            (
                vec![("OTEL_BSP_MAX_QUEUE_SIZE", "0")],
                "OTEL_BSP_MAX_QUEUE_SIZE",
            ),
            (vec![("OTEL_EXPORTER_OTLP_HEADERS", "novalue")], "HEADERS"),
        ] {
            let err = resolve(&e, &vars).unwrap_err();
            assert!(err.to_string().contains(needle), "{err}");
            assert_eq!(err.code(), "INVALID_CONFIG");
        }
        let err = resolve(&with_endpoint("ftp://c"), &[]).unwrap_err();
        assert!(err.to_string().contains("http"), "{err}");
        assert!(resolve(&with_endpoint("not a url"), &[]).is_err());
    }

    #[test]
    fn samplers_decide_by_parent_and_trace_id() {
        let parent = |flags| SpanContext {
            trace_id: TraceId([7; 16]),
            span_id: crate::context::SpanId([1; 8]),
            flags,
        };
        let pb = Sampler::ParentBased(RootSampler::AlwaysOff);
        assert!(pb.sampled(Some(&parent(1)), TraceId([7; 16])));
        assert!(!pb.sampled(Some(&parent(0)), TraceId([7; 16])));
        assert!(!pb.sampled(None, TraceId([7; 16])));
        let half = Sampler::TraceIdRatio(0.5);
        let mut low = [0u8; 16];
        low[8] = 0x10;
        let mut high = [0u8; 16];
        high[8] = 0xf0;
        assert!(half.sampled(None, TraceId(low)));
        assert!(!half.sampled(None, TraceId(high)));
        assert!(!Sampler::AlwaysOff.sampled(Some(&parent(1)), TraceId(low)));
    }
}
