//! TODO family reduce
use super::FamilyRegistrar;
pub(super) fn register(_reg: &mut FamilyRegistrar) {}
