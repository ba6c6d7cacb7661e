//! Compressed sparse matrices (CSR and CSC) of one weight layer.
//!
//! A layer is kept in CSR (`row -> (col, value)`), which drives the row-wise left SpMM that
//! scatters each nonzero activation row; its CSC form (`col -> (row, value)`), which drives
//! the column-wise right SpMM that gathers one output neuron at a time, is built lazily on
//! first use ([`LayerMatrix::csc`]), so loading a network materialises only CSR. Both forms
//! list their inner indices in ascending order, so both SpMM forms sum every output in the
//! same order.

use std::sync::OnceLock;

use super::error::{HpecError, HpecResult};

/// One sparse matrix in compressed form. For CSR `outer` is rows, `inner` columns; for CSC
/// the other way around. Offsets are `u32`: a layer holds fewer than 2^32 nonzeros.
#[derive(Clone, Debug, PartialEq)]
pub struct CompressedMatrix {
    pub n_outer: usize,
    pub n_inner: usize,
    pub offsets: Vec<u32>,
    pub indices: Vec<u32>,
    pub values: Vec<f32>,
}

impl CompressedMatrix {
    pub fn n_nonzeros(&self) -> usize {
        self.indices.len()
    }

    /// Inner indices and values of outer slot `outer_idx`.
    #[inline]
    pub fn slot(&self, outer_idx: usize) -> (&[u32], &[f32]) {
        let start = self.offsets[outer_idx] as usize;
        let end = self.offsets[outer_idx + 1] as usize;
        (&self.indices[start..end], &self.values[start..end])
    }

    /// Builds from `(outer, inner, value)` triples already sorted by `(outer, inner)` and free
    /// of duplicates.
    pub fn from_sorted_triples(
        n_outer: usize,
        n_inner: usize,
        triples: &[(u32, u32, f32)],
    ) -> HpecResult<CompressedMatrix> {
        if triples.len() > u32::MAX as usize {
            return Err(HpecError::InvalidArgument(format!(
                "{} nonzeros do not fit a layer (limit {})",
                triples.len(),
                u32::MAX
            )));
        }
        let mut offsets = vec![0u32; n_outer + 1];
        for &(outer, _, _) in triples {
            offsets[outer as usize + 1] += 1;
        }
        for idx in 0..n_outer {
            offsets[idx + 1] += offsets[idx];
        }
        let indices = triples.iter().map(|t| t.1).collect();
        let values = triples.iter().map(|t| t.2).collect();
        Ok(CompressedMatrix { n_outer, n_inner, offsets, indices, values })
    }

    /// The same matrix compressed along the other axis (CSR <-> CSC), inner indices ascending.
    pub fn transposed(&self) -> CompressedMatrix {
        let mut offsets = vec![0u32; self.n_inner + 1];
        for &inner in &self.indices {
            offsets[inner as usize + 1] += 1;
        }
        for idx in 0..self.n_inner {
            offsets[idx + 1] += offsets[idx];
        }
        let mut cursor: Vec<u32> = offsets[..self.n_inner].to_vec();
        let mut indices = vec![0u32; self.indices.len()];
        let mut values = vec![0f32; self.values.len()];
        for outer in 0..self.n_outer {
            let (inner_slice, value_slice) = self.slot(outer);
            for (&inner, &value) in inner_slice.iter().zip(value_slice) {
                let pos = cursor[inner as usize] as usize;
                indices[pos] = outer as u32;
                values[pos] = value;
                cursor[inner as usize] += 1;
            }
        }
        CompressedMatrix { n_outer: self.n_inner, n_inner: self.n_outer, offsets, indices, values }
    }

    /// Checks the structural invariants (used on data read back from a cache).
    pub fn is_well_formed(&self) -> bool {
        if self.offsets.len() != self.n_outer + 1
            || self.offsets[0] != 0
            || *self.offsets.last().unwrap() as usize != self.indices.len()
            || self.indices.len() != self.values.len()
        {
            return false;
        }
        for outer in 0..self.n_outer {
            if self.offsets[outer] > self.offsets[outer + 1] {
                return false;
            }
            let (inner, _) = self.slot(outer);
            if inner.windows(2).any(|w| w[0] >= w[1]) || inner.iter().any(|&i| i as usize >= self.n_inner) {
                return false;
            }
        }
        true
    }
}

/// One weight layer W (rows = input neurons, columns = output neurons): CSR always, CSC
/// built from it on first use (thread-safe; concurrent first callers wait for one build).
#[derive(Clone, Debug)]
pub struct LayerMatrix {
    pub csr: CompressedMatrix,
    csc: OnceLock<CompressedMatrix>,
}

/// Two layers are equal when their CSR forms are (CSC is derived from CSR).
impl PartialEq for LayerMatrix {
    fn eq(&self, other: &LayerMatrix) -> bool {
        self.csr == other.csr
    }
}

impl LayerMatrix {
    /// A layer from its CSR form; CSC is built when first asked for.
    pub fn from_csr(csr: CompressedMatrix) -> LayerMatrix {
        LayerMatrix { csr, csc: OnceLock::new() }
    }

    /// A layer from its CSC form (CSR is built now; CSC is kept).
    pub fn from_csc(csc: CompressedMatrix) -> LayerMatrix {
        LayerMatrix { csr: csc.transposed(), csc: OnceLock::from(csc) }
    }

    /// The CSC form, built from CSR on the first call.
    pub fn csc(&self) -> &CompressedMatrix {
        self.csc.get_or_init(|| self.csr.transposed())
    }

    /// Whether the CSC form has been built.
    pub fn has_csc(&self) -> bool {
        self.csc.get().is_some()
    }

    pub fn n_nonzeros(&self) -> usize {
        self.csr.n_nonzeros()
    }

    pub fn n_neurons(&self) -> usize {
        self.csr.n_outer
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transpose_round_trip_keeps_sorted_inner_indices() {
        let triples = vec![(0, 2, 1.0), (1, 0, 2.0), (1, 2, 3.0), (2, 1, 4.0)];
        let csr = CompressedMatrix::from_sorted_triples(3, 3, &triples).unwrap();
        let csc = csr.transposed();
        assert_eq!(csc.offsets, vec![0, 1, 2, 4]);
        assert_eq!(csc.indices, vec![1, 2, 0, 1]);
        assert_eq!(csc.values, vec![2.0, 4.0, 1.0, 3.0]);
        assert!(csc.is_well_formed());
        assert_eq!(csc.transposed(), csr);
    }

    #[test]
    fn layer_builds_csc_lazily_once() {
        let csr = CompressedMatrix::from_sorted_triples(2, 2, &[(0, 1, 0.5), (1, 0, 0.25)]).unwrap();
        let layer = LayerMatrix::from_csr(csr.clone());
        assert!(!layer.has_csc());
        assert_eq!(layer.csc(), &csr.transposed());
        assert!(layer.has_csc());
        assert_eq!(LayerMatrix::from_csc(csr.transposed()), layer);
    }
}
