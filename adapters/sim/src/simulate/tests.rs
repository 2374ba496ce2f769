//! The simulator: determinism, a clean run, and a checker that can fail.

use super::*;

#[test]
fn small_run_has_no_violations() {
    let report = run(&SimConfig::new(300, 1));
    assert!(report.passed(), "{report}");
    assert!(report.steps > 300);
    assert_eq!(report.outcomes.values().sum::<u64>(), 300);
}
