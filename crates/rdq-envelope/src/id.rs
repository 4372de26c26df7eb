//! Task ids: ULIDs, lexicographically sortable and generated with no coordination.
//!
//! Ids made by one process are strictly increasing, even within one millisecond,
//! so a store ordering by id orders by submission.

use std::fmt;
use std::sync::Mutex;

use crate::time::Timestamp;

/// A task's identity for its whole life: a 128-bit ULID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TaskId(u128);

const ALPHABET: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";

impl TaskId {
    /// A fresh id, greater than every id this process generated before.
    pub fn generate() -> Self {
        GENERATOR.next(Timestamp::now())
    }

    /// The id with exactly these 128 bits (a UUID converts losslessly).
    pub fn from_u128(bits: u128) -> Self {
        Self(bits)
    }

    /// The id's 128 bits.
    pub fn as_u128(self) -> u128 {
        self.0
    }

    /// The id's 16 bytes, big-endian, the same layout as a UUID.
    pub fn to_bytes(self) -> [u8; 16] {
        self.0.to_be_bytes()
    }

    /// The millisecond timestamp in the id's top 48 bits.
    pub fn timestamp_ms(self) -> u64 {
        (self.0 >> 80) as u64
    }

    /// Parses the canonical 26-character upper-case Crockford base32 form.
    pub fn parse(s: &str) -> Option<Self> {
        let b = s.as_bytes();
        if b.len() != 26 || b[0] > b'7' {
            return None;
        }
        let mut bits: u128 = 0;
        for &c in b {
            let v = ALPHABET.iter().position(|&a| a == c)?;
            bits = (bits << 5) | v as u128;
        }
        Some(Self(bits))
    }
}

impl TaskId {
    /// The canonical 26-character text as ASCII bytes, without an
    /// allocation.
    pub fn text(self) -> [u8; 26] {
        let mut out = [0u8; 26];
        for (i, slot) in out.iter_mut().enumerate() {
            let shift = 5 * (25 - i);
            *slot = ALPHABET[((self.0 >> shift) & 0x1f) as usize];
        }
        out
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The alphabet is ASCII, so this cannot fail.
        f.write_str(std::str::from_utf8(&self.text()).map_err(|_| fmt::Error)?)
    }
}

static GENERATOR: Generator = Generator {
    last: Mutex::new(0),
};

/// Keeps the last id so a burst within one millisecond increments instead of
/// drawing new randomness (the ULID spec's monotonic mode).
struct Generator {
    last: Mutex<u128>,
}

impl Generator {
    fn next(&self, now: Timestamp) -> TaskId {
        let ms = u128::from(u64::try_from(now.unix_ms()).unwrap_or(0)) & ((1 << 48) - 1);
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        let candidate = if (*last >> 80) >= ms && *last != 0 {
            // Same (or an earlier, after a clock step back) millisecond: stay monotonic.
            last.wrapping_add(1)
        } else {
            (ms << 80) | random_80()
        };
        *last = candidate;
        TaskId(candidate)
    }
}

fn random_80() -> u128 {
    let mut buf = [0u8; 16];
    // Without an OS random source ids stay unique through the monotonic counter;
    // the random part only spreads ids made by different processes.
    let _ = getrandom::fill(&mut buf[6..]);
    // Keep the top bit clear so a burst of increments cannot carry into the time.
    buf[6] &= 0x7f;
    u128::from_be_bytes(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_format_and_parse_back() {
        let s = "01J2ZK7Q8XW5H3N9G4T6B8RDQ0";
        assert_eq!(TaskId::parse(s).unwrap().to_string(), s);
        let max = "7ZZZZZZZZZZZZZZZZZZZZZZZZZ";
        assert_eq!(TaskId::parse(max).unwrap().as_u128(), u128::MAX);
    }

    #[test]
    fn malformed_ids_are_refused() {
        for s in [
            "",
            "01J2ZK7Q8XW5H3N9G4T6B8RDQ",
            "01J2ZK7Q8XW5H3N9G4T6B8RDQ00",
            "01j2zk7q8xw5h3n9g4t6b8rdq0",
            "01J2ZK7Q8XW5H3N9G4T6B8RDQI",
            "01J2ZK7Q8XW5H3N9G4T6B8RDQU",
            "81J2ZK7Q8XW5H3N9G4T6B8RDQ0",
        ] {
            assert!(TaskId::parse(s).is_none(), "{s} accepted");
        }
    }

    #[test]
    fn ids_in_one_millisecond_are_strictly_increasing() {
        let g = Generator {
            last: Mutex::new(0),
        };
        let now = Timestamp::from_unix_ms(1_784_556_202_117).unwrap();
        let mut prev = g.next(now);
        assert_eq!(prev.timestamp_ms(), 1_784_556_202_117);
        for _ in 0..10_000 {
            let id = g.next(now);
            assert!(id > prev);
            assert!(id.to_string() > prev.to_string());
            prev = id;
        }
        // A clock that steps back never produces a smaller id.
        let earlier = Timestamp::from_unix_ms(1_784_556_202_000).unwrap();
        assert!(g.next(earlier) > prev);
    }

    #[test]
    fn generated_ids_carry_the_current_time() {
        let before = Timestamp::now().unix_ms() as u64;
        let id = TaskId::generate();
        assert!(id.timestamp_ms() >= before);
    }
}
