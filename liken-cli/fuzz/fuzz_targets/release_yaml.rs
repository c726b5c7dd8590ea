//! release.yaml as fetch and index read it from a channel: the strict
//! decoder never panics, and an accepted release round-trips and passes
//! fetch's own name checks or refuses cleanly.
#![no_main]

use libfuzzer_sys::fuzz_target;
use liken_api::decode;
use liken_api::release::Release;
use liken_cli::releases::{fetch, layout};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(doc) = decode::strict::<Release>(text, "release.yaml") {
        let again = decode::to_yaml(&doc).expect("an accepted Release serializes");
        let back = decode::strict::<Release>(&again, "again.yaml").expect("its own output decodes");
        assert_eq!(back, doc);
        if fetch::check_names(&doc).is_ok() {
            let dir = std::path::Path::new("/channel/v");
            for a in &doc.artifacts {
                let p = layout::artifact_path(dir, &a.file).expect("checked names stay inside");
                assert_eq!(p.parent(), Some(dir));
            }
        }
    }
});
