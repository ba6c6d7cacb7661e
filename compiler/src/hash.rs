//! FNV-1a 64: the content hash of artifacts, kernel sources, cache keys and checksums. A leaf
//! module, so that every layer (codegen, plan, propagate, tune, program) hashes without
//! importing the layer that writes artifacts.

/// FNV-1a 64 of a byte string.
pub fn checksum(bytes: &[u8]) -> u64 {
    let mut h = Fnv64::new();
    h.add(bytes);
    h.finish()
}

/// FNV-1a 64 fed in pieces: [`checksum`] of the pieces' concatenation, without building it.
#[derive(Clone, Copy, Debug)]
pub struct Fnv64(u64);

impl Default for Fnv64 {
    fn default() -> Fnv64 {
        Fnv64::new()
    }
}

impl Fnv64 {
    pub fn new() -> Fnv64 {
        Fnv64(0xcbf2_9ce4_8422_2325)
    }

    pub fn add(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= *b as u64;
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }

    /// Adds each word's little-endian bytes.
    pub fn add_u32s(&mut self, words: &[u32]) {
        words.iter().for_each(|w| self.add(&w.to_le_bytes()));
    }

    /// Adds each value's little-endian bytes.
    pub fn add_f32s(&mut self, values: &[f32]) {
        values.iter().for_each(|v| self.add(&v.to_le_bytes()));
    }

    pub fn finish(&self) -> u64 {
        self.0
    }
}
