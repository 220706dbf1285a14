//! TensorFlow's layout kernels (tensorflow/core/kernels/conv_2d_gpu.h): the transposes it runs
//! between NHWC and NCHW around cuDNN calls, as 3-D shuffles of `Dimension<3>` (three `int`s).
//! They move elements, so they are exact.

use super::{Launch, Mem, Skip, load_checked};

/// The element type's size in bytes from its C++ name.
fn elem_size(t: &str) -> Option<usize> {
    Some(match t {
        "unsigned char" | "signed char" | "char" | "bool" => 1,
        "unsigned short" | "short" | "Eigen::half" | "Eigen::bfloat16" => 2,
        "unsigned int" | "int" | "float" => 4,
        "unsigned long" | "long" | "double" => 8,
        _ => return None,
    })
}

fn dims(b: &[u8]) -> Result<[usize; 3], Skip> {
    let mut d = [0usize; 3];
    for (i, v) in d.iter_mut().enumerate() {
        let x = i32::from_le_bytes(b[i * 4..i * 4 + 4].try_into().unwrap_or_default());
        *v = usize::try_from(x).map_err(|_| Skip::Layout(format!("dimension {x}")))?;
    }
    Ok(d)
}

/// Moves element `src(o)` of the input to each output position `o` (row-major over `out`).
fn permute(
    mem: &mut dyn Mem,
    es: usize,
    input: u64,
    output: u64,
    n: usize,
    src: impl Fn(usize) -> usize,
) -> Result<(), Skip> {
    let x = load_checked(mem, input, n * es)?;
    if !mem.holds(output, (n * es) as u64) {
        return Err(Skip::NoBytes);
    }
    let mut y = vec![0u8; n * es];
    for (o, chunk) in y.chunks_exact_mut(es).enumerate() {
        let i = src(o);
        chunk.copy_from_slice(&x[i * es..i * es + es]);
    }
    mem.store(output, &y);
    Ok(())
}

/// `SwapDimension1And2InTensor3UsingTiles<T, TileI, TileJ, Threads, false>(const T* input,
/// Dimension<3> input_dims, T* output)`: `output[i][k][j] = input[i][j][k]`.
pub fn swap_dims_1_2(l: &Launch, mem: &mut dyn Mem) -> Result<(), Skip> {
    let args = l
        .name
        .strip_prefix("void tensorflow::functor::SwapDimension1And2InTensor3UsingTiles<")
        .ok_or_else(|| Skip::Layout("name".into()))?;
    let t = args.split(',').next().unwrap_or("");
    let es = elem_size(t).ok_or_else(|| Skip::Layout(format!("element type {t}")))?;
    if !args.contains(", false>(") {
        return Err(Skip::Layout("conjugating transpose".into()));
    }
    l.expect_sizes(&[8, 12, 8])?;
    let [d0, d1, d2] = dims(l.param(1, 12)?)?;
    permute(mem, es, l.u64_at(0)?, l.u64_at(2)?, d0 * d1 * d2, |o| {
        // Output [d0, d2, d1].
        let (i, k, j) = (o / (d2 * d1), (o / d1) % d2, o % d1);
        (i * d1 + j) * d2 + k
    })
}

/// `ShuffleInTensor3Simple<T, sp0, sp1, sp2, false>(int nthreads, const T* input, Dimension<3>
/// input_dims, T* output)`: the output has dimensions `input_dims[sp0], [sp1], [sp2]`, and its
/// element `(a, b, c)` is the input's whose index `sp0` is `a`, `sp1` is `b`, `sp2` is `c`.
pub fn shuffle_3(l: &Launch, mem: &mut dyn Mem) -> Result<(), Skip> {
    let args = l
        .name
        .strip_prefix("void tensorflow::functor::ShuffleInTensor3Simple<")
        .and_then(|a| a.split_once(">("))
        .map(|(a, _)| a)
        .ok_or_else(|| Skip::Layout("name".into()))?;
    let parts: Vec<&str> = args.split(", ").collect();
    let [t, s0, s1, s2, "false"] = parts[..] else {
        return Err(Skip::Layout(format!("template arguments {args}")));
    };
    let es = elem_size(t).ok_or_else(|| Skip::Layout(format!("element type {t}")))?;
    let sp: Vec<usize> = [s0, s1, s2].iter().filter_map(|s| s.parse().ok()).collect();
    let mut seen = [false; 3];
    for &s in &sp {
        if s < 3 {
            seen[s] = true;
        }
    }
    if sp.len() != 3 || seen.contains(&false) {
        return Err(Skip::Layout(format!("permutation {args}")));
    }
    l.expect_sizes(&[4, 8, 12, 8])?;
    let d = dims(l.param(2, 12)?)?;
    let n = d[0] * d[1] * d[2];
    if l.i32_at(0)? as i64 != n as i64 {
        return Err(Skip::Layout(format!(
            "{} threads for {n} elements",
            l.i32_at(0)?
        )));
    }
    let od = [d[sp[0]], d[sp[1]], d[sp[2]]];
    permute(mem, es, l.u64_at(1)?, l.u64_at(3)?, n, |o| {
        let oi = [o / (od[1] * od[2]), (o / od[2]) % od[1], o % od[2]];
        let mut ii = [0usize; 3];
        for k in 0..3 {
            ii[sp[k]] = oi[k];
        }
        (ii[0] * d[1] + ii[1]) * d[2] + ii[2]
    })
}

#[cfg(test)]
mod tests {
    use super::super::testmem::TestMem;
    use super::super::{f32_bytes, f32s, run};
    use crate::fatbin::KernelParams;

    fn dims(d: [i32; 3]) -> Vec<u8> {
        d.iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    #[test]
    fn swap_and_shuffle_match_index_arithmetic() {
        // A 2 x 3 x 4 tensor of distinct values.
        let x: Vec<f32> = (0..24).map(|v| v as f32).collect();
        let at = |i: usize, j: usize, k: usize| x[(i * 3 + j) * 4 + k];
        let mut m = TestMem::default();
        m.add(0x1000, f32_bytes(&x));
        m.add(0x2000, vec![0; 96]);
        let mut b = 0x1000u64.to_le_bytes().to_vec();
        b.extend(dims([2, 3, 4]));
        b.extend([0; 4]);
        b.extend(0x2000u64.to_le_bytes());
        let p = KernelParams {
            params: vec![(0, 8), (8, 12), (24, 8)],
            cbank_size: None,
        };
        let swap = "void tensorflow::functor::SwapDimension1And2InTensor3UsingTiles<unsigned int, 1024, 1024, 2, false>(unsigned int const*, tensorflow::functor::Dimension<3>, unsigned int*)";
        run(swap, &p, &b, [1, 1, 1], &mut m).unwrap().unwrap();
        let y = f32s(&m.bufs[&0x2000]);
        for i in 0..2 {
            for k in 0..4 {
                for j in 0..3 {
                    assert_eq!(y[(i * 4 + k) * 3 + j], at(i, j, k));
                }
            }
        }
        // (2, 1, 0): the output is 4 x 3 x 2, element (k, j, i) = x[i][j][k].
        let mut b = 24i32.to_le_bytes().to_vec();
        b.extend([0; 4]);
        b.extend(0x1000u64.to_le_bytes());
        b.extend(dims([2, 3, 4]));
        b.extend([0; 4]);
        b.extend(0x2000u64.to_le_bytes());
        let p = KernelParams {
            params: vec![(0, 4), (8, 8), (16, 12), (32, 8)],
            cbank_size: None,
        };
        let shuffle = "void tensorflow::functor::ShuffleInTensor3Simple<float, 2, 1, 0, false>(int, float const*, tensorflow::functor::Dimension<3>, float*)";
        run(shuffle, &p, &b, [1, 1, 1], &mut m).unwrap().unwrap();
        let y = f32s(&m.bufs[&0x2000]);
        for k in 0..4 {
            for j in 0..3 {
                for i in 0..2 {
                    assert_eq!(y[(k * 3 + j) * 2 + i], at(i, j, k));
                }
            }
        }
    }
}
