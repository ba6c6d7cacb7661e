//! Speed of the reference executor's heavy ops on model-shaped work (not a test):
//! `cargo bench -p spartac --bench reference_ops`
//!
//! MatMul 4096x384x1536 and every MatMul of MiniLM-L6 at batch 32 x sequence 128; every
//! convolution of EfficientNet-Lite0 at batch 32. Prints time and GFLOP/s per item.

use spartac::ir::{Attr, Attrs, DType, Data, Tensor};
use spartac::ops::{registry, NodeCtx};
use spartac::rng::SplitMix64;
use std::time::Instant;

fn random(shape: &[usize], rng: &mut SplitMix64) -> Tensor {
    let n: usize = shape.iter().product();
    Tensor::new(shape.to_vec(), Data::from_f64_iter(DType::F32, (0..n).map(|_| rng.uniform(-1.0, 1.0)))).unwrap()
}

fn eval(op: &str, attrs: &Attrs, inputs: &[&Tensor]) -> Tensor {
    let ctx = NodeCtx { name: "bench", attrs, opset: 17, n_outputs: 1 };
    let ins: Vec<Option<&Tensor>> = inputs.iter().map(|t| Some(*t)).collect();
    (registry().get(op).unwrap().eval)(&ctx, &ins).unwrap().remove(0)
}

fn matmuls(rng: &mut SplitMix64) {
    let (a, b) = (random(&[32, 128, 384], rng), random(&[384, 1536], rng));
    let flops = 2.0 * 4096.0 * 384.0 * 1536.0;
    for _ in 0..3 {
        let t = Instant::now();
        eval("MatMul", &Attrs::new(), &[&a, &b]);
        let s = t.elapsed().as_secs_f64();
        println!("MatMul 4096x384x1536 f32: {:.3} s, {:.1} GFLOP/s", s, flops / s / 1e9);
    }
    let hidden = random(&[32, 128, 384], rng);
    let ffn = random(&[32, 128, 1536], rng);
    let (w_qkvo, w_up, w_down) = (random(&[384, 384], rng), random(&[384, 1536], rng), random(&[1536, 384], rng));
    let (q, kt) = (random(&[32, 12, 128, 32], rng), random(&[32, 12, 32, 128], rng));
    let (probs, v) = (random(&[32, 12, 128, 128], rng), random(&[32, 12, 128, 32], rng));
    // Per layer: Q, K, V, output projection; scores; context; FFN up; FFN down.
    let layer: [(&Tensor, &Tensor, usize); 5] =
        [(&hidden, &w_qkvo, 4), (&q, &kt, 1), (&probs, &v, 1), (&hidden, &w_up, 1), (&ffn, &w_down, 1)];
    let t = Instant::now();
    let mut flops = 0.0;
    for _ in 0..6 {
        for &(a, b, times) in &layer {
            for _ in 0..times {
                let y = eval("MatMul", &Attrs::new(), &[a, b]);
                flops += 2.0 * (y.len() * a.shape()[a.rank() - 1]) as f64;
            }
        }
    }
    let s = t.elapsed().as_secs_f64();
    println!("MiniLM-L6 b32 s128 MatMuls: {:.2} s for {:.1} GFLOP ({:.1} GFLOP/s)", s, flops / 1e9, flops / s / 1e9);
}

fn convs(rng: &mut SplitMix64) {
    // (in, out, kernel, stride, group, input size): stem, first block, then MBConv6 stages.
    let mut layers = vec![(3, 32, 3, 2, 1, 224), (32, 32, 3, 1, 32, 112), (32, 16, 1, 1, 1, 112)];
    let stages = [
        (16, 24, 3, 2, 2, 112),
        (24, 40, 5, 2, 2, 56),
        (40, 80, 3, 2, 3, 28),
        (80, 112, 5, 1, 3, 14),
        (112, 192, 5, 2, 4, 14),
        (192, 320, 3, 1, 1, 7),
    ];
    for (cin, cout, k, stride, repeats, size) in stages {
        let (mut c, mut hw) = (cin, size);
        for r in 0..repeats {
            let s = if r == 0 { stride } else { 1 };
            layers.push((c, 6 * c, 1, 1, 1, hw));
            layers.push((6 * c, 6 * c, k, s, 6 * c, hw));
            hw = (hw - 1) / s + 1;
            layers.push((6 * c, cout, 1, 1, 1, hw));
            c = cout;
        }
    }
    layers.push((320, 1280, 1, 1, 1, 7));
    let (mut total, mut flops) = (0.0, 0.0);
    for &(cin, cout, k, stride, group, hw) in &layers {
        let (x, w, b) =
            (random(&[32, cin, hw, hw], rng), random(&[cout, cin / group, k, k], rng), random(&[cout], rng));
        let mut a = Attrs::new();
        a.insert("group", Attr::Int(group as i64));
        a.insert("strides", Attr::Ints(vec![stride as i64; 2]));
        a.insert("pads", Attr::Ints(vec![(k / 2) as i64; 4]));
        let t = Instant::now();
        let y = eval("Conv", &a, &[&x, &w, &b]);
        let s = t.elapsed().as_secs_f64();
        let f = 2.0 * (y.len() * (cin / group) * k * k) as f64;
        total += s;
        flops += f;
        println!(
            "conv {cin:>4}->{cout:>4} k{k} s{stride} g{group:<4} {hw:>3}px: {:>7.1} ms {:>6.1} GFLOP/s",
            s * 1e3,
            f / s / 1e9
        );
    }
    println!(
        "EfficientNet-Lite0 b32 convs: {total:.2} s for {:.1} GFLOP ({:.1} GFLOP/s)",
        flops / 1e9,
        flops / total / 1e9
    );
}

fn main() {
    let mut rng = SplitMix64::new(1);
    println!("reference executor, {} rayon threads", rayon::current_num_threads());
    matmuls(&mut rng);
    convs(&mut rng);
}
