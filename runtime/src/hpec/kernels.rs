//! The two SpMM forms on one block of images, and dead-image dropping.
//!
//! A block holds up to `lanes` images as a dense neuron-major tile `Y[neuron][lane]`
//! (N × lanes floats, never images × N), so every inner loop runs over the block's images and
//! vectorises. Per layer one of two forms computes `Z = Y · W`:
//!
//! * row-wise left SpMM over CSR ([`step_row_wise_csr`]): for each neuron row `r` of Y with any
//!   nonzero (the sparse rows of Y), scatter `Y[r][·] · W[r, c]` into `Z[c][·]`;
//! * column-wise right SpMM over CSC ([`step_column_wise_csc`]): for each output neuron `c`,
//!   gather `Σ_r Y[r][·] · W[r, c]` over the column's rows.
//!
//! Both add the terms of each output in ascending row order from 0 (CSR visits rows ascending,
//! CSC lists rows ascending; skipped zero rows add exact zeros), so they give bit-identical
//! results. The epilogue applies `min(32, max(0, z + bias))`, records which neuron rows are
//! nonzero for the next layer and which images are still alive; dead images (all-zero rows)
//! leave the block and stay zero.

use super::sparse::LayerMatrix;

/// The challenge's activation ceiling.
pub const ACTIVATION_CAP: f32 = 32.0;

/// A block of images moving through the layers together.
pub struct ImageBlock {
    pub neurons: usize,
    pub lanes: usize,
    pub active: usize,
    /// `image_ids[lane]`: 0-based image of each active lane.
    pub image_ids: Vec<u32>,
    pub current: Vec<f32>,
    next: Vec<f32>,
    /// Neuron rows of `current` with a nonzero in some active lane, ascending.
    pub nonzero_rows: Vec<u32>,
    alive: Vec<bool>,
}

impl ImageBlock {
    /// A block for these images; `pixels_of(lane)` gives each image's `(pixel, value)` lists.
    pub fn new<'a>(
        neurons: usize,
        image_ids: Vec<u32>,
        pixels_of: impl Fn(u32) -> (&'a [u32], &'a [f32]),
    ) -> ImageBlock {
        let lanes = image_ids.len().max(1);
        let mut current = vec![0f32; neurons * lanes];
        let mut row_used = vec![false; neurons];
        for (lane, &image) in image_ids.iter().enumerate() {
            let (pixels, values) = pixels_of(image);
            for (&pixel, &value) in pixels.iter().zip(values) {
                current[pixel as usize * lanes + lane] = value;
                row_used[pixel as usize] |= value != 0.0;
            }
        }
        let nonzero_rows = (0..neurons as u32).filter(|&r| row_used[r as usize]).collect();
        let mut block = ImageBlock {
            neurons,
            lanes,
            active: image_ids.len(),
            image_ids,
            current,
            next: vec![0f32; neurons * lanes],
            nonzero_rows,
            alive: vec![false; lanes],
        };
        // Images without a nonzero pixel are dead before the first layer.
        block.alive.iter_mut().for_each(|a| *a = false);
        for lane in 0..block.active {
            block.alive[lane] = (0..neurons).any(|r| block.current[r * block.lanes + lane] != 0.0);
        }
        block.drop_dead_lanes();
        block
    }

    /// Applies the activation to `next[column]`, tracks nonzero rows and living lanes.
    #[inline]
    fn finish_column(next: &mut [f32], bias: f32, alive: &mut [bool]) -> bool {
        let mut any = false;
        for (value, lane_alive) in next.iter_mut().zip(alive.iter_mut()) {
            // `clamp`, as the f64 reference does (a NaN stays NaN rather than becoming 0).
            let activated = (*value + bias).clamp(0.0, ACTIVATION_CAP);
            *value = activated;
            let nonzero = activated != 0.0;
            *lane_alive |= nonzero;
            any |= nonzero;
        }
        any
    }

    /// Swaps `next` in, and removes lanes whose rows became all zero.
    fn commit(&mut self, new_nonzero_rows: Vec<u32>) {
        std::mem::swap(&mut self.current, &mut self.next);
        self.nonzero_rows = new_nonzero_rows;
        self.drop_dead_lanes();
    }

    fn drop_dead_lanes(&mut self) {
        let mut lane = 0;
        while lane < self.active {
            if self.alive[lane] {
                lane += 1;
                continue;
            }
            let last = self.active - 1;
            if lane != last {
                for row in 0..self.neurons {
                    self.current[row * self.lanes + lane] = self.current[row * self.lanes + last];
                }
                self.image_ids.swap(lane, last);
                self.alive[lane] = self.alive[last];
            }
            for row in 0..self.neurons {
                self.current[row * self.lanes + last] = 0.0;
            }
            self.active -= 1;
        }
        self.image_ids.truncate(self.active);
        if self.active == 0 {
            self.nonzero_rows.clear();
        }
    }
}

/// One layer by the row-wise left SpMM over CSR (skips all-zero rows of Y).
pub fn step_row_wise_csr(block: &mut ImageBlock, layer: &LayerMatrix, bias: f32) {
    let lanes = block.lanes;
    let active = block.active;
    block.next.iter_mut().for_each(|v| *v = 0.0);
    for &row in &block.nonzero_rows {
        let source = &block.current[row as usize * lanes..row as usize * lanes + active];
        let (columns, weights) = layer.csr.slot(row as usize);
        for (&column, &weight) in columns.iter().zip(weights) {
            let start = column as usize * lanes;
            let target = &mut block.next[start..start + active];
            for (z, &y) in target.iter_mut().zip(source) {
                *z += y * weight;
            }
        }
    }
    block.alive[..active].iter_mut().for_each(|a| *a = false);
    let mut new_nonzero_rows = Vec::with_capacity(block.nonzero_rows.len().max(16));
    for column in 0..block.neurons {
        let start = column * lanes;
        if ImageBlock::finish_column(&mut block.next[start..start + active], bias, &mut block.alive[..active]) {
            new_nonzero_rows.push(column as u32);
        }
    }
    block.commit(new_nonzero_rows);
}

/// One layer by the column-wise right SpMM over CSC (gathers every output neuron).
pub fn step_column_wise_csc(block: &mut ImageBlock, layer: &LayerMatrix, bias: f32) {
    let lanes = block.lanes;
    let active = block.active;
    block.alive[..active].iter_mut().for_each(|a| *a = false);
    let mut new_nonzero_rows = Vec::with_capacity(block.nonzero_rows.len().max(16));
    let csc = layer.csc();
    for column in 0..block.neurons {
        let start = column * lanes;
        let target = &mut block.next[start..start + active];
        target.iter_mut().for_each(|v| *v = 0.0);
        let (rows, weights) = csc.slot(column);
        for (&row, &weight) in rows.iter().zip(weights) {
            let source = &block.current[row as usize * lanes..row as usize * lanes + active];
            for (z, &y) in target.iter_mut().zip(source) {
                *z += y * weight;
            }
        }
        if ImageBlock::finish_column(target, bias, &mut block.alive[..active]) {
            new_nonzero_rows.push(column as u32);
        }
    }
    block.commit(new_nonzero_rows);
}
