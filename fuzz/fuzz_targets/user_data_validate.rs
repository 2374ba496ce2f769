//! Typing and validation of arbitrary bytes as user data.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../oracle/user_data.rs"]
mod oracle;

fuzz_target!(|data: &[u8]| oracle::check_validate(data));
