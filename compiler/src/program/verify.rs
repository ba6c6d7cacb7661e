//! [`Program::verify`]: the invariants of the program (see the module docs of `program`).

use super::*;

impl Program {
    /// Checks the invariants of the module docs.
    pub fn verify(&self) -> Result<(), ProgramError> {
        let fail = |message: String| ProgramError::Invalid { program: self.name.clone(), message };
        let nb = self.buffers.len();
        for b in &self.buffers {
            if let Storage::Constant(d) | Storage::Host(d) = &b.storage {
                if d.len() != b.len || d.elem() != b.elem {
                    return Err(fail(format!(
                        "buffer {}: data holds {} {} for {} {}",
                        b.name,
                        d.len(),
                        d.elem().name(),
                        b.len,
                        b.elem.name()
                    )));
                }
            }
        }
        for (i, step) in self.steps.iter().enumerate() {
            if step.after.iter().any(|&j| j >= i) {
                return Err(fail(format!("step {i} ({}) waits for a later step", step.label)));
            }
            for l in &step.launches {
                match l {
                    Launch::Kernel { kernel, args, .. } => {
                        if kernel.0 as usize >= self.kernels.len() {
                            return Err(fail(format!("step {i} ({}): kernel {} out of range", step.label, kernel.0)));
                        }
                        for a in args {
                            match a {
                                Arg::Buf(b, at) | Arg::TensorMap { buf: b, rows: at, .. }
                                    if b.0 as usize >= nb || *at > self.buffer(*b).len && matches!(a, Arg::Buf(..)) =>
                                {
                                    return Err(fail(format!("step {i} ({}): argument past its buffer", step.label)));
                                }
                                Arg::Param(p) if p.0 as usize >= self.params.len() => {
                                    return Err(fail(format!(
                                        "step {i} ({}): parameter {} out of range",
                                        step.label, p.0
                                    )))
                                }
                                _ => {}
                            }
                        }
                    }
                    Launch::Copy { src, dst, .. } if self.buffer(*src).elem != self.buffer(*dst).elem => {
                        return Err(fail(format!("step {i} ({}): copy between element types", step.label)));
                    }
                    Launch::Gemm { a, w, c, m, k, n, bias, accumulate, residual, .. } => {
                        if let Some(r) = residual {
                            if r.0 as usize >= nb
                                || r == c
                                || *accumulate
                                || self.buffer(*r).elem != self.buffer(*c).elem
                                || self.buffer(*r).len < m * n
                            {
                                return Err(fail(format!(
                                    "step {i} ({}): GEMM residual out of range, the output itself, of another type or short",
                                    step.label
                                )));
                            }
                        }
                        if let Some(b) = bias {
                            if b.0 as usize >= nb
                                || self.buffer(*b).elem != self.buffer(*c).elem
                                || self.buffer(*b).len < *n
                            {
                                return Err(fail(format!(
                                    "step {i} ({}): GEMM bias out of range, of another type or shorter than {n}",
                                    step.label
                                )));
                            }
                            if *accumulate {
                                return Err(fail(format!(
                                    "step {i} ({}): a GEMM that adds into C takes no bias of its own",
                                    step.label
                                )));
                            }
                        }
                        if [a, w, c].iter().any(|b| b.0 as usize >= nb) {
                            return Err(fail(format!("step {i} ({}): GEMM buffer out of range", step.label)));
                        }
                        let elems = [self.buffer(*a).elem, self.buffer(*w).elem, self.buffer(*c).elem];
                        if !matches!(elems[0], Elem::F32 | Elem::F16 | Elem::BF16)
                            || elems.iter().any(|e| *e != elems[0])
                        {
                            return Err(fail(format!(
                                "step {i} ({}): GEMM on {}, {} and {} (one float element type wanted)",
                                step.label,
                                elems[0].name(),
                                elems[1].name(),
                                elems[2].name()
                            )));
                        }
                        if [m, k, n].iter().any(|&&d| d == 0 || d > i32::MAX as usize) {
                            return Err(fail(format!(
                                "step {i} ({}): GEMM {m}x{k}x{n} outside the library's 32-bit dimensions",
                                step.label
                            )));
                        }
                    }
                    _ => {}
                }
            }
            if let Op::Nodes(nodes) = &step.op {
                for n in nodes {
                    for o in n.inputs.iter().flatten().chain(&n.outputs) {
                        let Operand::Buf { buf, dtype, shape } = o else { continue };
                        if buf.0 as usize >= nb {
                            return Err(fail(format!("step {i} ({}): buffer {} out of range", step.label, buf.0)));
                        }
                        let b = self.buffer(*buf);
                        // A value lies in the front of its buffer (a reused one may be longer).
                        if Elem::of_dtype(*dtype) != Some(b.elem) || shape.iter().product::<usize>() > b.len {
                            return Err(fail(format!(
                                "step {i} ({}): node {} sees {} as {}{:?} ({} {})",
                                step.label,
                                n.name,
                                b.name,
                                dtype.name(),
                                shape,
                                b.len,
                                b.elem.name()
                            )));
                        }
                    }
                }
            }
            if let Op::Spmm { weight, .. } = &step.op {
                if *weight >= self.matrices.len() {
                    return Err(fail(format!("step {i} ({}): matrix {weight} out of range", step.label)));
                }
            }
            if let Op::SpmmChain { layers, n, slots, idx, w, .. } = &step.op {
                if [idx, w].iter().any(|b| b.0 as usize >= nb) {
                    return Err(fail(format!("step {i} ({}): chain table out of range", step.label)));
                }
                let elems = [self.buffer(*idx).elem, self.buffer(*w).elem];
                if *layers == 0 || *n == 0 || *slots == 0 || elems != [Elem::I32, Elem::F32] {
                    return Err(fail(format!(
                        "step {i} ({}): chain of {layers} layers, {n} neurons, {slots} slots, tables of {} and {}",
                        step.label,
                        elems[0].name(),
                        elems[1].name()
                    )));
                }
            }
            for acc in self.accesses(i) {
                if acc.buf.0 as usize >= nb {
                    return Err(fail(format!("step {i} ({}): buffer {} out of range", step.label, acc.buf.0)));
                }
                let b = self.buffer(acc.buf);
                if acc.at + acc.len > b.len {
                    return Err(fail(format!(
                        "step {i} ({}): touches {}..{} of {} ({} elements)",
                        step.label,
                        acc.at,
                        acc.at + acc.len,
                        b.name,
                        b.len
                    )));
                }
                if acc.write && matches!(b.storage, Storage::Constant(_) | Storage::Host(_)) {
                    return Err(fail(format!("step {i} ({}): writes constant {}", step.label, b.name)));
                }
            }
        }
        // Ordering: reachability over `after`, as bitsets.
        let n = self.steps.len();
        let words = n.div_ceil(64);
        let mut reach = vec![0u64; n * words];
        for i in 0..n {
            for &j in &self.steps[i].after {
                reach[i * words + j / 64] |= 1 << (j % 64);
                for w in 0..words {
                    let v = reach[j * words + w];
                    reach[i * words + w] |= v;
                }
            }
        }
        let ordered = |i: usize, j: usize| reach[i * words + j / 64] >> (j % 64) & 1 == 1;
        // Conflicts can only be between accesses of one buffer: group them.
        let mut by_buffer: Vec<Vec<(usize, Access)>> = vec![vec![]; nb];
        for i in 0..n {
            for a in self.accesses(i) {
                by_buffer[a.buf.0 as usize].push((i, a));
            }
        }
        for list in &by_buffer {
            for (x, (i, a)) in list.iter().enumerate() {
                for (j, b) in &list[..x] {
                    if i != j && (a.write || b.write) && a.overlaps(b) && !ordered(*i, *j) {
                        return Err(fail(format!(
                            "steps {j} ({}) and {i} ({}) touch {} and are not ordered",
                            self.steps[*j].label,
                            self.steps[*i].label,
                            self.buffer(a.buf).name
                        )));
                    }
                }
            }
        }
        Ok(())
    }
}
