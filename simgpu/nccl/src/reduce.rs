//! NCCL's data types and reduction operators, and the element-wise reduction of the ranks'
//! contributions.
//!
//! Order and rounding: the contributions are combined in rank order, `((x0 op x1) op x2) ...`,
//! and every step is rounded to the data type (round to nearest, ties to even), as NCCL's
//! per-type device arithmetic does (`__hadd` for float16, and so on). The exact result of one
//! step of two values of the type is computed in f64 first: f64 holds more than twice the bits of
//! float32 and smaller types plus two, so rounding that to the type is the correctly rounded step
//! (Figueroa's double-rounding theorem). Real NCCL reduces along its rings or trees, in an order
//! that depends on the topology and the chunking, so a float sum may round differently there; an
//! integer result and max/min never differ.
//!
//! `ncclAvg` is what NCCL makes of it (`hostToDevRedOp` in NCCL's enqueue.cc): for floating types
//! each contribution is first multiplied by `1/n` rounded to the type (through float for the
//! 16- and 8-bit types), then summed; for integers the sum is divided by `n` (truncating).
//! Integer sums and products wrap. Float max/min return the operand that is not NaN, as
//! `fmaxf`/`fminf` do. The fp8 types saturate to their largest finite value on overflow, as CUDA's
//! `__NV_SATFINITE` conversions do.

/// `ncclDataType_t` (nccl.h of NCCL 2.32.3: ncclInt8 = 0 ... ncclFloat8e5m2 = 11).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataType {
    I8,
    U8,
    I32,
    U32,
    I64,
    U64,
    F16,
    F32,
    F64,
    Bf16,
    F8E4M3,
    F8E5M2,
}

impl DataType {
    /// The type of a raw `ncclDataType_t`, if it is one.
    pub fn from_raw(v: i32) -> Option<DataType> {
        use DataType::*;
        // nccl.h: the enum's values in order.
        [
            I8, U8, I32, U32, I64, U64, F16, F32, F64, Bf16, F8E4M3, F8E5M2,
        ]
        .get(usize::try_from(v).ok()?)
        .copied()
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        use DataType::*;
        match self {
            I8 | U8 | F8E4M3 | F8E5M2 => 1,
            F16 | Bf16 => 2,
            I32 | U32 | F32 => 4,
            I64 | U64 | F64 => 8,
        }
    }
}

/// A reduction operator (`ncclRedOp_t`: ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3,
/// ncclAvg = 4; from ncclNumOps = 5 on, operators made by ncclRedOpCreatePreMulSum).
#[derive(Debug, Clone, PartialEq)]
pub enum RedOp {
    Sum,
    Prod,
    Max,
    Min,
    Avg,
    /// Each contribution times this scalar (the scalar's bytes, in the operation's type), then
    /// the sum.
    PreMulSum(Vec<u8>),
}

impl RedOp {
    /// A built-in operator from its raw value.
    pub fn builtin(v: i32) -> Option<RedOp> {
        Some(match v {
            0 => RedOp::Sum,
            1 => RedOp::Prod,
            2 => RedOp::Max,
            3 => RedOp::Min,
            4 => RedOp::Avg,
            _ => return None,
        })
    }
}

/// A binary floating-point format of at most 16 bits: `mant` stored mantissa bits, `exp` exponent
/// bits, and whether the all-ones exponent means infinity/NaN (IEEE) or only NaN with the
/// mantissa all ones too (the "fn" fp8 format, E4M3).
#[derive(Debug, Clone, Copy)]
struct Fmt {
    mant: i32,
    exp: i32,
    ieee: bool,
    saturate: bool,
}

const F16: Fmt = Fmt {
    mant: 10,
    exp: 5,
    ieee: true,
    saturate: false,
};
const BF16: Fmt = Fmt {
    mant: 7,
    exp: 8,
    ieee: true,
    saturate: false,
};
const E4M3: Fmt = Fmt {
    mant: 3,
    exp: 4,
    ieee: false,
    saturate: true,
};
const E5M2: Fmt = Fmt {
    mant: 2,
    exp: 5,
    ieee: true,
    saturate: true,
};

impl Fmt {
    fn bias(self) -> i32 {
        (1 << (self.exp - 1)) - 1
    }
    fn exp_all(self) -> u32 {
        (1 << self.exp) - 1
    }
    fn mant_all(self) -> u32 {
        (1 << self.mant) - 1
    }
    fn min_exp(self) -> i32 {
        1 - self.bias()
    }
    /// The largest finite value's bits (without sign).
    fn max_bits(self) -> u32 {
        if self.ieee {
            ((self.exp_all() - 1) << self.mant) | self.mant_all()
        } else {
            (self.exp_all() << self.mant) | (self.mant_all() - 1)
        }
    }
    fn nan_bits(self) -> u32 {
        if self.ieee {
            (self.exp_all() << self.mant) | (1 << (self.mant - 1))
        } else {
            (self.exp_all() << self.mant) | self.mant_all()
        }
    }
    fn sign_bit(self) -> u32 {
        1 << (self.exp + self.mant)
    }

    fn decode(self, bits: u32) -> f64 {
        let sign = if bits & self.sign_bit() != 0 {
            -1.0
        } else {
            1.0
        };
        let e = (bits >> self.mant) & self.exp_all();
        let m = bits & self.mant_all();
        let scale = |k: i32| 2f64.powi(k);
        if e == self.exp_all() && (self.ieee || m == self.mant_all()) {
            return if self.ieee && m == 0 {
                sign * f64::INFINITY
            } else {
                f64::NAN
            };
        }
        if e == 0 {
            return sign * f64::from(m) * scale(self.min_exp() - self.mant);
        }
        let frac = 1.0 + f64::from(m) * scale(-self.mant);
        sign * frac * scale(e as i32 - self.bias())
    }

    /// `x` rounded to the nearest value of the format (ties to even), as bits.
    fn encode(self, x: f64) -> u32 {
        if x.is_nan() {
            return self.nan_bits();
        }
        let sign = if x.is_sign_negative() {
            self.sign_bit()
        } else {
            0
        };
        let a = x.abs();
        let max = self.decode(self.max_bits());
        let overflow = || {
            if self.saturate {
                sign | self.max_bits()
            } else if self.ieee {
                sign | (self.exp_all() << self.mant)
            } else {
                self.nan_bits()
            }
        };
        if a.is_infinite() {
            return overflow();
        }
        // The exponent of the quantum at a's magnitude: a's own binade, or the subnormals'.
        let e = if a == 0.0 {
            self.min_exp()
        } else {
            ((a.to_bits() >> 52) as i32 - 1023).max(self.min_exp())
        };
        let q = 2f64.powi(e - self.mant);
        let r = (a / q).round_ties_even() * q;
        if r > max {
            return overflow();
        }
        if r == 0.0 {
            return sign;
        }
        let re = (r.to_bits() >> 52) as i32 - 1023;
        if re < self.min_exp() {
            return sign | (r / 2f64.powi(self.min_exp() - self.mant)) as u32;
        }
        let m = (r / 2f64.powi(re - self.mant)) as u32 - (1 << self.mant);
        sign | (((re + self.bias()) as u32) << self.mant) | m
    }
}

fn fmt_of(dt: DataType) -> Option<Fmt> {
    match dt {
        DataType::F16 => Some(F16),
        DataType::Bf16 => Some(BF16),
        DataType::F8E4M3 => Some(E4M3),
        DataType::F8E5M2 => Some(E5M2),
        _ => None,
    }
}

/// Element `i` of a floating-point buffer of type `dt`, as f64 (exact).
fn load_float(dt: DataType, b: &[u8], i: usize) -> f64 {
    match dt {
        DataType::F32 => f64::from(f32::from_le_bytes(b[i * 4..i * 4 + 4].try_into().unwrap())),
        DataType::F64 => f64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap()),
        DataType::F16 | DataType::Bf16 => {
            let bits = u16::from_le_bytes(b[i * 2..i * 2 + 2].try_into().unwrap());
            fmt_of(dt).unwrap().decode(u32::from(bits))
        }
        _ => fmt_of(dt).unwrap().decode(u32::from(b[i])),
    }
}

fn store_float(dt: DataType, b: &mut [u8], i: usize, x: f64) {
    match dt {
        DataType::F32 => b[i * 4..i * 4 + 4].copy_from_slice(&(x as f32).to_le_bytes()),
        DataType::F64 => b[i * 8..i * 8 + 8].copy_from_slice(&x.to_le_bytes()),
        DataType::F16 | DataType::Bf16 => {
            let bits = fmt_of(dt).unwrap().encode(x) as u16;
            b[i * 2..i * 2 + 2].copy_from_slice(&bits.to_le_bytes());
        }
        _ => b[i] = fmt_of(dt).unwrap().encode(x) as u8,
    }
}

/// `x` rounded to `dt` (a floating type), as f64.
pub fn round_to(dt: DataType, x: f64) -> f64 {
    match dt {
        DataType::F64 => x,
        DataType::F32 => f64::from(x as f32),
        _ => {
            let f = fmt_of(dt).expect("a floating type");
            f.decode(f.encode(x))
        }
    }
}

fn reduce_float(dt: DataType, op: &RedOp, inputs: &[&[u8]], out: &mut [u8], count: usize) {
    let n = inputs.len();
    // The per-contribution factor of Avg and PreMulSum.
    let premul = match op {
        // NCCL: float(1.0 / nRanks), converted to the type (f64 directly for ncclFloat64).
        RedOp::Avg if dt == DataType::F64 => Some(1.0 / n as f64),
        RedOp::Avg => Some(round_to(dt, f64::from((1.0 / n as f64) as f32))),
        RedOp::PreMulSum(s) => Some(load_float(dt, s, 0)),
        _ => None,
    };
    let step = |a: f64, b: f64| -> f64 {
        match op {
            RedOp::Sum | RedOp::Avg | RedOp::PreMulSum(_) => round_to(dt, a + b),
            RedOp::Prod => round_to(dt, a * b),
            RedOp::Max => a.max(b),
            RedOp::Min => a.min(b),
        }
    };
    for i in 0..count {
        let get = |r: usize| {
            let x = load_float(dt, inputs[r], i);
            match premul {
                Some(s) => round_to(dt, x * s),
                None => x,
            }
        };
        let mut acc = get(0);
        for r in 1..n {
            acc = step(acc, get(r));
        }
        store_float(dt, out, i, acc);
    }
}

macro_rules! reduce_int {
    ($t:ty, $op:expr, $inputs:expr, $out:expr, $count:expr) => {{
        const W: usize = std::mem::size_of::<$t>();
        let n = $inputs.len();
        let load =
            |b: &[u8], i: usize| <$t>::from_le_bytes(b[i * W..i * W + W].try_into().unwrap());
        let scalar: Option<$t> = match $op {
            RedOp::PreMulSum(s) => Some(load(s, 0)),
            _ => None,
        };
        for i in 0..$count {
            let get = |r: usize| {
                let x = load($inputs[r], i);
                scalar.map_or(x, |s| x.wrapping_mul(s))
            };
            let mut acc = get(0);
            for r in 1..n {
                let x = get(r);
                acc = match $op {
                    RedOp::Sum | RedOp::Avg | RedOp::PreMulSum(_) => acc.wrapping_add(x),
                    RedOp::Prod => acc.wrapping_mul(x),
                    RedOp::Max => acc.max(x),
                    RedOp::Min => acc.min(x),
                };
            }
            if *$op == RedOp::Avg {
                acc /= n as $t;
            }
            $out[i * W..i * W + W].copy_from_slice(&acc.to_le_bytes());
        }
    }};
}

/// Reduces `inputs` (one buffer per rank, in rank order, each at least `count` elements of `dt`)
/// with `op` into `out` (`count` elements).
pub fn reduce(dt: DataType, op: &RedOp, inputs: &[&[u8]], out: &mut [u8], count: usize) {
    if inputs.is_empty() || count == 0 {
        return;
    }
    match dt {
        DataType::I8 => reduce_int!(i8, op, inputs, out, count),
        DataType::U8 => reduce_int!(u8, op, inputs, out, count),
        DataType::I32 => reduce_int!(i32, op, inputs, out, count),
        DataType::U32 => reduce_int!(u32, op, inputs, out, count),
        DataType::I64 => reduce_int!(i64, op, inputs, out, count),
        DataType::U64 => reduce_int!(u64, op, inputs, out, count),
        _ => reduce_float(dt, op, inputs, out, count),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::{bf16, f16};

    /// A deterministic pseudo-random sequence (xorshift64*).
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
        fn f64(&mut self, scale: f64) -> f64 {
            ((self.next() >> 11) as f64 / (1u64 << 53) as f64 - 0.5) * scale
        }
    }

    #[test]
    fn data_types_follow_nccl_h() {
        assert_eq!(DataType::from_raw(0), Some(DataType::I8));
        assert_eq!(DataType::from_raw(7), Some(DataType::F32));
        assert_eq!(DataType::from_raw(9), Some(DataType::Bf16));
        assert_eq!(DataType::from_raw(11), Some(DataType::F8E5M2));
        assert_eq!(DataType::from_raw(12), None);
        assert_eq!(DataType::from_raw(-1), None);
        assert_eq!(DataType::F16.size(), 2);
        assert_eq!(DataType::U64.size(), 8);
        assert_eq!(RedOp::builtin(4), Some(RedOp::Avg));
        assert_eq!(RedOp::builtin(5), None);
    }

    #[test]
    fn half_and_bfloat16_round_as_the_half_crate_does() {
        for bits in 0..=u16::MAX {
            let h = f16::from_bits(bits);
            let b = bf16::from_bits(bits);
            if !h.is_nan() {
                assert_eq!(F16.decode(u32::from(bits)), h.to_f64(), "{bits:#x}");
            }
            if !b.is_nan() {
                assert_eq!(BF16.decode(u32::from(bits)), b.to_f64(), "{bits:#x}");
            }
        }
        let mut rng = Rng(7);
        for k in 0..200_000 {
            // Magnitudes across the normal, subnormal and overflow ranges of both formats.
            let x = rng.f64(2.0) * 2f64.powi((k % 300) - 150);
            // half's from_f64 is not correctly rounded for every f64 (see below); its from_f32
            // is, so the references take float32 inputs.
            let y = x as f32;
            assert_eq!(
                F16.encode(f64::from(y)),
                u32::from(f16::from_f32(y).to_bits()),
                "{y:e}"
            );
            assert_eq!(
                BF16.encode(f64::from(y)),
                u32::from(bf16::from_f32(y).to_bits()),
                "{y:e}"
            );
        }
        // -4.289679486776054e17 = 190.50003737923998 * 2^51: rounds up to mantissa 191 (0x3f
        // stored), exponent 58 (checked with exact rational arithmetic).
        assert_eq!(BF16.encode(-4.289679486776054e17), 0xdcbf);
        // 13828.000482091971 = 1728.5000602614964 * 2^3: rounds up to 1729 (0x2c1 stored).
        assert_eq!(F16.encode(13828.000482091971), 0x72c1);
        // Ties go to even: 1 + 2^-11 lies halfway between 1 and the next float16.
        assert_eq!(F16.encode(1.0 + 2f64.powi(-11)), 0x3c00);
        assert_eq!(F16.encode(65520.0), 0x7c00, "rounds to infinity");
    }

    #[test]
    fn fp8_formats_match_their_definitions() {
        // E4M3 (fn): no infinities, 0x7f is NaN, 448 is the largest value; saturating.
        assert_eq!(E4M3.encode(1.0), 0x38);
        assert_eq!(E4M3.encode(448.0), 0x7e);
        assert_eq!(E4M3.encode(1e6), 0x7e);
        assert_eq!(E4M3.encode(-1e6), 0xfe);
        assert_eq!(E4M3.encode(f64::NAN), 0x7f);
        assert_eq!(E4M3.encode(2f64.powi(-9)), 0x01);
        assert_eq!(E4M3.decode(0x7e), 448.0);
        assert!(E4M3.decode(0x7f).is_nan());
        // E5M2: IEEE-like, 57344 is the largest finite value.
        assert_eq!(E5M2.encode(1.0), 0x3c);
        assert_eq!(E5M2.encode(57344.0), 0x7b);
        assert_eq!(E5M2.encode(f64::INFINITY), 0x7b);
        assert_eq!(E5M2.encode(2f64.powi(-16)), 0x01);
        assert_eq!(E5M2.decode(0x7c), f64::INFINITY);
        // Every finite code round-trips.
        for f in [E4M3, E5M2] {
            for b in 0..=255u32 {
                let x = f.decode(b);
                if x.is_finite() {
                    assert_eq!(f.encode(x), b, "{b:#x}");
                }
            }
        }
    }

    fn buffers<T: Copy>(vals: &[Vec<T>], to: impl Fn(T) -> Vec<u8>) -> Vec<Vec<u8>> {
        vals.iter()
            .map(|v| v.iter().flat_map(|&x| to(x)).collect())
            .collect()
    }

    fn run(dt: DataType, op: RedOp, bufs: &[Vec<u8>]) -> Vec<u8> {
        let inputs: Vec<&[u8]> = bufs.iter().map(|b| b.as_slice()).collect();
        let count = bufs[0].len() / dt.size();
        let mut out = vec![0u8; bufs[0].len()];
        reduce(dt, &op, &inputs, &mut out, count);
        out
    }

    #[test]
    fn float32_matches_native_arithmetic_in_rank_order() {
        let mut rng = Rng(11);
        for n in [2usize, 3, 4, 8] {
            let vals: Vec<Vec<f32>> = (0..n)
                .map(|_| (0..257).map(|_| rng.f64(1e4) as f32).collect())
                .collect();
            let bufs = buffers(&vals, |x: f32| x.to_le_bytes().to_vec());
            let inv = (1.0 / n as f64) as f32;
            type Step = fn(f32, f32) -> f32;
            let cases: [(RedOp, Step); 4] = [
                (RedOp::Sum, |a, b| a + b),
                (RedOp::Prod, |a, b| a * b),
                (RedOp::Max, f32::max),
                (RedOp::Min, f32::min),
            ];
            for (op, f) in cases {
                let got = run(DataType::F32, op.clone(), &bufs);
                for i in 0..257 {
                    let want = (1..n).fold(vals[0][i], |a, r| f(a, vals[r][i]));
                    let g = f32::from_le_bytes(got[i * 4..i * 4 + 4].try_into().unwrap());
                    assert_eq!(g.to_bits(), want.to_bits(), "{op:?} n={n} i={i}");
                }
            }
            let got = run(DataType::F32, RedOp::Avg, &bufs);
            for i in 0..257 {
                let want = (1..n).fold(vals[0][i] * inv, |a, r| a + vals[r][i] * inv);
                let g = f32::from_le_bytes(got[i * 4..i * 4 + 4].try_into().unwrap());
                assert_eq!(g.to_bits(), want.to_bits(), "avg n={n} i={i}");
            }
        }
    }

    #[test]
    fn half_types_round_every_step_in_the_type() {
        let mut rng = Rng(5);
        let n = 4;
        let hv: Vec<Vec<f16>> = (0..n)
            .map(|_| (0..300).map(|_| f16::from_f64(rng.f64(50.0))).collect())
            .collect();
        let bv: Vec<Vec<bf16>> = (0..n)
            .map(|_| (0..300).map(|_| bf16::from_f64(rng.f64(1e3))).collect())
            .collect();
        let hb = buffers(&hv, |x: f16| x.to_le_bytes().to_vec());
        let bb = buffers(&bv, |x: bf16| x.to_le_bytes().to_vec());
        let h_sum = run(DataType::F16, RedOp::Sum, &hb);
        let h_prod = run(DataType::F16, RedOp::Prod, &hb);
        let b_sum = run(DataType::Bf16, RedOp::Sum, &bb);
        let b_avg = run(DataType::Bf16, RedOp::Avg, &bb);
        let quarter = bf16::from_f32(0.25);
        for i in 0..300 {
            let get = |b: &[u8]| u16::from_le_bytes(b[i * 2..i * 2 + 2].try_into().unwrap());
            // half's arithmetic rounds each operation to the type.
            let hs = (1..n).fold(hv[0][i], |a, r| a + hv[r][i]);
            let hp = (1..n).fold(hv[0][i], |a, r| a * hv[r][i]);
            let bs = (1..n).fold(bv[0][i], |a, r| a + bv[r][i]);
            let ba = (1..n).fold(bv[0][i] * quarter, |a, r| a + bv[r][i] * quarter);
            assert_eq!(get(&h_sum), hs.to_bits(), "f16 sum {i}");
            assert_eq!(get(&h_prod), hp.to_bits(), "f16 prod {i}");
            assert_eq!(get(&b_sum), bs.to_bits(), "bf16 sum {i}");
            assert_eq!(get(&b_avg), ba.to_bits(), "bf16 avg {i}");
        }
    }

    #[test]
    fn integers_wrap_and_average_by_truncating_division() {
        let vals = vec![vec![i32::MAX, -7, 5], vec![1, 2, 6], vec![0, 0, 7]];
        let bufs = buffers(&vals, |x: i32| x.to_le_bytes().to_vec());
        let get = |b: Vec<u8>| -> Vec<i32> {
            b.chunks(4)
                .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
                .collect()
        };
        assert_eq!(
            get(run(DataType::I32, RedOp::Sum, &bufs)),
            vec![i32::MIN, -5, 18]
        );
        assert_eq!(
            get(run(DataType::I32, RedOp::Max, &bufs)),
            vec![i32::MAX, 2, 7]
        );
        assert_eq!(get(run(DataType::I32, RedOp::Min, &bufs)), vec![0, -7, 5]);
        assert_eq!(get(run(DataType::I32, RedOp::Prod, &bufs)), vec![0, 0, 210]);
        assert_eq!(
            get(run(DataType::I32, RedOp::Avg, &bufs)),
            vec![-715827882, -1, 6]
        );
        let u: Vec<Vec<u8>> = vec![vec![250, 3], vec![10, 4]];
        assert_eq!(run(DataType::U8, RedOp::Sum, &u), vec![4, 7]);
        assert_eq!(
            run(DataType::U8, RedOp::PreMulSum(vec![3]), &u),
            vec![(750u32 + 30) as u8, 21]
        );
        let big = vec![u64::MAX.to_le_bytes().to_vec(), 2u64.to_le_bytes().to_vec()];
        assert_eq!(
            run(DataType::U64, RedOp::Sum, &big),
            1u64.to_le_bytes().to_vec()
        );
    }

    #[test]
    fn premulsum_and_fp8_and_f64() {
        let vals = vec![vec![1.5f64, -2.0], vec![0.25, 8.0]];
        let bufs = buffers(&vals, |x: f64| x.to_le_bytes().to_vec());
        let got = run(
            DataType::F64,
            RedOp::PreMulSum(3.0f64.to_le_bytes().to_vec()),
            &bufs,
        );
        let g: Vec<f64> = got
            .chunks(8)
            .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(g, vec![5.25, 18.0]);
        // fp8 E4M3: 240 + 240 = 480 saturates to 448; 1 + 0.0625 = 1.0625 rounds to even (1.0).
        let a = vec![E4M3.encode(240.0) as u8, E4M3.encode(1.0) as u8];
        let b = vec![E4M3.encode(240.0) as u8, E4M3.encode(0.0625) as u8];
        let got = run(DataType::F8E4M3, RedOp::Sum, &[a, b]);
        assert_eq!(E4M3.decode(u32::from(got[0])), 448.0);
        assert_eq!(E4M3.decode(u32::from(got[1])), 1.0);
    }
}
