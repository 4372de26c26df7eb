//! The error body of every refusal: `application/problem+json` (RFC 9457)
//! with rdq's stable `code`.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Media type of every error body.
pub const PROBLEM_CONTENT_TYPE: &str = "application/problem+json";

/// A problem document as it travels.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Problem {
    /// `urn:rdq:error:CODE`.
    #[serde(rename = "type")]
    pub problem_type: String,
    /// A short human title.
    pub title: String,
    /// The HTTP status.
    pub status: u16,
    /// rdq's stable code.
    pub code: String,
    /// What went wrong, for people.
    pub detail: String,
    /// Extension members (`field`, `errors`, `hint`, …).
    #[serde(flatten)]
    pub extensions: Map<String, Value>,
}
