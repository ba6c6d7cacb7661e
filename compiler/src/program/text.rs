//! The program's deterministic text form ([`Program::to_text`]): what the snapshot tests hold.

use super::*;
use std::fmt::Write as _;

impl Program {
    /// The deterministic text form: buffers, kernels (name, bytes of source, hash), params,
    /// matrices (shape, nonzeros, checksum) and steps with their launches and edges.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "program {}", self.name);
        for (i, b) in self.buffers.iter().enumerate() {
            let storage = match &b.storage {
                Storage::Input => "input".to_string(),
                Storage::Output => "output".to_string(),
                Storage::Scratch => "scratch".to_string(),
                Storage::Constant(d) => format!("const #{:016x}", d.checksum()),
                Storage::Host(d) => format!("host #{:016x}", d.checksum()),
            };
            let _ = writeln!(s, "  buf%{i} {}: {}[{}] {storage}", b.name, b.elem.name(), b.len);
        }
        for (i, k) in self.kernels.iter().enumerate() {
            let _ = writeln!(
                s,
                "  kernel@{i} {}: {} bytes #{:016x} smem {}",
                k.name,
                k.source.len(),
                crate::codegen::source_hash(&k.source),
                k.smem_bytes
            );
        }
        for (i, p) in self.params.iter().enumerate() {
            let _ = writeln!(s, "  param${i} {} = {}", p.name, p.default);
        }
        for (i, m) in self.matrices.iter().enumerate() {
            let mut bytes = vec![];
            m.offsets.iter().chain(&m.indices).for_each(|v| bytes.extend(v.to_le_bytes()));
            m.values.iter().for_each(|v| bytes.extend(v.to_le_bytes()));
            let _ = writeln!(s, "  matrix#{i} {}x{} nnz {} #{:016x}", m.rows, m.cols, m.nnz(), checksum(&bytes));
        }
        for (i, st) in self.steps.iter().enumerate() {
            let after: Vec<String> = st.after.iter().map(|j| j.to_string()).collect();
            let _ = writeln!(s, "  step {i} {} after [{}]", st.label, after.join(","));
            let _ = writeln!(s, "    op {}", op_text(&st.op));
            for l in &st.launches {
                let _ = writeln!(s, "    {}", launch_text(l));
            }
        }
        s
    }
}

fn rows_text(r: &Rows) -> String {
    match r {
        Rows::All(m) => format!("{m}"),
        Rows::Live { max, count, at } => format!("live(buf%{}[{at}]) <= {max}", count.0),
    }
}

fn norm_text(nm: &super::SpmmNorm) -> String {
    let stats = |s: &super::RowStats| format!("buf%{}[{}..] eps={:e}", s.sums.0, s.at, s.eps);
    let mut out = String::new();
    if let Some(i) = &nm.input {
        out += &format!(" norm_input(stats={} colsum=buf%{})", stats(&i.stats), i.colsum.0);
    }
    if let Some(r) = &nm.residual {
        out += &format!(" residual=buf%{}", r.buf.0);
        if let Some(af) = &r.affine {
            out += &format!("(normalized stats={} gamma=buf%{} beta=buf%{})", stats(&af.stats), af.gamma.0, af.beta.0);
        }
    }
    if let Some(st) = &nm.stats {
        out += &format!(" row_stats(out=buf%{}[{}..])", st.sums.0, st.at);
    }
    out
}

fn op_text(op: &Op) -> String {
    match op {
        Op::Spmm { a, c, rows, weight, packed, bias, epilogue, accumulate, norm } => {
            let packed: Vec<String> = packed.iter().map(|(b, len, _)| format!("buf%{}[..{len}]", b.0)).collect();
            format!(
                "spmm c=buf%{} a=buf%{} rows={} w=matrix#{weight} packed=[{}] bias={} epilogue={:?}{}{}",
                c.0,
                a.0,
                rows_text(rows),
                packed.join(","),
                bias.map_or("none".into(), |b| format!("buf%{}", b.0)),
                epilogue,
                if *accumulate { " accumulate" } else { "" },
                norm.as_deref().map_or(String::new(), norm_text)
            )
        }
        Op::SpmmChain { a, c, rows, layers, n, slots, idx, w, bias, epilogue } => format!(
            "spmm_chain a=buf%{} c=buf%{} rows={} layers={layers} n={n} slots={slots} idx=buf%{} w=buf%{} bias=buf%{} epilogue={:?}",
            a.0,
            c.0,
            rows_text(rows),
            idx.0,
            w.0,
            bias.0,
            epilogue
        ),
        Op::LoadRows { images, first, count, cols, dst, ids, live, at, clear, alias, .. } => format!(
            "load_rows dst=buf%{} ids=buf%{} images={images} first=param${} count={count} cols={cols} live=buf%{}[{at}] clear={clear}{}",
            dst.0,
            ids.0,
            first.0,
            live.0,
            alias.map_or(String::new(), |a| format!(" alias=buf%{}", a.0))
        ),
        Op::CompactRows { src, src_ids, dst, dst_ids, cols, live, at, merge } => format!(
            "compact_rows buf%{}+ids buf%{} -> buf%{}+ids buf%{} cols={cols} live=buf%{}[{at}->{}]{}",
            src.0,
            src_ids.0,
            dst.0,
            dst_ids.0,
            live.0,
            at + 1,
            merge.map_or(String::new(), |m| format!(
                " merge table=buf%{}x{} row_slot=buf%{} alias=buf%{}",
                m.table.0, m.slots, m.row_slot.0, m.alias.0
            ))
        ),
        Op::ResolveAliases { alias, flags, first, count, images } => format!(
            "resolve_aliases alias=buf%{} flags=buf%{} first=param${} count={count} images={images}",
            alias.0, flags.0, first.0
        ),
        Op::DropRows { buf, ids, cols, live, at, scratch } => format!(
            "drop_rows buf%{}+ids buf%{} cols={cols} live=buf%{}[{at}->{}] scratch=buf%{}",
            buf.0,
            ids.0,
            live.0,
            at + 1,
            scratch.0
        ),
        Op::PermuteColumns { src, dst, cols, columns, live, at } => format!(
            "permute_columns buf%{} -> buf%{} cols={cols} columns=buf%{} live=buf%{}[{at}]",
            src.0, dst.0, columns.0, live.0
        ),
        Op::MarkRows { src, ids, cols, live, at, flags } => format!(
            "mark_rows buf%{} ids=buf%{} cols={cols} live=buf%{}[{at}] flags=buf%{}",
            src.0, ids.0, live.0, flags.0
        ),
        Op::Nodes(nodes) => {
            let one = |n: &NodeOp| {
                let ins: Vec<String> =
                    n.inputs.iter().map(|o| o.as_ref().map_or("none".into(), operand_text)).collect();
                let outs: Vec<String> = n.outputs.iter().map(operand_text).collect();
                let attrs = n.attrs.to_text();
                let attrs = if attrs.is_empty() { attrs } else { format!(" {{{attrs}}}") };
                format!("{} = {}{attrs}({})", outs.join(","), n.op_type, ins.join(", "))
            };
            let parts: Vec<String> = nodes.iter().map(one).collect();
            format!("nodes {}", parts.join("; "))
        }
        Op::Move => "move".into(),
    }
}

fn operand_text(o: &Operand) -> String {
    let dims = |s: &[usize]| s.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(",");
    match o {
        Operand::Buf { buf, dtype, shape } => format!("buf%{}:{}[{}]", buf.0, dtype.name(), dims(shape)),
        Operand::Temp { id, dtype, shape } => format!("t{id}:{}[{}]", dtype.name(), dims(shape)),
        Operand::Scalar { dtype, value } => format!("{}({})", dtype.name(), crate::ir::format_float(*value)),
    }
}

fn launch_text(l: &Launch) -> String {
    match l {
        Launch::Kernel { kernel, grid, block, args } => {
            let args: Vec<String> = args
                .iter()
                .map(|a| match a {
                    Arg::Buf(b, 0) => format!("buf%{}", b.0),
                    Arg::Buf(b, at) => format!("buf%{}+{at}", b.0),
                    Arg::I32(v) => format!("{v}i"),
                    Arg::F32(v) => format!("{v:?}f"),
                    Arg::Param(p) => format!("param${}", p.0),
                    Arg::TensorMap { buf, rows, cols, tma } => {
                        format!(
                            "tmap(buf%{} {rows}x{cols} box {}x{} swz {})",
                            buf.0, tma.rows, tma.cols, tma.swizzle_bytes
                        )
                    }
                })
                .collect();
            format!(
                "launch kernel@{} grid {}x{}x{} block {}x{}x{} ({})",
                kernel.0,
                grid.0,
                grid.1,
                grid.2,
                block.0,
                block.1,
                block.2,
                args.join(", ")
            )
        }
        Launch::Copy { src, src_at, dst, dst_at, len } => {
            format!("copy buf%{}[{src_at}..+{len}] -> buf%{}[{dst_at}..]", src.0, dst.0)
        }
        Launch::Zero { dst, at, len } => format!("zero buf%{}[{at}..+{len}]", dst.0),
        Launch::Gemm { a, w, c, m, k, n, accumulate, bias, relu, residual } => format!(
            "gemm buf%{}[{m}x{k}] * buf%{}[{k}x{n}]{}{}{} {} buf%{}",
            a.0,
            w.0,
            residual.map_or(String::new(), |r| format!(" + buf%{}[{m}x{n}]", r.0)),
            bias.map_or(String::new(), |b| format!(" + buf%{}", b.0)),
            if *relu { " relu" } else { "" },
            if *accumulate { "+=>" } else { "=>" },
            c.0
        ),
    }
}
