//! The strict decoder on arbitrary Machine manifests: it must answer
//! every input with a document or an error, never a panic, and a
//! document it accepts must survive a write and a second read unchanged.
#![no_main]

use libfuzzer_sys::fuzz_target;
use liken_api::{Machine, decode};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(doc) = decode::strict::<Machine>(text, "fuzz.yaml") {
        let again = decode::to_yaml(&doc).expect("an accepted Machine serializes");
        let back = decode::strict::<Machine>(&again, "again.yaml").expect("its own output decodes");
        assert_eq!(back, doc);
    }
});
