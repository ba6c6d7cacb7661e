//! The plan artifact: a versioned protobuf message (prost, messages written by hand, no
//! `.proto` build step) that later stages (kernel generation, runtime) read, and its JSON
//! summary for people and scripts.
//!
//! Version 1. Field numbers are stable; new fields get new numbers, and a reader rejects
//! a major version it does not know. Times are seconds; coordinates are in the logical
//! weight (see [`super::suboperator`]). Wall-clock cover times are not stored, so
//! planning the same model twice gives identical bytes.

use super::egraph::SplitKind;
use super::suboperator::{Epilogue, KernelHints, Mode, Orientation, SubOpKind, SubOperator};
use super::{Considered, KernelChoice, OperatorPlan, Plan};
use crate::tesa::Format;
use crate::Error;
use prost::Message;
use serde_json::json;

pub const PLAN_VERSION: u32 = 1;

#[derive(Clone, PartialEq, prost::Message)]
pub struct PlanProto {
    #[prost(uint32, tag = "1")]
    pub version: u32,
    #[prost(string, tag = "2")]
    pub arch: String,
    #[prost(message, repeated, tag = "3")]
    pub operators: Vec<OperatorProto>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct OperatorProto {
    #[prost(string, tag = "1")]
    pub node: String,
    #[prost(string, tag = "2")]
    pub op_type: String,
    #[prost(string, tag = "3")]
    pub weight: String,
    /// 0 = weight right (`X·W`), 1 = weight left (`W·X`).
    #[prost(uint32, tag = "4")]
    pub orientation: u32,
    #[prost(bool, tag = "5")]
    pub transposed: bool,
    #[prost(uint64, tag = "6")]
    pub rows: u64,
    #[prost(uint64, tag = "7")]
    pub cols: u64,
    #[prost(uint64, tag = "8")]
    pub m: u64,
    #[prost(double, tag = "9")]
    pub density: f64,
    #[prost(string, tag = "10")]
    pub dtype: String,
    #[prost(message, repeated, tag = "11")]
    pub considered: Vec<ConsideredProto>,
    /// Index into `considered` plus one; 0 = nothing to run (all pruned).
    #[prost(uint32, tag = "12")]
    pub chosen: u32,
    #[prost(string, tag = "13")]
    pub expr: String,
    #[prost(message, repeated, tag = "14")]
    pub suboperators: Vec<SubOperatorProto>,
    #[prost(string, optional, tag = "15")]
    pub bias: Option<String>,
    #[prost(string, optional, tag = "16")]
    pub activation: Option<String>,
    #[prost(bool, tag = "17")]
    pub epilogue_fused: bool,
    #[prost(double, tag = "18")]
    pub dense_s: f64,
    #[prost(double, tag = "19")]
    pub planned_s: f64,
    #[prost(string, tag = "20")]
    pub reason: String,
    /// The kernel choice (`KernelChoice` as JSON); empty: `auto`.
    #[prost(string, tag = "21")]
    pub kernel: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ConsideredProto {
    #[prost(string, tag = "1")]
    pub split: String,
    #[prost(string, tag = "2")]
    pub label: String,
    #[prost(double, tag = "3")]
    pub predicted_s: f64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct SubOperatorProto {
    /// 0 = block sparse, 1 = 2:4, 2 = dense.
    #[prost(uint32, tag = "1")]
    pub kind: u32,
    #[prost(uint32, tag = "2")]
    pub block_h: u32,
    #[prost(uint32, tag = "3")]
    pub block_w: u32,
    #[prost(uint32, tag = "4")]
    pub bits: u32,
    /// [`Format`] code.
    #[prost(uint32, tag = "5")]
    pub format: u32,
    #[prost(string, tag = "6")]
    pub dtype: String,
    #[prost(uint32, repeated, tag = "7")]
    pub tile: Vec<u32>,
    #[prost(uint32, tag = "8")]
    pub dismantle_level: u32,
    /// 0 = unrolled, 1 = index stream.
    #[prost(uint32, tag = "9")]
    pub mode: u32,
    #[prost(bool, tag = "10")]
    pub tensor_cores: bool,
    /// Block coordinates, interleaved `row, col, row, col, ...`.
    #[prost(uint32, repeated, tag = "11")]
    pub blocks: Vec<u32>,
    /// Owned elements, flat row-major indices into the logical weight.
    #[prost(uint32, repeated, tag = "12")]
    pub owned: Vec<u32>,
    #[prost(uint64, tag = "13")]
    pub covered_zeros: u64,
    #[prost(double, tag = "14")]
    pub predicted_s: f64,
}

impl PlanProto {
    /// The protobuf bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        self.encode_to_vec()
    }
}

const SPLITS: [SplitKind; 5] =
    [SplitKind::Dense, SplitKind::ByShape, SplitKind::ByBits, SplitKind::OneShape, SplitKind::TwoFourRest];

fn sub_to_proto(s: &SubOperator) -> SubOperatorProto {
    let h = &s.hints;
    SubOperatorProto {
        kind: match s.kind {
            SubOpKind::BlockSparse => 0,
            SubOpKind::TwoFour => 1,
            SubOpKind::Dense => 2,
        },
        block_h: h.block.0 as u32,
        block_w: h.block.1 as u32,
        bits: h.bits as u32,
        format: h.format as u32,
        dtype: h.dtype.clone(),
        tile: vec![h.tile.0 as u32, h.tile.1 as u32, h.tile.2 as u32],
        dismantle_level: h.dismantle_level as u32,
        mode: (h.mode == Mode::IndexStream) as u32,
        tensor_cores: h.tensor_cores,
        blocks: s.blocks.iter().flat_map(|&(r, c)| [r, c]).collect(),
        owned: s.owned.clone(),
        covered_zeros: s.covered_zeros as u64,
        predicted_s: s.predicted_s,
    }
}

fn sub_from_proto(p: &SubOperatorProto, orientation: Orientation) -> Result<SubOperator, Error> {
    let bad = |what: &str| Error::Unsupported(format!("plan artifact: bad {what}"));
    let tile = match p.tile.as_slice() {
        [a, b, c] => (*a as usize, *b as usize, *c as usize),
        _ => return Err(bad("tile")),
    };
    Ok(SubOperator {
        kind: match p.kind {
            0 => SubOpKind::BlockSparse,
            1 => SubOpKind::TwoFour,
            2 => SubOpKind::Dense,
            _ => return Err(bad("sub-operator kind")),
        },
        hints: KernelHints {
            block: (p.block_h as usize, p.block_w as usize),
            bits: p.bits as u8,
            format: Format::from_code(p.format as u8).ok_or_else(|| bad("format"))?,
            dtype: p.dtype.clone(),
            tile,
            dismantle_level: p.dismantle_level as u8,
            orientation,
            mode: if p.mode == 1 { Mode::IndexStream } else { Mode::Unrolled },
            tensor_cores: p.tensor_cores,
        },
        blocks: p.blocks.chunks(2).map(|c| (c[0], c.get(1).copied().unwrap_or(0))).collect(),
        owned: p.owned.clone(),
        covered_zeros: p.covered_zeros as usize,
        predicted_s: p.predicted_s,
    })
}

impl Plan {
    pub fn to_proto(&self) -> PlanProto {
        PlanProto {
            version: PLAN_VERSION,
            arch: self.arch.clone(),
            operators: self
                .operators
                .iter()
                .map(|o| OperatorProto {
                    node: o.node.clone(),
                    op_type: o.op_type.clone(),
                    weight: o.weight.clone(),
                    orientation: (o.orientation == Orientation::WeightLeft) as u32,
                    transposed: o.transposed,
                    rows: o.rows as u64,
                    cols: o.cols as u64,
                    m: o.m as u64,
                    density: o.density,
                    dtype: o.dtype.clone(),
                    considered: o
                        .considered
                        .iter()
                        .map(|c| ConsideredProto {
                            split: c.split.name().into(),
                            label: c.label.clone(),
                            predicted_s: c.predicted_s,
                        })
                        .collect(),
                    chosen: o.chosen.map_or(0, |c| c as u32 + 1),
                    expr: o.expr.clone(),
                    suboperators: o.suboperators.iter().map(sub_to_proto).collect(),
                    bias: o.epilogue.bias.clone(),
                    activation: o.epilogue.activation.clone(),
                    epilogue_fused: o.epilogue.fused,
                    dense_s: o.dense_s,
                    planned_s: o.planned_s,
                    reason: o.reason.clone(),
                    kernel: match o.kernel {
                        KernelChoice::Auto => String::new(),
                        k => serde_json::to_string(&k).unwrap_or_default(),
                    },
                })
                .collect(),
        }
    }

    /// The protobuf bytes of the artifact.
    pub fn encode(&self) -> Vec<u8> {
        self.to_proto().encode_to_vec()
    }

    /// Reads an artifact written by [`Plan::encode`].
    pub fn decode(bytes: &[u8]) -> Result<Plan, Error> {
        let p = PlanProto::decode(bytes).map_err(|e| Error::Unsupported(format!("plan artifact: {e}")))?;
        if p.version != PLAN_VERSION {
            return Err(Error::Unsupported(format!(
                "plan artifact: version {} not supported (expected {PLAN_VERSION})",
                p.version
            )));
        }
        let mut operators = vec![];
        for o in &p.operators {
            let orientation = if o.orientation == 1 { Orientation::WeightLeft } else { Orientation::WeightRight };
            let considered = o
                .considered
                .iter()
                .map(|c| {
                    let split = SPLITS.iter().copied().find(|s| s.name() == c.split);
                    split.map(|split| Considered { split, label: c.label.clone(), predicted_s: c.predicted_s })
                })
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| Error::Unsupported("plan artifact: bad split kind".into()))?;
            operators.push(OperatorPlan {
                node: o.node.clone(),
                op_type: o.op_type.clone(),
                weight: o.weight.clone(),
                orientation,
                transposed: o.transposed,
                rows: o.rows as usize,
                cols: o.cols as usize,
                m: o.m as usize,
                density: o.density,
                dtype: o.dtype.clone(),
                considered,
                chosen: o.chosen.checked_sub(1).map(|c| c as usize),
                expr: o.expr.clone(),
                suboperators: o
                    .suboperators
                    .iter()
                    .map(|s| sub_from_proto(s, orientation))
                    .collect::<Result<_, _>>()?,
                epilogue: Epilogue { bias: o.bias.clone(), activation: o.activation.clone(), fused: o.epilogue_fused },
                dense_s: o.dense_s,
                planned_s: o.planned_s,
                reason: o.reason.clone(),
                cover_s: 0.0,
                kernel: if o.kernel.is_empty() {
                    KernelChoice::Auto
                } else {
                    serde_json::from_str(&o.kernel)
                        .map_err(|_| Error::Unsupported("plan artifact: bad kernel".into()))?
                },
            });
        }
        Ok(Plan { arch: p.arch, operators })
    }

    /// JSON summary: everything but the owned-element lists (their counts instead).
    pub fn to_json(&self) -> serde_json::Value {
        json!({
            "version": PLAN_VERSION,
            "arch": self.arch,
            "operators": self.operators.iter().map(|o| json!({
                "node": o.node,
                "op_type": o.op_type,
                "weight": o.weight,
                "orientation": if o.orientation == Orientation::WeightLeft { "weight_left" } else { "weight_right" },
                "transposed": o.transposed,
                "shape": [o.rows, o.cols],
                "m": o.m,
                "density": o.density,
                "dtype": o.dtype,
                "chosen": o.chosen.map(|c| o.considered[c].split.name()),
                "expr": o.expr,
                "dense_s": o.dense_s,
                "planned_s": o.planned_s,
                "speedup": o.speedup(),
                "reason": o.reason,
                "kernel": o.kernel.label(),
                "epilogue": {"bias": o.epilogue.bias, "activation": o.epilogue.activation, "fused": o.epilogue.fused},
                "considered": o.considered.iter().map(|c| json!({
                    "split": c.split.name(), "label": c.label, "predicted_s": c.predicted_s,
                })).collect::<Vec<_>>(),
                "suboperators": o.suboperators.iter().map(|s| json!({
                    "kind": format!("{:?}", s.kind),
                    "block": [s.hints.block.0, s.hints.block.1],
                    "bits": s.hints.bits,
                    "dtype": s.hints.dtype,
                    "tile": [s.hints.tile.0, s.hints.tile.1, s.hints.tile.2],
                    "dismantle_level": s.hints.dismantle_level,
                    "mode": format!("{:?}", s.hints.mode),
                    "tensor_cores": s.hints.tensor_cores,
                    "n_blocks": s.blocks.len(),
                    "blocks": s.blocks,
                    "n_owned": s.owned.len(),
                    "covered_zeros": s.covered_zeros,
                    "predicted_s": s.predicted_s,
                })).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        })
    }
}
