//! The envelope's name rule, applied at compile time.
//!
//! Queue names and handler refs are `[a-z0-9._-]{1,240}` on the wire
//! (`docs/envelope.md`); the same check lives in `rdq-envelope`, but a proc-macro cannot
//! depend on it cheaply, so this small copy turns a bad name into a compile
//! error at the offending token instead of a refused submit at runtime.

/// Longest queue name or handler ref, in bytes (the envelope's `MAX_NAME_LEN`).
pub(crate) const MAX_NAME_LEN: usize = 240;

/// Why `name` breaks the envelope's name rule, if it does.
pub(crate) fn name_problem(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("must not be empty".to_owned());
    }
    if name.len() > MAX_NAME_LEN {
        return Some(format!(
            "is {} bytes long; the limit is {MAX_NAME_LEN}",
            name.len()
        ));
    }
    let bad: String = name
        .chars()
        .filter(|c| !matches!(c, 'a'..='z' | '0'..='9' | '.' | '_' | '-'))
        .collect();
    (!bad.is_empty()).then(|| format!("has characters outside [a-z0-9._-]: {bad:?}"))
}

/// `SendEmail` → `send_email`, `HTTPRequest` → `http_request`,
/// `ResizeV2` → `resize_v2`: the default job and queue names.
pub(crate) fn snake_case(ident: &str) -> String {
    let chars: Vec<char> = ident.chars().collect();
    let mut out = String::with_capacity(ident.len() + 4);
    for (i, &c) in chars.iter().enumerate() {
        if c.is_uppercase() {
            let prev = i.checked_sub(1).and_then(|p| chars.get(p)).copied();
            let next = chars.get(i + 1).copied();
            let starts_word = match prev {
                None | Some('_') => false,
                Some(p) if p.is_lowercase() || p.is_ascii_digit() => true,
                Some(p) if p.is_uppercase() => next.is_some_and(char::is_lowercase),
                Some(_) => false,
            };
            if starts_word {
                out.push('_');
            }
            out.extend(c.to_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_names_become_snake_case() {
        assert_eq!(snake_case("SendEmail"), "send_email");
        assert_eq!(snake_case("HTTPRequest"), "http_request");
        assert_eq!(snake_case("ResizeImageV2"), "resize_image_v2");
        assert_eq!(snake_case("Emails"), "emails");
        assert_eq!(snake_case("already_snake"), "already_snake");
        assert_eq!(snake_case("A"), "a");
    }

    #[test]
    fn the_envelope_name_rule_is_enforced() {
        assert_eq!(name_problem("payments.charge-card_v2"), None);
        assert!(name_problem("").is_some());
        assert!(name_problem("Send Email").is_some());
        assert!(name_problem(&"a".repeat(241)).is_some());
        assert_eq!(name_problem(&"a".repeat(240)), None);
        assert!(name_problem("café").is_some());
    }
}
