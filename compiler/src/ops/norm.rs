//! TODO family norm
use super::FamilyRegistrar;
pub(super) fn register(_reg: &mut FamilyRegistrar) {}
