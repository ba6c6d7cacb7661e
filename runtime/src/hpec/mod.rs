//! The MIT/IEEE/Amazon HPEC Sparse DNN Graph Challenge: data and an exact CPU engine.
//!
//! Data flow: layer files (`n{N}-l{k}.tsv` in a directory, a file list or a `.tar.gz`) →
//! [`load_network`] (streaming, validating readers, through a binary cache) → [`Network`]
//! (each layer in CSR, its CSC form built on first use); or [`generate`] a
//! structure-equivalent network; image TSVs, the bundled challenge images or MNIST-derived
//! images ([`mnist`]) → [`Images`]; then [`infer`] (fp32, data parallel over image blocks,
//! dead images dropped, row-wise CSR or column-wise CSC SpMM chosen per layer) → [`InferResult`] with the
//! categories and edges per second; [`reference_categories`] is the slow f64 cross-check; [`screen`] turns the compiled fp32
//! program into one with the reference's categories (an fp32 screen, then f64 for its survivors).
//!
//! Semantics: `Y_{l+1} = min(32, max(0, Y_l · W_l + bias))`; a category is an image whose
//! last row has any nonzero.

pub mod bundled;
pub mod cache;
pub mod engine;
pub mod error;
pub mod generator;
pub mod hashing;
pub mod images;
pub mod kernels;
pub mod load;
pub mod mnist;
#[cfg(feature = "mpi")]
pub mod mpi;
pub mod network;
pub mod onnx_export;
pub mod reference;
pub mod relabellings;
pub mod screen;
pub mod source;
pub mod sparse;
pub mod task_graph;
pub mod tsv_reader;
pub mod tsv_writer;

pub use cache::{CacheConfig, CacheStatus};
pub use engine::{infer, InferOptions, InferResult, KernelChoice};
pub use error::{HpecError, HpecResult};
pub use generator::{generate, generate_with, recover_relabellings, GeneratorConfig};
pub use images::{load_categories, load_images, Images};
pub use load::{load_network, load_network_with_status};
pub use network::{bias_for_neurons, Network};
pub use onnx_export::{images_to_tensor, network_to_graph};
pub use reference::{reference_categories, reference_categories_cached};
pub use relabellings::Relabellings;
pub use source::NetworkSource;
pub use sparse::{CompressedMatrix, LayerMatrix};
pub use tsv_writer::{write_categories, write_images_tsv, write_layer_tsv, write_network_tsv};
