//! serve's request parser, target decoder and Range decision on
//! arbitrary bytes: no panics, and the promises the server relies on
//! hold (a complete head lies within the buffer, a decoded path cannot
//! climb out, a partial range lies within the file).
#![no_main]

use libfuzzer_sys::fuzz_target;
use liken_cli::releases::http::{self, Parsed, RangeDecision};
use liken_cli::releases::urlpath;

fuzz_target!(|data: &[u8]| {
    // The first eight bytes double as a file length for the Range check.
    let len = data
        .get(..8)
        .map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])) % (1 << 40))
        .unwrap_or(0);
    match http::parse_request(data) {
        Ok(Parsed::Complete(req, used)) => {
            assert!(used <= data.len() && used > 0);
            assert!(req.target.bytes().all(|b| (0x21..0x7f).contains(&b)));
            if let Ok(segments) = urlpath::decode_target(&req.target) {
                for s in segments {
                    assert!(!s.is_empty() && s != b".." && s != b".");
                    assert!(!s.iter().any(|&c| c == b'/' || c == b'\\' || c == 0));
                    assert!(s[0] != b'.');
                }
            }
            if let RangeDecision::Partial { start, end } =
                http::decide_range(req.range.as_deref(), len)
            {
                assert!(start <= end && end < len);
            }
        }
        Ok(Parsed::Partial) => {
            // Waiting is bounded: past the empty lines a client may send
            // first, no more than MAX_HEAD bytes are ever buffered.
            let rest = data
                .iter()
                .skip_while(|&&b| b == b'\r' || b == b'\n')
                .count();
            assert!(rest <= http::MAX_HEAD);
        }
        Err(e) => assert!(matches!(e.status(), 400 | 431 | 501 | 505)),
    }
    let text = String::from_utf8_lossy(data);
    if let RangeDecision::Partial { start, end } = http::decide_range(Some(&text), len) {
        assert!(start <= end && end < len);
    }
});
