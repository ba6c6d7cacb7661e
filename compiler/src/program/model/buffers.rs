//! Buffers of values: constants uploaded on first use, scratch buffers reused once every value
//! they held has been read by its last reader (counted at the loop iteration that emits that
//! reader's step), best fit among the free ones of the element type. Reuse needs no extra care
//! for ordering: the builder makes a write wait for every earlier read of the range it writes.

use super::*;

impl Lowering<'_> {
    /// The buffer of value `v`, made on first use (constants uploaded, others scratch).
    pub(super) fn buf(&mut self, v: ValueId) -> Result<BufferId, ProgramError> {
        if let Some(&b) = self.bufs.get(&v) {
            return Ok(b);
        }
        let value = self.graph.value(v);
        let elem = self.elem(value.fact.dtype, &value.name)?;
        let id = match constant(self.graph, v) {
            Some(t) => {
                let data = Data::of_tensor(t.data())
                    .ok_or_else(|| invalid(format!("constant {}: no buffer form", value.name)))?;
                self.b.constant(&value.name, data, false)
            }
            None => {
                let len = value.fact.numel();
                // Best fit among the free buffers of this element type: the smallest that holds
                // the value, else the largest, grown. Graph outputs get a buffer of their own.
                let fits = |b: &BufferId| self.b.program().buffer(*b).len;
                let same: Vec<usize> = (0..self.free.len())
                    .filter(|&i| self.b.program().buffer(self.free[i]).elem == elem && !self.is_output[v.0 as usize])
                    .collect();
                let pick = same
                    .iter()
                    .copied()
                    .filter(|&i| fits(&self.free[i]) >= len)
                    .min_by_key(|&i| (fits(&self.free[i]), i))
                    .or_else(|| same.iter().copied().max_by_key(|&i| (fits(&self.free[i]), usize::MAX - i)));
                let id = match pick {
                    Some(i) => {
                        let id = self.free.remove(i);
                        self.b.grow(id, len);
                        id
                    }
                    None => self.b.buffer(&value.name, elem, len, Storage::Scratch),
                };
                self.in_use.push(id);
                id
            }
        };
        self.bufs.insert(v, id);
        self.note_use(v, id);
        Ok(id)
    }

    /// Records that buffer `id` holds value `v` until `v`'s last read.
    pub(super) fn note_use(&mut self, v: ValueId, id: BufferId) {
        let last = self.last_use.get(v.0 as usize).copied().unwrap_or(usize::MAX);
        let e = self.buf_last.entry(id).or_insert(0);
        *e = (*e).max(last);
    }

    /// After loop iteration `i`: scratch buffers whose values are all read are free for reuse.
    /// Reuse is safe by construction: the builder orders a write after every earlier read of
    /// the range it writes.
    pub(super) fn release(&mut self, i: usize) {
        let (done, keep): (Vec<BufferId>, Vec<BufferId>) =
            self.in_use.iter().partition(|b| self.buf_last.get(b).is_some_and(|&l| l <= i));
        self.in_use = keep;
        for b in done {
            self.buf_last.remove(&b);
            self.free.push(b);
        }
    }
}
