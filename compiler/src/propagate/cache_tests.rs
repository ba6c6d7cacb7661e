//! Propagation cache tests: a cached result equals a fresh one exactly, the key follows what
//! the result depends on, damaged entries are refused, writes leave no partial file.

use super::*;
use crate::ir::{Attrs, Tensor};
use crate::propagate::tests::{random_tensor, G};
use crate::propagate::{propagate, PropagateOptions};
use crate::rng::SplitMix64;
use crate::tesa::attrs::{apply_attrs, TesaAttrs};

/// An MLP with zero columns in its first weight (pruned rows flow into the second).
fn mlp() -> Graph {
    let mut rng = SplitMix64::new(7);
    let mut b = G::new();
    let x = b.input("x", &[4, 64]);
    let mut w1 = random_tensor(&mut rng, &[64, 96], 0.3).to_f64_vec();
    for r in 0..64 {
        for c in 0..40 {
            w1[r * 96 + c] = 0.0;
        }
    }
    let w1 = Tensor::new(vec![64, 96], crate::ir::Data::from_f64_iter(crate::ir::DType::F32, w1.into_iter()));
    let w1 = b.init("w1", w1.unwrap());
    let w2 = b.init("w2", random_tensor(&mut rng, &[96, 70], 0.0));
    let h = b.node("MatMul", &[x, w1], Attrs::new());
    let h = b.node("Relu", &[h], Attrs::new());
    let y = b.node("MatMul", &[h, w2], Attrs::new());
    let mut g = b.finish(&[y]);
    for v in g.values.iter_mut() {
        v.tesa = None;
    }
    g
}

const ATTRS: &str = r#"{"tensors": {"w2": {"block_magnitude": {"block": [8, 8], "sparsity": 0.5}, "bits": 8}}}"#;

/// `apply_attrs` then (maybe) the pass: what the cache stores.
fn sparsified(mut g: Graph, attrs: Option<&TesaAttrs>, run: bool) -> Graph {
    apply_attrs(&mut g, attrs).unwrap();
    if run {
        propagate(&mut g, &PropagateOptions::default()).unwrap();
    }
    g
}

fn key_of(g: &Graph, attrs: Option<&TesaAttrs>, run: bool) -> String {
    cache_key(graph_fingerprint(b"model", g), attrs, run, &PropagateOptions::default())
}

#[test]
fn a_cached_propagation_equals_a_fresh_one_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let cache = PropagationCache::new(dir.path().join("propagate"));
    let attrs = TesaAttrs::parse(ATTRS).unwrap();
    for (attrs, run) in [(Some(&attrs), true), (None, true), (Some(&attrs), false)] {
        let fresh = sparsified(mlp(), attrs, run);
        assert!(fresh.values.iter().any(|v| v.tesa.as_ref().is_some_and(|t| t.n_pruned() > 0)));
        let key = key_of(&mlp(), attrs, run);
        let mut cached = mlp();
        assert_eq!(cache.load(&key, &mut cached), Lookup::Miss);
        assert_eq!(cached, mlp(), "a miss leaves the graph as it was");
        cache.store(&key, &fresh).unwrap();
        assert_eq!(cache.load(&key, &mut cached), Lookup::Hit);
        assert_eq!(cached, fresh, "attrs {}, propagate {run}", attrs.is_some());
    }
    // Without the pass the activations keep no TeSA; with it every value has one.
    let fresh = sparsified(mlp(), Some(&attrs), true);
    assert!(fresh.values.iter().all(|v| v.tesa.is_some()));
    let bytes = encode("k", &fresh);
    let dense_bits: usize = fresh.values.iter().map(|v| v.fact.shape.iter().product::<usize>()).sum();
    assert!(bytes.len() < dense_bits / 8, "{} bytes for {dense_bits} elements", bytes.len());
}

#[test]
fn the_key_follows_the_model_the_attrs_and_the_flag() {
    let attrs = TesaAttrs::parse(ATTRS).unwrap();
    let other = TesaAttrs::parse(&ATTRS.replace("0.5", "0.75")).unwrap();
    let g = mlp();
    let base = key_of(&g, Some(&attrs), true);
    assert_eq!(base, key_of(&mlp(), Some(&attrs), true), "the same inputs, the same key");
    assert_eq!(base.len(), 16);
    let mut keys = vec![
        base.clone(),
        key_of(&g, Some(&other), true),
        key_of(&g, None, true),
        key_of(&g, Some(&attrs), false),
        cache_key(graph_fingerprint(b"model2", &g), Some(&attrs), true, &PropagateOptions::default()),
        cache_key(
            graph_fingerprint(b"model", &g),
            Some(&attrs),
            true,
            &PropagateOptions { max_visits_per_node: 7, ..Default::default() },
        ),
    ];
    // Another weight value, another pinned shape.
    let mut weights = mlp();
    let id = weights.find_value("w2").unwrap();
    weights
        .initializers
        .insert(id, crate::ir::Initializer::Dense(Tensor::from_vec(vec![96, 70], vec![0.5f32; 96 * 70])));
    keys.push(key_of(&weights, Some(&attrs), true));
    let mut shape = mlp();
    let x = shape.find_value("x").unwrap();
    shape.values[x.index()].fact.shape = vec![8, 64];
    keys.push(key_of(&shape, Some(&attrs), true));
    // A mask read from a file counts by content.
    let mask = |keep: bool| {
        let m = TesaAttrs::parse(&format!(r#"{{"tensors": {{"w1": {{"mask": [[1, {}]]}}}}}}"#, u8::from(keep)));
        attrs_fingerprint(&m.unwrap())
    };
    assert_ne!(mask(true), mask(false));
    let n = keys.len();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), n, "every change gives another key");
}

#[test]
fn a_damaged_entry_is_refused_and_leaves_the_graph() {
    let dir = tempfile::tempdir().unwrap();
    let cache = PropagationCache::new(dir.path());
    let fresh = sparsified(mlp(), None, true);
    let key = key_of(&mlp(), None, true);
    cache.store(&key, &fresh).unwrap();
    let path = cache.path_of(&key);
    let good = std::fs::read(&path).unwrap();
    let damaged = |bytes: &[u8]| {
        std::fs::write(&path, bytes).unwrap();
        let mut g = mlp();
        let found = cache.load(&key, &mut g);
        assert_eq!(g, mlp(), "a damaged entry changes nothing");
        match found {
            Lookup::Damaged(why) => why,
            other => panic!("{other:?}"),
        }
    };
    // Truncated anywhere, one byte flipped anywhere, empty.
    for n in [0, 1, 8, good.len() / 2, good.len() - 1] {
        assert!(!damaged(&good[..n]).is_empty());
    }
    for at in [0, 10, good.len() / 2, good.len() - 1] {
        let mut bad = good.clone();
        bad[at] ^= 0x10;
        assert!(damaged(&bad).contains("checksum"), "byte {at}");
    }
    // Intact, but under another key or for another graph.
    std::fs::write(&path, encode("0000000000000000", &fresh)).unwrap();
    assert!(matches!(cache.load(&key, &mut mlp()), Lookup::Damaged(w) if w.contains("another key")));
    let mut other = G::new();
    let x = other.input("x", &[4, 64]);
    let small = other.finish(&[x]);
    std::fs::write(&path, encode(&key, &small)).unwrap();
    assert!(matches!(cache.load(&key, &mut mlp()), Lookup::Damaged(w) if w.contains("not for this graph")));
    // Rewritten, it is used again.
    cache.store(&key, &fresh).unwrap();
    let mut g = mlp();
    assert_eq!(cache.load(&key, &mut g), Lookup::Hit);
    assert_eq!(g, fresh);
}

#[test]
fn a_failed_write_leaves_no_entry_and_no_temporary() {
    let dir = tempfile::tempdir().unwrap();
    let fresh = sparsified(mlp(), None, true);
    let key = key_of(&mlp(), None, true);
    // The cache folder is a file: the folder cannot be made.
    let blocked = dir.path().join("file");
    std::fs::write(&blocked, b"x").unwrap();
    let err = PropagationCache::new(blocked.join("propagate")).store(&key, &fresh).unwrap_err();
    assert!(err.to_string().contains("propagate"), "{err}");
    // The entry's name is taken by a folder: the rename fails, the temporary file goes.
    let cache = PropagationCache::new(dir.path().join("cache"));
    std::fs::create_dir_all(cache.path_of(&key).join("inside")).unwrap();
    let err = cache.store(&key, &fresh).unwrap_err();
    assert!(err.to_string().contains(&key), "{err}");
    let names: Vec<_> = std::fs::read_dir(cache.dir()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names.len(), 1, "{names:?}");
    assert_eq!(cache.load(&key, &mut mlp()), Lookup::Miss);
}

/// A FIFO in an entry's place would block a reader that opened it: it is refused by its type,
/// unopened, and the graph is left as it was.
#[test]
#[cfg(unix)]
fn a_fifo_in_an_entrys_place_is_not_opened() {
    let dir = tempfile::tempdir().unwrap();
    let cache = PropagationCache::new(dir.path());
    let key = key_of(&mlp(), None, true);
    let made = std::process::Command::new("mkfifo").arg(cache.path_of(&key)).status().is_ok_and(|s| s.success());
    assert!(made, "mkfifo is needed for this test");
    let mut g = mlp();
    assert_eq!(cache.load(&key, &mut g), Lookup::Damaged("not a regular file".into()));
    assert_eq!(g, mlp());
}
