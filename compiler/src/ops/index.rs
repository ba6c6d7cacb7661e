//! TODO family index
use super::FamilyRegistrar;
pub(super) fn register(_reg: &mut FamilyRegistrar) {}
