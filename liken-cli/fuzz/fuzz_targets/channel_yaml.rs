//! channel.yaml as fetch (`latest`) and bundle read it: the strict
//! decoder never panics, and an accepted channel round-trips.
#![no_main]

use libfuzzer_sys::fuzz_target;
use liken_api::{Channel, decode};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(doc) = decode::strict::<Channel>(text, "channel.yaml") {
        let again = decode::to_yaml(&doc).expect("an accepted Channel serializes");
        let back = decode::strict::<Channel>(&again, "again.yaml").expect("its own output decodes");
        assert_eq!(back, doc);
    }
});
