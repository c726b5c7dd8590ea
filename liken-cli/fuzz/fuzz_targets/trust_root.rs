//! trust.yaml as `liken layer` and init read it: the strict decoder
//! never panics, an accepted trust root round-trips, and every key it
//! accepts carries its own id.
#![no_main]

use libfuzzer_sys::fuzz_target;
use liken_api::decode;
use liken_api::signing::{KeyId, TrustRoot};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(trust) = decode::strict::<TrustRoot>(text, "trust.yaml") {
        assert!(!trust.keys.is_empty());
        for k in &trust.keys {
            assert_eq!(KeyId::of(&k.public_key), k.id);
        }
        let again = decode::to_yaml(&trust).expect("an accepted trust root serializes");
        let back =
            decode::strict::<TrustRoot>(&again, "again.yaml").expect("its own output decodes");
        assert_eq!(back, trust);
    }
});
