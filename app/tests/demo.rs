//! `demo` as a person or CI runs it: a FAIL says what failed, progress is
//! printed as lines when stdout is not a terminal, and
//! `--create-failure-rate 0` is a clean cloud for every Server.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

fn demo(args: &[&str]) -> (bool, String, String) {
    let output =
        Command::new(env!("CARGO_BIN_EXE_server-controller")).arg("demo").args(args).output().expect("demo runs");
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    (output.status.success(), text(&output.stdout), text(&output.stderr))
}

/// A run cut short by --timeout fails and says why: how many Servers did not
/// settle, which, and where they stood; not a bare `verdict: FAIL`.
#[test]
fn a_failed_run_names_what_failed() {
    let (passed, stdout, stderr) = demo(&["--servers", "30", "--timeout", "1s", "--seed", "3"]);
    assert!(!passed, "{stdout}");
    let verdict =
        stdout.split_once("verdict: FAIL\n").map(|(_, after)| after).unwrap_or_else(|| panic!("{stdout}{stderr}"));
    let reason = verdict.lines().next().unwrap_or_default();
    assert!(reason.contains("Servers did not settle within --timeout 1s: server-"), "{stdout}");
    assert!(reason.contains(" (") && reason.contains("more"), "{reason:?} in {stdout}");
    // Not a terminal: progress as lines on stderr, never on stdout.
    assert!(stderr.lines().any(|line| line.starts_with("settling servers: stopped at ")), "{stderr}");
    assert!(!stdout.contains("settling servers"), "{stdout}");
}

/// `--create-failure-rate 0`: every Server, the showcase ones included, gets a
/// clean cloud: all boot at the first create, no Server is refused or parked.
#[test]
fn a_clean_cloud_is_clean_for_every_server() {
    let (passed, stdout, stderr) = demo(&["--servers", "8", "--create-failure-rate", "0", "--timeout", "120s"]);
    assert!(passed, "{stdout}{stderr}");
    // Not a terminal: a line per 10 % settled.
    let lines: Vec<&str> = stderr.lines().filter(|line| line.starts_with("settling servers: ")).collect();
    assert!(lines.last().is_some_and(|line| line.contains("8/8 (100%)")), "{stderr}");
    let table: Vec<&str> = stdout
        .lines()
        .skip_while(|line| !line.contains("fate (what the cloud does)"))
        .skip(1)
        .take_while(|l| !l.is_empty())
        .collect();
    assert_eq!(table.len(), 1, "{stdout}");
    assert!(table[0].contains("boots cleanly") && table[0].contains("running") && table[0].ends_with(" 8"), "{stdout}");
    for faulty in ["ProviderCreateFailed", "ProviderCreateRefused", "ProviderServerMissing", "ProviderCreateRetrying"] {
        assert!(!stdout.contains(faulty), "{faulty}: {stdout}");
    }
}
