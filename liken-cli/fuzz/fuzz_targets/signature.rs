//! A detached signature (`release.yaml.sig`) as init and the CLI read
//! it: the strict decoder never panics, an accepted signature
//! round-trips, and checking it against a trust root never panics and
//! never accepts it over bytes its key did not sign.
#![no_main]

use libfuzzer_sys::fuzz_target;
use liken_api::decode;
use liken_api::signing::{DetachedSignature, TrustRoot, key_pair};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(sig) = decode::strict::<DetachedSignature>(text, "release.yaml.sig") {
        let again = decode::to_yaml(&sig).expect("an accepted signature serializes");
        let back = decode::strict::<DetachedSignature>(&again, "again.sig")
            .expect("its own output decodes");
        assert_eq!(back, sig);
        // The seed's key never signed these bytes: a fuzzed signature is
        // accepted only by a forgery of ed25519.
        let (_, public) = key_pair([9; 32]);
        let trust = TrustRoot::new([public]);
        assert!(trust.verify(b"release.yaml bytes", Some(&sig)).is_err());
    }
});
