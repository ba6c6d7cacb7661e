//! `BitMask`'s word-at-a-time movements against their one-element-at-a-time definitions
//! (`ir::broadcast_index_map`, index arithmetic) on random shapes and masks.

use super::BitMask;
use crate::ir::{broadcast_index_map, strides};
use crate::rng::SplitMix64;

fn random_mask(len: usize, density: f64, rng: &mut SplitMix64) -> Vec<bool> {
    (0..len).map(|_| rng.next_f64() < density).collect()
}

fn random_shape(rank: usize, rng: &mut SplitMix64) -> Vec<usize> {
    // Sizes around a word (63, 64, 65, 130) as well as small ones.
    const SIZES: [usize; 9] = [1, 2, 3, 5, 7, 63, 64, 65, 130];
    let mut total = 1;
    (0..rank)
        .map(|_| {
            let d =
                if total > 4000 { 1 + rng.below(3) as usize } else { SIZES[rng.below(SIZES.len() as u64) as usize] };
            total *= d;
            d
        })
        .collect()
}

#[test]
fn bools_round_trip_and_tail_stays_clear() {
    let mut rng = SplitMix64::new(1);
    for len in [0, 1, 63, 64, 65, 200] {
        let b = random_mask(len, 0.5, &mut rng);
        let m = BitMask::from_bools(&b);
        assert_eq!(m.to_bools(), b);
        assert_eq!(m.count_ones(), b.iter().filter(|x| **x).count());
        let not = m.not();
        assert_eq!(not.count_ones(), len - m.count_ones(), "the complement sets no bit past len");
        assert_eq!(BitMask::ones(len).count_ones(), len);
    }
}

#[test]
fn runs_match_bit_by_bit_copies() {
    let mut rng = SplitMix64::new(2);
    for _ in 0..300 {
        let (n_src, n_dst) = (1 + rng.below(300) as usize, 1 + rng.below(300) as usize);
        let src_b = random_mask(n_src, 0.5, &mut rng);
        let dst_b = random_mask(n_dst, 0.5, &mut rng);
        let len = rng.below(n_src.min(n_dst) as u64 + 1) as usize;
        let so = rng.below((n_src - len) as u64 + 1) as usize;
        let d = rng.below((n_dst - len) as u64 + 1) as usize;
        let src = BitMask::from_bools(&src_b);
        let mut want = dst_b.clone();
        let mut m = BitMask::from_bools(&dst_b);
        m.copy_run(d, &src, so, len);
        want[d..d + len].copy_from_slice(&src_b[so..so + len]);
        assert_eq!(m.to_bools(), want, "copy {len} bits {so} -> {d}");
        let mut m = BitMask::from_bools(&dst_b);
        m.and_run(d, &src, so, len);
        let mut want = dst_b.clone();
        (0..len).for_each(|t| want[d + t] &= src_b[so + t]);
        assert_eq!(m.to_bools(), want, "and {len} bits {so} -> {d}");
        let mut m = BitMask::from_bools(&dst_b);
        m.or_run(d, &src, so, len);
        let mut want = dst_b.clone();
        (0..len).for_each(|t| want[d + t] |= src_b[so + t]);
        assert_eq!(m.to_bools(), want, "or {len} bits {so} -> {d}");
        let value = rng.below(2) == 1;
        let mut m = BitMask::from_bools(&dst_b);
        m.fill_run(d, len, value);
        let mut want = dst_b.clone();
        want[d..d + len].iter_mut().for_each(|b| *b = value);
        assert_eq!(m.to_bools(), want, "fill {len} bits at {d}");
        assert_eq!(m.all_run(d, len), value || len == 0);
        assert_eq!(src.all_run(so, len), src_b[so..so + len].iter().all(|b| *b));
    }
}

#[test]
fn broadcast_and_reduce_all_match_the_index_map() {
    let mut rng = SplitMix64::new(3);
    for case in 0..400 {
        let out_shape = random_shape(1 + rng.below(4) as usize, &mut rng);
        // The input: a suffix of the output's axes, each kept or set to 1.
        let drop = rng.below(out_shape.len() as u64 + 1) as usize;
        let in_shape: Vec<usize> = out_shape[drop..].iter().map(|&d| if rng.below(3) == 0 { 1 } else { d }).collect();
        let n_in: usize = in_shape.iter().product();
        let n_out: usize = out_shape.iter().product();
        let map = broadcast_index_map(&in_shape, &out_shape);
        let x = random_mask(n_in, 0.5, &mut rng);
        let want: Vec<bool> = map.iter().map(|&s| x[s]).collect();
        let got = BitMask::from_bools(&x).broadcast(&in_shape, &out_shape);
        assert_eq!(got.to_bools(), want, "case {case}: broadcast {in_shape:?} -> {out_shape:?}");
        // Mostly set, so that whole broadcast sets are set now and then.
        let y = random_mask(n_out, if case % 2 == 0 { 0.97 } else { 0.5 }, &mut rng);
        let mut needed = vec![false; n_in];
        for (o, &s) in map.iter().enumerate() {
            needed[s] |= !y[o];
        }
        let want: Vec<bool> = needed.iter().map(|n| !n).collect();
        let got = BitMask::from_bools(&y).reduce_all(&in_shape, &out_shape);
        assert_eq!(got.to_bools(), want, "case {case}: reduce {out_shape:?} -> {in_shape:?}");
    }
}

#[test]
fn permute_matches_index_arithmetic() {
    let mut rng = SplitMix64::new(4);
    for case in 0..300 {
        let rank = 1 + rng.below(5) as usize;
        let shape = random_shape(rank, &mut rng);
        let mut perm: Vec<usize> = (0..rank).collect();
        for i in (1..rank).rev() {
            perm.swap(i, rng.below(i as u64 + 1) as usize);
        }
        let n: usize = shape.iter().product();
        let x = random_mask(n, 0.5, &mut rng);
        let out_shape: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
        let (in_strides, out_strides) = (strides(&shape), strides(&out_shape));
        let mut want = vec![false; n];
        for (o, w) in want.iter_mut().enumerate() {
            let src: usize = (0..rank).map(|a| (o / out_strides[a]) % out_shape[a] * in_strides[perm[a]]).sum();
            *w = x[src];
        }
        let got = BitMask::from_bools(&x).permute(&shape, &perm);
        assert_eq!(got.to_bools(), want, "case {case}: {shape:?} by {perm:?}");
    }
}
