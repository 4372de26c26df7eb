//! A queue's stored configuration: the engine's [`QueuePolicy`] plus the
//! sections other parts of rdq own, which the engine keeps but never reads.
//!
//! One JSON object holds both (`GET /v1/queues/{queue}/config`,
//! `docs/configuration.md`): the policy's fields and each section's key side
//! by side at the top level. Today's sections are `callback` (read by the
//! server's callback dispatcher) and `queuey_compatible` (read by the
//! RabbitMQ store); the front end that accepts a document names the sections
//! it admits, so the engine stays ignorant of them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::EngineError;
use crate::policy::QueuePolicy;

/// A queue's configuration: the engine's policy and the opaque sections
/// owned by a front end or a store. See the module documentation.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct QueueConfig {
    /// What the engine reads at every claim and settle.
    pub policy: QueuePolicy,
    /// Top-level keys the policy does not have, kept verbatim: each belongs
    /// to the part of rdq that reads it (`callback`, `queuey_compatible`).
    pub sections: BTreeMap<String, Value>,
}

impl From<QueuePolicy> for QueueConfig {
    fn from(policy: QueuePolicy) -> Self {
        Self {
            policy,
            sections: BTreeMap::new(),
        }
    }
}

impl QueueConfig {
    /// The section `key`, if the configuration has one (a JSON `null` counts
    /// as absent).
    pub fn section(&self, key: &str) -> Option<&Value> {
        self.sections.get(key).filter(|v| !v.is_null())
    }

    /// This configuration with `key` set to `value`.
    #[must_use]
    pub fn with_section(mut self, key: &str, value: Value) -> Self {
        self.sections.insert(key.to_owned(), value);
        self
    }

    /// Parses a submitted configuration document and validates its policy,
    /// refusing (`INVALID_POLICY`) every top-level key that is neither a
    /// policy field nor one of `sections`.
    pub fn from_json(value: Value, sections: &[&str]) -> Result<Self, EngineError> {
        let Value::Object(map) = value else {
            return Err(EngineError::InvalidPolicy(
                "a queue configuration must be a JSON object".into(),
            ));
        };
        let (policy, found) = split(map);
        if let Some(unknown) = found.keys().find(|k| !sections.contains(&k.as_str())) {
            return Err(EngineError::InvalidPolicy(format!(
                "{unknown}: unknown policy field"
            )));
        }
        Ok(Self {
            policy: QueuePolicy::from_json(Value::Object(policy))?,
            sections: found.into_iter().collect(),
        })
    }

    /// This configuration with the keys of `patch` (a JSON object) replaced,
    /// nested objects whole; a `null` section is removed. The result is
    /// checked as [`QueueConfig::from_json`] checks a document.
    pub fn patched(&self, patch: &Value, sections: &[&str]) -> Result<Self, EngineError> {
        let Value::Object(patch) = patch else {
            return Err(EngineError::InvalidPolicy(
                "a policy patch must be a JSON object".into(),
            ));
        };
        let mut current = self.to_map()?;
        for (k, v) in patch {
            current.insert(k.clone(), v.clone());
        }
        let mut next = Self::from_json(Value::Object(current), sections)?;
        next.sections.retain(|_, v| !v.is_null());
        Ok(next)
    }

    fn to_map(&self) -> Result<Map<String, Value>, EngineError> {
        let Value::Object(mut map) = serde_json::to_value(&self.policy)
            .map_err(|e| EngineError::InvalidPolicy(e.to_string()))?
        else {
            return Err(EngineError::InvalidPolicy(
                "a policy serialises as an object".into(),
            ));
        };
        for (k, v) in &self.sections {
            map.entry(k.clone()).or_insert_with(|| v.clone());
        }
        Ok(map)
    }
}

/// Splits a document into the policy's fields and everything else.
fn split(map: Map<String, Value>) -> (Map<String, Value>, Map<String, Value>) {
    let known = QueuePolicy::field_names();
    map.into_iter()
        .partition(|(k, _)| known.iter().any(|f| f == k))
}

impl Serialize for QueueConfig {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.to_map()
            .map_err(serde::ser::Error::custom)?
            .serialize(s)
    }
}

/// Lenient, like [`QueuePolicy`]'s own reading: a stored document with keys
/// this version does not know keeps them as sections.
impl<'de> Deserialize<'de> for QueueConfig {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let map = Map::<String, Value>::deserialize(d)?;
        let (policy, sections) = split(map);
        Ok(Self {
            policy: QueuePolicy::deserialize(Value::Object(policy))
                .map_err(serde::de::Error::custom)?,
            sections: sections.into_iter().collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const SECTIONS: &[&str] = &["callback", "queuey_compatible"];

    #[test]
    fn sections_sit_beside_the_policy_in_one_document() {
        let doc =
            json!({"max_attempts": 3, "callback": {"url": "http://x"}, "queuey_compatible": true});
        let config = QueueConfig::from_json(doc, SECTIONS).unwrap();
        assert_eq!(config.policy.max_attempts, 3);
        assert_eq!(
            config.section("callback"),
            Some(&json!({"url": "http://x"}))
        );
        assert_eq!(config.section("queuey_compatible"), Some(&json!(true)));
        let written = serde_json::to_value(&config).unwrap();
        assert_eq!(written["max_attempts"], 3);
        assert_eq!(written["callback"]["url"], "http://x");
        let read: QueueConfig = serde_json::from_value(written).unwrap();
        assert_eq!(read, config);
    }

    #[test]
    fn keys_no_part_admits_are_refused() {
        let err = QueueConfig::from_json(json!({"max_atempts": 3}), SECTIONS).unwrap_err();
        assert_eq!(err.code(), "INVALID_POLICY");
        assert!(err.to_string().contains("max_atempts"), "{err}");
        let err = QueueConfig::from_json(json!({"callback": {}}), &[]).unwrap_err();
        assert!(err.to_string().contains("callback"), "{err}");
        assert!(QueueConfig::from_json(json!([1]), SECTIONS).is_err());
        assert!(QueueConfig::from_json(json!({"max_attempts": 0}), SECTIONS).is_err());
    }

    #[test]
    fn a_patch_replaces_what_it_names_and_null_removes_a_section() {
        let config = QueueConfig::from(QueuePolicy::default())
            .with_section("callback", json!({"url": "http://x"}));
        let next = config
            .patched(
                &json!({"paused": true, "queuey_compatible": true}),
                SECTIONS,
            )
            .unwrap();
        assert!(next.policy.paused);
        assert_eq!(next.section("callback"), config.section("callback"));
        assert_eq!(next.section("queuey_compatible"), Some(&json!(true)));
        let cleared = next.patched(&json!({"callback": null}), SECTIONS).unwrap();
        assert_eq!(cleared.section("callback"), None);
        assert!(!cleared.sections.contains_key("callback"));
        assert!(config.patched(&json!(3), SECTIONS).is_err());
    }

    #[test]
    fn a_stored_document_from_a_newer_rdq_keeps_its_unknown_keys() {
        let read: QueueConfig =
            serde_json::from_value(json!({"lease_ms": 5000, "future_thing": [1, 2]})).unwrap();
        assert_eq!(read.policy.lease_ms, 5000);
        assert_eq!(read.section("future_thing"), Some(&json!([1, 2])));
    }
}
