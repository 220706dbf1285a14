//! TensorFlow's hand-written CUDA kernels, by their C++ signatures (tensorflow/core/kernels:
//! bias_op_gpu.cu.cc, reduction_gpu_kernels.cu.h).
//!
//! Sums are taken in f64 and rounded once to f32: the GPU adds in f32 in its own tree order,
//! so a sum can differ from the GPU's in its last bits, never by more than the GPU's own
//! rounding error.

use super::{Launch, Mem, Skip, f32_bytes, f32s, load_checked};

fn grid_one(l: &Launch, dim: usize) -> Result<(), Skip> {
    if l.grid[dim] == 1 {
        Ok(())
    } else {
        // More blocks along the reduced dimension write partial results to a temporary that a
        // second kernel reduces: not computed here.
        Err(Skip::Layout(format!("grid {:?}: partial results", l.grid)))
    }
}

/// TensorFlow's reduction kernels start some partial results from `initVal` and others from
/// an element, so only an identity is computed here (TensorFlow passes one: 0 for sums, the
/// lowest float for maxima).
fn identity(init: f32, id: &[f32]) -> Result<(), Skip> {
    if id.contains(&init) {
        Ok(())
    } else {
        Err(Skip::Layout(format!(
            "initial value {init} is not the identity"
        )))
    }
}

fn load_f32(mem: &mut dyn Mem, addr: u64, n: usize) -> Result<Vec<f32>, Skip> {
    Ok(f32s(&load_checked(mem, addr, n * 4)?))
}

fn store_f32(mem: &mut dyn Mem, addr: u64, v: &[f32]) -> Result<(), Skip> {
    if !mem.holds(addr, v.len() as u64 * 4) {
        return Err(Skip::NoBytes);
    }
    mem.store(addr, &f32_bytes(v));
    Ok(())
}

fn count(v: i32) -> Result<usize, Skip> {
    usize::try_from(v).map_err(|_| Skip::Layout(format!("negative count {v}")))
}

/// `BiasNHWCKernel<float>(int nthreads, const float* input, const float* bias, float* output,
/// int bias_size)`: `output[i] = input[i] + bias[i % bias_size]`.
pub fn bias_nhwc_f32(l: &Launch, mem: &mut dyn Mem) -> Result<(), Skip> {
    l.expect_sizes(&[4, 8, 8, 8, 4])?;
    let n = count(l.i32_at(0)?)?;
    let c = count(l.i32_at(4)?)?;
    if c == 0 {
        return Err(Skip::Layout("bias_size 0".into()));
    }
    let input = load_f32(mem, l.u64_at(1)?, n)?;
    let bias = load_f32(mem, l.u64_at(2)?, c)?;
    let out: Vec<f32> = input
        .iter()
        .enumerate()
        .map(|(i, x)| x + bias[i % c])
        .collect();
    store_f32(mem, l.u64_at(3)?, &out)
}

/// `BiasGradNHWC_SharedAtomics<float>(int nthreads, const float* output_backprop,
/// float* bias_backprop, int bias_size)`: adds (atomically, onto what the buffer holds: TF
/// zeroes it first) the sum of `output_backprop[i]` over every `i` with `i % bias_size == c`
/// to `bias_backprop[c]`.
pub fn bias_grad_nhwc_f32(l: &Launch, mem: &mut dyn Mem) -> Result<(), Skip> {
    l.expect_sizes(&[4, 8, 8, 4])?;
    let n = count(l.i32_at(0)?)?;
    let c = count(l.i32_at(3)?)?;
    if c == 0 {
        return Err(Skip::Layout("bias_size 0".into()));
    }
    let g = load_f32(mem, l.u64_at(1)?, n)?;
    let out_at = l.u64_at(2)?;
    let prior = load_f32(mem, out_at, c)?;
    let mut sums = vec![0f64; c];
    for (i, x) in g.iter().enumerate() {
        sums[i % c] += *x as f64;
    }
    let out: Vec<f32> = prior
        .iter()
        .zip(&sums)
        .map(|(p, s)| (*p as f64 + s) as f32)
        .collect();
    store_f32(mem, out_at, &out)
}

/// The arguments of the reduction kernels `(T in, OUT_T out, int num_rows, int num_cols, Op op,
/// T initVal)`, with an empty functor (one byte).
fn reduce_args(l: &Launch) -> Result<(u64, u64, usize, usize, f32), Skip> {
    l.expect_sizes(&[8, 8, 4, 4, 1, 4])?;
    let init = f32::from_le_bytes(l.param(5, 4)?.try_into().unwrap_or_default());
    Ok((
        l.u64_at(0)?,
        l.u64_at(1)?,
        count(l.i32_at(2)?)?,
        count(l.i32_at(3)?)?,
        init,
    ))
}

/// `ColumnReduceKernel` / `ColumnReduceMax16ColumnsKernel` with `plus` over a row-major
/// `num_rows x num_cols` input: `out[col] = initVal + sum over rows` when one block row covers
/// the rows (`gridDim.y == 1`).
pub fn column_sum_f32(l: &Launch, mem: &mut dyn Mem) -> Result<(), Skip> {
    let (inp, out, rows, cols, init) = reduce_args(l)?;
    identity(init, &[0.0])?;
    grid_one(l, 1)?;
    let x = load_f32(mem, inp, rows * cols)?;
    let mut sums = vec![init as f64; cols];
    for r in 0..rows {
        for (c, s) in sums.iter_mut().enumerate() {
            *s += x[r * cols + c] as f64;
        }
    }
    let v: Vec<f32> = sums.iter().map(|s| *s as f32).collect();
    store_f32(mem, out, &v)
}

/// `RowReduceKernel` with `plus`: `out[row] = initVal + the row's sum`.
pub fn row_sum_f32(l: &Launch, mem: &mut dyn Mem) -> Result<(), Skip> {
    let (inp, out, rows, cols, init) = reduce_args(l)?;
    identity(init, &[0.0])?;
    let x = load_f32(mem, inp, rows * cols)?;
    let v: Vec<f32> = (0..rows)
        .map(|r| {
            x[r * cols..(r + 1) * cols]
                .iter()
                .fold(init as f64, |s, &e| s + e as f64) as f32
        })
        .collect();
    store_f32(mem, out, &v)
}

/// `RowReduceKernel<float*, TransformOutputIterator<float, float, DividesBy<float, float>,
/// long>, Sum<float>>` (a mean): the output iterator is `{float* ptr; DividesBy {float
/// divisor}}` (16 bytes); `out[row] = (initVal + the row's sum) / divisor`.
pub fn row_mean_f32(l: &Launch, mem: &mut dyn Mem) -> Result<(), Skip> {
    l.expect_sizes(&[8, 16, 4, 4, 1, 4])?;
    let it = l.param(1, 16)?;
    let out = u64::from_le_bytes(it[0..8].try_into().unwrap_or_default());
    let divisor = f32::from_le_bytes(it[8..12].try_into().unwrap_or_default());
    let (rows, cols) = (count(l.i32_at(2)?)?, count(l.i32_at(3)?)?);
    let init = f32::from_le_bytes(l.param(5, 4)?.try_into().unwrap_or_default());
    identity(init, &[0.0])?;
    let x = load_f32(mem, l.u64_at(0)?, rows * cols)?;
    let v: Vec<f32> = (0..rows)
        .map(|r| {
            let s = x[r * cols..(r + 1) * cols]
                .iter()
                .fold(init as f64, |s, &e| s + e as f64) as f32;
            s / divisor
        })
        .collect();
    store_f32(mem, out, &v)
}

/// `BiasGradNCHW_SharedAtomics<float>(const float* output_backprop, float* bias_backprop, int
/// batch, int bias_size, int image_size, int group_size)`: adds (atomically, onto what the
/// buffer holds) the sum over the batch and the image of channel `c` to `bias_backprop[c]`.
pub fn bias_grad_nchw_f32(l: &Launch, mem: &mut dyn Mem) -> Result<(), Skip> {
    l.expect_sizes(&[8, 8, 4, 4, 4, 4])?;
    let (n, c, hw) = (
        count(l.i32_at(2)?)?,
        count(l.i32_at(3)?)?,
        count(l.i32_at(4)?)?,
    );
    let g = load_f32(mem, l.u64_at(0)?, n * c * hw)?;
    let out_at = l.u64_at(1)?;
    let prior = load_f32(mem, out_at, c)?;
    let mut sums = vec![0f64; c];
    for (i, x) in g.iter().enumerate() {
        sums[(i / hw) % c] += *x as f64;
    }
    let out: Vec<f32> = prior
        .iter()
        .zip(&sums)
        .map(|(p, s)| (*p as f64 + s) as f32)
        .collect();
    store_f32(mem, out_at, &out)
}

/// `RedzoneAllocatorKernelImpl(uint8* buffer, uint8 pattern, uint64 length, uint32* mismatches)`
/// (the check of the guard bytes around an autotuning buffer): adds the number of bytes that
/// differ from the pattern to `*mismatches`.
pub fn redzone_check(l: &Launch, mem: &mut dyn Mem) -> Result<(), Skip> {
    l.expect_sizes(&[8, 1, 8, 8])?;
    let pattern = l.param(1, 1)?[0];
    let len = usize::try_from(l.u64_at(2)?).map_err(|_| Skip::Layout("length".into()))?;
    let bytes = load_checked(mem, l.u64_at(0)?, len)?;
    let at = l.u64_at(3)?;
    let prior = load_checked(mem, at, 4)?;
    let was = u32::from_le_bytes(prior[..4].try_into().unwrap_or_default());
    let bad = bytes.iter().filter(|&&b| b != pattern).count() as u32;
    mem.store(at, &was.wrapping_add(bad).to_le_bytes());
    Ok(())
}

/// CUB's `DeviceSegmentedReduceKernel` as TensorFlow's row sums launch it: `(const float* in,
/// float* out, begin, end, int num_segments, plus, float init)`, with `begin` and `end`
/// `TransformInputIterator<int, RowOffset, CountingInputIterator<int, long>>` ({int cols; int
/// first}): segment `s` (one block each) is `in[(b + s) * cols_b .. (e + s) * cols_e]`, and
/// `out[s] = init + its sum`.
pub fn segmented_sum_f32(l: &Launch, mem: &mut dyn Mem) -> Result<(), Skip> {
    l.expect_sizes(&[8, 8, 8, 8, 4, 1, 4])?;
    let it = |i: usize| -> Result<(i64, i64), Skip> {
        let b = l.param(i, 8)?;
        let w = |k: usize| i32::from_le_bytes(b[k..k + 4].try_into().unwrap_or_default()) as i64;
        Ok((w(0), w(4)))
    };
    let ((bc, b0), (ec, e0)) = (it(2)?, it(3)?);
    let segments = l.i32_at(4)? as i64;
    if segments != l.grid[0] as i64 {
        return Err(Skip::Layout(format!(
            "{segments} segments on a grid of {:?}",
            l.grid
        )));
    }
    let init = f32::from_le_bytes(l.param(6, 4)?.try_into().unwrap_or_default());
    let span = |s: i64| ((b0 + s) * bc, (e0 + s) * ec);
    let (lo, hi) = (0..segments)
        .map(span)
        .fold((i64::MAX, 0), |(lo, hi), (b, e)| (lo.min(b), hi.max(e)));
    if segments <= 0 || lo < 0 || hi < lo {
        return Err(Skip::Layout(format!("segments {lo}..{hi}")));
    }
    let x = load_f32(mem, l.u64_at(0)? + lo as u64 * 4, count((hi - lo) as i32)?)?;
    let v: Vec<f32> = (0..segments)
        .map(|s| {
            let (b, e) = span(s);
            x[(b - lo) as usize..(e.max(b) - lo) as usize]
                .iter()
                .fold(init as f64, |acc, &v| acc + v as f64) as f32
        })
        .collect();
    store_f32(mem, l.u64_at(1)?, &v)
}

/// `RowReduceKernel` with `maximum`: `out[row] = max(initVal, the row's elements)`.
pub fn row_max_f32(l: &Launch, mem: &mut dyn Mem) -> Result<(), Skip> {
    let (inp, out, rows, cols, init) = reduce_args(l)?;
    identity(init, &[f32::MIN, f32::NEG_INFINITY])?;
    let x = load_f32(mem, inp, rows * cols)?;
    let v: Vec<f32> = (0..rows)
        .map(|r| {
            let row = &x[r * cols..(r + 1) * cols];
            match row.split_first() {
                Some((&first, rest)) => rest
                    .iter()
                    .fold(first, |m, &e| if e > m || e.is_nan() { e } else { m }),
                None => init,
            }
        })
        .collect();
    store_f32(mem, out, &v)
}

/// `BlockReduceKernel<float*, float*, 256, Sum<float>>(in, out, int num_elems, Op op, T initVal)`
/// with one block: `out[0] = initVal + the sum of num_elems elements`.
pub fn block_sum_f32(l: &Launch, mem: &mut dyn Mem) -> Result<(), Skip> {
    l.expect_sizes(&[8, 8, 4, 1, 4])?;
    grid_one(l, 0)?;
    let n = count(l.i32_at(2)?)?;
    let init = f32::from_le_bytes(l.param(4, 4)?.try_into().unwrap_or_default());
    identity(init, &[0.0])?;
    let x = load_f32(mem, l.u64_at(0)?, n)?;
    let s = x.iter().fold(init as f64, |s, &e| s + e as f64);
    store_f32(mem, l.u64_at(1)?, &[s as f32])
}

#[cfg(test)]
mod tests {
    use super::super::testmem::TestMem;
    use super::*;
    use crate::fatbin::KernelParams;

    /// Packs parameters at their natural alignment, as the C++ compiler lays out a kernel's
    /// parameter block.
    fn pack(vals: &[&[u8]]) -> (KernelParams, Vec<u8>) {
        let mut b = Vec::new();
        let mut params = Vec::new();
        for v in vals {
            let align = v.len().clamp(1, 8);
            while b.len() % align != 0 {
                b.push(0);
            }
            params.push((b.len(), v.len()));
            b.extend_from_slice(v);
        }
        (
            KernelParams {
                params,
                cbank_size: None,
            },
            b,
        )
    }

    fn launch(name: &str, grid: [u32; 3], vals: &[&[u8]], m: &mut TestMem) -> Result<(), Skip> {
        let (p, b) = pack(vals);
        super::super::run(name, &p, &b, grid, m).expect("a host kernel")
    }

    fn f(v: &[f32]) -> Vec<u8> {
        f32_bytes(v)
    }

    const BIAS: &str =
        "void tensorflow::BiasNHWCKernel<float>(int, float const*, float const*, float*, int)";
    const BIAS_GRAD: &str =
        "void tensorflow::BiasGradNHWC_SharedAtomics<float>(int, float const*, float*, int)";
    const COLS: &str = "void tensorflow::functor::ColumnReduceKernel<float const*, float*, cuda::std::__4::plus<void> >(float const*, float*, int, int, cuda::std::__4::plus<void>, std::iterator_traits<float const*>::value_type)";
    const ROWMAX: &str = "void tensorflow::functor::RowReduceKernel<float const*, float*, cuda::__4::maximum<void> >(float const*, float*, int, int, cuda::__4::maximum<void>, std::iterator_traits<float const*>::value_type)";
    const BLOCK: &str = "void tensorflow::functor::BlockReduceKernel<float*, float*, 256, tensorflow::functor::Sum<float> >(float*, float*, int, tensorflow::functor::Sum<float>, std::iterator_traits<float*>::value_type)";

    #[test]
    fn bias_add_and_its_gradient() {
        let mut m = TestMem::default();
        // A 2 x 3 input, a bias of 3.
        m.add(0x1000, f(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]));
        m.add(0x2000, f(&[0.5, -1.0, 10.0]));
        m.add(0x3000, vec![0; 24]);
        let p = |a: u64| a.to_le_bytes();
        launch(
            BIAS,
            [1, 1, 1],
            &[
                &6i32.to_le_bytes(),
                &p(0x1000),
                &p(0x2000),
                &p(0x3000),
                &3i32.to_le_bytes(),
            ],
            &mut m,
        )
        .unwrap();
        assert_eq!(m.bufs[&0x3000], f(&[1.5, 1.0, 13.0, 4.5, 4.0, 16.0]));
        // The gradient adds column sums onto what the buffer holds.
        m.add(0x4000, f(&[100.0, 0.0, 0.0]));
        launch(
            BIAS_GRAD,
            [1, 1, 1],
            &[
                &6i32.to_le_bytes(),
                &p(0x1000),
                &p(0x4000),
                &3i32.to_le_bytes(),
            ],
            &mut m,
        )
        .unwrap();
        assert_eq!(m.bufs[&0x4000], f(&[105.0, 7.0, 9.0]));
    }

    #[test]
    fn row_sums_means_nchw_bias_gradient_and_redzones() {
        let mut m = TestMem::default();
        // 2 x 3 rows.
        m.add(0x1000, f(&[1.0, -2.0, 3.0, 4.0, 5.0, -6.0]));
        let p = |a: u64| a.to_le_bytes();
        let (two, three) = (2i32.to_le_bytes(), 3i32.to_le_bytes());
        let sum = "void tensorflow::functor::RowReduceKernel<float const*, float*, cuda::std::__4::plus<void> >(float const*, float*, int, int, cuda::std::__4::plus<void>, std::iterator_traits<float const*>::value_type)";
        m.add(0x2000, vec![0; 8]);
        launch(
            sum,
            [1, 1, 1],
            &[
                &p(0x1000),
                &p(0x2000),
                &two,
                &three,
                &[0],
                &0f32.to_le_bytes(),
            ],
            &mut m,
        )
        .unwrap();
        assert_eq!(m.bufs[&0x2000], f(&[2.0, 3.0]));
        let mean = "void tensorflow::functor::RowReduceKernel<float*, tensorflow::TransformOutputIterator<float, float, tensorflow::functor::DividesBy<float, float>, long>, tensorflow::functor::Sum<float> >(float*, tensorflow::TransformOutputIterator<float, float, tensorflow::functor::DividesBy<float, float>, long>, int, int, tensorflow::functor::Sum<float>, std::iterator_traits<float*>::value_type)";
        let mut it = p(0x3000).to_vec();
        it.extend(4f32.to_le_bytes());
        it.extend([0; 4]);
        m.add(0x3000, vec![0; 8]);
        launch(
            mean,
            [1, 1, 1],
            &[&p(0x1000), &it, &two, &three, &[0], &0f32.to_le_bytes()],
            &mut m,
        )
        .unwrap();
        assert_eq!(m.bufs[&0x3000], f(&[0.5, 0.75]));
        // NCHW: batch 2, 3 channels, 2 pixels; channel c's gradient is the sum of its 4 values.
        let g: Vec<f32> = (0..12).map(|v| v as f32).collect();
        m.add(0x4000, f(&g));
        m.add(0x5000, f(&[1.0, 0.0, 0.0]));
        let nchw = "void tensorflow::BiasGradNCHW_SharedAtomics<float>(float const*, float*, int, int, int, int)";
        launch(
            nchw,
            [1, 1, 1],
            &[
                &p(0x4000),
                &p(0x5000),
                &two,
                &three,
                &two,
                &1i32.to_le_bytes(),
            ],
            &mut m,
        )
        .unwrap();
        // c0: 0 + 1 + 6 + 7, c1: 2 + 3 + 8 + 9, c2: 4 + 5 + 10 + 11; c0 onto its prior 1.
        assert_eq!(m.bufs[&0x5000], f(&[15.0, 22.0, 30.0]));
        // Two of five guard bytes differ from the pattern.
        m.add(0x6000, vec![0xa5, 0xa5, 0x00, 0xa5, 0x17]);
        m.add(0x7000, 1u32.to_le_bytes().to_vec());
        let rz = "stream_executor::gpu::RedzoneAllocatorKernelImpl(unsigned char*, unsigned char, unsigned long, unsigned int*)";
        launch(
            rz,
            [1, 1, 1],
            &[&p(0x6000), &[0xa5], &5u64.to_le_bytes(), &p(0x7000)],
            &mut m,
        )
        .unwrap();
        assert_eq!(m.bufs[&0x7000], 3u32.to_le_bytes());
    }

    #[test]
    fn segmented_sums_of_rows() {
        let name = "void cub::CUB_200805_SM___CUDA_ARCH_LIST__::DeviceSegmentedReduceKernel<cub::CUB_200805_SM___CUDA_ARCH_LIST__::detail::reduce::policy_hub<float, int, cuda::std::__4::plus<void> >::Policy1000, float const*, float*, cub::CUB_200805_SM___CUDA_ARCH_LIST__::TransformInputIterator<int, tensorflow::functor::RowOffset, cub::CUB_200805_SM___CUDA_ARCH_LIST__::CountingInputIterator<int, long>, long>, cub::CUB_200805_SM___CUDA_ARCH_LIST__::TransformInputIterator<int, tensorflow::functor::RowOffset, cub::CUB_200805_SM___CUDA_ARCH_LIST__::CountingInputIterator<int, long>, long>, int, cuda::std::__4::plus<void>, float, float>(float const*, float*, ...)";
        let mut m = TestMem::default();
        // 3 rows of 4.
        let x: Vec<f32> = (0..12).map(|v| v as f32).collect();
        m.add(0x1000, f(&x));
        m.add(0x2000, vec![0; 12]);
        let p = |a: u64| a.to_le_bytes();
        let iter = |cols: i32, first: i32| {
            let mut b = cols.to_le_bytes().to_vec();
            b.extend(first.to_le_bytes());
            b
        };
        let (b, e) = (iter(4, 0), iter(4, 1));
        let three = 3i32.to_le_bytes();
        let init = 0.5f32.to_le_bytes();
        launch(
            name,
            [3, 1, 1],
            &[&p(0x1000), &p(0x2000), &b, &e, &three, &[0], &init],
            &mut m,
        )
        .unwrap();
        assert_eq!(m.bufs[&0x2000], f(&[6.5, 22.5, 38.5]));
        // A grid that is not one block per segment is left alone.
        let r = launch(
            name,
            [1, 1, 1],
            &[&p(0x1000), &p(0x2000), &b, &e, &three, &[0], &init],
            &mut m,
        );
        assert!(matches!(r, Err(Skip::Layout(_))));
    }

    #[test]
    fn reductions_over_rows_columns_and_all() {
        let mut m = TestMem::default();
        m.add(0x1000, f(&[1.0, -2.0, 3.0, 4.0, 5.0, -6.0]));
        m.add(0x2000, vec![0; 12]);
        let p = |a: u64| a.to_le_bytes();
        let (two, three) = (2i32.to_le_bytes(), 3i32.to_le_bytes());
        launch(
            COLS,
            [1, 1, 1],
            &[
                &p(0x1000),
                &p(0x2000),
                &two,
                &three,
                &[0],
                &0f32.to_le_bytes(),
            ],
            &mut m,
        )
        .unwrap();
        assert_eq!(m.bufs[&0x2000], f(&[5.0, 3.0, -3.0]));
        m.add(0x3000, vec![0; 8]);
        let lowest = f32::MIN.to_le_bytes();
        launch(
            ROWMAX,
            [1, 1, 1],
            &[&p(0x1000), &p(0x3000), &two, &three, &[0], &lowest],
            &mut m,
        )
        .unwrap();
        assert_eq!(m.bufs[&0x3000], f(&[3.0, 5.0]));
        m.add(0x4000, vec![0; 4]);
        let six = 6i32.to_le_bytes();
        launch(
            BLOCK,
            [1, 1, 1],
            &[&p(0x1000), &p(0x4000), &six, &[0], &0f32.to_le_bytes()],
            &mut m,
        )
        .unwrap();
        assert_eq!(m.bufs[&0x4000], f(&[5.0]));
        // Several blocks write partial sums: left alone.
        m.add(0x5000, vec![7; 4]);
        let r = launch(
            BLOCK,
            [2, 1, 1],
            &[&p(0x1000), &p(0x5000), &six, &[0], &0f32.to_le_bytes()],
            &mut m,
        );
        assert!(matches!(r, Err(Skip::Layout(_))));
        assert_eq!(m.bufs[&0x5000], vec![7; 4]);
        // An input that holds no bytes.
        let r = launch(
            BLOCK,
            [1, 1, 1],
            &[&p(0x9000), &p(0x4000), &six, &[0], &0f32.to_le_bytes()],
            &mut m,
        );
        assert_eq!(r, Err(Skip::NoBytes));
    }
}
