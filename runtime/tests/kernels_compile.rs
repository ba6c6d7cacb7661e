//! Every kernel the GPU tests run, compiled without a GPU: rendered, NVRTC to PTX for
//! sm_90a, ptxas to a cubin, registers and spills recorded in a snapshot. NVRTC and ptxas
//! come from the pinned PyPI wheels under `.cuda/` (tests/run-all.sh installs them); a
//! missing NVRTC fails the test.

use spartac::codegen::{library_gemm, specialize, Dtype, Mode, SpmmSpec};
use spartac_runtime::cuda::cases::{correctness_cases, two_four_cases, Cover};
mod common;

use common::{nvrtc, ptxas, ptxas_for};
use spartac_runtime::cuda::{compile_ptx, nvrtc_version};

#[test]
fn every_kernel_family_compiles_with_nvrtc_and_ptxas_for_sm_90a() {
    nvrtc();
    let (major, minor) = nvrtc_version().unwrap();
    assert_eq!(major, 13, "NVRTC {major}.{minor}: the GPU machine's driver is CUDA 13");
    let dir = tempfile::tempdir().unwrap();
    let mut table = String::from("case | kernel | mode | smem B | registers | spill st/ld B\n");
    let mut seen_families = std::collections::BTreeSet::new();
    for (i, case) in correctness_cases().iter().enumerate() {
        for (j, spec) in case.problem(1).specs.iter().enumerate() {
            let kernels = if case.uses_library(spec) {
                // cuBLAS does the product; what we generate is the bias prefill and the rest of
                // the epilogue, when there are.
                let g = library_gemm(spec).unwrap_or_else(|e| panic!("{}: {e}", case.label()));
                g.prefill.into_iter().chain(g.epilogue).collect()
            } else {
                vec![specialize(spec).unwrap_or_else(|e| panic!("{}: {e}", case.label()))]
            };
            for (n, kernel) in kernels.into_iter().enumerate() {
                let ptx = compile_ptx(&kernel.name, &kernel.source, "sm_90a").unwrap_or_else(|e| panic!("{e}"));
                assert!(ptx.ptx.contains(&format!(".entry {}", kernel.name)), "no entry {} in PTX", kernel.name);
                if kernel.family == spartac::codegen::Family::BlockMma
                    || kernel.family == spartac::codegen::Family::DenseStream
                    || (kernel.family.name() == "dense" && spec.dtype != Dtype::F32)
                {
                    assert!(
                        ptx.ptx.contains("mma.sync.aligned.m16n8k16"),
                        "{}: no tensor-core mma in PTX",
                        kernel.name
                    );
                    assert!(ptx.ptx.contains("ldmatrix"), "{}: no ldmatrix in PTX", kernel.name);
                }
                if kernel.family == spartac::codegen::Family::BlockInt8 {
                    assert!(
                        ptx.ptx.contains("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32"),
                        "{}: no int8 tensor-core mma in PTX",
                        kernel.name
                    );
                    assert!(ptx.ptx.contains("ldmatrix"), "{}: no ldmatrix in PTX", kernel.name);
                }
                if kernel.family == spartac::codegen::Family::BlockWgmma {
                    let op = format!(
                        "wgmma.mma_async.sync.aligned.m64n{}k16.f32.{1}.{1}",
                        kernel.block.1,
                        spec.dtype.name()
                    );
                    assert!(ptx.ptx.contains(&op), "{}: no {op} in PTX", kernel.name);
                    assert!(
                        ptx.ptx.contains("fence.proxy.async.shared::cta"),
                        "{}: no proxy fence in PTX",
                        kernel.name
                    );
                    assert!(!ptx.ptx.contains("mma.sync"), "{}: mma.sync in a wgmma kernel", kernel.name);
                }
                if kernel.family == spartac::codegen::Family::FineTf32 {
                    let op = "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32";
                    assert!(ptx.ptx.contains(op), "{}: no {op} in PTX", kernel.name);
                    assert!(
                        ptx.ptx.contains("cp.async.bulk.shared"),
                        "{}: no bulk copy of the steps in PTX",
                        kernel.name
                    );
                }
                if kernel.tma_a.is_some() {
                    assert!(ptx.ptx.contains("cp.async.bulk.tensor.2d"), "{}: no TMA copy in PTX", kernel.name);
                    assert!(ptx.ptx.contains("mbarrier.expect_tx"), "{}: no transaction count in PTX", kernel.name);
                }
                if !matches!(kernel.family, spartac::codegen::Family::Fine | spartac::codegen::Family::Epilogue) {
                    assert!(ptx.ptx.contains("cp.async"), "{}: no cp.async in PTX", kernel.name);
                }
                let (regs, st, ld) = ptxas(&format!("k{i}_{j}_{n}"), &ptx.ptx, dir.path());
                assert!(regs <= 255);
                assert_eq!((st, ld), (0, 0), "{} ({}) spills: {st} B stored, {ld} B loaded", kernel.name, case.label());
                if let Some(pre) = &kernel.prepass {
                    let ptx = compile_ptx(&pre.name, &pre.source, "sm_90a").unwrap_or_else(|e| panic!("{e}"));
                    let (regs, st, ld) = ptxas(&format!("k{i}_{j}_prepass"), &ptx.ptx, dir.path());
                    assert_eq!((st, ld), (0, 0), "{} ({}) spills", pre.name, case.label());
                    seen_families.insert("transpose prepass");
                    table.push_str(&format!("{} | {} | prepass | 0 | {regs} | {st}/{ld}\n", case.label(), pre.name));
                }
                seen_families.insert(kernel.family.name());
                table.push_str(&format!(
                    "{} | {} | {:?} | {} | {regs} | {st}/{ld}\n",
                    case.label(),
                    kernel.name,
                    kernel.mode,
                    kernel.launch.smem_bytes
                ));
            }
        }
    }
    for family in [
        "block_simt",
        "block_mma",
        "fine",
        "dense",
        "block_int8",
        "epilogue",
        "fine_left",
        "block_wgmma",
        "fine_dismantled",
        "fine_tf32",
        "transpose prepass",
    ] {
        assert!(seen_families.contains(family), "family {family} not compiled: {seen_families:?}");
    }
    insta::assert_snapshot!("ptxas_stats", table);
}

/// The 2:4 kernels of the GPU tests and of the 2:4 bench (every tile it tries): the `mma.sp`
/// kernel for Hopper (sm_90a) and Ampere (sm_80), `mma.sp` with ordered metadata in the PTX,
/// fed by cp.async and ldmatrix, every access in bounds on the CPU replay
/// (`codegen::two_four_replay`); the Hopper kernel for sm_90a, `wgmma.mma_async.sp` fed by TMA
/// and bulk copies, its epilogue through `stmatrix.trans`, on f16, bf16 and int8 (`k64.s32.s8.s8`).
/// All assembled by ptxas without spills.
#[test]
fn two_four_kernels_compile_for_sm_90a_and_sm_80() {
    nvrtc();
    let dir = tempfile::tempdir().unwrap();
    let bench =
        [Dtype::F16, Dtype::Bf16, Dtype::I8].into_iter().flat_map(|d| two_four_cases(d).into_iter().map(|(_, c)| c));
    let cases: Vec<_> = correctness_cases().into_iter().filter(|c| c.cover == Cover::TwoFour).chain(bench).collect();
    let mut seen = std::collections::BTreeSet::new();
    let (mut hopper, mut int8) = (0, 0);
    for case in &cases {
        for spec in case.problem(1).specs.iter().filter(|s| s.two_four) {
            let kernel = specialize(spec).unwrap_or_else(|e| panic!("{}: {e}", case.label()));
            if !seen.insert(kernel.source.clone()) {
                continue;
            }
            let (archs, op) = match kernel.family {
                spartac::codegen::Family::TwoFour => {
                    // Every access of the launch replayed on the CPU: in bounds, aligned, inside
                    // the dynamic shared memory the launch reports.
                    spartac::codegen::two_four_replay::replay(&kernel)
                        .unwrap_or_else(|e| panic!("{}: {e}", case.label()));
                    let op = format!(
                        "mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.{0}.{0}.f32",
                        spec.dtype.name()
                    );
                    (&["sm_90a", "sm_80"][..], op)
                }
                spartac::codegen::Family::TwoFourWgmma => {
                    hopper += 1;
                    if spec.dtype == Dtype::I8 {
                        int8 += 1;
                        (&["sm_90a"][..], "k64.s32.s8.s8".to_string())
                    } else {
                        (&["sm_90a"][..], "wgmma.mma_async.sp.sync.aligned.m64n".to_string())
                    }
                }
                f => panic!("{}: a 2:4 spec specialized as {f:?}", case.label()),
            };
            for arch in archs {
                let ptx = compile_ptx(&kernel.name, &kernel.source, arch).unwrap_or_else(|e| panic!("{e}"));
                assert!(ptx.ptx.contains(&op), "{} ({arch}): no {op} in PTX", kernel.name);
                if kernel.family == spartac::codegen::Family::TwoFour {
                    assert!(ptx.ptx.contains("ldmatrix") && ptx.ptx.contains("cp.async"), "{}", kernel.name);
                } else {
                    assert!(
                        ptx.ptx.contains("cp.async.bulk.tensor.2d") && ptx.ptx.contains("stmatrix"),
                        "{}",
                        kernel.name
                    );
                }
                let (regs, st, ld) = ptxas_for(&format!("tf{}_{arch}", seen.len()), &ptx.ptx, dir.path(), arch);
                assert!(regs <= 255);
                assert_eq!((st, ld), (0, 0), "{} ({}, {arch}) spills: {st}/{ld} B", kernel.name, case.label());
            }
        }
    }
    assert!(
        seen.len() >= 12 && hopper >= 4 && int8 >= 4,
        "{} distinct 2:4 kernels, {hopper} for Hopper, {int8} int8",
        seen.len()
    );
}

#[test]
fn nvrtc_errors_carry_the_compiler_log() {
    nvrtc();
    let err =
        compile_ptx("broken", "extern \"C\" __global__ void broken() { undefined_thing(); }", "sm_90a").unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("broken") && msg.contains("undefined_thing"), "{msg}");
}

/// Small rendered kernels, one per family and mode, as snapshots of the exact source.
#[test]
fn rendered_kernels_snapshot() {
    let mask_blocks = vec![(0, 0), (1, 1), (0, 2)];
    let mut spec = SpmmSpec::new(64, 64, 96, Dtype::F32, (32, 32), mask_blocks.clone());
    spec.mode = Mode::Unrolled;
    insta::assert_snapshot!("block_tf32_unrolled", specialize(&spec).unwrap().source);
    spec.engine = spartac::codegen::Engine::Simt;
    insta::assert_snapshot!("block_simt_unrolled", specialize(&spec).unwrap().source);
    spec.mode = Mode::IndexStream;
    spec.epilogue = spartac::codegen::Epilogue { bias: true, activation: spartac::codegen::Activation::Relu };
    insta::assert_snapshot!("block_simt_stream_bias_relu", specialize(&spec).unwrap().source);
    let mut spec = SpmmSpec::new(64, 64, 64, Dtype::F16, (32, 32), vec![(1, 0), (0, 1)]);
    spec.mode = Mode::Unrolled;
    spec.engine = spartac::codegen::Engine::MmaSync;
    insta::assert_snapshot!("block_mma_unrolled", specialize(&spec).unwrap().source);
    spec.engine = spartac::codegen::Engine::Wgmma;
    insta::assert_snapshot!("block_wgmma_unrolled", specialize(&spec).unwrap().source);
    spec.engine = spartac::codegen::Engine::WgmmaWs;
    insta::assert_snapshot!("block_wgmma_ws_unrolled", specialize(&spec).unwrap().source);
    let mut spec = SpmmSpec::new(32, 16, 16, Dtype::F32, (1, 1), vec![(0, 3), (5, 3), (15, 0), (2, 9)]);
    spec.values = Some((0..16 * 16).map(|i| i as f32 * 0.5).collect());
    spec.mode = Mode::Auto;
    spec.engine = spartac::codegen::Engine::Simt;
    let k = specialize(&spec).unwrap();
    assert_eq!(k.mode, Mode::Unrolled);
    assert!(k.values_embedded);
    insta::assert_snapshot!("fine_unrolled_values", k.source);
    // The same weight dismantled to the element: one FFMA per nonzero, the values immediates.
    spec.mode = Mode::Unrolled;
    let k = specialize(&spec).unwrap();
    assert_eq!(k.family, spartac::codegen::Family::FineDismantled);
    insta::assert_snapshot!("fine_dismantled_values", k.source);
    // The same weight on tensor cores (3xTF32 on gathered k), the engine's choice at this size.
    spec.mode = Mode::Auto;
    spec.engine = spartac::codegen::Engine::Auto;
    let k = specialize(&spec).unwrap();
    assert_eq!(k.family, spartac::codegen::Family::FineTf32);
    insta::assert_snapshot!("fine_tf32_stream", k.source);
    // Left orientation: W[32,16] · B[16,24], W element-sparse, index stream, bias + relu.
    let mut spec = SpmmSpec::new(32, 16, 24, Dtype::F32, (1, 1), vec![(0, 3), (5, 3), (31, 0), (2, 9)]);
    spec.orientation = spartac::codegen::Orientation::Left;
    spec.mode = Mode::IndexStream;
    spec.epilogue = spartac::codegen::Epilogue { bias: true, activation: spartac::codegen::Activation::Relu };
    let k = specialize(&spec).unwrap();
    assert_eq!(k.family, spartac::codegen::Family::FineLeft);
    insta::assert_snapshot!("fine_left_stream_bias_relu", k.source);
    // Right orientation through the transpose prepass: the fine kernel copies At's rows whole.
    let mut spec = SpmmSpec::new(30, 64, 48, Dtype::F32, (1, 1), vec![(0, 3), (5, 3), (63, 0), (2, 47)]);
    spec.mode = Mode::IndexStream;
    spec.dense_copy = spartac::codegen::DenseCopy::Prepass;
    let k = specialize(&spec).unwrap();
    let pre = k.prepass.as_ref().expect("a prepass was asked for");
    assert_eq!(pre.scratch_bytes, 4 * 64 * 32, "At is fp32 K × M, M rounded up to 4");
    insta::assert_snapshot!("fine_prepass_stream", k.source);
    insta::assert_snapshot!("transpose_prepass_f32", pre.source.clone());
    let mut spec = SpmmSpec::new(64, 64, 64, Dtype::I8, (32, 32), vec![(1, 0), (0, 1)]);
    spec.mode = Mode::Unrolled;
    spec.epilogue = spartac::codegen::Epilogue { bias: true, activation: spartac::codegen::Activation::Relu };
    insta::assert_snapshot!("block_int8_unrolled_bias_relu", specialize(&spec).unwrap().source);
}

/// The left orientation (C = W·B) of each block family, as snapshots of the exact source.
#[test]
fn rendered_left_kernels_snapshot() {
    use spartac::codegen::{Activation, Epilogue, Orientation};
    let mut spec = SpmmSpec::new(64, 96, 64, Dtype::F32, (32, 32), vec![(0, 0), (1, 1), (0, 2)]);
    spec.orientation = Orientation::Left;
    spec.mode = Mode::IndexStream;
    spec.epilogue = Epilogue { bias: true, activation: Activation::Relu };
    insta::assert_snapshot!("block_simt_left_stream_bias_relu", specialize(&spec).unwrap().source);
    let mut spec = SpmmSpec::new(64, 64, 64, Dtype::F16, (32, 32), vec![(1, 0), (0, 1)]);
    spec.orientation = Orientation::Left;
    spec.mode = Mode::Unrolled;
    spec.accumulate = true;
    insta::assert_snapshot!("block_mma_left_unrolled_accumulate", specialize(&spec).unwrap().source);
    let all = (0..2).flat_map(|r| (0..2).map(move |c| (r, c))).collect();
    let mut spec = SpmmSpec::new(64, 64, 32, Dtype::Bf16, (32, 32), all);
    spec.orientation = Orientation::Left;
    let k = specialize(&spec).unwrap();
    assert_eq!(k.family, spartac::codegen::Family::Dense);
    insta::assert_snapshot!("dense_left_bf16", k.source);
    // The Hopper 2:4 kernel: 64 output columns × 64 rows per item, bias and GELU.
    let mut spec = SpmmSpec::new(100, 128, 64, Dtype::F16, (1, 1), vec![(0, 0), (5, 1), (70, 63)]);
    spec.two_four = true;
    spec.tile = Some(spartac::codegen::Tile { group: 1, ..spartac::codegen::Tile::new(64, 2) });
    spec.epilogue = Epilogue { bias: true, activation: Activation::Gelu };
    let k = specialize(&spec).unwrap();
    assert_eq!(k.family, spartac::codegen::Family::TwoFourWgmma);
    insta::assert_snapshot!("two_four_wgmma_bias_gelu", k.source);
}
