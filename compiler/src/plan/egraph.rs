//! The equivalent plans of one operator as an e-graph (`egg`), and the extraction of the
//! cheapest by the cost model.
//!
//! Every alternative (dense; split by block shape; split by bit width; one block shape
//! only; 2:4 + rest) is the sum of its sub-operator terms, and all of them are unioned
//! into one e-class: they compute the same `X·W`. An epilogue (bias, activation) is either
//! fused into the kernel (`fused`) or a separate kernel after it (`then`), again two
//! members of one e-class.
//!
//! Extraction uses egg's [`Extractor`] with a [`CostFunction`] that adds the predicted
//! times of the terms. egg's ILP extractor (`LpExtractor`) needs the `lp` feature, which
//! links coin_cbc, a C++ solver that does not build here. It is not needed either: the
//! alternatives share no sub-terms, so the tree cost the greedy extractor minimizes equals
//! the DAG cost an ILP would minimize, and the greedy extractor is exact.

use egg::{define_language, CostFunction, EGraph, Extractor, Id, Language, RecExpr, Symbol};
use std::collections::HashMap;

define_language! {
    /// Plan nodes: a split kind over its terms, or a term (a sub-operator) by name.
    pub enum PlanLang {
        "dense" = Dense(Box<[Id]>),
        "by-shape" = ByShape(Box<[Id]>),
        "by-bits" = ByBits(Box<[Id]>),
        "one-shape" = OneShape(Box<[Id]>),
        "two-four+rest" = TwoFourRest(Box<[Id]>),
        "fused" = Fused([Id; 1]),
        "then" = Then([Id; 2]),
        Term(Symbol),
    }
}

/// How an alternative splits the operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SplitKind {
    Dense,
    ByShape,
    ByBits,
    OneShape,
    TwoFourRest,
}

impl SplitKind {
    pub fn name(self) -> &'static str {
        match self {
            SplitKind::Dense => "dense",
            SplitKind::ByShape => "by-shape",
            SplitKind::ByBits => "by-bits",
            SplitKind::OneShape => "one-shape",
            SplitKind::TwoFourRest => "two-four+rest",
        }
    }
}

/// One candidate plan of an operator: its split kind and the predicted time of each term.
#[derive(Clone, Debug, PartialEq)]
pub struct Alternative {
    pub split: SplitKind,
    pub term_times: Vec<f64>,
}

/// The extracted plan.
#[derive(Clone, Debug, PartialEq)]
pub struct Choice {
    /// Index into the alternatives.
    pub alternative: usize,
    pub fused_epilogue: bool,
    /// Predicted time of the chosen plan, epilogue included.
    pub time_s: f64,
    /// The extracted expression, e.g. `(fused (by-shape a1.0 a1.1))`.
    pub expr: String,
    /// E-classes and e-nodes of the e-graph.
    pub n_classes: usize,
    pub n_nodes: usize,
}

struct TermTimes<'a>(&'a HashMap<Symbol, f64>);

impl CostFunction<PlanLang> for TermTimes<'_> {
    type Cost = f64;

    fn cost<C>(&mut self, enode: &PlanLang, mut costs: C) -> f64
    where
        C: FnMut(Id) -> f64,
    {
        match enode {
            PlanLang::Term(s) => self.0.get(s).copied().unwrap_or(f64::INFINITY),
            // Fusing saves the epilogue kernel; a hair of cost keeps the function monotone.
            PlanLang::Fused(_) => enode.fold(1e-12, |acc, id| acc + costs(id)),
            other => other.fold(0.0, |acc, id| acc + costs(id)),
        }
    }
}

/// Builds the e-graph of `alternatives` (plus the epilogue choice when `epilogue_s` is
/// given: the time of the epilogue as its own kernel) and extracts the cheapest plan.
/// `None` when there is no alternative. Ties go to the earlier alternative.
pub fn choose(alternatives: &[Alternative], epilogue_s: Option<f64>) -> Option<Choice> {
    if alternatives.is_empty() {
        return None;
    }
    let mut egraph: EGraph<PlanLang, ()> = EGraph::default();
    let mut times: HashMap<Symbol, f64> = HashMap::new();
    let mut class: Option<Id> = None;
    for (a, alt) in alternatives.iter().enumerate() {
        let terms: Vec<Id> = alt
            .term_times
            .iter()
            .enumerate()
            .map(|(j, t)| {
                let name = Symbol::from(format!("a{a}.{j}"));
                // A tie-breaker far below any real time keeps the choice deterministic.
                times.insert(name, t + a as f64 * 1e-15);
                egraph.add(PlanLang::Term(name))
            })
            .collect();
        let terms = terms.into_boxed_slice();
        let node = match alt.split {
            SplitKind::Dense => PlanLang::Dense(terms),
            SplitKind::ByShape => PlanLang::ByShape(terms),
            SplitKind::ByBits => PlanLang::ByBits(terms),
            SplitKind::OneShape => PlanLang::OneShape(terms),
            SplitKind::TwoFourRest => PlanLang::TwoFourRest(terms),
        };
        let id = egraph.add(node);
        class = Some(match class {
            Some(c) => {
                egraph.union(c, id);
                c
            }
            None => id,
        });
    }
    let mut root = class.expect("at least one alternative");
    if let Some(t) = epilogue_s {
        let epi = Symbol::from("epilogue");
        times.insert(epi, t);
        let epi = egraph.add(PlanLang::Term(epi));
        let fused = egraph.add(PlanLang::Fused([root]));
        let then = egraph.add(PlanLang::Then([root, epi]));
        egraph.union(fused, then);
        root = fused;
    }
    egraph.rebuild();
    let extractor = Extractor::new(&egraph, TermTimes(&times));
    let (time_s, best): (f64, RecExpr<PlanLang>) = extractor.find_best(root);
    let mut alternative = 0;
    let mut fused_epilogue = false;
    for node in best.iter() {
        match node {
            PlanLang::Term(s) => {
                if let Some(a) = s.as_str().strip_prefix('a').and_then(|r| r.split('.').next()) {
                    alternative = a.parse().unwrap_or(0);
                }
            }
            PlanLang::Fused(_) => fused_epilogue = true,
            _ => {}
        }
    }
    Some(Choice {
        alternative,
        fused_epilogue,
        time_s,
        expr: best.to_string(),
        n_classes: egraph.number_of_classes(),
        n_nodes: egraph.total_number_of_nodes(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extracts_the_cheapest_alternative_and_fuses_the_epilogue() {
        let alts = vec![
            Alternative { split: SplitKind::Dense, term_times: vec![10e-6] },
            Alternative { split: SplitKind::ByShape, term_times: vec![3e-6, 2e-6] },
            Alternative { split: SplitKind::OneShape, term_times: vec![6e-6] },
        ];
        let c = choose(&alts, Some(4e-6)).unwrap();
        assert_eq!(c.alternative, 1);
        assert!(c.fused_epilogue);
        assert!((c.time_s - 5e-6).abs() < 1e-9, "{}", c.time_s);
        assert_eq!(c.expr, "(fused (by-shape a1.0 a1.1))");
        let c = choose(&alts[..1], None).unwrap();
        assert_eq!((c.alternative, c.expr.as_str()), (0, "(dense a0.0)"));
        assert!(choose(&[], None).is_none());
    }
}
