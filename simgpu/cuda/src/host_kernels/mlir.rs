//! TensorFlow's MLIR-generated element-wise kernels (`AddV2_GPU_DT_INT64_DT_INT64_kernel`,
//! `Cast_GPU_DT_INT32_DT_INT64_kernel`, ...: `<Op>_GPU_<input type>_<output type>_kernel`).
//!
//! Their parameters, as the entry's parameter list lays them out: the element count (`i32`),
//! then one memref descriptor per operand and one for the result, each `{allocated pointer,
//! aligned pointer, offset, sizes[rank], strides[rank]}` with 32-bit indices. An operand of rank
//! 0 is a scalar broadcast over the result; one of the result's rank is read through its own
//! strides (0 where it is broadcast). Element `i` of the result is `op(operands at i)`.

use super::{Launch, Mem, Skip, load_checked};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ty {
    F32,
    F64,
    I8,
    I16,
    I32,
    I64,
    U8,
    U16,
    U32,
    U64,
    Bool,
}

impl Ty {
    fn parse(s: &str) -> Option<Ty> {
        Some(match s {
            "FLOAT" => Ty::F32,
            "DOUBLE" => Ty::F64,
            "INT8" => Ty::I8,
            "INT16" => Ty::I16,
            "INT32" => Ty::I32,
            "INT64" => Ty::I64,
            "UINT8" => Ty::U8,
            "UINT16" => Ty::U16,
            "UINT32" => Ty::U32,
            "UINT64" => Ty::U64,
            "BOOL" => Ty::Bool,
            _ => return None,
        })
    }
    fn size(self) -> usize {
        match self {
            Ty::I8 | Ty::U8 | Ty::Bool => 1,
            Ty::I16 | Ty::U16 => 2,
            Ty::F32 | Ty::I32 | Ty::U32 => 4,
            Ty::F64 | Ty::I64 | Ty::U64 => 8,
        }
    }
    fn is_float(self) -> bool {
        matches!(self, Ty::F32 | Ty::F64)
    }
    fn load(self, b: &[u8]) -> Val {
        let mut w = [0u8; 8];
        w[..b.len()].copy_from_slice(b);
        let u = u64::from_le_bytes(w);
        match self {
            Ty::F32 => Val::F(f32::from_bits(u as u32) as f64),
            Ty::F64 => Val::F(f64::from_bits(u)),
            Ty::I8 => Val::I(u as u8 as i8 as i128),
            Ty::I16 => Val::I(u as u16 as i16 as i128),
            Ty::I32 => Val::I(u as u32 as i32 as i128),
            Ty::I64 => Val::I(u as i64 as i128),
            Ty::U8 | Ty::U16 | Ty::U32 | Ty::U64 => Val::I(u as i128),
            Ty::Bool => Val::B(u != 0),
        }
    }
    /// The value in this type, converted as a C++ `static_cast` (and MLIR's `arith` casts)
    /// convert in range; integers wrap to the type's width.
    fn store(self, v: Val, out: &mut [u8]) {
        let bits: u64 = match (self, v) {
            (Ty::F32, Val::F(x)) => (x as f32).to_bits() as u64,
            (Ty::F32, Val::I(i)) => (i as f32).to_bits() as u64,
            (Ty::F64, Val::F(x)) => x.to_bits(),
            (Ty::F64, Val::I(i)) => (i as f64).to_bits(),
            (Ty::F32 | Ty::F64, Val::B(b)) => {
                return self.store(Val::F(b as u8 as f64), out);
            }
            (Ty::Bool, v) => match v {
                Val::B(b) => b as u64,
                Val::I(i) => (i != 0) as u64,
                Val::F(x) => (x != 0.0) as u64,
            },
            (_, Val::I(i)) => i as u64,
            (_, Val::B(b)) => b as u64,
            (t, Val::F(x)) => match t {
                Ty::U8 | Ty::U16 | Ty::U32 | Ty::U64 => x as u64,
                _ => x as i64 as u64,
            },
        };
        out.copy_from_slice(&bits.to_le_bytes()[..self.size()]);
    }
}

/// A value as the kernels compute with it: floats as f64 (exact for f32; +, -, *, / rounded
/// once more to f32 give f32's own correctly rounded result), integers unbounded until stored.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Val {
    F(f64),
    I(i128),
    B(bool),
}

impl Val {
    fn f(self) -> f64 {
        match self {
            Val::F(x) => x,
            Val::I(i) => i as f64,
            Val::B(b) => b as u8 as f64,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Cast,
    Neg,
    Abs,
    Square,
    AddV2,
    Sub,
    Mul,
    RealDiv,
    Div,
    DivNoNan,
    Maximum,
    Minimum,
    FloorMod,
    FloorDiv,
    Equal,
    NotEqual,
    Less,
    LessEqual,
    Greater,
    GreaterEqual,
}

impl Op {
    fn parse(s: &str) -> Option<Op> {
        Some(match s {
            "Cast" => Op::Cast,
            "Neg" => Op::Neg,
            "Abs" => Op::Abs,
            "Square" => Op::Square,
            "AddV2" => Op::AddV2,
            "Sub" => Op::Sub,
            "Mul" => Op::Mul,
            "RealDiv" => Op::RealDiv,
            "Div" => Op::Div,
            "DivNoNan" => Op::DivNoNan,
            "Maximum" => Op::Maximum,
            "Minimum" => Op::Minimum,
            "FloorMod" => Op::FloorMod,
            "FloorDiv" => Op::FloorDiv,
            "Equal" => Op::Equal,
            "NotEqual" => Op::NotEqual,
            "Less" => Op::Less,
            "LessEqual" => Op::LessEqual,
            "Greater" => Op::Greater,
            "GreaterEqual" => Op::GreaterEqual,
            _ => return None,
        })
    }
    fn arity(self) -> usize {
        match self {
            Op::Cast | Op::Neg | Op::Abs | Op::Square => 1,
            _ => 2,
        }
    }
    /// Whether the op is defined here for operands of type `t`.
    fn supports(self, t: Ty) -> bool {
        match self {
            Op::RealDiv | Op::DivNoNan => t.is_float(),
            Op::FloorMod => !t.is_float() && t != Ty::Bool,
            Op::FloorDiv => t != Ty::Bool,
            Op::Div => t != Ty::Bool,
            Op::Cast | Op::Equal | Op::NotEqual => true,
            _ => t != Ty::Bool,
        }
    }
    /// Whether the kernel takes its operands in reverse: the generated kernels take their
    /// operands' descriptors in the order their body first reads them, and DivNoNan's reads its
    /// divisor first (`y == 0 ? 0 : x / y`). Checked against TensorFlow's CPU for every op here
    /// by examples/tf/op_check.py.
    fn reversed(self) -> bool {
        self == Op::DivNoNan
    }

    fn unary(self, a: Val) -> Val {
        match (self, a) {
            (Op::Cast, v) => v,
            (Op::Neg, Val::F(x)) => Val::F(-x),
            (Op::Neg, Val::I(i)) => Val::I(-i),
            (Op::Abs, Val::F(x)) => Val::F(x.abs()),
            (Op::Abs, Val::I(i)) => Val::I(i.abs()),
            (Op::Square, Val::F(x)) => Val::F(x * x),
            (Op::Square, Val::I(i)) => Val::I(i.wrapping_mul(i)),
            (_, v) => v,
        }
    }
    /// `None` for an integer division by zero (an error on TensorFlow's CPU; what the GPU
    /// kernel writes then is not known here).
    fn binary(self, a: Val, b: Val, t: Ty) -> Option<Val> {
        if t.is_float() {
            let (x, y) = (a.f(), b.f());
            // f32 operands: the f64 result of +, -, *, / rounds to the f32 one (stored as f32).
            return Some(match self {
                Op::AddV2 => Val::F(x + y),
                Op::Sub => Val::F(x - y),
                Op::Mul => Val::F(x * y),
                Op::RealDiv | Op::Div => Val::F(x / y),
                Op::DivNoNan => Val::F(if y == 0.0 { 0.0 } else { x / y }),
                // floor of the quotient rounded to the operands' type.
                Op::FloorDiv if t == Ty::F32 => Val::F(((x / y) as f32).floor() as f64),
                Op::FloorDiv => Val::F((x / y).floor()),
                Op::Maximum => Val::F(if x.is_nan() || y.is_nan() {
                    f64::NAN
                } else {
                    x.max(y)
                }),
                Op::Minimum => Val::F(if x.is_nan() || y.is_nan() {
                    f64::NAN
                } else {
                    x.min(y)
                }),
                Op::Equal => Val::B(x == y),
                Op::NotEqual => Val::B(x != y),
                Op::Less => Val::B(x < y),
                Op::LessEqual => Val::B(x <= y),
                Op::Greater => Val::B(x > y),
                Op::GreaterEqual => Val::B(x >= y),
                _ => Val::F(f64::NAN),
            });
        }
        let (x, y) = match (a, b) {
            (Val::I(x), Val::I(y)) => (x, y),
            (Val::B(x), Val::B(y)) => (x as i128, y as i128),
            _ => (0, 0),
        };
        if y == 0 && matches!(self, Op::FloorMod | Op::FloorDiv | Op::Div) {
            return None;
        }
        Some(match self {
            Op::AddV2 => Val::I(x + y),
            Op::Sub => Val::I(x - y),
            Op::Mul => Val::I(x.wrapping_mul(y)),
            Op::Maximum => Val::I(x.max(y)),
            Op::Minimum => Val::I(x.min(y)),
            // Python's floor semantics.
            Op::FloorMod => {
                let r = x % y;
                Val::I(if r != 0 && ((r < 0) != (y < 0)) {
                    r + y
                } else {
                    r
                })
            }
            Op::FloorDiv => {
                let q = x / y;
                Val::I(if (x % y != 0) && ((x < 0) != (y < 0)) {
                    q - 1
                } else {
                    q
                })
            }
            Op::Equal => Val::B(x == y),
            Op::NotEqual => Val::B(x != y),
            Op::Less => Val::B(x < y),
            Op::LessEqual => Val::B(x <= y),
            Op::Greater => Val::B(x > y),
            Op::GreaterEqual => Val::B(x >= y),
            Op::Div => Val::I(x / y),
            _ => Val::I(0),
        })
    }
}

/// `<Op>_GPU_DT_<A>_DT_<B>_kernel` -> (op, input type, output type), for the ops and types
/// computed here.
pub fn parse_name(name: &str) -> Option<(Op, Ty, Ty)> {
    let rest = name.strip_suffix("_kernel")?;
    let (op, types) = rest.split_once("_GPU_DT_")?;
    let (a, b) = types.split_once("_DT_")?;
    let (op, a, b) = (Op::parse(op)?, Ty::parse(a)?, Ty::parse(b)?);
    op.supports(a).then_some((op, a, b))
}

/// One memref descriptor: aligned pointer, offset, sizes and strides (elements).
#[derive(Debug, Clone, PartialEq)]
pub struct Memref {
    pub aligned: u64,
    pub offset: i64,
    pub sizes: Vec<i64>,
    pub strides: Vec<i64>,
}

impl Memref {
    /// First and one-past-last element it reaches (None when it reaches none or strides back).
    fn span(&self) -> Option<(i64, i64)> {
        if self.sizes.contains(&0) {
            return None;
        }
        let mut last = self.offset;
        for (s, st) in self.sizes.iter().zip(&self.strides) {
            if *st < 0 || *s < 0 {
                return None;
            }
            last += (s - 1) * st;
        }
        Some((self.offset, last + 1))
    }
    fn at(&self, idx: &[i64]) -> i64 {
        self.offset
            + idx
                .iter()
                .zip(&self.strides)
                .map(|(i, s)| i * s)
                .sum::<i64>()
    }
}

/// The element count and the memref descriptors of a launch. The count is one `i32`: first
/// (`{n, A, B, C}`), or, in the variants of rank 2 and above, right after the first operand's
/// descriptor, in its alignment hole before the next pointer (`{A, n, B, C}`). A descriptor
/// has an odd number of indices (offset, sizes and strides), so the run of indices that holds
/// the count is the one of even length.
pub fn descriptors(l: &Launch) -> Result<(i64, Vec<Memref>), Skip> {
    let p = &l.params.params;
    let bad = || Skip::Layout(format!("not an element count and memrefs: {p:?}"));
    let mut n = None;
    let mut i = 0;
    if p.first().map(|x| x.1) == Some(4) {
        n = Some(l.i32_at(0)? as i64);
        i = 1;
    }
    let mut out = Vec::new();
    while i < p.len() {
        if p[i].1 != 8 || p.get(i + 1).map(|x| x.1) != Some(8) {
            return Err(bad());
        }
        let aligned = l.u64_at(i + 1)?;
        let mut j = i + 2;
        let mut ints = Vec::new();
        while j < p.len() && p[j].1 == 4 {
            ints.push(l.i32_at(j)? as i64);
            j += 1;
        }
        if ints.len() % 2 == 0 {
            if n.is_some() || ints.is_empty() {
                return Err(bad());
            }
            n = ints.pop();
        }
        let rank = ints.len() / 2;
        out.push(Memref {
            aligned,
            offset: ints[0],
            sizes: ints[1..1 + rank].to_vec(),
            strides: ints[1 + rank..].to_vec(),
        });
        i = j;
    }
    Ok((n.ok_or_else(bad)?, out))
}

/// Computes an element-wise MLIR kernel.
pub fn elementwise(l: &Launch, mem: &mut dyn Mem) -> Result<(), Skip> {
    let (op, tin, tout) = parse_name(l.name).ok_or_else(|| Skip::Layout("name".into()))?;
    let (n, refs) = descriptors(l)?;
    if refs.len() != op.arity() + 1 {
        return Err(Skip::Layout(format!(
            "{} memrefs for an op of {} operands",
            refs.len(),
            op.arity()
        )));
    }
    let (ins, out) = refs.split_at(op.arity());
    let out = &out[0];
    let count: i64 = out.sizes.iter().product();
    if count != n {
        return Err(Skip::Layout(format!(
            "element count {n} is not the result's {:?}",
            out.sizes
        )));
    }
    if n == 0 {
        return Ok(());
    }
    for m in ins {
        if !m.sizes.is_empty() && m.sizes.len() != out.sizes.len() {
            return Err(Skip::Layout(format!(
                "operand of rank {} for a result of rank {}",
                m.sizes.len(),
                out.sizes.len()
            )));
        }
    }
    // Load every operand's span, and the result's (written back whole).
    let mut load = |m: &Memref, es: usize| -> Result<(i64, Vec<u8>), Skip> {
        let (a, b) = m
            .span()
            .ok_or_else(|| Skip::Layout(format!("memref {m:?}")))?;
        let addr = m.aligned + (a as u64) * es as u64;
        Ok((a, load_checked(mem, addr, (b - a) as usize * es)?))
    };
    let mut datas = Vec::new();
    for m in ins {
        datas.push(load(m, tin.size())?);
    }
    let (obase, mut obytes) = load(out, tout.size())?;
    let rank = out.sizes.len();
    let mut idx = vec![0i64; rank];
    for _ in 0..n {
        let vals: Vec<Val> = ins
            .iter()
            .zip(&datas)
            .map(|(m, (base, bytes))| {
                let e = if m.sizes.is_empty() {
                    m.offset
                } else {
                    m.at(&idx)
                };
                let at = (e - base) as usize * tin.size();
                tin.load(&bytes[at..at + tin.size()])
            })
            .collect();
        let v = match op.arity() {
            1 => Some(op.unary(vals[0])),
            _ if op.reversed() => op.binary(vals[1], vals[0], tin),
            _ => op.binary(vals[0], vals[1], tin),
        }
        .ok_or_else(|| Skip::Layout("integer division by zero".into()))?;
        let at = (out.at(&idx) - obase) as usize * tout.size();
        tout.store(v, &mut obytes[at..at + tout.size()]);
        // Row-major order over the result's index space.
        for d in (0..rank).rev() {
            idx[d] += 1;
            if idx[d] < out.sizes[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    mem.store(out.aligned + obase as u64 * tout.size() as u64, &obytes);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::testmem::TestMem;
    use super::*;
    use crate::fatbin::KernelParams;

    /// A parameter block laid out as the generated kernels take it: count, then memrefs.
    fn block(n: i32, refs: &[(u64, i32, &[i32], &[i32])]) -> (KernelParams, Vec<u8>) {
        let mut params = vec![(0usize, 4usize)];
        let mut b = n.to_le_bytes().to_vec();
        for &(ptr, off, sizes, strides) in refs {
            for _ in 0..2 {
                while !b.len().is_multiple_of(8) {
                    b.push(0);
                }
                params.push((b.len(), 8));
                b.extend(ptr.to_le_bytes());
            }
            for v in std::iter::once(&off).chain(sizes).chain(strides) {
                params.push((b.len(), 4));
                b.extend(v.to_le_bytes());
            }
        }
        (
            KernelParams {
                params,
                cbank_size: None,
            },
            b,
        )
    }

    fn run(
        name: &str,
        n: i32,
        refs: &[(u64, i32, &[i32], &[i32])],
        mem: &mut TestMem,
    ) -> Result<(), Skip> {
        let (p, b) = block(n, refs);
        super::super::run(name, &p, &b, [1, 1, 1], mem).expect("a host kernel")
    }

    #[test]
    fn names_parse_for_known_ops_and_types_only() {
        assert_eq!(
            parse_name("Cast_GPU_DT_INT64_DT_FLOAT_kernel"),
            Some((Op::Cast, Ty::I64, Ty::F32))
        );
        assert_eq!(parse_name("Tanh_GPU_DT_FLOAT_DT_FLOAT_kernel"), None);
        assert_eq!(parse_name("AddV2_GPU_DT_HALF_DT_HALF_kernel"), None);
        assert_eq!(parse_name("RealDiv_GPU_DT_INT32_DT_INT32_kernel"), None);
        assert_eq!(parse_name("main_kernel"), None);
    }

    #[test]
    fn int64_add_with_a_broadcast_scalar() {
        // out[i] = a[i] + b (b rank 0), the step counter's update.
        let mut m = TestMem::default();
        let a: Vec<i64> = vec![1, -5, i64::MAX];
        m.add(0x1000, a.iter().flat_map(|v| v.to_le_bytes()).collect());
        m.add(0x2000, 7i64.to_le_bytes().to_vec());
        m.add(0x3000, vec![0; 24]);
        run(
            "AddV2_GPU_DT_INT64_DT_INT64_kernel",
            3,
            &[
                (0x1000, 0, &[3], &[1]),
                (0x2000, 0, &[], &[]),
                (0x3000, 0, &[3], &[1]),
            ],
            &mut m,
        )
        .unwrap();
        let got: Vec<i64> = m.bufs[&0x3000]
            .chunks(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(got, vec![8, 2, i64::MAX.wrapping_add(7)]);
    }

    #[test]
    fn casts_as_cpp_static_cast_does() {
        let mut m = TestMem::default();
        let a: Vec<f32> = vec![1.9, -2.5, 3e9, 0.0];
        m.add(0x1000, a.iter().flat_map(|v| v.to_le_bytes()).collect());
        m.add(0x2000, vec![0xff; 32]);
        run(
            "Cast_GPU_DT_FLOAT_DT_INT64_kernel",
            4,
            &[(0x1000, 0, &[4], &[1]), (0x2000, 0, &[4], &[1])],
            &mut m,
        )
        .unwrap();
        let got: Vec<i64> = m.bufs[&0x2000]
            .chunks(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(got, vec![1, -2, 3_000_000_000, 0]);
        // int64 -> int32 wraps; int32 -> float rounds to nearest.
        m.add(0x4000, (1i64 << 32 | 5).to_le_bytes().to_vec());
        m.add(0x5000, vec![0; 4]);
        run(
            "Cast_GPU_DT_INT64_DT_INT32_kernel",
            1,
            &[(0x4000, 0, &[1], &[1]), (0x5000, 0, &[1], &[1])],
            &mut m,
        )
        .unwrap();
        assert_eq!(m.bufs[&0x5000], 5i32.to_le_bytes());
        m.add(0x6000, 16_777_217i32.to_le_bytes().to_vec());
        m.add(0x7000, vec![0; 4]);
        run(
            "Cast_GPU_DT_INT32_DT_FLOAT_kernel",
            1,
            &[(0x6000, 0, &[1], &[1]), (0x7000, 0, &[1], &[1])],
            &mut m,
        )
        .unwrap();
        assert_eq!(m.bufs[&0x7000], 16_777_216f32.to_le_bytes());
    }

    #[test]
    fn float_ops_round_as_f32_arithmetic_does() {
        // Against f32 arithmetic done by the CPU, with a strided, offset operand and a scalar.
        let mut m = TestMem::default();
        let a: Vec<f32> = vec![0.1, 1e-8, 3.0, -7.25, 1.0 / 3.0, 0.0];
        let b = 0.3f32;
        m.add(0x1000, a.iter().flat_map(|v| v.to_le_bytes()).collect());
        m.add(0x2000, b.to_le_bytes().to_vec());
        for (name, f) in [
            (
                "Mul_GPU_DT_FLOAT_DT_FLOAT_kernel",
                (|x: f32, y: f32| x * y) as fn(f32, f32) -> f32,
            ),
            ("AddV2_GPU_DT_FLOAT_DT_FLOAT_kernel", |x, y| x + y),
            ("Sub_GPU_DT_FLOAT_DT_FLOAT_kernel", |x, y| x - y),
            ("RealDiv_GPU_DT_FLOAT_DT_FLOAT_kernel", |x, y| x / y),
        ] {
            m.add(0x3000, vec![0; 12]);
            // Elements 1, 3, 5 of a (offset 1, stride 2).
            run(
                name,
                3,
                &[
                    (0x1000, 1, &[3], &[2]),
                    (0x2000, 0, &[], &[]),
                    (0x3000, 0, &[3], &[1]),
                ],
                &mut m,
            )
            .unwrap();
            let want: Vec<u8> = [a[1], a[3], a[5]]
                .iter()
                .flat_map(|&x| f(x, b).to_le_bytes())
                .collect();
            assert_eq!(m.bufs[&0x3000], want, "{name}");
        }
        // DivNoNan: 0 where the divisor is 0; the divisor's descriptor comes first.
        m.add(
            0x4000,
            [6f32, 1.0].iter().flat_map(|v| v.to_le_bytes()).collect(),
        );
        m.add(
            0x5000,
            [0f32, 4.0].iter().flat_map(|v| v.to_le_bytes()).collect(),
        );
        m.add(0x6000, vec![0xff; 8]);
        run(
            "DivNoNan_GPU_DT_FLOAT_DT_FLOAT_kernel",
            2,
            &[
                (0x5000, 0, &[2], &[1]),
                (0x4000, 0, &[2], &[1]),
                (0x6000, 0, &[2], &[1]),
            ],
            &mut m,
        )
        .unwrap();
        assert_eq!(
            m.bufs[&0x6000],
            [0f32, 0.25]
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect::<Vec<_>>()
        );
    }

    #[test]
    fn rank_two_with_the_count_after_the_first_operand_and_a_broadcast_column() {
        // {A, n, B, C} as the rank-2 variants take them: A 2x3 (strides 3, 1), B a column of 2
        // broadcast along dimension 1 (strides 1, 0), C = A * B in place of A.
        let mut m = TestMem::default();
        let a = [1f32, 2.0, 3.0, 4.0, 5.0, 6.0];
        m.add(0x1000, a.iter().flat_map(|v| v.to_le_bytes()).collect());
        m.add(
            0x2000,
            [10f32, -1.0].iter().flat_map(|v| v.to_le_bytes()).collect(),
        );
        let mut b = Vec::new();
        let mut params = Vec::new();
        let mut put = |b: &mut Vec<u8>, bytes: &[u8]| {
            while !b.len().is_multiple_of(bytes.len()) {
                b.push(0);
            }
            params.push((b.len(), bytes.len()));
            b.extend_from_slice(bytes);
        };
        let memref =
            |b: &mut Vec<u8>, put: &mut dyn FnMut(&mut Vec<u8>, &[u8]), p: u64, ints: &[i32]| {
                put(b, &p.to_le_bytes());
                put(b, &p.to_le_bytes());
                for v in ints {
                    put(b, &v.to_le_bytes());
                }
            };
        memref(&mut b, &mut put, 0x1000, &[0, 2, 3, 3, 1]);
        put(&mut b, &6i32.to_le_bytes());
        memref(&mut b, &mut put, 0x2000, &[0, 2, 3, 1, 0]);
        memref(&mut b, &mut put, 0x1000, &[0, 2, 3, 3, 1]);
        assert_eq!(
            params[7],
            (36, 4),
            "the count sits in the first descriptor's hole"
        );
        let kp = KernelParams {
            params,
            cbank_size: None,
        };
        super::super::run(
            "Mul_GPU_DT_FLOAT_DT_FLOAT_kernel",
            &kp,
            &b,
            [1, 1, 1],
            &mut m,
        )
        .unwrap()
        .unwrap();
        let want: Vec<u8> = [10f32, 20.0, 30.0, -4.0, -5.0, -6.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        assert_eq!(m.bufs[&0x1000], want);
    }

    #[test]
    fn floor_mod_follows_the_divisor_sign() {
        let mut m = TestMem::default();
        let a: Vec<i64> = vec![7, -7, 7, -7];
        let b: Vec<i64> = vec![3, 3, -3, -3];
        m.add(0x1000, a.iter().flat_map(|v| v.to_le_bytes()).collect());
        m.add(0x2000, b.iter().flat_map(|v| v.to_le_bytes()).collect());
        m.add(0x3000, vec![0; 32]);
        run(
            "FloorMod_GPU_DT_INT64_DT_INT64_kernel",
            4,
            &[
                (0x1000, 0, &[4], &[1]),
                (0x2000, 0, &[4], &[1]),
                (0x3000, 0, &[4], &[1]),
            ],
            &mut m,
        )
        .unwrap();
        let got: Vec<i64> = m.bufs[&0x3000]
            .chunks(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        // Python's %: the same rule TensorFlow's FloorMod documents.
        assert_eq!(got, vec![1, 2, -2, -1]);
    }

    #[test]
    fn nothing_is_written_where_a_buffer_holds_no_bytes_or_the_layout_is_unknown() {
        let mut m = TestMem::default();
        m.add(0x3000, vec![9; 8]);
        // The operand at 0x1000 holds no bytes.
        let r = run(
            "AddV2_GPU_DT_INT64_DT_INT64_kernel",
            1,
            &[
                (0x1000, 0, &[1], &[1]),
                (0x1000, 0, &[1], &[1]),
                (0x3000, 0, &[1], &[1]),
            ],
            &mut m,
        );
        assert_eq!(r, Err(Skip::NoBytes));
        assert_eq!(m.bufs[&0x3000], vec![9; 8]);
        // An element count that is not the result's.
        m.add(0x1000, vec![1; 8]);
        let r = run(
            "AddV2_GPU_DT_INT64_DT_INT64_kernel",
            2,
            &[
                (0x1000, 0, &[1], &[1]),
                (0x1000, 0, &[1], &[1]),
                (0x3000, 0, &[1], &[1]),
            ],
            &mut m,
        );
        assert!(matches!(r, Err(Skip::Layout(_))), "{r:?}");
        assert_eq!(m.bufs[&0x3000], vec![9; 8]);
    }
}
