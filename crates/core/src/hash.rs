//! Stable hashes: shard placement and per-slot jitter.
//!
//! Both must give the same answer on every node and across releases, so they use 64-bit
//! FNV-1a (Fowler–Noll–Vo, IETF draft-eastlake-fnv) rather than the standard library's hasher,
//! whose output may change between Rust versions.

use jiff::Timestamp;

use crate::SHARD_COUNT;
use crate::duration::Dur;

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// 64-bit FNV-1a over `bytes`.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(FNV_OFFSET, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(FNV_PRIME)
    })
}

/// The shard of a job: `fnv1a(namespace "/" name) mod 1024`, in `0..SHARD_COUNT`.
pub fn shard_of(namespace: &str, name: &str) -> u16 {
    let mut key = Vec::with_capacity(namespace.len() + name.len() + 1);
    key.extend_from_slice(namespace.as_bytes());
    key.push(b'/');
    key.extend_from_slice(name.as_bytes());
    u16::try_from(fnv1a(&key) % u64::from(SHARD_COUNT)).unwrap_or(0)
}

/// The jitter offset of one slot: deterministic in `[0, jitter)` for (job uid, slot), so every
/// scheduler computes the same fire time. Zero when `jitter` is zero.
pub fn jitter_offset(job_uid: &str, slot: Timestamp, jitter: Dur) -> Dur {
    if jitter.is_zero() {
        return Dur::ZERO;
    }
    let mut key = Vec::with_capacity(job_uid.len() + 8);
    key.extend_from_slice(job_uid.as_bytes());
    key.extend_from_slice(&slot.as_millisecond().to_le_bytes());
    Dur::from_millis(fnv1a(&key) % jitter.as_millis())
}

/// The fire time of a slot (docs/policies.md, "jitter"): the slot plus its [`jitter_offset`].
/// Every scheduler and reader computes the same instant for the same job incarnation and slot.
pub fn fire_time(job_uid: &str, slot: Timestamp, jitter: Dur) -> Timestamp {
    slot + jitter_offset(job_uid, slot, jitter).as_signed()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn fnv1a_matches_reference_vectors() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
    }

    proptest! {
        #[test]
        fn jitter_is_deterministic_and_below_bound(ms in 0i64..4_000_000_000_000, j in 1u64..86_400_000) {
            let slot = Timestamp::from_millisecond(ms).unwrap();
            let a = jitter_offset("job-1", slot, Dur::from_millis(j));
            prop_assert_eq!(a, jitter_offset("job-1", slot, Dur::from_millis(j)));
            prop_assert!(a.as_millis() < j);
        }

        #[test]
        fn shard_is_in_range(ns in "[a-z]{1,10}", name in "[a-z]{1,10}") {
            prop_assert!(shard_of(&ns, &name) < SHARD_COUNT);
        }
    }
}
