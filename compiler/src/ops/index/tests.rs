//! Unit tests of the index family, run through both hooks (infer and eval).

use super::super::shape::test_util::{i64s, iota, run};
use crate::ir::{Attr, DType, Tensor};

#[test]
fn gather_rows_along_axis_0_like_an_embedding() {
    let table = iota(&[5, 3]);
    let ids = Tensor::from_vec(vec![2, 2], vec![4i32, 0, -1, 2]);
    let y = &run("Gather", 13, &[], &[Some(&table), Some(&ids)]).unwrap()[0];
    assert_eq!(y.shape(), &[2, 2, 3]);
    assert_eq!(y.to_f64_vec(), vec![12.0, 13.0, 14.0, 0.0, 1.0, 2.0, 12.0, 13.0, 14.0, 6.0, 7.0, 8.0]);
}

#[test]
fn gather_on_an_inner_axis_with_scalar_indices() {
    let x = iota(&[2, 3, 2]);
    let y = &run("Gather", 13, &[("axis", Attr::Int(1))], &[Some(&x), Some(&Tensor::scalar(-2i64))]).unwrap()[0];
    assert_eq!(y.shape(), &[2, 2]);
    assert_eq!(y.to_f64_vec(), vec![2.0, 3.0, 8.0, 9.0]);
}

#[test]
fn gather_any_dtype_and_rejects_out_of_range() {
    let x = Tensor::from_vec(vec![3], vec![10u16, 20, 30]);
    let y = &run("Gather", 13, &[], &[Some(&x), Some(&i64s(&[2, 2, 0]))]).unwrap()[0];
    assert_eq!((y.dtype(), y.to_i64_vec()), (DType::U16, vec![30, 30, 10]));
    let err = run("Gather", 13, &[], &[Some(&x), Some(&i64s(&[3]))]).unwrap_err();
    assert!(err.0.contains("out of range"), "{err}");
    let float_ids = Tensor::from_vec(vec![1], vec![0.0f32]);
    assert!(run("Gather", 13, &[], &[Some(&x), Some(&float_ids)]).is_err());
}

#[test]
fn gather_elements_picks_along_the_axis() {
    let x = Tensor::from_vec(vec![2, 2], vec![1i64, 2, 3, 4]);
    let idx = Tensor::from_vec(vec![2, 2], vec![0i64, 0, 1, 0]);
    let y = &run("GatherElements", 13, &[("axis", Attr::Int(1))], &[Some(&x), Some(&idx)]).unwrap()[0];
    assert_eq!(y.to_i64_vec(), vec![1, 1, 4, 3]);
    let idx = Tensor::from_vec(vec![1, 2], vec![-1i64, 0]);
    let y = &run("GatherElements", 13, &[], &[Some(&x), Some(&idx)]).unwrap()[0];
    assert_eq!((y.shape(), y.to_i64_vec()), (&[1usize, 2][..], vec![3, 2]));
}

#[test]
fn gather_nd_with_and_without_batch_dims() {
    let x = Tensor::from_vec(vec![2, 2], vec![0i32, 1, 2, 3]);
    let idx = Tensor::from_vec(vec![2, 2], vec![0i64, 0, 1, 1]);
    let y = &run("GatherND", 13, &[], &[Some(&x), Some(&idx)]).unwrap()[0];
    assert_eq!((y.shape(), y.to_i64_vec()), (&[2usize][..], vec![0, 3]));
    let rows = Tensor::from_vec(vec![2, 1], vec![1i64, -2]);
    let y = &run("GatherND", 13, &[], &[Some(&x), Some(&rows)]).unwrap()[0];
    assert_eq!((y.shape(), y.to_i64_vec()), (&[2usize, 2][..], vec![2, 3, 0, 1]));
    // batch_dims = 1: data [2, 2, 2], one index tuple per batch.
    let x = Tensor::from_vec(vec![2, 2, 2], (0..8).collect::<Vec<i64>>());
    let idx = Tensor::from_vec(vec![2, 1], vec![1i64, 0]);
    let y = &run("GatherND", 13, &[("batch_dims", Attr::Int(1))], &[Some(&x), Some(&idx)]).unwrap()[0];
    assert_eq!((y.shape(), y.to_i64_vec()), (&[2usize, 2][..], vec![2, 3, 4, 5]));
}

#[test]
fn scatter_nd_replaces_and_reduces() {
    let data = iota(&[4]);
    let idx = Tensor::from_vec(vec![3, 1], vec![1i64, 3, 1]);
    let upd = Tensor::from_vec(vec![3], vec![10.0f32, 20.0, 30.0]);
    let y = &run("ScatterND", 18, &[], &[Some(&data), Some(&idx), Some(&upd)]).unwrap()[0];
    assert_eq!(y.to_f64_vec(), vec![0.0, 30.0, 2.0, 20.0]);
    let add = [("reduction", Attr::String("add".into()))];
    let y = &run("ScatterND", 18, &add, &[Some(&data), Some(&idx), Some(&upd)]).unwrap()[0];
    assert_eq!(y.to_f64_vec(), vec![0.0, 41.0, 2.0, 23.0]);
}

#[test]
fn scatter_elements_reductions_on_integers_are_exact() {
    let big = (1i64 << 60) + 1;
    let data = Tensor::from_vec(vec![2], vec![big, 5]);
    let idx = Tensor::from_vec(vec![2], vec![0i64, 0]);
    let upd = Tensor::from_vec(vec![2], vec![1i64, 2]);
    let run_with = |r: &str| {
        let attrs = [("reduction", Attr::String(r.into()))];
        run("ScatterElements", 18, &attrs, &[Some(&data), Some(&idx), Some(&upd)]).unwrap()[0].to_i64_vec()
    };
    assert_eq!(run_with("add"), vec![big + 3, 5]);
    assert_eq!(run_with("mul"), vec![big * 2, 5]);
    assert_eq!(run_with("min"), vec![1, 5]);
    assert_eq!(run_with("none"), vec![2, 5]);
}

#[test]
fn range_of_ints_and_floats() {
    let r =
        |s: Tensor, l: Tensor, d: Tensor| run("Range", 11, &[], &[Some(&s), Some(&l), Some(&d)]).map(|o| o[0].clone());
    let y = r(Tensor::scalar(10i32), Tensor::scalar(4i32), Tensor::scalar(-3i32)).unwrap();
    assert_eq!((y.dtype(), y.to_i64_vec()), (DType::I32, vec![10, 7]));
    let y = r(Tensor::scalar(1.0f32), Tensor::scalar(2.0f32), Tensor::scalar(0.25f32)).unwrap();
    assert_eq!(y.to_f64_vec(), vec![1.0, 1.25, 1.5, 1.75]);
    let y = r(Tensor::scalar(5i64), Tensor::scalar(1i64), Tensor::scalar(1i64)).unwrap();
    assert_eq!(y.shape(), &[0]);
    assert!(r(Tensor::scalar(0i64), Tensor::scalar(1i64), Tensor::scalar(0i64)).is_err());
}

#[test]
fn size_counts_elements() {
    let y = &run("Size", 13, &[], &[Some(&iota(&[3, 0, 2]))]).unwrap()[0];
    assert_eq!((y.shape(), y.to_i64_vec()), (&[][..], vec![0]));
    let y = &run("Size", 13, &[], &[Some(&iota(&[3, 4]))]).unwrap()[0];
    assert_eq!(y.to_i64_vec(), vec![12]);
}
