//! The program of one batch ([`lower`]): a network whose layers are compiled already, lowered
//! to the steps the module docs list, with the weights resident or streamed.

use super::layer::EXACT_LABEL;
use super::{HpecOptions, LayerKernels, LayerPart, Precision, TAIL_STREAM_LAYERS, YMAX};
use crate::codegen::{rows, Activation, CodegenError, Epilogue};
use crate::program::{
    Arg, BufferId, Csr, Data, Elem, KernelId, Launch, Merge, Op, Program, ProgramBuilder, ProgramError, Rows, Storage,
};

/// The launch of a row kernel (`k` rendered, `kernel` its id in the program) with `args`.
fn rows_launch(kernel: KernelId, k: &rows::RowsKernel, args: Vec<Arg>) -> Launch {
    Launch::Kernel { kernel, grid: k.launch.grid, block: k.launch.block, args }
}

/// Where a layer kernel's constant inputs are: packed weight, `ptr`, `idx` (and their lengths).
struct PartBuffers {
    w: (BufferId, usize),
    ptr: (BufferId, usize),
    idx: (BufferId, usize),
}

/// The images of a run, as the program reads them (CSR over `neurons` columns).
pub struct HpecImages<'a> {
    pub n_images: usize,
    pub offsets: &'a [u32],
    pub indices: &'a [u32],
    pub values: &'a [f32],
}

/// What [`lower`] produced besides the program.
#[derive(Clone, Debug)]
pub struct HpecLowering {
    pub program: Program,
    /// The buffer of per-image category flags (u8, one per image).
    pub flags: BufferId,
    /// The counters buffer: element 0 the batch's rows, element c + 1 the rows after compaction c.
    pub live: BufferId,
    /// Packed weight bytes (values, tables) over all layers.
    pub weight_bytes: usize,
    pub streamed: bool,
    /// Per layer, what the planner and the specializer chose.
    pub layer_summaries: Vec<String>,
}

fn u32_data(v: &[u32]) -> Data {
    Data::I32(v.iter().map(|&x| x as i32).collect())
}

/// Lowers a network whose layers are compiled already (see [`compile_layer`]) to the program
/// of one batch. `layers[l]` is layer l's weight (kept in the program for the CPU executor)
/// for the layers before the tail, `kernels[l]` its kernels; `tail` the tables of the layers
/// after them ([`rows::tail_tables`]), which must start at [`HpecOptions::tail_start`];
/// `permutations` the boundaries that permute (`(l, columns)`: before layer `l`, the
/// activations move by [`Op::PermuteColumns`] with `columns`).
///
/// [`compile_layer`]: super::compile_layer
#[allow(clippy::too_many_arguments)] // the lowering's inputs are the compile's outputs, one each
pub fn lower(
    neurons: usize,
    bias: f32,
    layers: Vec<Csr>,
    kernels: Vec<LayerKernels>,
    tail: Option<rows::TailTables>,
    images: &HpecImages,
    options: &HpecOptions,
    permutations: &[(usize, Vec<u32>)],
) -> Result<HpecLowering, ProgramError> {
    let invalid = |message: String| ProgramError::Invalid { program: "hpec".into(), message };
    let n_tail = tail.as_ref().map_or(0, |t| t.layers);
    let n_layers = layers.len() + n_tail;
    let tail_start = options.tail_start(n_layers);
    if kernels.len() != layers.len() || tail_start != layers.len() || n_layers == 0 {
        return Err(invalid(format!(
            "{} layers before the tail ({tail_start} wanted), {n_tail} in it, {} compiled",
            layers.len(),
            kernels.len()
        )));
    }
    let f64 = options.precision == Precision::F64;
    if let Some(l) = kernels.iter().position(|k| k.summary.starts_with(EXACT_LABEL) != f64) {
        return Err(invalid(format!(
            "layer {l} was compiled for the other precision than {} ({})",
            options.precision.name(),
            kernels[l].summary
        )));
    }
    // The row kernels that only move or test rows see an f64 row as twice the 32-bit words.
    let words = if f64 { 2 * neurons } else { neurons };
    if let Some(t) = tail.as_ref().filter(|t| t.neurons != neurons) {
        return Err(invalid(format!("the tail's layers are {0}x{0}, the network has {neurons} neurons", t.neurons)));
    }
    if options.batch == 0 || images.n_images == 0 {
        return Err(invalid("a batch needs at least one image".into()));
    }
    if kernels.iter().any(|k| k.summary.contains("row_scatter")) && images.values.iter().any(|v| v.abs() > YMAX) {
        // The row-scatter kernels' fixed-point range assumes every input is within the cap.
        return Err(invalid(format!("an image value exceeds {YMAX} in magnitude (the row-scatter layers assume it)")));
    }
    let batch = options.batch.min(images.n_images);
    let name = format!("hpec_n{neurons}_l{}_b{batch}", layers.len());
    let mut b = ProgramBuilder::new(&name);
    let codegen = |e: CodegenError| invalid(e.to_string());

    // Inputs on the device: every image, as CSR.
    let img_off = b.constant("images.offsets", u32_data(images.offsets), false);
    let img_idx = b.constant("images.indices", u32_data(images.indices), false);
    let img_val = b.constant("images.values", Data::F32(images.values.to_vec()), false);
    let act_elem = if f64 { Elem::F64 } else { Elem::F32 };
    let act = [
        b.buffer("act0", act_elem, batch * neurons, Storage::Scratch),
        b.buffer("act1", act_elem, batch * neurons, Storage::Scratch),
    ];
    let ids =
        [b.buffer("ids0", Elem::I32, batch, Storage::Scratch), b.buffer("ids1", Elem::I32, batch, Storage::Scratch)];
    let compactions = (0..n_layers).filter(|&l| options.compacts_after(l, n_layers)).count();
    let live = b.buffer("live", Elem::I32, compactions + 1, Storage::Scratch);
    let bias_buf = b.constant("bias", Data::F32(vec![bias; neurons]), false);
    let flags = b.buffer("categories", Elem::U8, images.n_images, Storage::Output);
    let first = b.param("first_image", 0);
    // Merging compactions: the hash table, each row's slot, and per image its alias.
    let merging = (0..n_layers).any(|l| options.merges_after(l, n_layers));
    let merge = merging.then(|| {
        let slots = rows::merge_slots(batch);
        Merge {
            table: b.buffer("merge.table", Elem::I32, 3 * slots, Storage::Scratch),
            slots,
            row_slot: b.buffer("merge.row_slot", Elem::I32, batch, Storage::Scratch),
            alias: b.buffer("alias", Elem::I32, images.n_images, Storage::Scratch),
        }
    });

    // Weights: resident or streamed.
    let mut weight_bytes: usize =
        kernels.iter().flat_map(|l| &l.parts).map(|p| 4 * (p.weight.len() + p.ptr.len() + p.idx.len())).sum();
    // The tail's tables count toward the budget too: over it, they stream with the layers'.
    let tail_bytes = tail.as_ref().map_or(0, |t| 4 * (t.idx.len() + t.values.len()));
    let streamed = weight_bytes + tail_bytes > options.weight_budget;
    let slots = options.stream_slots.max(1);
    let max_parts = kernels.iter().map(|l| l.parts.len()).max().unwrap_or(0);
    // Streaming: per slot and part position, device buffers as large as the largest layer's.
    let mut slot_bufs: Vec<Vec<PartBuffers>> = vec![];
    if streamed {
        for s in 0..slots {
            let mut per_part = vec![];
            for p in 0..max_parts {
                let size = |f: &dyn Fn(&LayerPart) -> usize| {
                    kernels.iter().filter_map(|l| l.parts.get(p)).map(f).max().unwrap_or(1).max(1)
                };
                let (wl, pl, il) = (size(&|x| x.weight.len()), size(&|x| x.ptr.len()), size(&|x| x.idx.len()));
                per_part.push(PartBuffers {
                    w: (b.buffer(&format!("slot{s}.p{p}.w"), Elem::F32, wl, Storage::Scratch), wl),
                    ptr: (b.buffer(&format!("slot{s}.p{p}.ptr"), Elem::I32, pl, Storage::Scratch), pl),
                    idx: (b.buffer(&format!("slot{s}.p{p}.idx"), Elem::I32, il, Storage::Scratch), il),
                });
            }
            slot_bufs.push(per_part);
        }
    }

    let load = rows::load_rows(batch, neurons, images.n_images, compactions, merge.is_some(), f64).map_err(codegen)?;
    let load_k = b.kernel(&load.name, &load.source, 0);
    b.step(
        "load batch",
        Op::LoadRows {
            offsets: img_off,
            indices: img_idx,
            values: img_val,
            images: images.n_images,
            first,
            count: batch,
            cols: neurons,
            dst: act[0],
            ids: ids[0],
            live,
            at: 0,
            clear: compactions,
            alias: merge.map(|m| m.alias),
        },
        vec![rows_launch(
            load_k,
            &load,
            [Arg::Buf(img_off, 0), Arg::Buf(img_idx, 0), Arg::Buf(img_val, 0)]
                .into_iter()
                .chain([Arg::Buf(act[0], 0), Arg::Buf(ids[0], 0), Arg::Buf(live, 0)])
                .chain(merge.map(|m| Arg::Buf(m.alias, 0)))
                .chain([Arg::Param(first)])
                .collect(),
        )],
    );
    let compact = rows::compact_rows(batch, words).map_err(codegen)?;
    let compact_k = b.kernel(&compact.name, &compact.source, 0);
    let drop = match options.compact_in_place {
        true => {
            let ks = rows::drop_rows(batch, words).map_err(codegen)?;
            let ids = [0, 1, 2].map(|i| b.kernel(&ks[i].name, &ks[i].source, 0));
            let scratch = b.buffer("drop.scratch", Elem::I32, 3 * batch + 2, Storage::Scratch);
            Some((ks, ids, scratch))
        }
        false => None,
    };
    let merge_ks = match merge {
        Some(_) => {
            let (hash, pack) = rows::merge_rows(batch, words).map_err(codegen)?;
            let ids = (b.kernel(&hash.name, &hash.source, 0), b.kernel(&pack.name, &pack.source, 0));
            Some((hash, pack, ids))
        }
        None => None,
    };

    if let Some((l, c)) = permutations.iter().find(|(l, c)| *l == 0 || *l >= layers.len() || c.len() != neurons) {
        return Err(invalid(format!(
            "a permutation of {} columns before layer {l} (1..{} allowed)",
            c.len(),
            layers.len()
        )));
    }
    if f64 && !permutations.is_empty() {
        return Err(invalid("permuted boundaries need fp32 activations".into()));
    }
    let permute = match permutations.is_empty() {
        true => None,
        false => {
            let k = rows::permute_columns(batch, neurons, options.sm_count).map_err(codegen)?;
            let id = b.kernel(&k.name, &k.source, k.launch.smem_bytes);
            Some((k, id))
        }
    };

    let (mut cur, mut cur_ids, mut count_at) = (0usize, 0usize, 0usize);
    let mut summaries = vec![];
    for (l, (layer, lk)) in layers.into_iter().zip(kernels).enumerate() {
        if layer.rows != neurons || layer.cols != neurons {
            return Err(invalid(format!(
                "layer {l} is {}x{}, the network has {neurons} neurons",
                layer.rows, layer.cols
            )));
        }
        if let (Some(columns), Some((k, kid))) = (permutations.iter().find(|(at, _)| *at == l), &permute) {
            let table = b.constant(&format!("l{l}.columns"), u32_data(&columns.1), false);
            let (src, dst) = (act[cur], act[1 - cur]);
            b.step(
                &format!("neuron order before layer {l}"),
                Op::PermuteColumns { src, dst, cols: neurons, columns: table, live, at: count_at },
                vec![rows_launch(
                    *kid,
                    k,
                    vec![Arg::Buf(src, 0), Arg::Buf(table, 0), Arg::Buf(dst, 0), Arg::Buf(live, count_at)],
                )],
            );
            cur = 1 - cur;
        }
        summaries.push(lk.summary);
        let matrix = b.matrix(layer);
        let (a, c) = (act[cur], act[1 - cur]);
        let rows = Rows::Live { max: batch, count: live, at: count_at };
        let mut launches = vec![];
        let mut packed = vec![];
        for (p, kernel) in lk.parts.into_iter().enumerate() {
            // The packed tables move into the program (a 65,536-neuron layer's are ~100 MB:
            // no copy is kept beside them).
            let (pl, il) = (kernel.ptr.len(), kernel.idx.len());
            let wdata = if kernel.weight.is_empty() { vec![0.0] } else { kernel.weight };
            let wl = wdata.len();
            let (wdata, ptr, idx) = (Data::F32(wdata), Data::I32(kernel.ptr), Data::I32(kernel.idx));
            let sums = [wdata.checksum(), ptr.checksum(), idx.checksum()];
            let bufs = if streamed {
                // Host copies, then a copy step per table into this layer's slot.
                let slot = &slot_bufs[l % slots][p];
                let hw = b.constant(&format!("l{l}.p{p}.w"), wdata, true);
                let hp = b.constant(&format!("l{l}.p{p}.ptr"), ptr, true);
                let hi = b.constant(&format!("l{l}.p{p}.idx"), idx, true);
                for (src, dst, len) in [(hw, slot.w.0, wl), (hp, slot.ptr.0, pl), (hi, slot.idx.0, il)] {
                    b.step(
                        &format!("layer {l} stream in"),
                        Op::Move,
                        vec![Launch::Copy { src, src_at: 0, dst, dst_at: 0, len }],
                    );
                }
                PartBuffers { w: (slot.w.0, wl), ptr: (slot.ptr.0, pl), idx: (slot.idx.0, il) }
            } else {
                PartBuffers {
                    w: (b.constant(&format!("l{l}.p{p}.w"), wdata, false), wl),
                    ptr: (b.constant(&format!("l{l}.p{p}.ptr"), ptr, false), pl),
                    idx: (b.constant(&format!("l{l}.p{p}.idx"), idx, false), il),
                }
            };
            packed.push((bufs.w.0, bufs.w.1, sums[0]));
            packed.push((bufs.ptr.0, bufs.ptr.1, sums[1]));
            packed.push((bufs.idx.0, bufs.idx.1, sums[2]));
            let kid = b.kernel(&kernel.name, &kernel.source, kernel.launch.smem_bytes);
            let mut args = vec![
                Arg::Buf(a, 0),
                Arg::Buf(bufs.w.0, 0),
                Arg::Buf(bufs.ptr.0, 0),
                Arg::Buf(bufs.idx.0, 0),
                Arg::Buf(bias_buf, 0),
                Arg::Buf(c, 0),
            ];
            if let Some(tma) = kernel.tma_a {
                args.push(Arg::TensorMap { buf: a, rows: batch, cols: neurons, tma });
            }
            args.push(Arg::Buf(live, count_at));
            launches.push(Launch::Kernel { kernel: kid, grid: kernel.launch.grid, block: kernel.launch.block, args });
        }
        if launches.is_empty() {
            return Err(invalid(format!("layer {l} has no kernel")));
        }
        b.step(
            &format!("layer {l}"),
            Op::Spmm {
                a,
                c,
                rows,
                weight: matrix,
                packed,
                bias: Some(bias_buf),
                epilogue: Epilogue { bias: true, activation: Activation::Clip { lo: 0.0, hi: YMAX } },
                accumulate: false,
                norm: None,
            },
            launches,
        );
        cur = 1 - cur;
        let in_place = drop.as_ref().filter(|_| !options.merges_after(l, n_layers));
        if let (true, Some((ks, kids, scratch))) = (options.compacts_after(l, n_layers), in_place) {
            let (buf, row_ids, scratch) = (act[cur], ids[cur_ids], *scratch);
            let (flags, holes, movers, counters) = (0, batch, 2 * batch, 3 * batch);
            b.step(
                &format!("compact after layer {l}"),
                Op::DropRows { buf, ids: row_ids, cols: neurons, live, at: count_at, scratch },
                vec![
                    Launch::Zero { dst: scratch, at: counters, len: 2 },
                    rows_launch(
                        kids[0],
                        &ks[0],
                        vec![Arg::Buf(buf, 0), Arg::Buf(live, count_at), Arg::Buf(scratch, flags)],
                    ),
                    rows_launch(
                        kids[1],
                        &ks[1],
                        vec![
                            Arg::Buf(live, count_at),
                            Arg::Buf(scratch, flags),
                            Arg::Buf(scratch, holes),
                            Arg::Buf(scratch, movers),
                            Arg::Buf(scratch, counters),
                        ],
                    ),
                    rows_launch(
                        kids[2],
                        &ks[2],
                        vec![
                            Arg::Buf(buf, 0),
                            Arg::Buf(row_ids, 0),
                            Arg::Buf(scratch, holes),
                            Arg::Buf(scratch, movers),
                            Arg::Buf(scratch, counters),
                        ],
                    ),
                ],
            );
            count_at += 1;
        } else if options.compacts_after(l, n_layers) {
            let (src, dst) = (act[cur], act[1 - cur]);
            let (sids, dids) = (ids[cur_ids], ids[1 - cur_ids]);
            let this_merge = merge.filter(|_| options.merges_after(l, n_layers));
            let launches = match (this_merge, &merge_ks) {
                (Some(m), Some((hash, pack, (hash_k, pack_k)))) => vec![
                    Launch::Zero { dst: m.table, at: 0, len: 3 * m.slots },
                    rows_launch(
                        *hash_k,
                        hash,
                        vec![
                            Arg::Buf(src, 0),
                            Arg::Buf(live, count_at),
                            Arg::Buf(m.table, 0),
                            Arg::Buf(m.table, 2 * m.slots),
                            Arg::Buf(m.row_slot, 0),
                        ],
                    ),
                    rows_launch(
                        *pack_k,
                        pack,
                        vec![
                            Arg::Buf(src, 0),
                            Arg::Buf(sids, 0),
                            Arg::Buf(dst, 0),
                            Arg::Buf(dids, 0),
                            Arg::Buf(live, count_at),
                            Arg::Buf(m.table, 2 * m.slots),
                            Arg::Buf(m.row_slot, 0),
                            Arg::Buf(m.alias, 0),
                        ],
                    ),
                ],
                _ => vec![rows_launch(
                    compact_k,
                    &compact,
                    vec![
                        Arg::Buf(src, 0),
                        Arg::Buf(sids, 0),
                        Arg::Buf(dst, 0),
                        Arg::Buf(dids, 0),
                        Arg::Buf(live, count_at),
                    ],
                )],
            };
            b.step(
                &format!("{} after layer {l}", if this_merge.is_some() { "compact + merge" } else { "compact" }),
                Op::CompactRows {
                    src,
                    src_ids: sids,
                    dst,
                    dst_ids: dids,
                    cols: neurons,
                    live,
                    at: count_at,
                    merge: this_merge,
                },
                launches,
            );
            cur = 1 - cur;
            cur_ids = 1 - cur_ids;
            count_at += 1;
        }
    }
    if let Some(t) = tail.filter(|t| t.layers > 0) {
        let slots = t.slots;
        weight_bytes += tail_bytes;
        summaries.extend((0..n_tail).map(|_| format!("tail:{slots}slots")));
        let table = slots * neurons;
        // Resident: one launch for the whole tail. Streamed: a launch per segment of
        // TAIL_STREAM_LAYERS layers, each segment's tables copied from pinned host memory into
        // one of `stream_slots` rotating device slots first (ordered after the segment that
        // last read the slot).
        let seg = if streamed { TAIL_STREAM_LAYERS.min(n_tail) } else { n_tail };
        let (idx_src, w_src) =
            (b.constant("tail.idx", Data::I32(t.idx), streamed), b.constant("tail.w", Data::F32(t.values), streamed));
        let tail_slots: Vec<(BufferId, BufferId)> = if streamed {
            (0..options.stream_slots.max(1))
                .map(|s| {
                    (
                        b.buffer(&format!("tail.slot{s}.idx"), Elem::I32, seg * table, Storage::Scratch),
                        b.buffer(&format!("tail.slot{s}.w"), Elem::F32, seg * table, Storage::Scratch),
                    )
                })
                .collect()
        } else {
            vec![(idx_src, w_src)]
        };
        let barrier = b.buffer("tail.barrier", Elem::I32, 1, Storage::Scratch);
        for (i, start) in (0..n_tail).step_by(seg).enumerate() {
            let len = seg.min(n_tail - start);
            let (idx_buf, w_buf) = tail_slots[i % tail_slots.len()];
            if streamed {
                for (src, dst) in [(idx_src, idx_buf), (w_src, w_buf)] {
                    b.step(
                        &format!("tail layers {} stream in", tail_start + start),
                        Op::Move,
                        vec![Launch::Copy { src, src_at: start * table, dst, dst_at: 0, len: len * table }],
                    );
                }
            }
            let kernel = rows::tail_layers(neurons, slots, len, batch, YMAX, options.sm_count, f64).map_err(codegen)?;
            let tail_k = b.kernel(&kernel.name, &kernel.source, 0);
            let (x, y) = (act[cur], act[1 - cur]);
            let (first_l, end_l) = (tail_start + start, tail_start + start + len);
            b.step(
                &if len == n_tail {
                    format!("layers {first_l}..{end_l} (one launch)")
                } else {
                    format!("layers {first_l}..{end_l} (one launch, streamed)")
                },
                Op::SpmmChain {
                    a: x,
                    c: y,
                    rows: Rows::Live { max: batch, count: live, at: count_at },
                    layers: len,
                    n: neurons,
                    slots,
                    idx: idx_buf,
                    w: w_buf,
                    bias: bias_buf,
                    epilogue: Epilogue { bias: true, activation: Activation::Clip { lo: 0.0, hi: YMAX } },
                },
                vec![
                    Launch::Zero { dst: barrier, at: 0, len: 1 },
                    rows_launch(
                        tail_k,
                        &kernel,
                        vec![
                            Arg::Buf(x, 0),
                            Arg::Buf(y, 0),
                            Arg::Buf(idx_buf, 0),
                            Arg::Buf(w_buf, 0),
                            Arg::Buf(bias_buf, 0),
                            Arg::Buf(live, count_at),
                            Arg::Buf(barrier, 0),
                        ],
                    ),
                ],
            );
            if len % 2 == 1 {
                cur = 1 - cur;
            }
        }
    }
    let mark = rows::mark_rows(batch, words).map_err(codegen)?;
    let mark_k = b.kernel(&mark.name, &mark.source, 0);
    b.step(
        "categories",
        Op::MarkRows { src: act[cur], ids: ids[cur_ids], cols: neurons, live, at: count_at, flags },
        vec![rows_launch(
            mark_k,
            &mark,
            vec![Arg::Buf(act[cur], 0), Arg::Buf(ids[cur_ids], 0), Arg::Buf(live, count_at), Arg::Buf(flags, 0)],
        )],
    );
    if let Some(m) = merge {
        let resolve = rows::resolve_aliases(batch, images.n_images).map_err(codegen)?;
        let resolve_k = b.kernel(&resolve.name, &resolve.source, 0);
        b.step(
            "categories of merged images",
            Op::ResolveAliases { alias: m.alias, flags, first, count: batch, images: images.n_images },
            vec![rows_launch(resolve_k, &resolve, vec![Arg::Buf(m.alias, 0), Arg::Buf(flags, 0), Arg::Param(first)])],
        );
    }
    let program = b.finish()?;
    Ok(HpecLowering { program, flags, live, weight_bytes, streamed, layer_summaries: summaries })
}
