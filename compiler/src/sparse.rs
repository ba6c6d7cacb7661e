//! Sparse matrices without their dense form: [`Csr`] (a weight as the CPU executor and the
//! HPEC networks hold it) and [`WeightLookup`], how the specializer's packers read a weight's
//! values either from a dense row-major slice or from a CSR.
//!
//! A weight too large to hold densely (an HPEC layer of 65,536 neurons is 2^32 elements, 16 GiB
//! as fp32, of which 2 million are nonzero) goes through the planner and the specializer in
//! this form: the cover works on its sorted flat indices ([`Csr::flat_indices`]), the kernel
//! tables on its block list, and the packers look values up here.

/// A sparse matrix in CSR (`rows × cols`, row-major view): row `r`'s column indices are
/// `indices[offsets[r]..offsets[r + 1]]`, increasing, with their values beside them.
#[derive(Clone, Debug, PartialEq)]
pub struct Csr {
    pub rows: usize,
    pub cols: usize,
    pub offsets: Vec<u32>,
    pub indices: Vec<u32>,
    pub values: Vec<f32>,
}

/// A borrowed CSR matrix (e.g. a layer held in another type).
#[derive(Clone, Copy, Debug)]
pub struct CsrRef<'a> {
    pub rows: usize,
    pub cols: usize,
    pub offsets: &'a [u32],
    pub indices: &'a [u32],
    pub values: &'a [f32],
}

impl Csr {
    /// This matrix, borrowed.
    pub fn view(&self) -> CsrRef<'_> {
        CsrRef {
            rows: self.rows,
            cols: self.cols,
            offsets: &self.offsets,
            indices: &self.indices,
            values: &self.values,
        }
    }

    pub fn nnz(&self) -> usize {
        self.indices.len()
    }

    /// Row-major dense `rows × cols` → CSR of its nonzeros.
    pub fn from_dense(w: &[f32], rows: usize, cols: usize) -> Csr {
        let mut offsets = vec![0u32];
        let (mut indices, mut values) = (vec![], vec![]);
        for r in 0..rows {
            for c in 0..cols {
                let v = w[r * cols + c];
                if v != 0.0 {
                    indices.push(c as u32);
                    values.push(v);
                }
            }
            offsets.push(indices.len() as u32);
        }
        Csr { rows, cols, offsets, indices, values }
    }

    /// The row-major dense `rows × cols` form (for weights small enough to hold densely).
    pub fn to_dense(&self) -> Vec<f32> {
        let mut dense = vec![0.0f32; self.rows * self.cols];
        for r in 0..self.rows {
            for e in self.offsets[r] as usize..self.offsets[r + 1] as usize {
                dense[r * self.cols + self.indices[e] as usize] = self.values[e];
            }
        }
        dense
    }

    /// Checks the structure: `rows + 1` non-decreasing offsets ending at the entry count,
    /// columns in range and strictly increasing per row, one value per entry, and (when
    /// `nonzero_values`) no stored zero. The message names the first row at fault.
    pub fn validate(&self, nonzero_values: bool) -> Result<(), String> {
        if self.offsets.len() != self.rows + 1 || self.offsets.first() != Some(&0) {
            return Err(format!(
                "{} offsets for {} rows (expected rows + 1, starting at 0)",
                self.offsets.len(),
                self.rows
            ));
        }
        if *self.offsets.last().unwrap() as usize != self.indices.len() || self.values.len() != self.indices.len() {
            return Err(format!(
                "offsets end at {}, with {} column indices and {} values",
                self.offsets.last().unwrap(),
                self.indices.len(),
                self.values.len()
            ));
        }
        for r in 0..self.rows {
            let (a, b) = (self.offsets[r] as usize, self.offsets[r + 1] as usize);
            if a > b {
                return Err(format!("row {r}: offsets decrease"));
            }
            let row = &self.indices[a..b];
            if row.iter().any(|&c| c as usize >= self.cols) {
                return Err(format!("row {r}: a column index is not below {}", self.cols));
            }
            if row.windows(2).any(|p| p[0] >= p[1]) {
                return Err(format!("row {r}: column indices are not strictly increasing"));
            }
            if nonzero_values && self.values[a..b].contains(&0.0) {
                return Err(format!("row {r} stores an explicit zero: a stored weight must be nonzero"));
            }
        }
        Ok(())
    }

    /// The stored entries as row-major flat indices `r·cols + c`, increasing. The largest
    /// matrix this takes is 2^32 elements (65,536²), the range of a `u32`.
    pub fn flat_indices(&self) -> Vec<u32> {
        assert!(self.rows * self.cols <= 1 << 32, "flat indices of a {}x{} matrix overflow u32", self.rows, self.cols);
        let mut out = Vec::with_capacity(self.nnz());
        for r in 0..self.rows {
            for e in self.offsets[r] as usize..self.offsets[r + 1] as usize {
                out.push((r * self.cols + self.indices[e] as usize) as u32);
            }
        }
        out
    }

    /// The value at `(r, c)`, 0 where nothing is stored (a binary search in row `r`).
    pub fn get(&self, r: usize, c: usize) -> f32 {
        let (a, b) = (self.offsets[r] as usize, self.offsets[r + 1] as usize);
        match self.indices[a..b].binary_search(&(c as u32)) {
            Ok(i) => self.values[a + i],
            Err(_) => 0.0,
        }
    }

    /// The entries whose flat index is in `keep` (sorted, each one stored here): the part
    /// of the matrix one sub-operator owns.
    pub fn restricted_to(&self, keep: &[u32]) -> Csr {
        let mut offsets = vec![0u32; self.rows + 1];
        let mut indices = Vec::with_capacity(keep.len());
        let mut values = Vec::with_capacity(keep.len());
        for &i in keep {
            let (r, c) = (i as usize / self.cols, i as usize % self.cols);
            offsets[r + 1] += 1;
            indices.push(c as u32);
            values.push(self.get(r, c));
        }
        for r in 0..self.rows {
            offsets[r + 1] += offsets[r];
        }
        Csr { rows: self.rows, cols: self.cols, offsets, indices, values }
    }
}

/// Read access to a weight's values by row-major flat index, whatever holds them. The
/// specializer's packers are written against this, so a kernel's device tables are packed the
/// same way from a dense weight and from a [`Csr`].
pub trait WeightLookup<T> {
    /// Elements of the (logical, dense) matrix.
    fn numel(&self) -> usize;
    /// The value at flat index `i` (0 where the matrix stores nothing).
    fn at(&self, i: usize) -> T;
}

impl<T: Copy> WeightLookup<T> for [T] {
    fn numel(&self) -> usize {
        self.len()
    }

    fn at(&self, i: usize) -> T {
        self[i]
    }
}

impl<T: Copy> WeightLookup<T> for Vec<T> {
    fn numel(&self) -> usize {
        self.len()
    }

    fn at(&self, i: usize) -> T {
        self[i]
    }
}

impl WeightLookup<f32> for Csr {
    fn numel(&self) -> usize {
        self.rows * self.cols
    }

    fn at(&self, i: usize) -> f32 {
        self.get(i / self.cols, i % self.cols)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> (Vec<f32>, Csr) {
        let dense = vec![0.0, 2.0, 0.0, 0.0, 0.0, 0.0, -1.0, 0.0, 3.0, 0.0, 0.0, 4.0];
        let csr = Csr::from_dense(&dense, 3, 4);
        (dense, csr)
    }

    #[test]
    fn lookups_agree_with_the_dense_form() {
        let (dense, csr) = sample();
        csr.validate(true).unwrap();
        assert_eq!(csr.to_dense(), dense);
        assert_eq!(csr.nnz(), 4);
        for i in 0..dense.len() {
            assert_eq!(csr.at(i), dense.at(i), "element {i}");
        }
        assert_eq!(csr.flat_indices(), vec![1, 6, 8, 11]);
        let part = csr.restricted_to(&[8, 11]);
        part.validate(true).unwrap();
        assert_eq!(part.flat_indices(), vec![8, 11]);
        assert_eq!((part.at(8), part.at(11), part.at(1), part.at(6)), (3.0, 4.0, 0.0, 0.0));
    }

    #[test]
    fn validation_names_the_row_at_fault() {
        let (_, mut csr) = sample();
        csr.indices.swap(2, 3);
        assert!(csr.validate(false).unwrap_err().starts_with("row 2:"));
        let (_, mut csr) = sample();
        csr.values[0] = 0.0;
        assert!(csr.validate(true).unwrap_err().contains("explicit zero"));
        assert!(csr.validate(false).is_ok());
        let (_, mut csr) = sample();
        csr.offsets.pop();
        assert!(csr.validate(false).is_err());
    }
}
