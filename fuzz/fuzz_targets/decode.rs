//! Fuzzes the compact-record decoder, which runs inside GDB on bytes read from processes and
//! core files: it must never panic, hang or allocate without bound, and whatever it accepts
//! must survive a round trip through the encoder unchanged.

#![no_main]

use jit_interface::{decode_all, encode_bundle};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(objects) = decode_all(data) else {
        return;
    };
    let input: Vec<_> = objects.iter().map(|d| (&d.object, d.live)).collect();
    let bytes = match encode_bundle(&input) {
        Ok(bytes) => bytes,
        Err(e) => panic!("the decoder accepted objects the encoder refuses: {e}"),
    };
    match decode_all(&bytes) {
        Ok(again) => assert_eq!(again, objects, "a re-encoded payload decodes differently"),
        Err(e) => panic!("a re-encoded payload does not decode: {e}"),
    }
});
