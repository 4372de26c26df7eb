//! Integers as the API's OpenAPI document counts them.
//!
//! JSON Schema calls any number with a zero fractional part an integer, so
//! `668`, `668.0` and `6.68e2` are one value wherever the document says
//! `integer` (`docs/http-api.md`). serde refuses the last two for a `u64`
//! field, and under serde_json's `arbitrary_precision` `Value::as_u64` does
//! too, so every integer of a request is read here instead: from the
//! number's exact text, never through a float, so `9007199254740993.0` is
//! that integer and not its nearest double.
//!
//! Fields use these through `#[serde(deserialize_with = "…")]`; a JSON
//! document read as a `Value` (a policy patch) goes through
//! [`normalize_integers`] first.

use serde::de::{Deserialize, Deserializer, Error};
use serde_json::{Number, Value};

/// Why a number is not an unsigned integer in range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IntError {
    /// The number has a non-zero fractional part (`1.5`), or is not a number.
    NotInteger,
    /// The value is below zero.
    Negative,
    /// The value is larger than `max`.
    TooLarge {
        /// The largest accepted value.
        max: u64,
    },
}

impl std::fmt::Display for IntError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NotInteger => f.write_str("must be an integer"),
            Self::Negative => f.write_str("must not be negative"),
            Self::TooLarge { max } => write!(f, "must be at most {max}"),
        }
    }
}

/// The unsigned integer that JSON number text `text` denotes, if it is one
/// no larger than `max`. Accepts what JSON allows: an optional `-`, digits,
/// an optional fraction and an optional exponent (`-0.0` is 0).
pub fn parse_unsigned(text: &str, max: u64) -> Result<u64, IntError> {
    let (negative, rest) = match text.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, text),
    };
    let (mantissa, exponent) = match rest.find(['e', 'E']) {
        Some(i) => {
            let exp_text = &rest[i + 1..];
            let (exp_negative, exp_digits) = match exp_text.as_bytes().first() {
                Some(b'-') => (true, &exp_text[1..]),
                Some(b'+') => (false, &exp_text[1..]),
                _ => (false, exp_text),
            };
            if exp_digits.is_empty() || !exp_digits.bytes().all(|b| b.is_ascii_digit()) {
                return Err(IntError::NotInteger);
            }
            // An exponent too long for an i64 is capped: the answer is the
            // same (too large, not an integer, or zero).
            let magnitude: i64 = exp_digits.parse().unwrap_or(i64::MAX / 2).min(i64::MAX / 2);
            let exp = if exp_negative { -magnitude } else { magnitude };
            (&rest[..i], exp)
        }
        None => (rest, 0),
    };
    let (int_part, frac_part) = match mantissa.split_once('.') {
        Some((i, f)) => (i, f),
        None => (mantissa, ""),
    };
    if int_part.is_empty()
        || !int_part.bytes().all(|b| b.is_ascii_digit())
        || !frac_part.bytes().all(|b| b.is_ascii_digit())
        || (mantissa.contains('.') && frac_part.is_empty())
    {
        return Err(IntError::NotInteger);
    }
    // The value is digits × 10^scale.
    let digits: String = format!("{int_part}{frac_part}");
    let digits = digits.trim_start_matches('0');
    let mut scale = exponent.saturating_sub(i64::try_from(frac_part.len()).unwrap_or(i64::MAX));
    let mut digits = digits;
    while scale < 0 && digits.ends_with('0') {
        digits = &digits[..digits.len() - 1];
        scale += 1;
    }
    if digits.is_empty() {
        return Ok(0);
    }
    if scale < 0 {
        return Err(IntError::NotInteger);
    }
    if negative {
        return Err(IntError::Negative);
    }
    // u64::MAX has 20 digits.
    let too_large = IntError::TooLarge { max };
    if i64::try_from(digits.len())
        .unwrap_or(i64::MAX)
        .saturating_add(scale)
        > 20
    {
        return Err(too_large);
    }
    let mut value: u64 = digits.parse().map_err(|_| too_large.clone())?;
    for _ in 0..scale {
        value = value.checked_mul(10).ok_or_else(|| too_large.clone())?;
    }
    if value > max {
        return Err(too_large);
    }
    Ok(value)
}

/// The unsigned integer `n` denotes, if it is one no larger than `max`.
pub fn number_to_unsigned(n: &Number, max: u64) -> Result<u64, IntError> {
    if let Some(v) = n.as_u64() {
        return if v > max {
            Err(IntError::TooLarge { max })
        } else {
            Ok(v)
        };
    }
    parse_unsigned(&n.to_string(), max)
}

fn read<'de, D: Deserializer<'de>>(d: D, max: u64) -> Result<u64, D::Error> {
    let n = Number::deserialize(d)?;
    number_to_unsigned(&n, max).map_err(|e| D::Error::custom(format!("{n} {e}")))
}

/// Reads a `u64` field from any integral JSON number.
pub fn u64<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    read(d, u64::MAX)
}

/// Reads a `u8` field from any integral JSON number.
pub fn u8<'de, D: Deserializer<'de>>(d: D) -> Result<u8, D::Error> {
    read(d, u64::from(u8::MAX)).and_then(|v| u8::try_from(v).map_err(D::Error::custom))
}

/// Reads a `usize` field from any integral JSON number.
pub fn usize<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    let max = u64::try_from(usize::MAX).unwrap_or(u64::MAX);
    read(d, max).and_then(|v| usize::try_from(v).map_err(D::Error::custom))
}

/// Reads an optional `u64` field (`null` is absent) from any integral JSON number.
pub fn option_u64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    match Option::<Number>::deserialize(d)? {
        None => Ok(None),
        Some(n) => number_to_unsigned(&n, u64::MAX)
            .map(Some)
            .map_err(|e| D::Error::custom(format!("{n} {e}"))),
    }
}

/// Reads an optional `usize` field (`null` is absent) from any integral JSON number.
pub fn option_usize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<usize>, D::Error> {
    option_u64(d)?
        .map(|v| usize::try_from(v).map_err(D::Error::custom))
        .transpose()
}

/// Reads an optional `usize` from a query-string value (`limit=50`,
/// `limit=50.0`), by the same rule as JSON numbers.
pub fn query_option_usize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<usize>, D::Error> {
    let text = String::deserialize(d)?;
    let max = u64::try_from(usize::MAX).unwrap_or(u64::MAX);
    parse_unsigned(text.trim(), max)
        .map_err(|e| D::Error::custom(format!("{text:?} {e}")))
        .and_then(|v| usize::try_from(v).map(Some).map_err(D::Error::custom))
}

/// Rewrites every integral number in `value` with a fraction or an
/// exponent (`668.0`, `6.68e2`) as the plain integer (`668`), so code that
/// reads a `Value` with `as_u64` or serde sees the integer JSON Schema sees.
/// Other numbers (`2.5`, `-1`) are left as written; the subtrees under the
/// keys in `opaque` (values compared as given, such as a callback body
/// rule's `equals`) are not touched.
pub fn normalize_integers(value: &mut Value, opaque: &[&str]) {
    match value {
        Value::Number(n) => {
            if n.as_u64().is_none()
                && let Ok(v) = parse_unsigned(&n.to_string(), u64::MAX)
            {
                *n = Number::from(v);
            }
        }
        Value::Array(items) => {
            for item in items {
                normalize_integers(item, opaque);
            }
        }
        Value::Object(map) => {
            for (k, v) in map.iter_mut() {
                if !opaque.contains(&k.as_str()) {
                    normalize_integers(v, opaque);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integral_numbers_are_integers_whatever_their_spelling() {
        for text in [
            "668", "668.0", "668.000", "6.68e2", "6.68E+2", "66800e-2", "0.668e3",
        ] {
            assert_eq!(parse_unsigned(text, u64::MAX), Ok(668), "{text}");
        }
        for text in ["0", "-0", "-0.0", "0e5", "0.000e-3"] {
            assert_eq!(parse_unsigned(text, u64::MAX), Ok(0), "{text}");
        }
        assert_eq!(
            parse_unsigned("9007199254740993.0", u64::MAX),
            Ok(9_007_199_254_740_993)
        );
        assert_eq!(
            parse_unsigned("18446744073709551615.0", u64::MAX),
            Ok(u64::MAX)
        );
    }

    #[test]
    fn fractions_negatives_and_overflow_are_refused() {
        for text in [
            "668.5", "1e-1", "0.1", "6.685e2", "", "1.", ".5", "1e", "abc", "--1",
        ] {
            assert_eq!(
                parse_unsigned(text, u64::MAX),
                Err(IntError::NotInteger),
                "{text}"
            );
        }
        assert_eq!(parse_unsigned("-1", u64::MAX), Err(IntError::Negative));
        assert_eq!(parse_unsigned("-1.0", u64::MAX), Err(IntError::Negative));
        for text in ["18446744073709551616", "1e20", "1e999999999999999999999"] {
            assert_eq!(
                parse_unsigned(text, u64::MAX),
                Err(IntError::TooLarge { max: u64::MAX }),
                "{text}"
            );
        }
        assert_eq!(
            parse_unsigned("256.0", 255),
            Err(IntError::TooLarge { max: 255 })
        );
    }

    #[test]
    fn a_value_is_normalised_except_under_opaque_keys() {
        let mut v: Value =
            serde_json::from_str(r#"{"a":668.0,"b":[1e2,2.5,-3.0],"equals":1.0}"#).unwrap();
        normalize_integers(&mut v, &["equals"]);
        assert_eq!(
            v.to_string(),
            r#"{"a":668,"b":[100,2.5,-3.0],"equals":1.0}"#
        );
    }
}
