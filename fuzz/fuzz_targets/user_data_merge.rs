//! Merging arbitrary user data with an SSH CA key (input: `key NUL user-data`).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../oracle/user_data.rs"]
mod oracle;

fuzz_target!(|data: &[u8]| oracle::check_merge(data));
