//! Exact categories at near fp32 speed: fp32 bounds that can only overestimate or only
//! underestimate the f64 reference, and the reference's arithmetic for what they leave open.
//!
//! fp32 cannot promise the reference's categories: an image near an unstable fixed point (on
//! the generated 4096-neuron networks, x → 2x − 0.35 from layer 8 on for image 42,014) follows
//! its rounding, not the reference's, and fp32 and f64 end on opposite sides. Computing every
//! image in f64 settles it but costs ~3× on the wide first layers, where nearly every image is
//! still alive. [`Arithmetic::Screened`] spends f64 only where fp32 cannot decide:
//!
//! 1. **Screen** ([`bounding_network`] with [`Bound::Upper`]): the first `T` layers (the layers
//!    before the one-launch tail, where nearly every image that dies does) in fp32, with every
//!    weight multiplied by `1 + δ` and the bias raised, both rounded up. With non-negative
//!    weights a layer is monotone in its input, and `δ` exceeds what fp32 can err by
//!    (`δ = 2 (n + 2) · 2^-20`, `n` the most nonzeros a column sums: 16× fp32's unit
//!    roundoff per term, room for 3xTF32's split and a truncating accumulator), so by
//!    induction over the layers no screened activation is below the reference's. An image
//!    whose screened row is all zeros after `T` layers is dead in the reference too and, the
//!    bias being negative, stays dead.
//! 2. **Bound** ([`Bound::Lower`]): the screen's survivors through every layer in fp32 with the
//!    weights scaled by `1 − δ` and the bias lowered, rounded down: no activation above the
//!    reference's, so an image alive at the end is alive in the reference.
//! 3. **Settle**: the survivors the bound lost (those within rounding of a threshold: one image
//!    of the 4096 networks) run every layer as the f64 reference computes them
//!    ([`Precision::F64`]), whose categories are the reference's bit for bit.
//!
//! The categories are exactly the reference's on any network with non-negative weights and a
//! negative bias ([`bounding_network`] refuses others); `δ` only decides how many images the
//! later stages get.

use super::error::{HpecError, HpecResult};
use super::images::Images;
use super::network::Network;
use super::sparse::{CompressedMatrix, LayerMatrix};
use spartac::program::hpec::Precision;

/// How `hpec run` computes the activations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Arithmetic {
    /// An fp32 screen, then f64 for its survivors: the reference's categories at near fp32
    /// speed (the module docs).
    #[default]
    Screened,
    /// fp32 throughout: the fastest, but an image at an unstable fixed point may end on the
    /// other side of zero than in the reference.
    F32,
    /// Every layer as the f64 reference computes it.
    F64,
}

impl Arithmetic {
    pub fn name(self) -> &'static str {
        match self {
            Arithmetic::Screened => "screened",
            Arithmetic::F32 => "f32",
            Arithmetic::F64 => "f64",
        }
    }

    pub fn parse(s: &str) -> Result<Arithmetic, String> {
        match s {
            "screened" => Ok(Arithmetic::Screened),
            "f32" => Ok(Arithmetic::F32),
            "f64" => Ok(Arithmetic::F64),
            other => Err(format!("unknown precision {other:?} (choose screened, f32 or f64)")),
        }
    }
}

/// The bound on one term's share of an fp32 sum's error the bounds allow, relative to the
/// sum of the terms' magnitudes: 2^-20, 16× fp32's unit roundoff. An fp32 sum of n products
/// (FMAs, or 3xTF32: a 2^-22 split residue per product, fp32 accumulation) errs by at most
/// about (n + 1) · 2^-23 of it even when the accumulator truncates.
pub const TERM_ERROR: f64 = 1.0 / 1048576.0;

/// Which side of the reference a [`bounding_network`] stays on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bound {
    /// No activation below the reference's: a row dead here is dead there.
    Upper,
    /// No activation above the reference's: a row alive here is alive there.
    Lower,
}

/// A network whose fp32 activations bound the reference's: what [`bounding_network`] changed.
#[derive(Clone, Debug, PartialEq)]
pub struct Screen {
    pub network: Network,
    pub bound: Bound,
    /// Layers kept (the network's first ones).
    pub layers: usize,
    /// Every weight was multiplied by this, then rounded away from the reference.
    pub weight_scale: f64,
}

/// `x` rounded to f32 toward +∞ (`up`) or −∞.
fn f32_toward(x: f64, up: bool) -> f32 {
    let r = x as f32;
    match (up, (r as f64).partial_cmp(&x)) {
        (true, Some(std::cmp::Ordering::Less)) => r.next_up(),
        (false, Some(std::cmp::Ordering::Greater)) => r.next_down(),
        _ => r,
    }
}

/// The first `layers` layers of `network` with every weight scaled by `1 ± δ` and the bias
/// moved (module docs), each rounded away from the reference: up for [`Bound::Upper`], down
/// for [`Bound::Lower`]. Errors when a kept weight is negative or the bias is not negative:
/// the bound needs a monotone network whose dead rows stay dead.
pub fn bounding_network(network: &Network, layers: usize, bound: Bound) -> HpecResult<Screen> {
    if network.bias.is_nan() || network.bias >= 0.0 {
        return Err(HpecError::InvalidArgument(format!(
            "the screened precision needs a negative bias (this network's is {}); use --precision f64",
            network.bias
        )));
    }
    let layers = layers.min(network.n_layers());
    let kept = &network.layers[..layers];
    if let Some(l) = kept.iter().position(|m| m.csr.values.iter().any(|&w| w.is_nan() || w < 0.0 || w.is_infinite())) {
        return Err(HpecError::InvalidArgument(format!(
            "the screened precision needs non-negative weights (layer {l} has a negative or non-finite one); use --precision f64"
        )));
    }
    // The longest sum a column of any kept layer makes.
    let longest = kept
        .iter()
        .map(|m| {
            let mut per_column = vec![0usize; m.n_neurons()];
            m.csr.indices.iter().for_each(|&c| per_column[c as usize] += 1);
            per_column.into_iter().max().unwrap_or(0)
        })
        .max()
        .unwrap_or(0);
    let delta = 2.0 * (longest as f64 + 2.0) * TERM_ERROR;
    let (up, sign) = match bound {
        Bound::Upper => (true, 1.0),
        Bound::Lower => (false, -1.0),
    };
    let weight_scale = 1.0 + sign * delta;
    let scaled = kept
        .iter()
        .map(|m| {
            let csr = &m.csr;
            LayerMatrix::from_csr(CompressedMatrix {
                n_outer: csr.n_outer,
                n_inner: csr.n_inner,
                offsets: csr.offsets.clone(),
                indices: csr.indices.clone(),
                values: csr.values.iter().map(|&w| f32_toward(w as f64 * weight_scale, up)).collect(),
            })
        })
        .collect();
    // The bias moved by 4 units of fp32 roundoff of its magnitude: room for the rounding of
    // the sum plus bias and for the reference's own (2^-53) rounding.
    let b = network.bias as f64;
    let bias = f32_toward(b + sign * 4.0 * f32::EPSILON as f64 * b.abs(), up);
    Ok(Screen { network: Network { neurons: network.neurons, bias, layers: scaled }, bound, layers, weight_scale })
}

/// The images whose 1-based positions `ids` lists, in that order (the settle's inputs).
pub fn survivors(images: &Images, ids: &[u32]) -> HpecResult<Images> {
    if let Some(&bad) = ids.iter().find(|&&id| id == 0 || id as usize > images.n_images()) {
        return Err(HpecError::InvalidArgument(format!(
            "survivor {bad} is not one of the {} images",
            images.n_images()
        )));
    }
    images.reordered(&ids.iter().map(|&id| id - 1).collect::<Vec<_>>())
}

/// The settle's categories (1-based positions among the survivors) as positions among all the
/// images.
pub fn settled_categories(survivor_ids: &[u32], settled: &[u32]) -> Vec<u32> {
    let mut ids: Vec<u32> = settled.iter().map(|&pos| survivor_ids[pos as usize - 1]).collect();
    ids.sort_unstable();
    ids
}

/// One stage of a screened run: which, on how many images, what it found (1-based positions
/// among all the images), and what the stage function returned.
pub struct Stage<S> {
    pub name: &'static str,
    pub images: usize,
    pub found: Vec<u32>,
    pub result: S,
}

/// What a screened run gave: the screen, its stages in order (screen, bound, settle; the later
/// ones only while images are left undecided) and the categories (positions among the images).
pub struct Screened<S> {
    pub screen: Screen,
    pub stages: Vec<Stage<S>>,
    pub categories: Vec<u32>,
}

/// Runs `network` on `images` screened (module docs): `stage` compiles and runs a network on
/// images in a precision and returns the categories (1-based positions among its images) with
/// whatever else it measured. It is called for the screen of the first `screen_layers` layers
/// (upper bound, fp32), then when any image survives for the lower bound of the whole network
/// on the survivors (fp32), then when the bound loses any survivor for the whole network in
/// f64 on those.
pub fn run_screened<S, E: From<HpecError>>(
    network: &Network,
    images: &Images,
    screen_layers: usize,
    mut stage: impl FnMut(&Network, &Images, Precision) -> Result<(Vec<u32>, S), E>,
) -> Result<Screened<S>, E> {
    let screen = bounding_network(network, screen_layers, Bound::Upper)?;
    let (survivor_ids, result) = stage(&screen.network, images, Precision::F32)?;
    let mut stages = vec![Stage { name: "screen", images: images.n_images(), found: survivor_ids.clone(), result }];
    let mut alive = vec![];
    if !survivor_ids.is_empty() {
        let lower = bounding_network(network, network.n_layers(), Bound::Lower)?;
        let kept = survivors(images, &survivor_ids)?;
        let (bounded, result) = stage(&lower.network, &kept, Precision::F32)?;
        alive = settled_categories(&survivor_ids, &bounded);
        stages.push(Stage { name: "bound", images: kept.n_images(), found: alive.clone(), result });
        let open: Vec<u32> = survivor_ids.iter().copied().filter(|id| alive.binary_search(id).is_err()).collect();
        if !open.is_empty() {
            let (settled, result) = stage(network, &survivors(images, &open)?, Precision::F64)?;
            let found = settled_categories(&open, &settled);
            alive.extend_from_slice(&found);
            alive.sort_unstable();
            stages.push(Stage { name: "settle", images: open.len(), found, result });
        }
    }
    Ok(Screened { screen, stages, categories: alive })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hpec::generate;

    #[test]
    fn the_bounds_scale_every_weight_and_move_the_bias_away_from_the_reference() {
        let network = generate(1024, 4, 0).unwrap();
        let screen = bounding_network(&network, 3, Bound::Upper).unwrap();
        assert_eq!(screen.layers, 3);
        assert_eq!(screen.network.n_layers(), 3);
        // 32 nonzeros a column: delta = 2 * 34 * 2^-20.
        assert!((screen.weight_scale - (1.0 + 68.0 / 1048576.0)).abs() < 1e-15);
        for (s, o) in screen.network.layers.iter().zip(&network.layers) {
            assert_eq!(s.csr.indices, o.csr.indices);
            for (&ws, &wo) in s.csr.values.iter().zip(&o.csr.values) {
                assert!(ws as f64 >= wo as f64 * screen.weight_scale);
                assert!((ws as f64) < wo as f64 * screen.weight_scale * (1.0 + 2.0 * f32::EPSILON as f64));
            }
        }
        assert!(screen.network.bias > network.bias && (screen.network.bias - network.bias) < 1e-6);
        assert_eq!(bounding_network(&network, 99, Bound::Upper).unwrap().layers, 4);
        let lower = bounding_network(&network, 4, Bound::Lower).unwrap();
        assert!((lower.weight_scale - (1.0 - 68.0 / 1048576.0)).abs() < 1e-15);
        for (s, o) in lower.network.layers.iter().zip(&network.layers) {
            assert!(s
                .csr
                .values
                .iter()
                .zip(&o.csr.values)
                .all(|(&ws, &wo)| ws as f64 <= wo as f64 * lower.weight_scale));
        }
        assert!(lower.network.bias < network.bias && (network.bias - lower.network.bias) < 1e-6);
    }

    #[test]
    fn the_bounds_refuse_negative_weights_and_a_bias_that_is_not_negative() {
        let mut network = generate(1024, 2, 0).unwrap();
        network.bias = 0.0;
        let e = bounding_network(&network, 2, Bound::Upper).unwrap_err().to_string();
        assert!(e.contains("negative bias") && e.contains("--precision f64"), "{e}");
        network.bias = -0.3;
        let mut csr = network.layers[1].csr.clone();
        csr.values[5] = -0.0625;
        network.layers[1] = LayerMatrix::from_csr(csr);
        let e = bounding_network(&network, 2, Bound::Upper).unwrap_err().to_string();
        assert!(e.contains("layer 1") && e.contains("non-negative"), "{e}");
        // Only the screened layers need to be monotone.
        assert!(bounding_network(&network, 1, Bound::Lower).is_ok());
    }

    #[test]
    fn survivors_and_their_categories_map_back_to_the_images() {
        let images = crate::hpec::bundled::real_1024_images().unwrap().first(10);
        let picked = survivors(&images, &[3, 7, 10]).unwrap();
        assert_eq!(picked.n_images(), 3);
        assert_eq!(picked.pixels.slot(1), images.pixels.slot(6));
        assert_eq!(settled_categories(&[3, 7, 10], &[3, 1]), vec![3, 10]);
        assert!(survivors(&images, &[0]).is_err() && survivors(&images, &[11]).is_err());
    }
}
