//! MNIST-derived inputs for generated networks: deterministic, sane pixel counts, every size.

use spartac_runtime::hpec::{bundled, mnist};

#[test]
fn bundled_digits_become_deterministic_binary_images_of_every_size() {
    let digits = bundled::mnist_digits().unwrap();
    // Bundle order is class-balanced round robin: digit k has label k mod 10 for k < 8630.
    let ink = |k: usize| digits.digit(k).iter().filter(|&&v| v > 127).count();
    assert!((20..=300).contains(&ink(0)), "digit 0 has {} pixels > 127", ink(0));
    for (neurons, side) in [(1024usize, 32usize), (4096, 64), (16384, 128), (65536, 256)] {
        let images = mnist::mnist_images(&digits, neurons, 200).unwrap();
        assert_eq!(images, mnist::mnist_images(&digits, neurons, 200).unwrap(), "{neurons}: not deterministic");
        assert_eq!((images.n_images(), images.neurons()), (200, neurons));
        assert!(images.pixels.is_well_formed());
        assert!(images.pixels.values.iter().all(|&v| v == 1.0));
        // An MNIST digit covers about 13 % of its 28×28 raster above 127; bilinear upscaling
        // keeps that fraction.
        let fraction = images.n_nonzeros() as f64 / (200 * side * side) as f64;
        assert!((0.08..0.20).contains(&fraction), "{neurons}: ink fraction {fraction}");
        for image in 0..200 {
            assert!(!images.pixels.slot(image).0.is_empty(), "{neurons}: image {image} is blank");
        }
    }
    // Not a perfect square: a 45×45 raster, the last 2048 - 2025 neurons unused.
    let images = bundled::images_for_neurons(2048, 50).unwrap();
    assert_eq!(images.neurons(), 2048);
    assert!(images.pixels.indices.iter().all(|&p| p < 45 * 45));
    // 60,000 images at most; image 10,000 is digit 0 shifted right by one pixel.
    let at_784 = mnist::mnist_images(&digits, 784, 10_001).unwrap();
    let shifted: Vec<u32> = at_784.pixels.slot(0).0.iter().map(|p| p + 1).collect();
    assert_eq!(at_784.pixels.slot(10_000).0, &shifted[..]);
    // The 1024 network's real images are 1,200: asking for more is an error, not a clamp.
    assert_eq!(bundled::images_for_neurons(1024, 1200).unwrap().n_images(), 1200);
    assert!(bundled::images_for_neurons(1024, 5000).is_err());
    assert!(mnist::mnist_images(&digits, 784, 60_001).is_err());
}
