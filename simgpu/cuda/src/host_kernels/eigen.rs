//! Eigen's element-wise and reduction kernels as TensorFlow instantiates them
//! (`EigenMetaKernel<TensorEvaluator<TensorAssignOp<...>, GpuDevice>, Index>(evaluator, size)`):
//! the evaluator is passed by value, its members laid out as Eigen's `TensorEvaluator`
//! specialisations declare them; the kernel evaluates element `i < size` of the assignment.
//!
//! Each expression here is one TensorFlow uses (fills, softmax cross-entropy, ReLU's gradient,
//! the SGD update), identified by its full template. Its host function reads the members at
//! their offsets in the evaluator and checks the ones that must agree (dimensions of operands
//! and result, reduced axes): an evaluator that does not is left uncomputed.
//!
//! `exp` and `log` are the host's (correctly rounded in practice); CUDA's `expf` and `logf` are
//! within 2 ulp of it, so results can differ from the GPU's in their last bits. Sums are taken
//! in f64 and rounded once.

use super::{HostFn, Launch, Mem, Skip, f32_bytes, f32s, load_checked};

/// The template of an `EigenMetaKernel`, shortened: namespaces `Eigen::` and
/// `Eigen::internal::` and the `, 16, Eigen::MakePointer` of each `TensorMap` removed, and the
/// assignment's `TensorEvaluator<TensorAssignOp<` prefix and `> const, GpuDevice>, Index>`
/// suffix replaced by ` @Index`.
pub fn short_template(name: &str) -> Option<String> {
    let t = name.strip_prefix("void Eigen::internal::EigenMetaKernel<")?;
    let t = t.split(">(Eigen::TensorEvaluator<").next()?;
    let t = t
        .replace("Eigen::internal::", "")
        .replace("Eigen::", "")
        .replace(", 16, MakePointer>", ">");
    let t = t.strip_prefix("TensorEvaluator<TensorAssignOp<")?;
    for idx in ["int", "long"] {
        if let Some(s) = t.strip_suffix(&format!("> const, GpuDevice>, {idx}")) {
            return Some(format!("{s} @{idx}"));
        }
    }
    None
}

const FILL: &str = "TensorMap<Tensor<float, 1, 1, int>>, TensorCwiseNullaryOp<scalar_const_op<float>, TensorMap<Tensor<float, 1, 1, int>> const> const @int";
const SUM_EXP: &str = "TensorMap<Tensor<float, 1, 1, int>>, TensorReductionOp<SumReducer<float>, IndexList<type2index<(long)1>, > const, TensorCwiseUnaryOp<scalar_exp_op<float>, TensorMap<Tensor<float, 2, 1, int>> const> const, MakePointer> const @int";
const XENT_LOSS: &str = "TensorMap<Tensor<float, 1, 1, int>>, TensorReductionOp<SumReducer<float>, IndexList<type2index<(long)1>, > const, TensorGeneratorOp<tensorflow::generator::SparseXentLossGenerator<float, long>, TensorMap<Tensor<float, 2, 1, int>> const> const, MakePointer> const @int";
const SUB_1D: &str = "TensorMap<Tensor<float, 1, 1, long>>, TensorCwiseBinaryOp<scalar_difference_op<float const, float const>, TensorMap<Tensor<float, 1, 1, long>> const, TensorMap<Tensor<float const, 1, 1, long>> const> const @long";
const RELU_GRAD: &str = "TensorMap<Tensor<float, 1, 1, long>>, TensorCwiseBinaryOp<scalar_product_op<float const, float const>, TensorMap<Tensor<float const, 1, 1, long>> const, TensorConversionOp<float, TensorCwiseBinaryOp<scalar_cmp_op<float const, float const, (ComparisonName)5, false>, TensorMap<Tensor<float const, 1, 1, long>> const, TensorCwiseNullaryOp<scalar_constant_op<float const>, TensorMap<Tensor<float const, 1, 1, long>> const> const> const> const> const @long";
const SUB_ROW_BCAST: &str = "TensorMap<Tensor<float, 2, 1, int>>, TensorCwiseBinaryOp<scalar_difference_op<float const, float const>, TensorMap<Tensor<float const, 2, 1, int>> const, TensorBroadcastingOp<IndexList<type2index<(long)1>, int> const, TensorReshapingOp<IndexList<int, type2index<(long)1> > const, TensorMap<Tensor<float, 1, 1, int>> > const> const> const @int";
const EXP_2D: &str = "TensorMap<Tensor<float, 2, 1, int>>, TensorCwiseUnaryOp<scalar_exp_op<float>, TensorMap<Tensor<float, 2, 1, int>> const> const @int";
const XENT_GRAD: &str = "TensorMap<Tensor<float, 2, 1, int>>, TensorGeneratorOp<tensorflow::generator::SparseXentGradGenerator<float, long>, TensorMap<Tensor<float, 2, 1, int>> const> const @int";

const BROADCAST_4D: &str = "TensorMap<Tensor<float, 4, 1, int>>, TensorBroadcastingOp<array<int, (unsigned long)4> const, TensorMap<Tensor<float const, 4, 1, int>> const> const @int";

const TABLE: &[(&str, HostFn)] = &[
    (BROADCAST_4D, broadcast_4d),
    (FILL, fill),
    (SUM_EXP, sum_exp_rows),
    (XENT_LOSS, xent_loss),
    (SUB_1D, sub_1d),
    (RELU_GRAD, relu_grad),
    (SUB_ROW_BCAST, sub_row_broadcast),
    (EXP_2D, exp_2d),
    (XENT_GRAD, xent_grad),
];

pub fn find(name: &str) -> Option<HostFn> {
    let t = short_template(name)?;
    TABLE.iter().find(|(p, _)| *p == t).map(|&(_, f)| f)
}

/// The evaluator (parameter 0, of `len` bytes) and the size (parameter 1, `int` or `long`).
struct Eval<'a> {
    b: &'a [u8],
    size: i64,
}

impl Eval<'_> {
    fn new<'a>(l: &'a Launch, len: usize, index: usize) -> Result<Eval<'a>, Skip> {
        l.expect_sizes(&[len, index])?;
        let size = match index {
            4 => l.i32_at(1)? as i64,
            _ => l.u64_at(1)? as i64,
        };
        Ok(Eval {
            b: l.param(0, len)?,
            size,
        })
    }
    fn u64(&self, at: usize) -> u64 {
        u64::from_le_bytes(self.b[at..at + 8].try_into().unwrap_or_default())
    }
    fn i64(&self, at: usize) -> i64 {
        self.u64(at) as i64
    }
    fn i32(&self, at: usize) -> i64 {
        i32::from_le_bytes(self.b[at..at + 4].try_into().unwrap_or_default()) as i64
    }
    fn f32(&self, at: usize) -> f32 {
        f32::from_le_bytes(self.b[at..at + 4].try_into().unwrap_or_default())
    }
}

/// Fails unless every pair agrees.
fn agree(pairs: &[(i64, i64)]) -> Result<(), Skip> {
    match pairs.iter().find(|(a, b)| a != b) {
        Some((a, b)) => Err(Skip::Layout(format!(
            "evaluator members disagree: {a} vs {b} ({pairs:?})"
        ))),
        None => Ok(()),
    }
}

fn count(n: i64) -> Result<usize, Skip> {
    usize::try_from(n).map_err(|_| Skip::Layout(format!("negative size {n}")))
}

fn load_f32(mem: &mut dyn Mem, addr: u64, n: usize) -> Result<Vec<f32>, Skip> {
    Ok(f32s(&load_checked(mem, addr, n * 4)?))
}

fn load_i64(mem: &mut dyn Mem, addr: u64, n: usize) -> Result<Vec<i64>, Skip> {
    Ok(load_checked(mem, addr, n * 8)?
        .chunks_exact(8)
        .map(|c| i64::from_le_bytes(c.try_into().unwrap_or_default()))
        .collect())
}

fn store_f32(mem: &mut dyn Mem, addr: u64, v: &[f32]) -> Result<(), Skip> {
    if !mem.holds(addr, v.len() as u64 * 4) {
        return Err(Skip::NoBytes);
    }
    mem.store(addr, &f32_bytes(v));
    Ok(())
}

/// `out = constant` (TensorFlow's `scalar_const_op<float>` holds a device pointer to the
/// value). Evaluator: out {data, int dim, device} at 0; the functor's pointer at 24; its
/// argument {data, int dim, device} at 32.
fn fill(l: &Launch, mem: &mut dyn Mem) -> Result<(), Skip> {
    let e = Eval::new(l, 64, 4)?;
    agree(&[(e.i32(8), e.i32(40)), (e.size, e.i32(8))])?;
    let n = count(e.size)?;
    let v = load_f32(mem, e.u64(24), 1)?[0];
    store_f32(mem, e.u64(0), &vec![v; n])
}

/// `out = exp(x)`, 2-D. out {data, int dims[2], device} at 0; the unary evaluator {device,
/// functor, x {data, dims[2], device}} at 24, x at 40.
fn exp_2d(l: &Launch, mem: &mut dyn Mem) -> Result<(), Skip> {
    let e = Eval::new(l, 64, 4)?;
    agree(&[
        (e.i32(8), e.i32(48)),
        (e.i32(12), e.i32(52)),
        (e.size, e.i32(8) * e.i32(12)),
    ])?;
    let n = count(e.size)?;
    let x = load_f32(mem, e.u64(40), n)?;
    let y: Vec<f32> = x.iter().map(|v| v.exp()).collect();
    store_f32(mem, e.u64(0), &y)
}

/// `out = x - reshape(m, [R, 1]).broadcast([1, C])`, 2-D (logits less their row maximum).
/// out at 0; the binary evaluator {device, functor, x {data, dims[2], device} at 40, the
/// broadcast at 64 {isCopy, nByOne, oneByN, device, broadcast [1, C] (C at 84), dimensions at
/// 88, output strides, input strides, the reshape {m {data at 112, dim at 120, device}, new
/// dimensions [R, 1] at 136}}}.
fn sub_row_broadcast(l: &Launch, mem: &mut dyn Mem) -> Result<(), Skip> {
    let e = Eval::new(l, 144, 4)?;
    let (r, c) = (e.i32(8), e.i32(12));
    agree(&[
        (e.i32(48), r),
        (e.i32(52), c),
        (e.b[64] as i64, 0),
        (e.b[65] as i64, 1),
        (e.i32(84), c),
        (e.i32(88), r),
        (e.i32(92), c),
        (e.i32(120), r),
        (e.i32(136), r),
        (e.size, r * c),
    ])?;
    let (rows, cols) = (count(r)?, count(c)?);
    let x = load_f32(mem, e.u64(40), rows * cols)?;
    let m = load_f32(mem, e.u64(112), rows)?;
    let y: Vec<f32> = x.iter().enumerate().map(|(i, v)| v - m[i / cols]).collect();
    store_f32(mem, e.u64(0), &y)
}

/// The header of a reduction of a 2-D input along axis 1 into a 1-D out at 0: the reduction
/// evaluator at 24 {reduced [false, true], dimensions [R] at 28, output strides, fast output
/// strides, preserved strides, output-to-input map, values to reduce at 56 (C), reduced
/// strides, reduced dims at 64 (C), the input's evaluator at 72 ...}. Returns (R, C).
fn rows_reduction(e: &Eval, in_dims: usize) -> Result<(usize, usize), Skip> {
    let (r, c) = (e.i32(in_dims), e.i32(in_dims + 4));
    agree(&[
        (e.b[24] as i64, 0),
        (e.b[25] as i64, 1),
        (e.i32(8), r),
        (e.i32(28), r),
        (e.i32(56), c),
        (e.i32(64), c),
        (e.size, r),
    ])?;
    Ok((count(r)?, count(c)?))
}

/// `out[r] = sum_c exp(x[r, c])`: the input's evaluator is the unary `exp` one {device at 72,
/// functor, x {data at 88, dims at 96, device}}.
fn sum_exp_rows(l: &Launch, mem: &mut dyn Mem) -> Result<(), Skip> {
    let e = Eval::new(l, 136, 4)?;
    let (rows, cols) = rows_reduction(&e, 96)?;
    let x = load_f32(mem, e.u64(88), rows * cols)?;
    let y: Vec<f32> = x
        .chunks(cols.max(1))
        .take(rows)
        .map(|row| row.iter().map(|v| v.exp() as f64).sum::<f64>() as f32)
        .collect();
    store_f32(mem, e.u64(0), &y)
}

/// One `SparseXent*Generator`'s members: logits (or exp-logits) {data, dims[2]}, sum of exps
/// {data, dim}, labels {data, dim}, max_depth (i64), from `at`.
struct Xent {
    x: u64,
    dims: (i64, i64),
    sums: u64,
    sums_len: i64,
    labels: u64,
    labels_len: i64,
    depth: i64,
}

fn xent_members(e: &Eval, at: usize) -> Xent {
    Xent {
        x: e.u64(at),
        dims: (e.i32(at + 8), e.i32(at + 12)),
        sums: e.u64(at + 16),
        sums_len: e.i32(at + 24),
        labels: e.u64(at + 32),
        labels_len: e.i32(at + 40),
        depth: e.i64(at + 48),
    }
}

/// The label of row `b`, if within `[0, depth)` (the generators' bounds check; outside it
/// they give NaN).
fn label(labels: &[i64], b: usize, depth: i64) -> Option<usize> {
    let l = labels[b];
    (0..depth).contains(&l).then_some(l as usize)
}

/// `loss[b] = sum_d gen(b, d)` with `SparseXentLossGenerator`: `log(sum_exp[b]) - x[b, d]`
/// where `d` is the row's label, 0 elsewhere. The generator evaluator at 72 {device, dims[2] at
/// 80, strides, fast strides, the generator at 120}.
fn xent_loss(l: &Launch, mem: &mut dyn Mem) -> Result<(), Skip> {
    let e = Eval::new(l, 200, 4)?;
    let (rows, cols) = rows_reduction(&e, 80)?;
    let g = xent_members(&e, 120);
    agree(&[
        (g.dims.0, rows as i64),
        (g.dims.1, cols as i64),
        (g.sums_len, rows as i64),
        (g.labels_len, rows as i64),
    ])?;
    let x = load_f32(mem, g.x, rows * cols)?;
    let sums = load_f32(mem, g.sums, rows)?;
    let labels = load_i64(mem, g.labels, rows)?;
    let y: Vec<f32> = (0..rows)
        .map(|b| match label(&labels, b, g.depth) {
            Some(d) if d < cols => sums[b].ln() - x[b * cols + d],
            Some(_) => 0.0,
            None => f32::NAN,
        })
        .collect();
    store_f32(mem, e.u64(0), &y)
}

/// `out[b, d] = exp_x[b, d] / sum_exp[b] - (d == label[b])` (`SparseXentGradGenerator`): out
/// {data, dims[2], device} at 0; the generator evaluator at 24 {device, dims[2] at 32,
/// strides, fast strides, the generator at 72}.
fn xent_grad(l: &Launch, mem: &mut dyn Mem) -> Result<(), Skip> {
    let e = Eval::new(l, 128, 4)?;
    let (r, c) = (e.i32(8), e.i32(12));
    let g = xent_members(&e, 72);
    agree(&[
        (e.i32(32), r),
        (e.i32(36), c),
        (g.dims.0, r),
        (g.dims.1, c),
        (g.sums_len, r),
        (g.labels_len, r),
        (e.size, r * c),
    ])?;
    let (rows, cols) = (count(r)?, count(c)?);
    let x = load_f32(mem, g.x, rows * cols)?;
    let sums = load_f32(mem, g.sums, rows)?;
    let labels = load_i64(mem, g.labels, rows)?;
    let y: Vec<f32> = (0..rows * cols)
        .map(|i| {
            let (b, d) = (i / cols, i % cols);
            match label(&labels, b, g.depth) {
                Some(lb) => x[i] / sums[b] - if lb == d { 1.0 } else { 0.0 },
                None => f32::NAN,
            }
        })
        .collect();
    store_f32(mem, e.u64(0), &y)
}

/// `out = a - b`, 1-D, long indices (a variable's `assign_sub`): out {data, long dim, device}
/// at 0; the binary evaluator {device, functor, a at 40 {data, dim at 48, device}, b at 64
/// {data, dim at 72, device}}.
fn sub_1d(l: &Launch, mem: &mut dyn Mem) -> Result<(), Skip> {
    let e = Eval::new(l, 88, 8)?;
    agree(&[
        (e.i64(8), e.i64(48)),
        (e.i64(8), e.i64(72)),
        (e.size, e.i64(8)),
    ])?;
    let n = count(e.size)?;
    let a = load_f32(mem, e.u64(40), n)?;
    let b = load_f32(mem, e.u64(64), n)?;
    let y: Vec<f32> = a.iter().zip(&b).map(|(x, y)| x - y).collect();
    store_f32(mem, e.u64(0), &y)
}

/// `out = g * float(f > k)` (ReLU's gradient), 1-D, long indices: out at 0; the product's
/// evaluator {device, functor, g at 40 {data, dim at 48, device}, the conversion of the
/// comparison's evaluator at 64 {device, functor, f at 80 {data, dim at 88, device}, the
/// constant's evaluator at 104 {k (f32), its shape's evaluator {data, dim at 120, device}}}}.
fn relu_grad(l: &Launch, mem: &mut dyn Mem) -> Result<(), Skip> {
    let e = Eval::new(l, 144, 8)?;
    agree(&[
        (e.i64(8), e.i64(48)),
        (e.i64(8), e.i64(88)),
        (e.i64(8), e.i64(120)),
        (e.size, e.i64(8)),
    ])?;
    let n = count(e.size)?;
    let k = e.f32(104);
    let g = load_f32(mem, e.u64(40), n)?;
    let f = load_f32(mem, e.u64(80), n)?;
    let y: Vec<f32> = g
        .iter()
        .zip(&f)
        .map(|(g, f)| g * if *f > k { 1.0 } else { 0.0 })
        .collect();
    store_f32(mem, e.u64(0), &y)
}

/// `out = broadcast(x, factors)`, 4-D: element `o` of the output is the input's at `o[d] mod
/// x_dims[d]` in each dimension. out {data, int dims[4], device} at 0; the broadcast evaluator
/// at 32 {isCopy, nByOne, oneByN, device at 40, factors[4] at 48, dimensions[4] at 64, output
/// strides at 80, input strides at 96, x {data at 112, dims[4] at 120, device}}.
fn broadcast_4d(l: &Launch, mem: &mut dyn Mem) -> Result<(), Skip> {
    let e = Eval::new(l, 144, 4)?;
    let od: Vec<i64> = (0..4).map(|d| e.i32(8 + 4 * d)).collect();
    let xd: Vec<i64> = (0..4).map(|d| e.i32(120 + 4 * d)).collect();
    let mut pairs = vec![(e.size, od.iter().product())];
    for d in 0..4 {
        pairs.push((e.i32(64 + 4 * d), od[d]));
        pairs.push((xd[d] * e.i32(48 + 4 * d), od[d]));
    }
    agree(&pairs)?;
    let od: Vec<usize> = od.into_iter().map(count).collect::<Result<_, _>>()?;
    let xd: Vec<usize> = xd.into_iter().map(count).collect::<Result<_, _>>()?;
    let x = load_f32(mem, e.u64(112), xd.iter().product())?;
    let n = count(e.size)?;
    let y: Vec<f32> = (0..n)
        .map(|o| {
            let mut rest = o;
            let mut idx = [0usize; 4];
            for d in (0..4).rev() {
                idx[d] = rest % od[d];
                rest /= od[d];
            }
            let i = (0..4).fold(0, |acc, d| acc * xd[d] + idx[d] % xd[d]);
            x[i]
        })
        .collect();
    store_f32(mem, e.u64(0), &y)
}

#[cfg(test)]
mod tests;
