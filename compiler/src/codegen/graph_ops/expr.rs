//! Scalar expressions of fused elementwise kernels: their ONNX typing rules and their rendering
//! to one C expression over the loaded inputs `v0, v1, ...`.
//!
//! Types follow ONNX: `Input(i)` has the type of input `i`, `Const` its own, a `Unary` or an
//! arithmetic `Binary` the type of its operands (which must agree), a comparison `Bool`, a
//! `Cast` its target. Values compute in [`compute_type`]: the 16-bit floats in f32 without
//! rounding in between (a fused chain is at least as accurate as the op-by-op reference), F64
//! in double, integers in their own width (wrapping), Bool as `bool`.

use super::{compute_type, storage_type};
use crate::ir::DType;

/// Scalar expression of a fused elementwise kernel (see the module documentation for types).
#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    /// The element of input `i` at this position (after broadcasting).
    Input(usize),
    /// A literal of the given type: rounded to a float type, truncated toward zero (and
    /// saturated to i64 / u64, then wrapped) for an integer type, `!= 0` for Bool.
    Const(f64, DType),
    Unary(Unary, Box<Expr>),
    Binary(Binary, Box<Expr>, Box<Expr>),
    /// `cond ? then : else`; `cond` is Bool, the branches share a type.
    Where(Box<Expr>, Box<Expr>, Box<Expr>),
    /// ONNX Cast: floats to integers truncate and saturate (NaN to 0), integers wrap, anything
    /// to Bool is `!= 0`, to F16 / BF16 rounds to nearest even.
    Cast(DType, Box<Expr>),
}

/// Unary operators. `Exp`, `Log`, `Sqrt`, `Reciprocal`, `Erf`, `Tanh`, `Sigmoid`, `Floor` and
/// `Ceil` take floats; `Neg`, `Abs` and `Relu` any number; `Not` Bool; `Identity` anything.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unary {
    Neg,
    Abs,
    Exp,
    Log,
    Sqrt,
    Reciprocal,
    Erf,
    Tanh,
    Sigmoid,
    Relu,
    Not,
    Floor,
    Ceil,
    Identity,
}

/// Binary operators. Arithmetic, `Pow`, `Max` and `Min` take numbers (integer `Div` truncates
/// toward zero and gives 0 for a zero divisor; `Max` / `Min` propagate NaN); `Equal` anything;
/// the orderings numbers; `And` / `Or` Bool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Binary {
    Add,
    Sub,
    Mul,
    Div,
    Pow,
    Max,
    Min,
    Equal,
    Less,
    Greater,
    LessOrEqual,
    GreaterOrEqual,
    And,
    Or,
}

impl Expr {
    pub fn input(i: usize) -> Expr {
        Expr::Input(i)
    }

    pub fn constant(value: f64, dtype: DType) -> Expr {
        Expr::Const(value, dtype)
    }

    pub fn unary(op: Unary, x: Expr) -> Expr {
        Expr::Unary(op, Box::new(x))
    }

    pub fn binary(op: Binary, a: Expr, b: Expr) -> Expr {
        Expr::Binary(op, Box::new(a), Box::new(b))
    }

    pub fn select(cond: Expr, then: Expr, otherwise: Expr) -> Expr {
        Expr::Where(Box::new(cond), Box::new(then), Box::new(otherwise))
    }

    pub fn cast(dtype: DType, x: Expr) -> Expr {
        Expr::Cast(dtype, Box::new(x))
    }

    /// The element type of the value, given the input types; an error names the first rule broken.
    pub fn dtype(&self, inputs: &[DType]) -> Result<DType, String> {
        render(self, inputs).map(|(_, d)| d)
    }

    /// The expression with every read of input `i` replaced by `with`.
    pub fn replace_input(&self, i: usize, with: &Expr) -> Expr {
        let r = |x: &Expr| Box::new(x.replace_input(i, with));
        match self {
            Expr::Input(j) if *j == i => with.clone(),
            Expr::Input(_) | Expr::Const(..) => self.clone(),
            Expr::Unary(op, x) => Expr::Unary(*op, r(x)),
            Expr::Cast(to, x) => Expr::Cast(*to, r(x)),
            Expr::Binary(op, a, b) => Expr::Binary(*op, r(a), r(b)),
            Expr::Where(c, a, b) => Expr::Where(r(c), r(a), r(b)),
        }
    }

    /// Whether the expression reads input `i`.
    pub fn reads(&self, i: usize) -> bool {
        match self {
            Expr::Input(j) => *j == i,
            Expr::Const(..) => false,
            Expr::Unary(_, x) | Expr::Cast(_, x) => x.reads(i),
            Expr::Binary(_, a, b) => a.reads(i) || b.reads(i),
            Expr::Where(c, a, b) => c.reads(i) || a.reads(i) || b.reads(i),
        }
    }
}

/// The C expression of `expr` (in the compute type of its ONNX type) and that type.
pub(super) fn render(expr: &Expr, inputs: &[DType]) -> Result<(String, DType), String> {
    match expr {
        Expr::Input(i) => match inputs.get(*i) {
            Some(&d) => Ok((format!("v{i}"), d)),
            None => Err(format!("the expression reads input {i} of {}", inputs.len())),
        },
        Expr::Const(v, d) => Ok((literal(*v, *d), *d)),
        Expr::Unary(op, x) => {
            let (x, d) = render(x, inputs)?;
            Ok((unary(*op, &x, d)?, d))
        }
        Expr::Binary(op, a, b) => {
            let (a, da) = render(a, inputs)?;
            let (b, db) = render(b, inputs)?;
            if da != db {
                return Err(format!("{op:?} of {da} and {db}: operand types differ"));
            }
            binary(*op, &a, &b, da)
        }
        Expr::Where(c, a, b) => {
            let (c, dc) = render(c, inputs)?;
            let (a, da) = render(a, inputs)?;
            let (b, db) = render(b, inputs)?;
            if dc != DType::Bool {
                return Err(format!("Where's condition is {dc}, not bool"));
            }
            if da != db {
                return Err(format!("Where of {da} and {db}: branch types differ"));
            }
            Ok((format!("({c} ? {a} : {b})"), da))
        }
        Expr::Cast(to, x) => {
            let (x, from) = render(x, inputs)?;
            Ok((cast(&x, from, *to), *to))
        }
    }
}

/// A float literal of C type `float` (`f32`) or `double`; non-finite values by their bits.
fn float_literal(v: f64, double: bool) -> String {
    if double {
        if v.is_finite() {
            format!("({v:?})")
        } else {
            format!("__longlong_as_double(0x{:016x}LL)", v.to_bits())
        }
    } else {
        let f = v as f32;
        if f.is_finite() {
            format!("({f:?}f)")
        } else {
            format!("__int_as_float(0x{:08x})", f.to_bits())
        }
    }
}

fn literal(v: f64, dtype: DType) -> String {
    match dtype {
        DType::Bool => (if v != 0.0 { "true" } else { "false" }).into(),
        DType::F16 => float_literal(half::f16::from_f64(v).to_f64(), false),
        DType::BF16 => float_literal(half::bf16::from_f64(v).to_f64(), false),
        DType::F32 => float_literal(v, false),
        DType::F64 => float_literal(v, true),
        DType::U64 => format!("{}ULL", v as u64),
        DType::I64 if v as i64 == i64::MIN => "(-9223372036854775807LL - 1)".into(),
        DType::I64 => format!("({}LL)", v as i64),
        d => format!("(({})({}LL))", storage_type(d), v as i64),
    }
}

/// `name` of the float math function for `dtype` (`expf` for f32 compute, `exp` for F64).
fn math(name: &str, dtype: DType) -> String {
    if dtype == DType::F64 {
        name.to_string()
    } else {
        format!("{name}f")
    }
}

fn unary(op: Unary, x: &str, d: DType) -> Result<String, String> {
    let ct = compute_type(d);
    let float_only = matches!(
        op,
        Unary::Exp
            | Unary::Log
            | Unary::Sqrt
            | Unary::Reciprocal
            | Unary::Erf
            | Unary::Tanh
            | Unary::Sigmoid
            | Unary::Floor
            | Unary::Ceil
    );
    if float_only && !d.is_float() {
        return Err(format!("{op:?} takes a float operand, got {d}"));
    }
    if matches!(op, Unary::Neg | Unary::Abs | Unary::Relu) && d == DType::Bool {
        return Err(format!("{op:?} takes a number, got bool"));
    }
    if op == Unary::Not && d != DType::Bool {
        return Err(format!("Not takes bool, got {d}"));
    }
    Ok(match op {
        Unary::Identity => x.to_string(),
        Unary::Not => format!("(!{x})"),
        Unary::Neg => format!("(({ct})(-{x}))"),
        Unary::Abs if d.is_float() => format!("{}({x})", math("fabs", d)),
        Unary::Abs if d.is_signed_int() => format!("op_iabs({x})"),
        Unary::Abs => x.to_string(),
        Unary::Relu => format!("op_relu({x})"),
        Unary::Reciprocal => format!("({} / {x})", float_literal(1.0, d == DType::F64)),
        Unary::Sigmoid => format!("op_sigmoid({x})"),
        Unary::Exp => format!("{}({x})", math("exp", d)),
        Unary::Log => format!("{}({x})", math("log", d)),
        Unary::Sqrt => format!("{}({x})", math("sqrt", d)),
        Unary::Erf => format!("{}({x})", math("erf", d)),
        Unary::Tanh if matches!(d, DType::F16 | DType::BF16) => format!("op_tanh_16({x})"),
        Unary::Tanh => format!("{}({x})", math("tanh", d)),
        Unary::Floor => format!("{}({x})", math("floor", d)),
        Unary::Ceil => format!("{}({x})", math("ceil", d)),
    })
}

fn binary(op: Binary, a: &str, b: &str, d: DType) -> Result<(String, DType), String> {
    let ct = compute_type(d);
    let logic = matches!(op, Binary::And | Binary::Or);
    if logic && d != DType::Bool {
        return Err(format!("{op:?} takes bool operands, got {d}"));
    }
    if !logic && op != Binary::Equal && d == DType::Bool {
        return Err(format!("{op:?} takes numbers, got bool"));
    }
    let compare = |c: &str| Ok((format!("({a} {c} {b})"), DType::Bool));
    let arith = |c: &str| Ok((format!("(({ct})({a} {c} {b}))"), d));
    match op {
        Binary::Add => arith("+"),
        Binary::Sub => arith("-"),
        Binary::Mul => arith("*"),
        Binary::Div if d.is_float() => arith("/"),
        Binary::Div => Ok((format!("op_idiv<{ct}>({a}, {b})"), d)),
        Binary::Pow if d.is_float() => Ok((format!("op_pow({a}, {b})"), d)),
        Binary::Pow => Ok((format!("op_ipow<{ct}>({a}, {b})"), d)),
        Binary::Max => Ok((format!("op_max<{ct}>({a}, {b})"), d)),
        Binary::Min => Ok((format!("op_min<{ct}>({a}, {b})"), d)),
        Binary::Equal => compare("=="),
        Binary::Less => compare("<"),
        Binary::Greater => compare(">"),
        Binary::LessOrEqual => compare("<="),
        Binary::GreaterOrEqual => compare(">="),
        Binary::And => compare("&&"),
        Binary::Or => compare("||"),
    }
}

/// `x` (compute type of `from`) converted to the compute type of `to`, rounded as `to` stores.
fn cast(x: &str, from: DType, to: DType) -> String {
    if from == to {
        return x.to_string();
    }
    let narrow = |lo: i64, hi: i64| format!("(({})sat_narrow((int)({x}), {lo}, {hi}))", compute_type(to));
    match to {
        DType::Bool => format!("({x} != 0)"),
        DType::F16 => format!("rnd_f16((float)({x}))"),
        DType::BF16 => format!("rnd_bf16((float)({x}))"),
        DType::I8 if from.is_float() => narrow(-128, 127),
        DType::U8 if from.is_float() => narrow(0, 255),
        DType::I16 if from.is_float() => narrow(-32768, 32767),
        DType::U16 if from.is_float() => narrow(0, 65535),
        _ => format!("(({})({x}))", compute_type(to)),
    }
}
