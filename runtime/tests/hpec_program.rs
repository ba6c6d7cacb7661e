//! The HPEC task graph without a GPU: the real 1024-neuron network compiled through the planner
//! and the specializer, lowered to the batch program, and run by the CPU executor (the same
//! buffers, steps and order the CUDA graph gets) gives the CPU engine's categories; the
//! streaming schedule and the dependency edges are checked; the layer and row kernels compile
//! with NVRTC for sm_90a; batches are dealt to simulated devices as to GPUs.

use spartac::codegen::Engine;
use spartac::program::hpec::{HpecOptions, Precision};
use spartac::program::{Launch, Op, Storage};
use spartac_runtime::cuda::{compile_ptx, nvrtc_version, preload_nvrtc};
use spartac_runtime::exec::cpu;
use spartac_runtime::hpec::{self, bundled, task_graph, GeneratorConfig, InferOptions};
use std::path::Path;

fn real_network(layers: usize) -> hpec::Network {
    let relabellings = Some(bundled::real_1024_relabellings().unwrap());
    hpec::generate_with(&GeneratorConfig { neurons: 1024, layers, seed: 0, relabellings }).unwrap()
}

/// The first 600 real images and the categories the truth file gives them.
fn first_600_with_truth() -> (hpec::Images, Vec<u32>) {
    let mut truth = bundled::real_1024_categories().unwrap();
    truth.retain(|&id| id <= 600);
    (bundled::real_1024_images().unwrap().first(600), truth)
}

fn options(batch: usize) -> HpecOptions {
    HpecOptions { batch, ..HpecOptions::default() }
}

#[test]
fn simulated_program_matches_the_cpu_engine_and_the_truth_on_the_real_network() {
    let network = real_network(120);
    let (images, truth) = first_600_with_truth();
    // Three batches, the last one partial.
    let compiled = task_graph::compile(&network, &images, &options(250), &|| {}).unwrap();
    let got = task_graph::run_cpu(&compiled).unwrap();
    let engine = hpec::infer(&network, &images, &InferOptions::default()).unwrap().categories;
    assert!(!truth.is_empty(), "the sample must hold categories for the check to mean anything");
    assert_eq!(got, engine);
    assert_eq!(got, truth);
}

#[test]
fn reordered_neurons_keep_the_truth_and_shrink_the_first_blocks_tables() {
    let network = real_network(40);
    let (images, truth) = first_600_with_truth();
    let natural =
        task_graph::compile(&network, &images, &HpecOptions { reorder: false, ..options(250) }, &|| {}).unwrap();
    let reordered = task_graph::compile(&network, &images, &options(250), &|| {}).unwrap();
    assert_eq!(natural.reordered_layers, 0);
    // Every layer before the tail (layer 32): the last boundary keeps the network's order.
    assert_eq!(reordered.reordered_layers, 32);
    assert_eq!(task_graph::run_cpu(&natural).unwrap(), truth);
    assert_eq!(task_graph::run_cpu(&reordered).unwrap(), truth);
    // Permuting between the relabelled blocks' layers: every relabelled layer then plans as
    // blocks or fine tiles of its own grouping, a step moves the rows between the two orders.
    let permuted =
        task_graph::compile(&network, &images, &HpecOptions { permute_from: Some(1024), ..options(250) }, &|| {})
            .unwrap();
    assert_eq!(reordered.permuted_boundaries, 0);
    assert!(permuted.permuted_boundaries >= 20, "{}", permuted.permuted_boundaries);
    let steps = &permuted.lowering.program.steps;
    assert_eq!(
        steps.iter().filter(|s| matches!(s.op, spartac::program::Op::PermuteColumns { .. })).count(),
        permuted.permuted_boundaries
    );
    assert_eq!(task_graph::run_cpu(&permuted).unwrap(), truth);
    // The fine kernel's 8-column tiles share their k once columns with equal row sets sit
    // together: fewer padded k8 x n8 steps, smaller tables.
    let bytes = |c: &task_graph::CompiledNetwork| c.lowering.weight_bytes;
    assert!(bytes(&reordered) * 4 < bytes(&natural) * 3, "{} against {}", bytes(&reordered), bytes(&natural));
}

#[test]
fn the_f64_program_matches_the_truth_on_the_real_network() {
    let network = real_network(120);
    let (images, truth) = first_600_with_truth();
    let opts = HpecOptions { precision: Precision::F64, ..options(250) };
    let compiled = task_graph::compile(&network, &images, &opts, &|| {}).unwrap();
    let program = &compiled.lowering.program;
    program.verify().unwrap();
    assert!(program.buffers.iter().any(|b| b.name == "act0" && b.elem == spartac::program::Elem::F64));
    assert!(program.kernels.iter().any(|k| k.name.starts_with("gather_layer") && k.name.contains("_f64")));
    assert!(program.kernels.iter().any(|k| k.name.starts_with("tail_layers") && k.name.ends_with("_f64")));
    assert!(!truth.is_empty());
    assert_eq!(task_graph::run_cpu(&compiled).unwrap(), truth);
}

#[test]
fn fp32_gather_layers_match_the_truth_on_the_real_network() {
    let network = real_network(120);
    let (images, truth) = first_600_with_truth();
    for fold_values in [true, false] {
        // In the network's order (reordered, the first block's layers plan as blocks instead).
        let opts = HpecOptions { gather_from: Some(1024), fold_values, reorder: false, ..options(250) };
        let compiled = task_graph::compile(&network, &images, &opts, &|| {}).unwrap();
        let low = &compiled.lowering;
        assert!(low.layer_summaries[..32].iter().all(|s| s.starts_with("gather_f32")), "{:?}", low.layer_summaries);
        assert_eq!(low.layer_summaries[0].ends_with(":folded"), fold_values);
        assert_eq!(task_graph::run_cpu(&compiled).unwrap(), truth, "fold {fold_values}");
    }
}

#[test]
fn where_fp32_loses_an_image_of_the_4096_network_the_f64_program_keeps_the_references_categories() {
    // Image 42,014 of the 4096-neuron network's inputs sits on the unstable fixed point of
    // x -> 2x - 0.35 from layer 8: the f64 reference saturates it, fp32 rounding kills it.
    let network = hpec::generate(4096, 40, 0).unwrap();
    let all = hpec::mnist::mnist_images(&bundled::mnist_digits().unwrap(), 4096, 42_040).unwrap();
    let order: Vec<u32> = (41_990..42_040).collect();
    let images = all.reordered(&order).unwrap();
    let reference = hpec::reference_categories(&network, &images).unwrap();
    let lost = 42_014 - 41_990;
    assert!(reference.contains(&lost), "the reference keeps image 42,014: {reference:?}");
    let run = |precision| {
        let opts = HpecOptions { precision, ..options(images.n_images()) };
        task_graph::run_cpu(&task_graph::compile(&network, &images, &opts, &|| {}).unwrap()).unwrap()
    };
    let fp32 = run(Precision::F32);
    assert!(!fp32.contains(&lost), "fp32 loses image 42,014 (the case this test exists for): {fp32:?}");
    assert_eq!(run(Precision::F64), reference);
    // Screened (the default): an upper bound in fp32 over the layers before the tail, a lower
    // bound over every layer for its survivors, f64 for the survivors the lower bound lost:
    // image 42,014 and few others. The categories are the reference's.
    let tail_start = HpecOptions::default().tail_start(network.n_layers());
    let mut calls = vec![];
    let screened = hpec::screen::run_screened(&network, &images, tail_start, |net, imgs, precision| {
        calls.push((net.n_layers(), imgs.n_images(), precision));
        let opts = HpecOptions { precision, ..options(imgs.n_images()) };
        task_graph::run_cpu(&task_graph::compile(net, imgs, &opts, &|| {})?).map(|c| (c, ()))
    })
    .unwrap();
    assert_eq!(screened.categories, reference);
    let names: Vec<&str> = screened.stages.iter().map(|s| s.name).collect();
    assert_eq!(names, ["screen", "bound", "settle"]);
    let (survivors, bound, settle) = (&screened.stages[0], &screened.stages[1], &screened.stages[2]);
    assert!(reference.iter().all(|id| survivors.found.contains(id)), "{:?}", survivors.found);
    assert!(survivors.found.len() < images.n_images(), "the screen drops the images that die early");
    assert!(bound.found.iter().all(|id| reference.contains(id)) && !bound.found.contains(&lost));
    assert!(settle.found.contains(&lost) && settle.images <= 3, "{} settled", settle.images);
    let n = survivors.found.len();
    assert_eq!(
        calls,
        vec![(tail_start, 50, Precision::F32), (40, n, Precision::F32), (40, settle.images, Precision::F64)]
    );
}

#[test]
fn the_fp32_bounds_never_cross_the_reference() {
    // Over every layer, the upper bound's categories contain the reference's and the lower
    // bound's are among them: on the real network's images and on generated networks of other
    // widths, through the planned 3xTF32 kernels, the few-rows kernels, merging and the tail.
    use hpec::screen::{bounding_network, Bound};
    let run = |net: &hpec::Network, imgs: &hpec::Images| {
        task_graph::run_cpu(&task_graph::compile(net, imgs, &options(imgs.n_images()), &|| {}).unwrap()).unwrap()
    };
    let (images, truth) = first_600_with_truth();
    let network = real_network(120);
    let upper = run(&bounding_network(&network, 120, Bound::Upper).unwrap().network, &images);
    let lower = run(&bounding_network(&network, 120, Bound::Lower).unwrap().network, &images);
    assert!(truth.iter().all(|id| upper.contains(id)), "truth {truth:?}, upper {upper:?}");
    assert!(lower.iter().all(|id| truth.contains(id)), "truth {truth:?}, lower {lower:?}");
    assert!(upper.len() <= truth.len() + 6 && lower.len() + 6 >= truth.len(), "{upper:?} {lower:?}");
    for neurons in [256usize, 2048] {
        let network = hpec::generate(neurons, 60, 1).unwrap();
        let all = hpec::mnist::mnist_images(&bundled::mnist_digits().unwrap(), neurons, 400).unwrap();
        let reference = hpec::reference_categories(&network, &all).unwrap();
        let upper = run(&bounding_network(&network, 60, Bound::Upper).unwrap().network, &all);
        let lower = run(&bounding_network(&network, 60, Bound::Lower).unwrap().network, &all);
        assert!(reference.iter().all(|id| upper.contains(id)), "{neurons}: {reference:?} upper {upper:?}");
        assert!(lower.iter().all(|id| reference.contains(id)), "{neurons}: {reference:?} lower {lower:?}");
    }
}

#[test]
fn the_one_launch_tail_keeps_the_categories_wherever_it_starts() {
    let network = real_network(40);
    let images = hpec::mnist::mnist_images(&bundled::mnist_digits().unwrap(), 1024, 400).unwrap();
    let engine = hpec::infer(&network, &images, &InferOptions::default()).unwrap().categories;
    assert!(!engine.is_empty(), "some images must survive for the check to mean anything");
    for tail_from in [None, Some(0), Some(7), Some(24), Some(39)] {
        let opts = HpecOptions { tail_from, ..options(images.n_images()) };
        let compiled = task_graph::compile(&network, &images, &opts, &|| {}).unwrap();
        let program = &compiled.lowering.program;
        program.verify().unwrap();
        let start = tail_from.unwrap_or(40);
        let chains: Vec<usize> = program
            .steps
            .iter()
            .filter_map(|s| match &s.op {
                Op::SpmmChain { layers, .. } => Some(*layers),
                _ => None,
            })
            .collect();
        assert_eq!(chains, if start < 40 { vec![40 - start] } else { vec![] }, "tail from {tail_from:?}");
        let layer_steps = program.steps.iter().filter(|s| matches!(s.op, Op::Spmm { .. })).count();
        assert_eq!(layer_steps, start, "tail from {tail_from:?}: a step per layer before the tail");
        // No compaction inside the tail; one right before it.
        let last_compaction = (0..40).rev().find(|&l| opts.compacts_after(l, 40));
        assert!(last_compaction.is_none_or(|l| l + 1 == start.min(40)), "tail from {tail_from:?}");
        assert_eq!(task_graph::run_cpu(&compiled).unwrap(), engine, "tail from {tail_from:?}");
    }
}

#[test]
fn merging_identical_rows_keeps_the_categories_and_leaves_one_row_per_distinct_activation() {
    let network = real_network(40);
    // Distinct MNIST-derived images, and the real images repeated (copies are identical rows).
    let mnist = hpec::mnist::mnist_images(&bundled::mnist_digits().unwrap(), 1024, 300).unwrap();
    let repeated = bundled::real_1024_images().unwrap().first(600).tiled(1200).unwrap();
    for (images, merge_from) in [(&mnist, 8), (&repeated, 0), (&repeated, 8)] {
        let engine = hpec::infer(&network, images, &InferOptions::default()).unwrap().categories;
        assert!(!engine.is_empty(), "some images must survive for the check to mean anything");
        let plain = HpecOptions { merge_from: None, ..options(images.n_images()) };
        let merged = HpecOptions { merge_from: Some(merge_from), ..options(images.n_images()) };
        let (got_plain, rows_plain) =
            task_graph::run_cpu_counted(&task_graph::compile(&network, images, &plain, &|| {}).unwrap()).unwrap();
        let compiled = task_graph::compile(&network, images, &merged, &|| {}).unwrap();
        let program = &compiled.lowering.program;
        let merges = program.steps.iter().filter(|s| matches!(s.op, Op::CompactRows { merge: Some(_), .. })).count();
        assert!(merges > 0 && program.steps.iter().any(|s| matches!(s.op, Op::ResolveAliases { .. })));
        program.verify().unwrap();
        let (got, rows) = task_graph::run_cpu_counted(&compiled).unwrap();
        assert_eq!(got_plain, engine);
        assert_eq!(got, engine, "merge from layer {merge_from}");
        // The survivors all converge to one row by layer 40; without merging they stay apart.
        assert_eq!(*rows.last().unwrap(), 1, "{rows:?}");
        assert!(*rows_plain.last().unwrap() as usize == engine.len(), "{rows_plain:?}");
    }
}

#[test]
fn the_merged_f64_reference_equals_the_image_by_image_one() {
    let network = real_network(40);
    let mnist = hpec::mnist::mnist_images(&bundled::mnist_digits().unwrap(), 1024, 300).unwrap();
    let repeated = bundled::real_1024_images().unwrap().first(600).tiled(900).unwrap();
    for images in [&mnist, &repeated] {
        let one_by_one: Vec<u32> = (0..images.n_images())
            .filter(|&i| hpec::reference::reference_final_row(&network, images, i).iter().any(|&v| v != 0.0))
            .map(|i| i as u32 + 1)
            .collect();
        assert!(!one_by_one.is_empty());
        assert_eq!(hpec::reference_categories(&network, images).unwrap(), one_by_one);
    }
}

#[test]
fn without_compaction_and_with_streamed_weights_the_categories_stay() {
    let network = real_network(24);
    // MNIST-derived inputs: more of them survive than of the first real images.
    let images = hpec::mnist::mnist_images(&bundled::mnist_digits().unwrap(), 1024, 200).unwrap();
    let engine = hpec::infer(&network, &images, &InferOptions::default()).unwrap().categories;
    assert!(!engine.is_empty(), "24 layers keep some images alive");
    for opts in [
        HpecOptions { compact_every: 0, ..options(200) },
        HpecOptions { compact_every: 5, ..options(64) },
        HpecOptions { weight_budget: 0, stream_slots: 3, ..options(200) },
        HpecOptions { fold_values: false, engine: Engine::Simt, ..options(128) },
        HpecOptions { fine_only: true, ..options(200) },
    ] {
        let compiled = task_graph::compile(&network, &images, &opts, &|| {}).unwrap();
        assert_eq!(task_graph::run_cpu(&compiled).unwrap(), engine, "{opts:?}");
    }
}

#[test]
fn dropping_dead_rows_in_place_keeps_the_live_counts_and_categories_of_packing() {
    let network = real_network(24);
    let images = hpec::mnist::mnist_images(&bundled::mnist_digits().unwrap(), 1024, 300).unwrap();
    // Merging off, so that every compaction is a drop (in place) or a packing copy.
    let run = |compact_in_place| {
        let opts = HpecOptions { compact_in_place, merge_from: None, ..options(300) };
        let compiled = task_graph::compile(&network, &images, &opts, &|| {}).unwrap();
        let steps = &compiled.lowering.program.steps;
        let drops = steps.iter().filter(|s| matches!(s.op, spartac::program::Op::DropRows { .. })).count();
        let packs = steps.iter().filter(|s| matches!(s.op, spartac::program::Op::CompactRows { .. })).count();
        assert_eq!((drops > 0, packs > 0), (compact_in_place, !compact_in_place));
        task_graph::run_cpu_counted(&compiled).unwrap()
    };
    let (dropped, dropped_live) = run(true);
    let (packed, packed_live) = run(false);
    let engine = hpec::infer(&network, &images, &InferOptions::default()).unwrap().categories;
    assert_eq!(dropped, engine);
    assert_eq!(packed, engine);
    assert_eq!(dropped_live, packed_live);
    // Rows died along the way, so the drops moved rows into the dead ones' places.
    assert!(dropped_live.windows(2).any(|w| w[1] < w[0]), "{dropped_live:?}");
}

#[test]
fn a_network_over_the_weight_budget_streams_through_k_slots_each_copy_before_its_reader() {
    let network = real_network(10);
    let images = bundled::real_1024_images().unwrap().first(64);
    let slots = 3;
    let opts = HpecOptions { weight_budget: 1 << 20, stream_slots: slots, ..options(64) };
    let compiled = task_graph::compile(&network, &images, &opts, &|| {}).unwrap();
    let low = &compiled.lowering;
    assert!(low.streamed && low.weight_bytes > 1 << 20);
    let p = &low.program;
    let slot_names: std::collections::BTreeSet<&str> =
        p.buffers.iter().filter(|b| b.name.starts_with("slot")).map(|b| b.name.split('.').next().unwrap()).collect();
    assert_eq!(slot_names.len(), slots);
    assert!(p
        .buffers
        .iter()
        .filter(|b| b.name.starts_with('l') && b.name[1..2].bytes().all(|c| c.is_ascii_digit()))
        .all(|b| matches!(b.storage, Storage::Host(_))));
    // Every layer step reads slot buffers whose copies are among its ancestors.
    p.verify().unwrap();
    for (i, s) in p.steps.iter().enumerate() {
        if let Op::Spmm { packed, .. } = &s.op {
            for (buf, _, _) in packed {
                let writer = (0..i)
                    .rev()
                    .find(|&j| p.steps[j].launches.iter().any(|l| matches!(l, Launch::Copy { dst, .. } if dst == buf)));
                let writer = writer.expect("a copy lands every slot before it is read");
                assert!(ancestors(p, i).contains(&writer), "step {i} does not wait for copy {writer}");
            }
        }
    }
    // Dropping one edge from a layer to its copy is caught by verify, and a layer that runs on
    // a stale slot is caught by the simulation.
    let layer = p.steps.iter().position(|s| matches!(s.op, Op::Spmm { .. })).unwrap();
    let mut broken = p.clone();
    let moves: Vec<bool> = broken.steps.iter().map(|s| matches!(s.op, Op::Move)).collect();
    broken.steps[layer].after.retain(|&j| !moves[j]);
    assert!(broken.verify().unwrap_err().to_string().contains("not ordered"));
    let mut stale = p.clone();
    let copy = stale.steps.iter().position(|s| matches!(s.op, Op::Move)).unwrap();
    stale.steps[copy].launches.clear();
    let mut mem = cpu::CpuMemory::new(&stale);
    let err = cpu::run(&stale, &mut mem, &[0]).unwrap_err().to_string();
    assert!(err.contains("before any step wrote it") || err.contains("copy not landed"), "{err}");
}

fn ancestors(p: &spartac::program::Program, i: usize) -> std::collections::BTreeSet<usize> {
    let mut seen = std::collections::BTreeSet::new();
    let mut todo = p.steps[i].after.clone();
    while let Some(j) = todo.pop() {
        if seen.insert(j) {
            todo.extend(&p.steps[j].after);
        }
    }
    seen
}

#[test]
fn a_streamed_network_streams_its_tail_in_segments_each_copy_before_its_launch() {
    let network = real_network(120);
    let images = bundled::real_1024_images().unwrap().first(300);
    let mut truth = bundled::real_1024_categories().unwrap();
    truth.retain(|&id| id <= 300);
    // 112 tail layers: two segments through one slot, so the second copy must wait for the
    // first segment's launch.
    let opts = HpecOptions { weight_budget: 0, stream_slots: 1, tail_from: Some(8), ..options(300) };
    let compiled = task_graph::compile(&network, &images, &opts, &|| {}).unwrap();
    let p = &compiled.lowering.program;
    p.verify().unwrap();
    assert!(compiled.lowering.streamed);
    let chains: Vec<usize> = (0..p.steps.len()).filter(|&i| matches!(p.steps[i].op, Op::SpmmChain { .. })).collect();
    let lens: Vec<usize> = chains
        .iter()
        .map(|&i| match p.steps[i].op {
            Op::SpmmChain { layers, .. } => layers,
            _ => unreachable!(),
        })
        .collect();
    let seg = spartac::program::hpec::TAIL_STREAM_LAYERS;
    assert_eq!(lens, vec![seg, 112 - seg]);
    for &i in &chains {
        let Op::SpmmChain { idx, w, .. } = p.steps[i].op else { unreachable!() };
        for table in [idx, w] {
            assert!(p.buffer(table).name.starts_with("tail.slot0"), "{}", p.buffer(table).name);
            // The copy that fills this slot for this segment is an ancestor of the launch.
            let fill = (0..i)
                .rev()
                .find(|&j| p.steps[j].launches.iter().any(|l| matches!(l, Launch::Copy { dst, .. } if *dst == table)));
            let fill = fill.expect("a copy into the slot before the launch");
            assert!(
                ancestors(p, i).contains(&fill),
                "segment at step {i}: its copy (step {fill}) is not ordered before it"
            );
            if i != chains[0] {
                // Reusing the slot: the copy waits for the segment that read it last.
                assert!(ancestors(p, fill).contains(&chains[0]), "the copy at step {fill} overwrites a slot in use");
            }
        }
    }
    // The tables in the slots are the host copies' (host storage, not device constants).
    assert!(p.buffers.iter().any(|b| b.name == "tail.idx" && matches!(b.storage, Storage::Host(_))));
    assert_eq!(task_graph::run_cpu(&compiled).unwrap(), truth);
}

#[test]
fn rolling_buffers_never_overlap_live_data() {
    // The two activation buffers alternate: a layer never writes the buffer it reads, and a
    // compaction never packs into the buffer it scans.
    let network = real_network(12);
    let images = bundled::real_1024_images().unwrap().first(32);
    let compiled =
        task_graph::compile(&network, &images, &HpecOptions { compact_every: 3, ..options(32) }, &|| {}).unwrap();
    for s in &compiled.lowering.program.steps {
        match &s.op {
            Op::Spmm { a, c, .. } => assert_ne!(a, c, "{}", s.label),
            Op::CompactRows { src, dst, src_ids, dst_ids, .. } => {
                assert_ne!(src, dst, "{}", s.label);
                assert_ne!(src_ids, dst_ids, "{}", s.label);
            }
            _ => {}
        }
    }
    compiled.lowering.program.verify().unwrap();
}

#[test]
fn layer_and_row_kernels_of_the_real_network_compile_with_nvrtc() {
    let lib = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.cuda/nvidia/cu13/lib");
    if lib.is_dir() {
        preload_nvrtc(&lib).expect("loading NVRTC from .cuda");
    }
    if let Err(e) = nvrtc_version() {
        panic!("NVRTC is required by this test and was not found ({e}); run tests/run-all.sh");
    }
    // A sample of the real layers at the batch the benchmarks use, both engines.
    let network = real_network(120);
    let (mut permuting, mut drops) = (0, 0);
    let images = bundled::real_1024_images().unwrap();
    // The third sample runs on the row-scatter kernel (from 1,024 neurons instead of 16,384).
    // The first sample runs its last two layers in the one-launch tail.
    // The fourth sample is the f64 program (exact layers, f64 rows, f64 tail), the fifth the
    // fp32 gather layers with their values in a table (not folded), the sixth the f64 program
    // of a screened run's settle (a batch of 40 rows: gathers in 256-column slices).
    for (engine, layers, scatter_from, tail_from, precision, gather_from, batch) in [
        (Engine::Auto, [0usize, 57, 119], None, Some(1), Precision::F32, None, 60_000),
        (Engine::Simt, [3, 64, 111], None, None, Precision::F32, None, 60_000),
        (Engine::Auto, [5, 80, 101], Some(1024), None, Precision::F32, None, 60_000),
        (Engine::Auto, [2, 70, 118], None, Some(2), Precision::F64, None, 60_000),
        (Engine::Auto, [4, 77, 90], None, None, Precision::F32, Some(1024), 60_000),
        (Engine::Auto, [6, 60, 100], None, None, Precision::F64, None, 40),
    ] {
        let sample = hpec::Network {
            neurons: network.neurons,
            bias: network.bias,
            layers: layers.iter().map(|&l| network.layers[l].clone()).collect(),
        };
        // Merging from the first layer: the merge kernels are in the program too.
        let opts = HpecOptions {
            batch,
            engine,
            merge_from: Some(0),
            scatter_from,
            tail_from,
            precision,
            gather_from,
            fold_values: gather_from.is_none(),
            // Boundaries between unrelated layers permute at this width too.
            permute_from: Some(1024),
            ..HpecOptions::default()
        };
        let compiled = task_graph::compile(&sample, &images, &opts, &|| {}).unwrap();
        let kernels = &compiled.lowering.program.kernels;
        permuting += usize::from(kernels.iter().any(|k| k.name.starts_with("permute_columns")));
        drops += kernels.iter().filter(|k| k.name.starts_with("drop_rows_")).count();
        let gathers = kernels.iter().filter(|k| k.name.starts_with("gather_layer")).count();
        let want = precision == Precision::F64 || gather_from.is_some();
        assert_eq!(gathers > 0, want, "gather layer kernels: {gathers}");
        assert!(kernels.iter().any(|k| k.name.starts_with("merge_hash")));
        assert_eq!(kernels.iter().any(|k| k.name.starts_with("tail_layers")), tail_from.is_some());
        let scatters = kernels.iter().filter(|k| k.name.starts_with("spmm_row_scatter")).count();
        assert_eq!(scatters > 0, scatter_from.is_some(), "row-scatter kernels: {scatters}");
        for k in &compiled.lowering.program.kernels {
            let ptx = compile_ptx(&k.name, &k.source, "sm_90a").unwrap_or_else(|e| panic!("{}: {e}", k.name));
            assert!(ptx.ptx.contains(&k.name), "{}: entry missing from the PTX", k.name);
        }
    }
    assert!(permuting > 0, "no sample has a permuting step");
    assert!(drops > 0, "no sample has the in-place drop's kernels");
}

#[test]
fn live_row_layer_kernels_stride_over_row_tiles_with_a_grid_sized_for_the_gpu() {
    let network = real_network(3);
    let images = bundled::real_1024_images().unwrap().tiled(60_000).unwrap();
    // Planned at 1,000 rows (the fine kernel alone) and at the whole batch (block covers too).
    for plan_rows in [1_000, 60_000] {
        let opts = HpecOptions { batch: 60_000, plan_rows: Some(plan_rows), sm_count: 132, ..HpecOptions::default() };
        let compiled = task_graph::compile(&network, &images, &opts, &|| {}).unwrap();
        let p = &compiled.lowering.program;
        let (mut strided, mut few) = (0, 0);
        for step in p.steps.iter().filter(|s| matches!(s.op, Op::Spmm { .. })) {
            for l in &step.launches {
                let Launch::Kernel { kernel, grid, .. } = l else { continue };
                let k = &p.kernels[kernel.0 as usize];
                if k.name.starts_with("spmm_few_rows") {
                    // The few-rows kernel: a row per CTA row, up to the bound, and nothing above it.
                    assert_eq!(grid.1 as usize, spartac::program::hpec::DEFAULT_FEW_ROWS, "{}", k.name);
                    few += 1;
                    continue;
                }
                assert!(
                    k.source.contains("ty += gridDim.y"),
                    "{}: a live-row layer kernel without the row-tile stride",
                    k.name
                );
                // At most twice what 132 SMs hold (32 CTAs each at most), far below 60,000 rows' tiles.
                assert!(grid.1 as usize <= (2 * 32 * 132usize).div_ceil(grid.0 as usize), "{}: grid {grid:?}", k.name);
                assert!((grid.1 as usize) < 60_000usize.div_ceil(64), "{}: grid {grid:?} not capped", k.name);
                strided += 1;
            }
        }
        assert!(strided >= 3, "plan rows {plan_rows}: {strided} layer kernels");
        assert_eq!(few, 3, "one few-rows kernel a layer");
    }
}

#[test]
fn repeated_images_are_copies_and_their_truth_repeats() {
    let base = bundled::real_1024_images().unwrap();
    let tiled = base.tiled(2_500).unwrap();
    assert_eq!(tiled.n_images(), 2_500);
    for (i, j) in [(0, 1_200), (5, 2_405), (1_199, 2_399)] {
        assert_eq!(tiled.pixels.slot(i), base.pixels.slot(j % 1_200));
        assert_eq!(tiled.pixels.slot(j), base.pixels.slot(i));
    }
    assert_eq!(hpec::images::tile_categories(&[5, 1_100], 1_200, 2_500), vec![5, 1_100, 1_205, 2_300, 2_405]);
}

#[test]
fn a_second_compile_reads_every_layer_from_the_cache_and_builds_the_same_program() {
    let dir = tempfile::tempdir().unwrap();
    let network = real_network(6);
    let images = bundled::real_1024_images().unwrap().first(300);
    let opts = options(300);
    let first = task_graph::compile_cached(&network, &images, &opts, Some(dir.path()), &|| {}).unwrap();
    assert_eq!(first.layers_cached, 0);
    let mut entries: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().path()).collect();
    entries.sort();
    assert_eq!(entries.len(), 6, "one entry per layer");
    let second = task_graph::compile_cached(&network, &images, &opts, Some(dir.path()), &|| {}).unwrap();
    assert_eq!(second.layers_cached, 6);
    assert!(first.lowering.program == second.lowering.program, "the cached layers built another program");
    // Another batch is another key; a damaged entry is rebuilt, not read.
    let other = task_graph::compile_cached(&network, &images, &options(200), Some(dir.path()), &|| {}).unwrap();
    assert_eq!(other.layers_cached, 0);
    // Damage one entry of the first compile's.
    let entry = &entries[0];
    let mut bytes = std::fs::read(entry).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 1;
    std::fs::write(entry, bytes).unwrap();
    let third = task_graph::compile_cached(&network, &images, &opts, Some(dir.path()), &|| {}).unwrap();
    assert_eq!(third.layers_cached, 5);
    assert!(third.lowering.program == first.lowering.program, "a rebuilt layer built another program");
}

#[test]
fn reference_categories_are_cached_by_content_and_a_damaged_entry_is_recomputed() {
    let dir = tempfile::tempdir().unwrap();
    let network = real_network(8);
    let images = bundled::real_1024_images().unwrap().first(400);
    let (fresh, hit) = hpec::reference_categories_cached(&network, &images, Some(dir.path())).unwrap();
    assert!(!hit);
    assert_eq!(fresh, hpec::reference_categories(&network, &images).unwrap());
    let (again, hit) = hpec::reference_categories_cached(&network, &images, Some(dir.path())).unwrap();
    assert!(hit && again == fresh);
    // Other images are another entry.
    let (_, hit) = hpec::reference_categories_cached(&network, &images.first(300), Some(dir.path())).unwrap();
    assert!(!hit);
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0x01; // a digit of the last id turns into another
        std::fs::write(&path, bytes).unwrap();
    }
    let (recomputed, hit) = hpec::reference_categories_cached(&network, &images, Some(dir.path())).unwrap();
    assert!(!hit && recomputed == fresh);
}

/// A simulated device for the multi-GPU dealing: each batch takes `ms` milliseconds.
struct SimDevice {
    ms: u64,
    fail_at: Option<usize>,
    prepared: bool,
}

fn sim(ms: u64) -> SimDevice {
    SimDevice { ms, fail_at: None, prepared: false }
}

fn deal(devices: &mut [SimDevice], n_batches: usize) -> hpec::HpecResult<task_graph::Dealt> {
    task_graph::deal_batches(
        devices,
        n_batches,
        |d| {
            d.prepared = true;
            Ok(())
        },
        |d, b| {
            assert!(d.prepared, "a batch ran on a device that was not prepared");
            if d.fail_at == Some(b) {
                return Err(hpec::HpecError::InvalidArgument(format!("device failed on batch {b}")));
            }
            std::thread::sleep(std::time::Duration::from_millis(d.ms));
            Ok(())
        },
        |_| Ok(()),
    )
}

#[test]
fn batches_are_dealt_once_each_and_a_slower_device_takes_fewer() {
    // Four simulated GPUs, the last three times slower.
    let mut devices = vec![sim(2), sim(2), sim(2), sim(6)];
    let dealt = deal(&mut devices, 60).unwrap();
    let mut all: Vec<usize> = dealt.batches.iter().flatten().copied().collect();
    all.sort_unstable();
    assert_eq!(all, (0..60).collect::<Vec<_>>(), "every batch exactly once");
    let counts: Vec<usize> = dealt.batches.iter().map(|b| b.len()).collect();
    for fast in &counts[..3] {
        assert!(*fast > counts[3], "a fast device took no more than the slow one: {counts:?}");
    }
    // Each device's batches come in increasing order (one counter), and nobody finished after
    // the run did.
    for b in &dealt.batches {
        assert!(b.windows(2).all(|w| w[0] < w[1]), "{b:?}");
    }
    assert!(dealt.busy_seconds.iter().all(|&s| s <= dealt.seconds));
}

#[test]
fn one_batch_per_device_gives_every_device_one() {
    // The default: as many batches as GPUs. A device that took its batch must not take another
    // before the others started (they start together).
    let mut devices: Vec<SimDevice> = (0..4).map(|_| sim(20)).collect();
    let dealt = deal(&mut devices, 4).unwrap();
    assert_eq!(dealt.batches.iter().map(|b| b.len()).collect::<Vec<_>>(), vec![1, 1, 1, 1]);
}

#[test]
fn a_failing_device_fails_the_run_without_hanging_the_others() {
    let mut devices = vec![sim(1), sim(1), SimDevice { fail_at: Some(5), ..sim(1) }];
    devices[0].fail_at = Some(5);
    devices[1].fail_at = Some(5);
    let err = deal(&mut devices, 40).unwrap_err();
    assert!(err.to_string().contains("failed on batch 5"), "{err}");
    // A device that cannot be prepared (no context) fails the run too; the others do not wait
    // for it at the start forever.
    let mut devices = vec![sim(1), sim(2)];
    let err = task_graph::deal_batches(
        &mut devices,
        10,
        |d| if d.ms == 1 { Err(hpec::HpecError::InvalidArgument("no context".into())) } else { Ok(()) },
        |_, _| Ok(()),
        |_| Ok(()),
    )
    .unwrap_err();
    assert!(err.to_string().contains("no context"), "{err}");
    let mut none: Vec<SimDevice> = vec![];
    assert!(deal(&mut none, 3).is_err());
}
