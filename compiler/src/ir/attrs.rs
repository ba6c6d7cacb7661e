//! Node attributes: a sorted map from name to a typed value, with typed getters that
//! turn a wrong or missing attribute into an `OpError` naming the attribute.

use super::Tensor;
use std::collections::BTreeMap;
use std::fmt;
use std::fmt::Write as _;

/// An op-level failure; the caller adds the node name and op type.
#[derive(Clone, Debug, PartialEq)]
pub struct OpError(pub String);

impl OpError {
    pub fn new(msg: impl Into<String>) -> OpError {
        OpError(msg.into())
    }
}

impl fmt::Display for OpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// One attribute value, as ONNX defines them (graphs and type protos are not held).
#[derive(Clone, Debug, PartialEq)]
pub enum Attr {
    Int(i64),
    Float(f32),
    String(String),
    Tensor(Tensor),
    Ints(Vec<i64>),
    Floats(Vec<f32>),
    Strings(Vec<String>),
}

impl Attr {
    fn kind(&self) -> &'static str {
        match self {
            Attr::Int(_) => "int",
            Attr::Float(_) => "float",
            Attr::String(_) => "string",
            Attr::Tensor(_) => "tensor",
            Attr::Ints(_) => "ints",
            Attr::Floats(_) => "floats",
            Attr::Strings(_) => "strings",
        }
    }

    /// Deterministic text form used by the IR printer (floats with 6 significant digits).
    pub fn to_text(&self) -> String {
        match self {
            Attr::Int(i) => i.to_string(),
            Attr::Float(f) => format_float(*f as f64),
            Attr::String(s) => format!("{s:?}"),
            Attr::Tensor(t) => {
                let mut s = format!("tensor<{}{:?}>", t.dtype(), t.shape());
                if t.len() <= 8 {
                    let vals: Vec<String> = t.to_f64_vec().iter().map(|x| format_float(*x)).collect();
                    let _ = write!(s, "[{}]", vals.join(","));
                }
                s
            }
            Attr::Ints(v) => format!("{v:?}").replace(' ', ""),
            Attr::Floats(v) => {
                let vals: Vec<String> = v.iter().map(|x| format_float(*x as f64)).collect();
                format!("[{}]", vals.join(","))
            }
            Attr::Strings(v) => format!("{v:?}").replace(", ", ","),
        }
    }
}

/// Fixed-precision float text: 6 significant digits, plain decimal between 1e-4 and
/// 1e6, scientific outside, no trailing zeros.
pub fn format_float(x: f64) -> String {
    if x.is_nan() {
        return "nan".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf".into() } else { "-inf".into() };
    }
    if x == x.trunc() && x.abs() < 1e15 {
        return format!("{}", x as i64);
    }
    let magnitude = x.abs().log10().floor() as i32;
    if (-4..6).contains(&magnitude) {
        // Plain decimal with 6 significant digits: 0.666667, 12.5, 0.0001.
        let decimals = (5 - magnitude).max(0) as usize;
        let s = format!("{x:.decimals$}");
        return s.trim_end_matches('0').trim_end_matches('.').to_string();
    }
    let s = format!("{x:.5e}");
    // Trim the mantissa's trailing zeros: 1.500000e-1 -> 1.5e-1.
    let (mant, exp) = s.split_once('e').unwrap_or((&s, "0"));
    let mant = mant.trim_end_matches('0').trim_end_matches('.');
    format!("{mant}e{exp}")
}

/// The attributes of a node, sorted by name.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Attrs(pub BTreeMap<String, Attr>);

impl Attrs {
    pub fn new() -> Attrs {
        Attrs(BTreeMap::new())
    }

    pub fn insert(&mut self, name: impl Into<String>, value: Attr) {
        self.0.insert(name.into(), value);
    }

    pub fn get(&self, name: &str) -> Option<&Attr> {
        self.0.get(name)
    }

    pub fn contains(&self, name: &str) -> bool {
        self.0.contains_key(name)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn wrong(&self, name: &str, want: &str) -> OpError {
        let got = self.0.get(name).map(|a| a.kind()).unwrap_or("nothing");
        OpError::new(format!("attribute '{name}' must be {want}, got {got}"))
    }

    pub fn int_opt(&self, name: &str) -> Result<Option<i64>, OpError> {
        match self.0.get(name) {
            None => Ok(None),
            Some(Attr::Int(i)) => Ok(Some(*i)),
            Some(_) => Err(self.wrong(name, "an int")),
        }
    }

    pub fn int(&self, name: &str, default: i64) -> Result<i64, OpError> {
        Ok(self.int_opt(name)?.unwrap_or(default))
    }

    pub fn req_int(&self, name: &str) -> Result<i64, OpError> {
        self.int_opt(name)?.ok_or_else(|| OpError::new(format!("missing required attribute '{name}'")))
    }

    pub fn float_opt(&self, name: &str) -> Result<Option<f32>, OpError> {
        match self.0.get(name) {
            None => Ok(None),
            Some(Attr::Float(f)) => Ok(Some(*f)),
            Some(Attr::Int(i)) => Ok(Some(*i as f32)),
            Some(_) => Err(self.wrong(name, "a float")),
        }
    }

    pub fn float(&self, name: &str, default: f32) -> Result<f32, OpError> {
        Ok(self.float_opt(name)?.unwrap_or(default))
    }

    pub fn string_opt(&self, name: &str) -> Result<Option<&str>, OpError> {
        match self.0.get(name) {
            None => Ok(None),
            Some(Attr::String(s)) => Ok(Some(s)),
            Some(_) => Err(self.wrong(name, "a string")),
        }
    }

    pub fn string<'a>(&'a self, name: &str, default: &'a str) -> Result<&'a str, OpError> {
        Ok(self.string_opt(name)?.unwrap_or(default))
    }

    pub fn ints_opt(&self, name: &str) -> Result<Option<&[i64]>, OpError> {
        match self.0.get(name) {
            None => Ok(None),
            Some(Attr::Ints(v)) => Ok(Some(v)),
            Some(_) => Err(self.wrong(name, "a list of ints")),
        }
    }

    pub fn floats_opt(&self, name: &str) -> Result<Option<&[f32]>, OpError> {
        match self.0.get(name) {
            None => Ok(None),
            Some(Attr::Floats(v)) => Ok(Some(v)),
            Some(_) => Err(self.wrong(name, "a list of floats")),
        }
    }

    pub fn tensor_opt(&self, name: &str) -> Result<Option<&Tensor>, OpError> {
        match self.0.get(name) {
            None => Ok(None),
            Some(Attr::Tensor(t)) => Ok(Some(t)),
            Some(_) => Err(self.wrong(name, "a tensor")),
        }
    }

    /// `name=value` pairs in name order, for the IR text form.
    pub fn to_text(&self) -> String {
        let parts: Vec<String> = self.0.iter().map(|(k, v)| format!("{k}={}", v.to_text())).collect();
        parts.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_print_with_fixed_precision() {
        assert_eq!(format_float(0.1f32 as f64), "0.1");
        assert_eq!(format_float(1.5), "1.5");
        assert_eq!(format_float(3.0), "3");
        assert_eq!(format_float(1.0 / 3.0), "0.333333");
        assert_eq!(format_float(-1234.5678), "-1234.57");
        assert_eq!(format_float(1e-7), "1e-7");
        assert_eq!(format_float(2.5e-9), "2.5e-9");
        assert_eq!(format_float(6.02e23), "6.02e23");
    }

    #[test]
    fn getters_name_the_attribute_on_type_errors() {
        let mut a = Attrs::new();
        a.insert("axis", Attr::Float(1.0));
        let err = a.int("axis", 0).unwrap_err();
        assert!(err.to_string().contains("'axis'"), "{err}");
    }
}
