//! Lease tokens only the holder can present: the text a worker gets with a
//! claimed task, bound to the task and the claim by a keyed MAC.
//!
//! The engine fences settles by the claim a token names ([`LeaseToken`], the
//! task's `claim_count`), and that number is public (it is in every
//! envelope). A worker that settles or extends over a network therefore
//! presents `CLAIM.MAC`, where `MAC` is HMAC-SHA256 over the task id and the
//! claim under a secret the store keeps ([`crate::Store::lease_secret`]),
//! cut to 128 bits: without the secret nobody can compute the token of a
//! lease they were not handed, so a caller allowed to work a queue still
//! cannot settle another worker's live lease. Fencing is unchanged: the claim
//! number inside still has to be the task's current one. The secret lives in
//! the store, so tokens survive a restart and are accepted by every node of
//! one database.

use hmac::{KeyInit, Mac};
use rdq_envelope::TaskId;

use crate::error::EngineError;
use crate::machine::LeaseToken;
use crate::store::Store;

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

/// Bytes of the MAC a token carries (hex-encoded, twice as many characters).
const MAC_BYTES: usize = 16;

/// Separates lease tokens from anything else the secret might ever sign.
const DOMAIN: &[u8] = b"rdq.lease_token.v1";

/// Why a presented token was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TokenMismatch {
    /// Not of the form `CLAIM.HEX`.
    #[error("not a lease token")]
    Malformed,
    /// Of the right form, but not issued for this task and claim under this
    /// store's secret: another task's token, a forged one, or one of an
    /// older format. Callers answer it like a lost lease.
    #[error("the lease token was not issued for this task")]
    OtherTask,
}

/// The keyed MAC behind lease tokens. Cheap to clone.
#[derive(Clone)]
pub struct LeaseKey {
    mac: HmacSha256,
}

impl std::fmt::Debug for LeaseKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LeaseKey(…)")
    }
}

impl LeaseKey {
    /// The key for a 32-byte secret.
    pub fn new(secret: [u8; 32]) -> Self {
        // HMAC pads a short key with zeros to the hash's block size; padding
        // it here gives the same MAC without a fallible constructor.
        let mut block = [0u8; 64];
        block[..32].copy_from_slice(&secret);
        Self {
            mac: HmacSha256::new(&block.into()),
        }
    }

    /// A key from fresh operating-system randomness: for stores whose leases
    /// do not outlive the process anyway.
    pub fn random() -> Result<Self, EngineError> {
        let mut secret = [0u8; 32];
        getrandom::fill(&mut secret).map_err(|e| {
            EngineError::Unavailable(format!("no randomness for a lease secret: {e}"))
        })?;
        Ok(Self::new(secret))
    }

    /// The key of `store`: its persistent secret, or a random one for this
    /// process when it keeps none.
    pub async fn of(store: &dyn Store) -> Result<Self, EngineError> {
        match store.lease_secret().await? {
            Some(secret) => Ok(Self::new(secret)),
            None => Self::random(),
        }
    }

    /// The text a worker presents for claim `token` of task `id`.
    pub fn format(&self, id: TaskId, token: LeaseToken) -> String {
        use std::fmt::Write as _;
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let tag = self.tag(id, token).finalize().into_bytes();
        let mut text = String::with_capacity(11 + 2 * MAC_BYTES);
        // Writing to a String cannot fail.
        let _ = write!(text, "{}.", token.0);
        for &byte in &tag[..MAC_BYTES] {
            text.push(char::from(HEX[usize::from(byte >> 4)]));
            text.push(char::from(HEX[usize::from(byte & 0xf)]));
        }
        text
    }

    /// The engine token in `text`, if this key issued it for task `id`. The
    /// MAC is compared in constant time.
    pub fn parse(&self, id: TaskId, text: &str) -> Result<LeaseToken, TokenMismatch> {
        let (claim, hex) = text.split_once('.').ok_or(TokenMismatch::Malformed)?;
        if claim.is_empty() || claim.len() > 10 || !claim.bytes().all(|b| b.is_ascii_digit()) {
            return Err(TokenMismatch::Malformed);
        }
        let claim: u32 = claim.parse().map_err(|_| TokenMismatch::Malformed)?;
        let tag = decode_tag(hex)?;
        let token = LeaseToken(claim);
        self.tag(id, token)
            .verify_truncated_left(&tag)
            .map(|()| token)
            .map_err(|_| TokenMismatch::OtherTask)
    }

    fn tag(&self, id: TaskId, token: LeaseToken) -> HmacSha256 {
        let mut mac = self.mac.clone();
        mac.update(DOMAIN);
        mac.update(&id.as_u128().to_be_bytes());
        mac.update(&token.0.to_be_bytes());
        mac
    }
}

/// The MAC of a token's text: `Malformed` unless it is lower-case hex of
/// whole bytes, at most 64 (upper case is refused too, so one token has one
/// spelling); `OtherTask` when it is well-formed but of another length (not
/// ours: the older 32-bit check, say).
fn decode_tag(hex: &str) -> Result<[u8; MAC_BYTES], TokenMismatch> {
    if hex.is_empty() || !hex.len().is_multiple_of(2) || hex.len() > 2 * 64 {
        return Err(TokenMismatch::Malformed);
    }
    let digit = |b: u8| match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        _ => None,
    };
    let mut tag = [0u8; MAC_BYTES];
    for (i, pair) in hex.as_bytes().chunks(2).enumerate() {
        let byte = digit(pair[0])
            .zip(digit(pair[1]))
            .ok_or(TokenMismatch::Malformed)?;
        if let Some(slot) = tag.get_mut(i) {
            *slot = byte.0 << 4 | byte.1;
        }
    }
    if hex.len() != 2 * MAC_BYTES {
        return Err(TokenMismatch::OtherTask);
    }
    Ok(tag)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(byte: u8) -> LeaseKey {
        LeaseKey::new([byte; 32])
    }

    const A_BITS: u128 = 0x0123_4567_89ab_cdef_0011_2233_4455_6677;

    #[test]
    fn a_token_parses_back_for_its_own_task_and_claim_only() {
        let k = key(1);
        let text = k.format(TaskId::from_u128(A_BITS), LeaseToken(3));
        assert!(text.starts_with("3."));
        assert_eq!(text.len(), 2 + 2 * MAC_BYTES);
        assert_eq!(k.parse(TaskId::from_u128(A_BITS), &text), Ok(LeaseToken(3)));
        assert_eq!(
            k.parse(TaskId::from_u128(A_BITS + 1), &text),
            Err(TokenMismatch::OtherTask)
        );
        let other_claim = text.replacen("3.", "4.", 1);
        assert_eq!(
            k.parse(TaskId::from_u128(A_BITS), &other_claim),
            Err(TokenMismatch::OtherTask)
        );
    }

    #[test]
    fn a_token_is_the_claim_number_and_the_mac_in_lower_case_hex() {
        let k = key(1);
        for claim in [0, 7, 4_294_967_295] {
            let id = TaskId::from_u128(A_BITS);
            let tag = k.tag(id, LeaseToken(claim)).finalize().into_bytes();
            let hex: String = tag[..MAC_BYTES]
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            assert_eq!(k.format(id, LeaseToken(claim)), format!("{claim}.{hex}"));
        }
    }

    #[test]
    fn a_token_is_refused_under_another_secret() {
        let text = key(1).format(TaskId::from_u128(A_BITS), LeaseToken(3));
        assert_eq!(
            key(2).parse(TaskId::from_u128(A_BITS), &text),
            Err(TokenMismatch::OtherTask)
        );
        assert_eq!(
            key(1).format(TaskId::from_u128(A_BITS), LeaseToken(3)),
            text,
            "deterministic per secret"
        );
    }

    #[test]
    fn tokens_in_the_older_public_format_are_refused_as_not_issued() {
        // The format before keyed tokens: CLAIM.CHECK with 8 hex digits.
        assert_eq!(
            key(1).parse(TaskId::from_u128(A_BITS), "3.9f1c22ab"),
            Err(TokenMismatch::OtherTask)
        );
    }

    #[test]
    fn malformed_tokens_are_refused_without_panicking() {
        let k = key(1);
        for bad in [
            "",
            "3",
            "3.",
            ".abcdef01",
            "x.abcdef01",
            "3.ABCDEF01",
            "3.abc",
            "99999999999.abcdef01",
            "4294967296.abcdef01",
            "-1.abcdef01",
            "3.abcdef01.1",
            "3.gggggggg",
            "3.é1",
        ] {
            assert_eq!(
                k.parse(TaskId::from_u128(A_BITS), bad),
                Err(TokenMismatch::Malformed),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn random_keys_differ() {
        let (a, b) = (LeaseKey::random(), LeaseKey::random());
        let (a, b) = (a.map_err(|e| e.to_string()), b.map_err(|e| e.to_string()));
        let (Ok(a), Ok(b)) = (a, b) else {
            panic!("the OS has randomness")
        };
        assert_ne!(
            a.format(TaskId::from_u128(A_BITS), LeaseToken(1)),
            b.format(TaskId::from_u128(A_BITS), LeaseToken(1))
        );
    }
}
