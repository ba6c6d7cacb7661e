//! TODO family arith
use super::FamilyRegistrar;
pub(super) fn register(_reg: &mut FamilyRegistrar) {}
