//! Globs on `error_type` for classification and DLQ filters: `*` (any run of
//! characters), `?` (one character), `[abc]`, `[a-z]` and `[!abc]`.

/// A validated glob pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Glob {
    pattern: Vec<char>,
}

impl Glob {
    /// Compiles `pattern`, refusing an empty pattern or an unclosed `[`.
    pub fn new(pattern: &str) -> Result<Self, String> {
        if pattern.is_empty() {
            return Err("a glob must not be empty".into());
        }
        let chars: Vec<char> = pattern.chars().collect();
        let mut i = 0;
        while i < chars.len() {
            if chars[i] == '[' {
                let end = class_end(&chars, i)
                    .ok_or_else(|| format!("glob {pattern:?} has an unclosed '['"))?;
                i = end;
            }
            i += 1;
        }
        Ok(Self { pattern: chars })
    }

    /// True if the whole of `text` matches.
    pub fn matches(&self, text: &str) -> bool {
        let text: Vec<char> = text.chars().collect();
        matches_at(&self.pattern, &text)
    }
}

/// Index of the `]` closing the class that opens at `start`.
fn class_end(p: &[char], start: usize) -> Option<usize> {
    let mut j = start + 1;
    if p.get(j) == Some(&'!') {
        j += 1;
    }
    // A `]` right after the opening is a literal member.
    if p.get(j) == Some(&']') {
        j += 1;
    }
    while j < p.len() {
        if p[j] == ']' {
            return Some(j);
        }
        j += 1;
    }
    None
}

fn class_matches(class: &[char], c: char) -> bool {
    let (negated, body) = match class.first() {
        Some('!') => (true, &class[1..]),
        _ => (false, class),
    };
    let mut found = false;
    let mut k = 0;
    while k < body.len() {
        if k + 2 < body.len() && body[k + 1] == '-' {
            found |= body[k] <= c && c <= body[k + 2];
            k += 3;
        } else {
            found |= body[k] == c;
            k += 1;
        }
    }
    found != negated
}

// Iterative matcher with single-star backtracking: linear in practice, never
// exponential on patterns like `a*a*a*a*b`.
fn matches_at(p: &[char], t: &[char]) -> bool {
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() {
            match p[pi] {
                '*' => {
                    star = Some((pi, ti));
                    pi += 1;
                    continue;
                }
                '?' => {
                    pi += 1;
                    ti += 1;
                    continue;
                }
                '[' => {
                    if let Some(end) = class_end(p, pi)
                        && class_matches(&p[pi + 1..end], t[ti])
                    {
                        pi = end + 1;
                        ti += 1;
                        continue;
                    }
                }
                c if c == t[ti] => {
                    pi += 1;
                    ti += 1;
                    continue;
                }
                _ => {}
            }
        }
        match star {
            Some((sp, st)) => {
                pi = sp + 1;
                ti = st + 1;
                star = Some((sp, st + 1));
            }
            None => return false,
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(p: &str, t: &str) -> bool {
        Glob::new(p).unwrap().matches(t)
    }

    #[test]
    fn globs_match_error_types() {
        assert!(m("java.net.*", "java.net.SocketTimeoutException"));
        assert!(!m("java.net.*", "java.io.IOException"));
        assert!(m("*Timeout*", "http.Timeout"));
        assert!(m("http.Status5??", "http.Status503"));
        assert!(!m("http.Status5??", "http.Status5030"));
        assert!(m("http.Status[45]*", "http.Status404"));
        assert!(m("[!a-c]x", "dx"));
        assert!(!m("[!a-c]x", "bx"));
        assert!(m("*", ""));
        assert!(m("exact", "exact"));
        assert!(!m("exact", "exactly"));
        assert!(!m("a*a*a*a*a*a*a*b", &"a".repeat(200)));
    }

    #[test]
    fn bad_globs_are_refused() {
        assert!(Glob::new("").is_err());
        assert!(Glob::new("java.[net").is_err());
        assert!(Glob::new("[]").is_err());
        assert!(Glob::new("[]]").is_ok());
    }
}
