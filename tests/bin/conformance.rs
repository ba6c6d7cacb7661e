//! Runs ONNX node tests and reports pass/fail per test and per op family.
//!
//! `cargo run -p spartac-tests --bin conformance -- [--claimed] [--write-claimed] [-v] [FILTER...]`
//! Without `--claimed` it runs every generated test whose name contains a FILTER
//! (all when none is given); `--claimed` runs the allow-list. `--write-claimed` rewrites
//! `tests/conformance/claimed/<family>.txt` with the passing tests of our op families.

use spartac_tests::conformance::{claimed_tests, family_of, main_op, node_tests_dir, run_node_test, Mode};
use std::collections::BTreeMap;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let claimed_only = args.iter().any(|a| a == "--claimed");
    let verbose = args.iter().any(|a| a == "-v");
    let filters: Vec<&String> = args.iter().filter(|a| !a.starts_with('-')).collect();
    let root = node_tests_dir();
    let names: Vec<String> = if claimed_only {
        claimed_tests()?
    } else {
        let mut all: Vec<String> = std::fs::read_dir(&root)?
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        all.sort();
        all.into_iter().filter(|n| filters.is_empty() || filters.iter().any(|f| n.contains(f.as_str()))).collect()
    };
    let write_claimed = args.iter().any(|a| a == "--write-claimed");
    let mut per_family: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    let mut passing: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    for name in &names {
        let dir = root.join(name);
        let family = family_of(&dir);
        let result = std::panic::catch_unwind(|| run_node_test(&dir));
        let entry = per_family.entry(family.clone()).or_default();
        entry.1 += 1;
        match result {
            Ok(Ok(mode)) => {
                entry.0 += 1;
                passing.entry(family.clone()).or_default().push((name.clone(), main_op(&dir)));
                let note = if mode == Mode::FrozenShapeInputs { " (shape inputs frozen)" } else { "" };
                println!("PASS {name}{note}");
            }
            Ok(Err(e)) => println!("FAIL {name}: {}", if verbose { format!("{e:#}") } else { format!("{e}") }),
            Err(_) => println!("PANIC {name}"),
        }
    }
    println!("\n{:<28} {:>7} {:>9}", "family", "passed", "attempted");
    let (mut p, mut a) = (0, 0);
    for (family, (passed, attempted)) in &per_family {
        println!("{family:<28} {passed:>7} {attempted:>9}");
        p += passed;
        a += attempted;
    }
    println!("{:<28} {p:>7} {a:>9}", "total");
    let ours: Vec<_> = per_family.iter().filter(|(f, _)| !f.starts_with("other:")).collect();
    let (op, oa) = ours.iter().fold((0, 0), |(p, a), (_, (x, y))| (p + x, a + y));
    println!("{:<28} {op:>7} {oa:>9}", "total (our op families)");
    if write_claimed {
        let dir = spartac_tests::repo_root().join("tests/conformance/claimed");
        // Tests of ops we do not register that pass through their function bodies
        // (`_expanded`) go together into composite.txt.
        let mut grouped: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
        for (family, tests) in &passing {
            let key = if family.starts_with("other:") { "composite".to_string() } else { family.clone() };
            grouped.entry(key).or_default().extend(tests.iter().cloned());
        }
        for (family, tests) in &grouped {
            let mut ops: Vec<&str> = tests.iter().map(|(_, op)| op.as_str()).collect();
            ops.sort();
            ops.dedup();
            let mut text = format!(
                "# {family}: ONNX node tests of {} that pass (regenerate with --write-claimed)\n",
                ops.join(", ")
            );
            for (name, _) in tests {
                text.push_str(name);
                text.push('\n');
            }
            std::fs::write(dir.join(format!("{family}.txt")), text)?;
        }
        println!("wrote the allow-lists in {}", dir.display());
    }
    Ok(())
}
