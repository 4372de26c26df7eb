//! The submit body: the client subset of the envelope (seed `000`) plus
//! scheduling options, and its translation into an engine [`SubmitRequest`].
//!
//! The payload comes either as base64 (`payload`, opaque bytes) or as inline
//! JSON (`payload_json`, stored byte for byte as sent, content type
//! `application/json` unless given). Everything the envelope layer checks
//! (names, reserved headers, size) is checked again by the engine before
//! anything is stored; this module refuses what only a request can get wrong.

use std::collections::BTreeMap;

use base64::Engine as _;
use rdq_engine::SubmitRequest;
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::problem::ApiError;

/// System header recording who submitted the task.
pub const SUBMITTED_BY_HEADER: &str = "rdq.submitted_by";

/// Longest idempotency key, in bytes.
pub const MAX_IDEMPOTENCY_KEY_LEN: usize = 255;

/// Longest `payload_content_type` or `handler_version`, in bytes.
pub const MAX_SHORT_FIELD_LEN: usize = 255;

/// The body of `POST /v1/tasks`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubmitBody {
    /// Target queue, `[a-z0-9._-]{1,240}`.
    pub queue: String,
    /// Handler name, `[a-z0-9._-]{1,240}`.
    pub handler_ref: String,
    /// Optional handler version.
    #[serde(default)]
    pub handler_version: Option<String>,
    /// The payload as standard base64 (padding optional).
    #[serde(default)]
    pub payload: Option<String>,
    /// The payload as JSON, stored exactly as sent.
    #[serde(default)]
    pub payload_json: Option<Box<RawValue>>,
    /// MIME type; defaults to `application/json` with `payload_json`,
    /// `application/octet-stream` otherwise.
    #[serde(default)]
    pub payload_content_type: Option<String>,
    /// User headers (the `rdq.` prefix is reserved).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Due this long after now.
    #[serde(default)]
    pub delay_ms: u64,
    /// Claim priority, 0–255 (higher first).
    #[serde(default)]
    pub priority: u8,
    /// Makes a repeated submit to the same queue return the original task.
    #[serde(default)]
    pub idempotency_key: Option<String>,
}

impl SubmitBody {
    /// The engine request for this body, submitted by `submitted_by` (a token
    /// name; `None` on an open server, which sets no `rdq.submitted_by`).
    pub fn into_request(self, submitted_by: Option<&str>) -> Result<SubmitRequest, ApiError> {
        let (payload, default_type) = match (self.payload, self.payload_json) {
            (Some(_), Some(_)) => {
                return Err(ApiError::invalid_field(
                    "payload",
                    "give either payload (base64) or payload_json, not both",
                ));
            }
            (Some(b64), None) => (decode_base64(&b64)?, "application/octet-stream"),
            (None, Some(raw)) => (raw.get().as_bytes().to_vec(), "application/json"),
            (None, None) => (Vec::new(), "application/octet-stream"),
        };
        let payload_content_type = self
            .payload_content_type
            .unwrap_or_else(|| default_type.to_owned());
        if payload_content_type.is_empty() || payload_content_type.len() > MAX_SHORT_FIELD_LEN {
            return Err(ApiError::invalid_field(
                "payload_content_type",
                format!("must be 1 to {MAX_SHORT_FIELD_LEN} bytes"),
            ));
        }
        if let Some(v) = &self.handler_version
            && (v.is_empty() || v.len() > MAX_SHORT_FIELD_LEN)
        {
            return Err(ApiError::invalid_field(
                "handler_version",
                format!("must be 1 to {MAX_SHORT_FIELD_LEN} bytes"),
            ));
        }
        if let Some(k) = &self.idempotency_key
            && (k.is_empty() || k.len() > MAX_IDEMPOTENCY_KEY_LEN)
        {
            return Err(ApiError::invalid_field(
                "idempotency_key",
                format!("must be 1 to {MAX_IDEMPOTENCY_KEY_LEN} bytes"),
            ));
        }
        let mut system_headers = BTreeMap::new();
        if let Some(name) = submitted_by {
            system_headers.insert(SUBMITTED_BY_HEADER.to_owned(), name.to_owned());
        }
        Ok(SubmitRequest {
            queue: self.queue,
            handler_ref: self.handler_ref,
            handler_version: self.handler_version,
            payload,
            payload_content_type,
            headers: self.headers,
            system_headers,
            delay_ms: self.delay_ms,
            priority: self.priority,
            idempotency_key: self.idempotency_key,
        })
    }
}

fn decode_base64(text: &str) -> Result<Vec<u8>, ApiError> {
    let engine = base64::engine::general_purpose::GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        base64::engine::GeneralPurposeConfig::new()
            .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
    );
    engine
        .decode(text)
        .map_err(|e| ApiError::invalid_field("payload", format!("is not standard base64: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(json: &str) -> SubmitBody {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn payload_json_is_kept_byte_for_byte_with_a_json_content_type() {
        let req = body(
            r#"{"queue":"q","handler_ref":"h","payload_json":{"n": 1.000000000000000000001}}"#,
        )
        .into_request(Some("svc"))
        .unwrap();
        assert_eq!(req.payload, br#"{"n": 1.000000000000000000001}"#);
        assert_eq!(req.payload_content_type, "application/json");
        assert_eq!(req.system_headers[SUBMITTED_BY_HEADER], "svc");
    }

    #[test]
    fn base64_payloads_decode_with_or_without_padding() {
        for b64 in ["aGk=", "aGk"] {
            let req = body(&format!(
                r#"{{"queue":"q","handler_ref":"h","payload":"{b64}"}}"#
            ))
            .into_request(None)
            .unwrap();
            assert_eq!(req.payload, b"hi");
            assert_eq!(req.payload_content_type, "application/octet-stream");
            assert!(req.system_headers.is_empty());
        }
    }

    #[test]
    fn conflicting_or_broken_fields_are_invalid() {
        for (json, field) in [
            (
                r#"{"queue":"q","handler_ref":"h","payload":"aGk=","payload_json":1}"#,
                "payload",
            ),
            (
                r#"{"queue":"q","handler_ref":"h","payload":"!!"}"#,
                "payload",
            ),
            (
                r#"{"queue":"q","handler_ref":"h","idempotency_key":""}"#,
                "idempotency_key",
            ),
            (
                r#"{"queue":"q","handler_ref":"h","payload_content_type":""}"#,
                "payload_content_type",
            ),
        ] {
            let err = body(json).into_request(None).unwrap_err();
            assert_eq!(err.code(), "INVALID_FIELD", "{json}");
            assert!(err.detail().starts_with(field), "{}", err.detail());
        }
    }

    #[test]
    fn unknown_fields_and_wrong_types_do_not_parse() {
        for json in [
            r#"{"queue":"q","handler_ref":"h","delay":5}"#,
            r#"{"queue":"q","handler_ref":"h","priority":300}"#,
            r#"{"queue":1,"handler_ref":"h"}"#,
            r#"{"handler_ref":"h"}"#,
        ] {
            assert!(serde_json::from_str::<SubmitBody>(json).is_err(), "{json}");
        }
    }
}
