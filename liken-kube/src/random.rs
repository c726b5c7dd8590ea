//! Non-cryptographic randomness for jitter and unique Event names.
//!
//! The standard library's `RandomState` is seeded from the OS once per
//! process and varied per instance, which is all jitter needs; splitmix64
//! stretches one seed into a sequence. Nothing here is a secret.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::{SystemTime, UNIX_EPOCH};

/// A fresh seed, different on every call.
pub fn seed() -> u64 {
    let mut h = RandomState::new().build_hasher();
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    h.write_u128(nanos);
    h.finish()
}

/// The next value of a splitmix64 sequence.
pub fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    #[test]
    fn seeds_differ() {
        assert_ne!(super::seed(), super::seed());
    }
}
