//! Long-run fuzzing of the hipfs wire protocol decoders:
//!   cargo +nightly fuzz run proto_decode -- -max_total_time=3600
//! Every decoder must return an error, never panic, on any input; what
//! decodes must re-encode to a message that decodes to the same value.
#![no_main]

use hipfs::remote::proto::{Challenge, Hello, Proof, Refused, Reply, Request, Welcome};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(req) = Request::decode(data) {
        let again = Request::decode(&req.encode()).expect("re-encoded request decodes");
        assert_eq!(again, req);
    }
    if let Ok(reply) = Reply::decode(data) {
        let again = Reply::decode(&reply.encode()).expect("re-encoded reply decodes");
        assert_eq!(again, reply);
    }
    let _ = Request::peek_id(data);
    let _ = Hello::decode(data);
    let _ = Challenge::decode(data);
    let _ = Proof::decode(data);
    let _ = Welcome::decode(data);
    let _ = Refused::decode(data);
});
