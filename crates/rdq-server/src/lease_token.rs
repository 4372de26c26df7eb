//! The lease token a pull worker gets with each claimed task, as text.
//!
//! The engine fences settles by the claim a token names ([`LeaseToken`], the
//! task's claim number). Over HTTP the token also carries a check value
//! derived from the task id, so a token presented for a different task (a
//! worker mixing up its tasks) is refused as `LEASE_LOST` instead of settling
//! a task that happens to be on the same claim number. The form is
//! `CLAIM.CHECK` (`3.9f1c22ab`); workers treat it as opaque. Like the
//! engine's token it fences stale workers, not malicious ones:
//! authentication does that.

use rdq_engine::LeaseToken;
use rdq_envelope::TaskId;

/// Why a presented token was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenMismatch {
    /// Not of the form this server issues.
    Malformed,
    /// Well-formed, but issued for another task.
    OtherTask,
}

/// The text form of `token` for task `id`.
pub fn format(id: TaskId, token: LeaseToken) -> String {
    format!("{}.{:08x}", token.0, check(id, token.0))
}

/// The engine token in `text`, if it was issued for task `id`.
pub fn parse(id: TaskId, text: &str) -> Result<LeaseToken, TokenMismatch> {
    let (claim, checksum) = text.split_once('.').ok_or(TokenMismatch::Malformed)?;
    let all_digits = |s: &str, hex: bool| {
        !s.is_empty()
            && s.len() <= 10
            && s.bytes().all(|b| {
                if hex {
                    b.is_ascii_digit() || (b'a'..=b'f').contains(&b)
                } else {
                    b.is_ascii_digit()
                }
            })
    };
    if !all_digits(claim, false) || !all_digits(checksum, true) || checksum.len() != 8 {
        return Err(TokenMismatch::Malformed);
    }
    let claim: u32 = claim.parse().map_err(|_| TokenMismatch::Malformed)?;
    let checksum = u32::from_str_radix(checksum, 16).map_err(|_| TokenMismatch::Malformed)?;
    if checksum == check(id, claim) {
        Ok(LeaseToken(claim))
    } else {
        Err(TokenMismatch::OtherTask)
    }
}

/// 32 well-mixed bits of (id, claim): SplitMix64 over both halves.
fn check(id: TaskId, claim: u32) -> u32 {
    let bits = id.as_u128();
    let mixed = mix(mix((bits >> 64) as u64 ^ u64::from(claim)) ^ bits as u64);
    (mixed >> 32) as u32
}

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_parses_back_for_its_own_task_only() {
        let a = TaskId::from_u128(0x0123_4567_89ab_cdef_0011_2233_4455_6677);
        let b = TaskId::from_u128(0x0123_4567_89ab_cdef_0011_2233_4455_6678);
        let text = format(a, LeaseToken(3));
        assert!(text.starts_with("3."));
        assert_eq!(parse(a, &text), Ok(LeaseToken(3)));
        assert_eq!(parse(b, &text), Err(TokenMismatch::OtherTask));
    }

    #[test]
    fn malformed_tokens_are_refused_without_panicking() {
        let id = TaskId::from_u128(7);
        for bad in [
            "",
            "3",
            "3.",
            ".abcdef01",
            "x.abcdef01",
            "3.ABCDEF01",
            "3.abc",
            "99999999999.abcdef01",
            "-1.abcdef01",
            "3.abcdef01.1",
            "3.ggggggggg",
        ] {
            assert_eq!(parse(id, bad), Err(TokenMismatch::Malformed), "{bad:?}");
        }
    }
}
