#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

//! Runs the language-neutral compliance fixtures in `compliance/fixtures/`
//! (see its README.md) against the Rust codec.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

use rdq_envelope::{DEFAULT_MAX_ENVELOPE_BYTES, Envelope, ErrorCode};
use serde_json::Value;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../compliance/fixtures");
const MIN_CASES: usize = 60;

/// JSON equality where a missing object member and a `null` one are the same, at every depth.
fn json_eq_absent_null(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => x.keys().chain(y.keys()).all(|k| {
            json_eq_absent_null(
                x.get(k).unwrap_or(&Value::Null),
                y.get(k).unwrap_or(&Value::Null),
            )
        }),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| json_eq_absent_null(p, q))
        }
        _ => a == b,
    }
}

/// A short, printable excerpt of some bytes, for failure messages.
fn excerpt(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let mut out: String = text.chars().take(300).collect();
    if text.chars().count() > 300 {
        out.push('…');
    }
    out
}

fn files_in(dir: &Path, sub: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for entry in fs::read_dir(dir.join(sub)).unwrap_or_else(|e| panic!("reading {sub}/: {e}")) {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_file() {
            out.insert(format!("{sub}/{}", entry.file_name().to_string_lossy()));
        }
    }
    out
}

/// Checks one valid case; returns a failure description.
fn check_valid(bytes: &[u8], max: usize, canonical: bool) -> Result<(), String> {
    let env = Envelope::decode_with_limit(bytes, max)
        .map_err(|e| format!("expected to decode, refused with {e}"))?;
    let encoded = env.encode();

    let input: Value = serde_json::from_slice(bytes)
        .map_err(|e| format!("the fixture itself is not JSON: {e}"))?;
    let output: Value = serde_json::from_slice(&encoded)
        .map_err(|e| format!("the encoding is not JSON ({e}): {}", excerpt(&encoded)))?;
    if !json_eq_absent_null(&input, &output) {
        return Err(format!(
            "re-encoding is not JSON-equal to the input\n      encoded: {}",
            excerpt(&encoded)
        ));
    }

    let again = Envelope::decode(&encoded)
        .map_err(|e| format!("the encoding does not decode again: {e}"))?
        .encode();
    if again != encoded {
        return Err(format!(
            "encoding is not stable\n      first:  {}\n      second: {}",
            excerpt(&encoded),
            excerpt(&again)
        ));
    }

    if canonical && encoded != bytes {
        let at = encoded
            .iter()
            .zip(bytes)
            .position(|(p, q)| p != q)
            .unwrap_or(encoded.len().min(bytes.len()));
        let from = at.saturating_sub(40);
        return Err(format!(
            "canonical input does not re-encode byte for byte (lengths {} vs {}, first difference at byte {at})\n      input:   …{}\n      encoded: …{}",
            bytes.len(),
            encoded.len(),
            excerpt(&bytes[from.min(bytes.len())..]),
            excerpt(&encoded[from.min(encoded.len())..]),
        ));
    }
    Ok(())
}

/// Checks one invalid case; returns a failure description.
fn check_invalid(bytes: &[u8], max: usize, code: &str, path: Option<&str>) -> Result<(), String> {
    match Envelope::decode_with_limit(bytes, max) {
        Ok(env) => Err(format!(
            "expected {code}, but it decoded\n      encoded: {}",
            excerpt(&env.encode())
        )),
        Err(e) => {
            let mut problems = Vec::new();
            if e.code().as_str() != code {
                problems.push(format!("code {} (expected {code})", e.code().as_str()));
            }
            if let Some(path) = path
                && e.path() != Some(path)
            {
                problems.push(format!("path {:?} (expected {path:?})", e.path()));
            }
            if problems.is_empty() {
                Ok(())
            } else {
                Err(format!(
                    "refused with {}; error was: {e}",
                    problems.join(", ")
                ))
            }
        }
    }
}

#[test]
fn compliance_fixtures() {
    let dir = PathBuf::from(FIXTURES);
    let manifest_text = fs::read(dir.join("manifest.json")).expect("reading manifest.json");
    let manifest: Value = serde_json::from_slice(&manifest_text).expect("manifest.json is JSON");
    assert_eq!(manifest["format"], Value::from(1), "manifest format");
    let cases = manifest["cases"]
        .as_array()
        .expect("manifest has a cases array");

    let mut failures: Vec<String> = Vec::new();
    let mut listed = BTreeSet::new();
    let mut names = BTreeSet::new();
    let (mut valid_count, mut invalid_count) = (0usize, 0usize);

    for (i, case) in cases.iter().enumerate() {
        let name = case["name"].as_str().unwrap_or("<unnamed>").to_owned();
        let label = format!("case #{i} {name:?}");
        let mut fail = |msg: String| failures.push(format!("{label}: {msg}"));

        if case["name"].as_str().is_none() {
            fail("has no string \"name\"".into());
        }
        if !names.insert(name.clone()) {
            fail("the name is used twice".into());
        }
        if case["description"].as_str().is_none_or(str::is_empty) {
            fail("has no description".into());
        }
        let Some(file) = case["file"].as_str() else {
            fail("has no string \"file\"".into());
            continue;
        };
        if !listed.insert(file.to_owned()) {
            fail(format!("file {file} is listed twice"));
        }
        let Some(valid) = case["valid"].as_bool() else {
            fail("has no boolean \"valid\"".into());
            continue;
        };
        let expected_prefix = if valid { "valid/" } else { "invalid/" };
        if !file.starts_with(expected_prefix) {
            fail(format!("file {file} is not under {expected_prefix}"));
        }
        let max = match &case["max_bytes"] {
            Value::Null => DEFAULT_MAX_ENVELOPE_BYTES,
            v => match v.as_u64().and_then(|n| usize::try_from(n).ok()) {
                Some(n) => n,
                None => {
                    fail(format!("max_bytes {v} is not a non-negative integer"));
                    continue;
                }
            },
        };
        let bytes = match fs::read(dir.join(file)) {
            Ok(b) => b,
            Err(e) => {
                fail(format!("cannot read {file}: {e}"));
                continue;
            }
        };

        let result = if valid {
            valid_count += 1;
            if !case["code"].is_null() || !case["path"].is_null() {
                fail("a valid case must not have code or path".into());
            }
            let canonical = match &case["canonical"] {
                Value::Null => false,
                Value::Bool(b) => *b,
                v => {
                    fail(format!("canonical {v} is not a boolean"));
                    false
                }
            };
            check_valid(&bytes, max, canonical)
        } else {
            invalid_count += 1;
            if !case["canonical"].is_null() {
                fail("an invalid case must not have canonical".into());
            }
            let Some(code) = case["code"].as_str() else {
                fail("an invalid case needs a string \"code\"".into());
                continue;
            };
            if ErrorCode::parse(code).is_none() {
                fail(format!("{code} is not an error code"));
            }
            let path = match &case["path"] {
                Value::Null => None,
                Value::String(s) => Some(s.as_str()),
                v => {
                    fail(format!("path {v} is not a string"));
                    continue;
                }
            };
            if code == "INVALID_FIELD" && path.is_none() {
                fail("an INVALID_FIELD case must give a path".into());
            }
            check_invalid(&bytes, max, code, path)
        };
        if let Err(msg) = result {
            fail(format!("{file}: {msg}"));
        }
    }

    let on_disk: BTreeSet<String> = files_in(&dir, "valid")
        .union(&files_in(&dir, "invalid"))
        .cloned()
        .collect();
    for file in on_disk.difference(&listed) {
        failures.push(format!("{file} is not listed in manifest.json"));
    }
    for file in listed.difference(&on_disk) {
        failures.push(format!(
            "manifest.json lists {file}, which is not in valid/ or invalid/"
        ));
    }
    if cases.len() < MIN_CASES {
        failures.push(format!(
            "only {} cases; at least {MIN_CASES} are required",
            cases.len()
        ));
    }

    if !failures.is_empty() {
        let mut report = format!(
            "{} of {} compliance fixture checks failed ({valid_count} valid and {invalid_count} invalid cases):\n",
            failures.len(),
            cases.len()
        );
        for f in &failures {
            let _ = writeln!(report, "  - {f}");
        }
        panic!("{report}");
    }
}
