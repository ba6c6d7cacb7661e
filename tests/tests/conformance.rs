//! Every ONNX backend node test on the allow-list (`tests/conformance/claimed/*.txt`)
//! passes. The data comes from `tests/conformance/setup.sh` (CI runs it); without it
//! this test fails and says how to make it.

use spartac_tests::conformance::{claimed_tests, family_of, node_tests_dir, run_node_test};
use std::collections::BTreeMap;

#[test]
fn claimed_node_tests_pass() {
    let root = node_tests_dir();
    assert!(root.is_dir(), "{} is missing: run tests/conformance/setup.sh first (.ci/run does)", root.display());
    let claimed = claimed_tests().unwrap();
    assert!(!claimed.is_empty(), "the allow-list is empty");
    let mut per_family: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    let mut failures = vec![];
    for name in &claimed {
        let dir = root.join(name);
        let entry = per_family.entry(family_of(&dir)).or_default();
        entry.1 += 1;
        match run_node_test(&dir) {
            Ok(_) => entry.0 += 1,
            Err(e) => failures.push(format!("{name}: {e:#}")),
        }
    }
    eprintln!("{:<14} {:>7} {:>7}", "family", "passed", "claimed");
    for (family, (p, a)) in &per_family {
        eprintln!("{family:<14} {p:>7} {a:>7}");
    }
    assert!(
        failures.is_empty(),
        "{} of {} claimed node tests fail:\n{}",
        failures.len(),
        claimed.len(),
        failures.join("\n")
    );
}
