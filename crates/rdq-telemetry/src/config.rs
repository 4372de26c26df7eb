//! Whether traces are exported, where to and which are kept: the
//! `[telemetry]` section of the server's configuration file,
//! `--otlp-endpoint`/`--otlp-protocol`, and the standard `OTEL_*`
//! environment variables (`docs/observability.md` lists them).
//!
//! rdq reads here what decides that tracing is on and how its spans are
//! formed: the endpoint, the protocol, the service name and the sampler.
//! The exporter's and the batch processor's own variables (headers,
//! timeouts, compression, `OTEL_BSP_*`) are read by the OpenTelemetry SDK
//! itself, as every SDK reads them.
//!
//! Precedence, highest first: rdq's own setting (`--otlp-endpoint`,
//! `RDQ_OTLP_ENDPOINT`, `[telemetry]`), then the `OTEL_*` variables, which
//! are often set for every process of a deployment at once.
//! `OTEL_SDK_DISABLED=true` switches tracing off whatever else is set.

use std::fmt;

use serde::Deserialize;

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
    /// The collector's base URL, e.g. `http://127.0.0.1:4318` (HTTP: spans
    /// are POSTed to `{endpoint}/v1/traces`) or `http://127.0.0.1:4317`
    /// (gRPC). Unset: tracing is off unless an `OTEL_EXPORTER_OTLP_*ENDPOINT`
    /// variable is set.
    pub otlp_endpoint: Option<String>,
    /// `grpc`, `http/protobuf` or `http/json` [default:
    /// `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`, `OTEL_EXPORTER_OTLP_PROTOCOL`,
    /// then `http/protobuf`].
    pub otlp_protocol: Option<String>,
    /// The `service.name` resource attribute [default: `OTEL_SERVICE_NAME`,
    /// then `service.name` in `OTEL_RESOURCE_ATTRIBUTES`, then `rdq`].
    pub service_name: Option<String>,
}

/// How spans travel to the collector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// OTLP/gRPC (`grpc`), usually port 4317.
    Grpc,
    /// OTLP/HTTP with protobuf bodies (`http/protobuf`), usually port 4318.
    /// `http/json` is sent this way too: every OTLP/HTTP receiver takes both.
    HttpProtobuf,
}

impl Protocol {
    fn parse(value: &str, name: &str) -> Result<Self, TelemetryError> {
        match value.trim() {
            "grpc" => Ok(Self::Grpc),
            "http/protobuf" | "http/json" => Ok(Self::HttpProtobuf),
            other => Err(TelemetryError::Invalid(format!(
                "{name} {other:?}: rdq exports over grpc or http/protobuf (http/json is sent as http/protobuf)"
            ))),
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Grpc => "grpc",
            Self::HttpProtobuf => "http/protobuf",
        })
    }
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
    /// The SDK's sampler for this choice.
    pub fn to_sdk(self) -> opentelemetry_sdk::trace::Sampler {
        use opentelemetry_sdk::trace::Sampler as S;
        match self {
            Self::AlwaysOn => S::AlwaysOn,
            Self::AlwaysOff => S::AlwaysOff,
            Self::TraceIdRatio(r) => S::TraceIdRatioBased(r),
            Self::ParentBased(root) => S::ParentBased(Box::new(match root {
                RootSampler::AlwaysOn => S::AlwaysOn,
                RootSampler::AlwaysOff => S::AlwaysOff,
                RootSampler::TraceIdRatio(r) => S::TraceIdRatioBased(r),
            })),
        }
    }

    /// Parses the SDK's sampler names; unlike the SDK, which falls back to
    /// its default, a name or argument rdq cannot use is refused.
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

/// A resolved configuration: tracing is on.
#[derive(Debug, Clone, PartialEq)]
pub struct TelemetryConfig {
    /// Where spans go: the full `…/v1/traces` URL over HTTP, the
    /// collector's address over gRPC.
    pub endpoint: String,
    /// How.
    pub protocol: Protocol,
    /// `service.name` when rdq's setting or `OTEL_SERVICE_NAME` names it;
    /// otherwise `service.name` in `OTEL_RESOURCE_ATTRIBUTES`, then `rdq`.
    pub service_name: Option<String>,
    /// Which traces are recorded.
    pub sampler: Sampler,
}

impl TelemetryConfig {
    /// Resolves the settings, reading the environment through `env`:
    /// `Ok(None)` when tracing is off (no endpoint anywhere,
    /// `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none`).
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
        let protocol = match settings.otlp_protocol.as_deref() {
            Some(p) => Protocol::parse(p, "otlp_protocol")?,
            None => match (
                var("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"),
                var("OTEL_EXPORTER_OTLP_PROTOCOL"),
            ) {
                (Some(p), _) => Protocol::parse(&p, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")?,
                (None, Some(p)) => Protocol::parse(&p, "OTEL_EXPORTER_OTLP_PROTOCOL")?,
                (None, None) => Protocol::HttpProtobuf,
            },
        };
        let endpoint = if let Some(base) = settings.otlp_endpoint.as_deref() {
            signal_endpoint(base.trim(), protocol)
        } else if let Some(url) = var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
            // The signal-specific variable is the full URL, used as given.
            url.trim().to_owned()
        } else if let Some(base) = var("OTEL_EXPORTER_OTLP_ENDPOINT") {
            signal_endpoint(base.trim(), protocol)
        } else {
            return Ok(None);
        };
        check_url(&endpoint)?;
        let service_name = settings
            .service_name
            .clone()
            .or_else(|| var("OTEL_SERVICE_NAME"));
        let sampler = match var("OTEL_TRACES_SAMPLER") {
            Some(name) => Sampler::parse(&name, var("OTEL_TRACES_SAMPLER_ARG").as_deref())?,
            None => Sampler::ParentBased(RootSampler::AlwaysOn),
        };
        Ok(Some(Self {
            endpoint,
            protocol,
            service_name,
            sampler,
        }))
    }
}

/// A base URL made the traces endpoint: `{base}/v1/traces` over HTTP
/// (unless `base` already ends there), `base` itself over gRPC, where the
/// service's path is fixed.
fn signal_endpoint(base: &str, protocol: Protocol) -> String {
    let base = base.trim_end_matches('/');
    match protocol {
        Protocol::Grpc => base.to_owned(),
        Protocol::HttpProtobuf if base.ends_with("/v1/traces") => base.to_owned(),
        Protocol::HttpProtobuf => format!("{base}/v1/traces"),
    }
}

fn check_url(endpoint: &str) -> Result<(), TelemetryError> {
    match url::Url::parse(endpoint) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => Ok(()),
        Ok(_) => Err(TelemetryError::Invalid(format!(
            "OTLP endpoint {endpoint:?}: must be an http:// or https:// URL"
        ))),
        Err(e) => Err(TelemetryError::Invalid(format!(
            "OTLP endpoint {endpoint:?}: {e}"
        ))),
    }
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
            ..TelemetrySettings::default()
        }
    }

    #[test]
    fn tracing_is_off_unless_an_endpoint_is_configured() {
        assert_eq!(resolve(&TelemetrySettings::default(), &[]), Ok(None));
        for off in [
            ("OTEL_SDK_DISABLED", "true"),
            ("OTEL_TRACES_EXPORTER", "none"),
        ] {
            assert_eq!(
                resolve(&with_endpoint("http://127.0.0.1:4318"), &[off]),
                Ok(None)
            );
        }
        let c = resolve(&with_endpoint("http://127.0.0.1:4318/"), &[])
            .unwrap()
            .unwrap();
        assert_eq!(c.endpoint, "http://127.0.0.1:4318/v1/traces");
        assert_eq!(c.protocol, Protocol::HttpProtobuf);
        assert_eq!(c.service_name, None);
        assert_eq!(c.sampler, Sampler::ParentBased(RootSampler::AlwaysOn));
    }

    #[test]
    fn the_otel_variables_are_read_in_their_order() {
        let none = TelemetrySettings::default();
        let c = resolve(&none, &[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318")])
            .unwrap()
            .unwrap();
        assert_eq!(c.endpoint, "http://c:4318/v1/traces");
        let c = resolve(
            &none,
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
                ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://t:9999/custom"),
                ("OTEL_SERVICE_NAME", "queue-a"),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
                ("OTEL_TRACES_SAMPLER", "traceidratio"),
                ("OTEL_TRACES_SAMPLER_ARG", "0.25"),
            ],
        )
        .unwrap()
        .unwrap();
        assert_eq!(c.endpoint, "http://t:9999/custom");
        assert_eq!(c.protocol, Protocol::HttpProtobuf);
        assert_eq!(c.service_name.as_deref(), Some("queue-a"));
        assert_eq!(c.sampler, Sampler::TraceIdRatio(0.25));
        // rdq's own setting wins over the ambient variables.
        let c = resolve(
            &TelemetrySettings {
                otlp_endpoint: Some("http://mine:4318".into()),
                otlp_protocol: None,
                service_name: Some("mine".into()),
            },
            &[
                ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://t:9999/custom"),
                ("OTEL_SERVICE_NAME", "queue-a"),
            ],
        )
        .unwrap()
        .unwrap();
        assert_eq!(c.endpoint, "http://mine:4318/v1/traces");
        assert_eq!(c.service_name.as_deref(), Some("mine"));
    }

    #[test]
    fn grpc_takes_the_endpoint_as_the_collectors_address() {
        let none = TelemetrySettings::default();
        let c = resolve(
            &none,
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4317/"),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ],
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            (c.endpoint.as_str(), c.protocol),
            ("http://c:4317", Protocol::Grpc)
        );
        // The signal's protocol variable wins over the general one, and
        // rdq's setting over both.
        let c = resolve(
            &none,
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
                ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf"),
            ],
        )
        .unwrap()
        .unwrap();
        assert_eq!(c.protocol, Protocol::HttpProtobuf);
        let c = resolve(
            &TelemetrySettings {
                otlp_endpoint: Some("http://mine:4317".into()),
                otlp_protocol: Some("grpc".into()),
                service_name: None,
            },
            &[("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf")],
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            (c.endpoint.as_str(), c.protocol),
            ("http://mine:4317", Protocol::Grpc)
        );
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
            (
                vec![("OTEL_EXPORTER_OTLP_PROTOCOL", "thrift")],
                "OTEL_EXPORTER_OTLP_PROTOCOL",
            ),
            (
                vec![("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "udp")],
                "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
            ),
        ] {
            let err = resolve(&e, &vars).unwrap_err();
            assert!(err.to_string().contains(needle), "{err}");
            assert_eq!(err.code(), "INVALID_CONFIG");
        }
        let err = resolve(
            &TelemetrySettings {
                otlp_protocol: Some("grpcs".into()),
                ..with_endpoint("http://c:4317")
            },
            &[],
        )
        .unwrap_err();
        assert!(err.to_string().contains("otlp_protocol"), "{err}");
        let err = resolve(&with_endpoint("ftp://c"), &[]).unwrap_err();
        assert!(err.to_string().contains("http"), "{err}");
        assert!(resolve(&with_endpoint("not a url"), &[]).is_err());
    }
}
