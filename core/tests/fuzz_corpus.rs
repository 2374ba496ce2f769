//! Replays the committed fuzz corpora (fuzz/corpus/<target>/) on the stable
//! toolchain through the same checks as the fuzz targets.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;

#[path = "../../fuzz/oracle/user_data.rs"]
mod oracle;

fn corpus(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus").join(target);
    let mut files: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|entry| {
            let path = entry.unwrap().path();
            let bytes = std::fs::read(&path).unwrap();
            (path, bytes)
        })
        .collect();
    files.sort();
    assert!(!files.is_empty(), "empty corpus {}", dir.display());
    files
}

fn replay(target: &str, check: fn(&[u8])) {
    let files = corpus(target);
    for (path, bytes) in &files {
        let result = std::panic::catch_unwind(|| check(bytes));
        assert!(result.is_ok(), "{target}: {} fails its check", path.display());
    }
    eprintln!("{target}: {} corpus files replayed", files.len());
}

#[test]
fn user_data_validate_corpus() {
    replay("user_data_validate", oracle::check_validate);
}

#[test]
fn user_data_merge_corpus() {
    replay("user_data_merge", oracle::check_merge);
}
