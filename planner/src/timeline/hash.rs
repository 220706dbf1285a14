//! A fast hasher for the simulator's maps keyed by storage and operation indices (SipHash,
//! the standard one, guards against adversarial keys that these small integers are not, and
//! was a fifth of the planning time on a 10,000-operation trace).

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// Multiply and fold (as rustc's FxHash does): each word mixed in with one multiplication.
#[derive(Default, Clone, Copy)]
pub(crate) struct IndexHasher(u64);

const K: u64 = 0x517c_c1b7_2722_0a95;

impl Hasher for IndexHasher {
    fn write(&mut self, bytes: &[u8]) {
        for c in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..c.len()].copy_from_slice(c);
            self.write_u64(u64::from_le_bytes(w));
        }
    }

    fn write_u64(&mut self, x: u64) {
        self.0 = (self.0.rotate_left(5) ^ x).wrapping_mul(K);
    }

    fn write_usize(&mut self, x: usize) {
        self.write_u64(x as u64);
    }

    fn finish(&self) -> u64 {
        // The high bits are the best mixed; hashbrown takes its control bits from the top.
        self.0
    }
}

pub(crate) type Map<K, V> = HashMap<K, V, BuildHasherDefault<IndexHasher>>;
pub(crate) type Set<K> = HashSet<K, BuildHasherDefault<IndexHasher>>;
