//! TensorFlow's random fills: `FillPhiloxRandomKernelLaunch<UniformDistribution<PhiloxRandom,
//! float>>(const uint64* key, const uint64* counter, PhiloxRandom gen, float* data, int64 size,
//! UniformDistribution dist)` (random_op_gpu.h, tsl/lib/random).
//!
//! The generator is Philox4x32-10: 128-bit counter, 64-bit key, each call one block of four
//! 32-bit words. Element `i` is word `i % 4` of the block at counter `+ i / 4`, whatever the
//! launch's grid (each thread skips to its own blocks), so the values are the same as on
//! TensorFlow's CPU. A uniform float is `bits(0x3f800000 | (word & 0x7fffff)) - 1`.

use super::{Launch, Mem, Skip, f32_bytes, load_checked};

const W32A: u32 = 0x9E37_79B9;
const W32B: u32 = 0xBB67_AE85;
const M4X32A: u32 = 0xD251_1F53;
const M4X32B: u32 = 0xCD9E_8D57;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Philox {
    pub counter: [u32; 4],
    pub key: [u32; 2],
}

impl Philox {
    /// The block of four words at the current counter (ten rounds).
    pub fn block(&self) -> [u32; 4] {
        let (mut c, mut k) = (self.counter, self.key);
        for round in 0..10 {
            let p0 = M4X32A as u64 * c[0] as u64;
            let p1 = M4X32B as u64 * c[2] as u64;
            c = [
                (p1 >> 32) as u32 ^ c[1] ^ k[0],
                p1 as u32,
                (p0 >> 32) as u32 ^ c[3] ^ k[1],
                p0 as u32,
            ];
            if round < 9 {
                k = [k[0].wrapping_add(W32A), k[1].wrapping_add(W32B)];
            }
        }
        c
    }

    /// Advances the 128-bit counter by `n` blocks.
    pub fn skip(&mut self, n: u64) {
        let c = &mut self.counter;
        let v = (c[0] as u128 | (c[1] as u128) << 32 | (c[2] as u128) << 64 | (c[3] as u128) << 96)
            .wrapping_add(n as u128);
        *c = [
            v as u32,
            (v >> 32) as u32,
            (v >> 64) as u32,
            (v >> 96) as u32,
        ];
    }
}

pub fn uniform_f32(word: u32) -> f32 {
    f32::from_bits(0x3f80_0000 | (word & 0x7f_ffff)) - 1.0
}

/// The launch: the generator from `counter` and `key` in device memory when both are given (two
/// and one uint64), else the one passed by value ({u32 counter[4], u32 key[2]}).
pub fn fill_uniform_f32(l: &Launch, mem: &mut dyn Mem) -> Result<(), Skip> {
    l.expect_sizes(&[8, 8, 24, 8, 8, 1])?;
    let (key_at, ctr_at) = (l.u64_at(0)?, l.u64_at(1)?);
    let words = |b: &[u8]| -> Vec<u32> {
        b.chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    };
    let mut philox = if key_at != 0 && ctr_at != 0 {
        let k = words(&load_checked(mem, key_at, 8)?);
        let c = words(&load_checked(mem, ctr_at, 16)?);
        Philox {
            counter: [c[0], c[1], c[2], c[3]],
            key: [k[0], k[1]],
        }
    } else {
        let g = words(l.param(2, 24)?);
        Philox {
            counter: [g[0], g[1], g[2], g[3]],
            key: [g[4], g[5]],
        }
    };
    let size =
        usize::try_from(l.u64_at(4)? as i64).map_err(|_| Skip::Layout("negative size".into()))?;
    let data = l.u64_at(3)?;
    if !mem.holds(data, size as u64 * 4) {
        return Err(Skip::NoBytes);
    }
    let mut out = Vec::with_capacity(size);
    while out.len() < size {
        for w in philox.block() {
            if out.len() < size {
                out.push(uniform_f32(w));
            }
        }
        philox.skip(1);
    }
    mem.store(data, &f32_bytes(&out));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::testmem::TestMem;
    use super::super::{f32s, run};
    use super::*;
    use crate::fatbin::KernelParams;

    /// Known-answer vectors of Philox4x32-10 (Random123's kat_vectors).
    #[test]
    fn philox_known_answers() {
        let kat = [
            (
                [0u32; 4],
                [0u32; 2],
                [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8],
            ),
            (
                [u32::MAX; 4],
                [u32::MAX; 2],
                [0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd],
            ),
            (
                [0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344],
                [0xa4093822, 0x299f31d0],
                [0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1],
            ),
        ];
        for (counter, key, want) in kat {
            assert_eq!(Philox { counter, key }.block(), want);
        }
        let mut g = Philox {
            counter: [u32::MAX, u32::MAX, 0, 0],
            key: [0, 0],
        };
        g.skip(1);
        assert_eq!(g.counter, [0, 0, 1, 0]);
    }

    #[test]
    fn fill_from_counter_and_key_in_device_memory() {
        let name = "void tensorflow::functor::FillPhiloxRandomKernelLaunch<tsl::random::UniformDistribution<tsl::random::PhiloxRandom, float> >(unsigned long const*, unsigned long const*, tsl::random::PhiloxRandom, tsl::random::UniformDistribution<tsl::random::PhiloxRandom, float>*::ResultElementType, long, tsl::random::UniformDistribution<tsl::random::PhiloxRandom, float>)";
        let mut m = TestMem::default();
        m.add(0x1000, 0u64.to_le_bytes().to_vec()); // key
        m.add(0x2000, vec![0; 16]); // counter
        m.add(0x3000, vec![0; 24]); // 6 floats
        let mut b = Vec::new();
        for v in [0x1000u64, 0x2000] {
            b.extend(v.to_le_bytes());
        }
        b.extend([0u8; 24]);
        b.extend(0x3000u64.to_le_bytes());
        b.extend(6u64.to_le_bytes());
        b.push(0);
        let p = KernelParams {
            params: vec![(0, 8), (8, 8), (16, 24), (40, 8), (48, 8), (56, 1)],
            cbank_size: None,
        };
        run(name, &p, &b, [2, 1, 1], &mut m).unwrap().unwrap();
        let got = f32s(&m.bufs[&0x3000]);
        // Counter 0 gives the first known answer; counter 1's first two words follow it.
        let first = [0x6627e8d5u32, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8];
        for (i, w) in first.iter().enumerate() {
            assert_eq!(got[i], uniform_f32(*w));
        }
        let next = Philox {
            counter: [1, 0, 0, 0],
            key: [0, 0],
        }
        .block();
        assert_eq!(got[4..], [uniform_f32(next[0]), uniform_f32(next[1])]);
        assert!(got.iter().all(|v| (0.0..1.0).contains(v)));
    }
}
