//! Exact touches of PyTorch's foreach kernels, the optimizers' updates (SGD's momentum, Adam's
//! moments, `torch._foreach_*`): `multi_tensor_apply_kernel<TensorListMetadata<n>,
//! Functor<T, depth, r_args_depth, res_arg_index>, ...>` (ATen's MultiTensorApply.cuh and
//! ForeachFunctors.cuh). Its first parameter is the metadata, by value:
//! * `const void* addresses[n][M]`: list d's tensor i;
//! * `int64_t numel_for_tensor[M]`;
//! * `block_to_tensor[B]` (one byte, or two where M and B are large) and `int32_t
//!   block_to_chunk[B]`: block b works on chunk `block_to_chunk[b]` (65536 elements) of
//!   tensor `block_to_tensor[b]`;
//! * `int32_t start_tensor_this_launch`.
//!
//! M and B depend on how torch was built: M = 110, 64, 48, 36, 30 for n = 1..5 and B = 320
//! before CUDA 13 (4 KB of parameters); M = 770, 448, 336, 252, 210 and B = 2240 from CUDA 13
//! (32 KB). The parameter's size tells which.
//!
//! torch fills the entries a launch uses and leaves the rest as they were: a stack that held
//! an earlier launch's metadata (an Adam step's other lists). Read as words, SGD's
//! `_foreach_mul_(momentum)` touched the weights too (a BERT step: 1186 MB instead of 593).
//! Read by this layout, a launch touches the tensors its blocks name, in each of its n lists:
//! the first `r_args_depth` lists are read; list `res_arg_index` is written, in place where it
//! is one of those read (`rw`), else whole (`w`) where the launch covers every chunk of a
//! tensor that fills its allocation. Extents are the tensors' own.

use super::words::{Found, element_size, le_at};
use planner::trace::{Access, Touch};

/// Elements per chunk (`kChunkSize`).
const CHUNK: u64 = 65536;

/// A foreach kernel's lists: `n` lists of `elem`-byte elements, the first `reads` read, list
/// `result` written.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Lists {
    n: usize,
    reads: usize,
    result: usize,
    elem: u64,
}

/// The lists of a foreach kernel, from its demangled name; None for any other kernel (the
/// scalar-list and fused-optimizer metadata are laid out otherwise).
pub fn parse(name: &str) -> Option<Lists> {
    let rest =
        name.strip_prefix("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<")?;
    let rest = rest.strip_prefix("at::native::(anonymous namespace)::TensorListMetadata<")?;
    let (n, rest) = rest.split_once(">, ")?;
    let n: usize = n.parse().ok()?;
    // The functor: `Name<T, depth, r_args_depth, res_arg_index>`.
    let args = rest.split_once('<')?.1.split_once('>')?.0;
    let a: Vec<&str> = args.split(", ").collect();
    let [t, depth, reads, result] = a.as_slice() else {
        return None;
    };
    let int = |s: &str| s.trim().parse::<usize>().ok();
    let (depth, reads, result) = (int(depth)?, int(reads)?, int(result)?);
    let ok = (1..=5).contains(&n) && depth == n && reads <= n && result < n;
    ok.then_some(Lists {
        n,
        reads,
        result,
        elem: element_size(t)?,
    })
}

/// The metadata's layout for `n` lists: (M, B, bytes of a block's tensor index), by the
/// parameter's size.
fn layout(n: usize, size: usize) -> Option<(usize, usize, usize)> {
    const OLD: ([usize; 5], usize, usize) = ([110, 64, 48, 36, 30], 320, 1);
    const CUDA13: ([usize; 5], usize, usize) = ([770, 448, 336, 252, 210], 2240, 2);
    [OLD, CUDA13].into_iter().find_map(|(m, b, idx)| {
        let m = m[n - 1];
        let bytes = (8 * n * m + 8 * m + idx * b + 4 * b + 4).div_ceil(8) * 8;
        (bytes == size).then_some((m, b, idx))
    })
}

/// Where the metadata's address slots are, relative to the parameter buffer's start: a
/// replay rewrites these words only.
pub fn pointer_words(l: Lists, params: &[(usize, usize)]) -> Option<Vec<usize>> {
    let &(at, size) = params.first()?;
    let (m, _, _) = layout(l.n, size)?;
    Some((0..l.n * m).map(|i| at + 8 * i).collect())
}

/// The touches of one launch of `grid` blocks (see the module's comment); None: left to the
/// conservative rule.
pub fn touches(
    l: Lists,
    params: &[(usize, usize)],
    buf: &[u8],
    grid: [u32; 3],
    find: impl Fn(u64) -> Option<Found>,
) -> Option<Vec<Touch>> {
    let &(at, size) = params.first()?;
    let (m, b, idx) = layout(l.n, size)?;
    let blocks = grid[0] as usize;
    if blocks == 0 || blocks > b || grid[1] != 1 || grid[2] != 1 {
        return None;
    }
    let numel_at = at + 8 * l.n * m;
    let tensor_at = numel_at + 8 * m;
    let chunk_at = tensor_at + idx * b;
    // Per tensor the launch works on: its chunks here.
    let mut chunks: Vec<(usize, Vec<u64>)> = Vec::new();
    for k in 0..blocks {
        let i = le_at(buf, tensor_at + idx * k, idx)? as usize;
        let c = le_at(buf, chunk_at + 4 * k, 4)?;
        if i >= m {
            return None;
        }
        // torch fills the blocks tensor by tensor: the last entry is almost always the one
        // (this runs on the launch hook, up to 2,240 blocks a launch).
        let at_last = chunks.last().is_some_and(|x| x.0 == i);
        match if at_last {
            chunks.last_mut()
        } else {
            chunks.iter_mut().find(|x| x.0 == i)
        } {
            Some(x) => x.1.push(c),
            None => chunks.push((i, vec![c])),
        }
    }
    let mut out: Vec<Touch> = Vec::new();
    for (i, mut cs) in chunks {
        let numel = le_at(buf, numel_at + 8 * i, 8)?;
        let bytes = numel.checked_mul(l.elem).filter(|&x| x > 0)?;
        cs.sort_unstable();
        cs.dedup();
        let every_chunk = cs.iter().copied().eq(0..numel.div_ceil(CHUNK));
        for d in 0..l.n {
            let (alloc, offset, alloc_size) = find(le_at(buf, at + 8 * (d * m + i), 8)?)?;
            if offset.checked_add(bytes)? > alloc_size {
                return None;
            }
            let access = if d == l.result && d >= l.reads {
                if every_chunk && offset == 0 && bytes == alloc_size {
                    Access::W
                } else {
                    Access::Rw
                }
            } else if d == l.result {
                Access::Rw
            } else if d < l.reads {
                Access::R
            } else {
                // A list neither read nor the result: not a layout this reader knows.
                return None;
            };
            // The same tensor in two lists (`x.add_(x)`): one touch, the stronger role.
            if let Some(t) = out
                .iter_mut()
                .find(|t| t.alloc == alloc && t.offset == offset)
            {
                if t.bytes != bytes {
                    return None;
                }
                if t.access != access {
                    t.access = Access::Rw;
                }
                continue;
            }
            out.push(Touch {
                alloc,
                offset,
                bytes,
                access,
            });
        }
    }
    (!out.is_empty()).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SGD's `_foreach_add_(momentum, grads, alpha)` and `_foreach_mul_(momentum, m)` as torch
    /// 2.15 names them (demangled).
    const ADD: &str = "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<2>, at::native::(anonymous namespace)::BinaryOpListAlphaFunctor<float, 2, 2, 0>, std::plus<float>, float>(at::native::(anonymous namespace)::TensorListMetadata<2>, at::native::(anonymous namespace)::BinaryOpListAlphaFunctor<float, 2, 2, 0>, std::plus<float>, float)";
    const MUL: &str = "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<1>, at::native::(anonymous namespace)::BinaryOpScalarFunctor<float, 1, 1, 0>, std::multiplies<float>, float>(at::native::(anonymous namespace)::TensorListMetadata<1>, at::native::(anonymous namespace)::BinaryOpScalarFunctor<float, 1, 1, 0>, std::multiplies<float>, float)";

    /// Allocations 1 to 9 at 0x100000 * id, each `size` bytes.
    fn find(size: u64) -> impl Fn(u64) -> Option<Found> {
        move |w| {
            let id = w / 0x100000;
            ((1..=9).contains(&id) && w % 0x100000 < size).then_some((id, w % 0x100000, size))
        }
    }

    /// A CUDA 13 metadata for `n` lists: tensors `addr[d][i]` of `numel[i]` elements, blocks
    /// (tensor, chunk); every other address slot holds `stale`, an earlier launch's pointer.
    fn metadata(
        n: usize,
        addr: &[Vec<u64>],
        numel: &[u64],
        blocks: &[(u16, i32)],
        stale: u64,
    ) -> ([(usize, usize); 1], Vec<u8>) {
        let m = [770, 448, 336, 252, 210][n - 1];
        let size = (8 * n * m + 8 * m + 2 * 2240 + 4 * 2240 + 4).div_ceil(8) * 8;
        let mut b = vec![0u8; size];
        for d in 0..n {
            for i in 0..m {
                let a = addr[d].get(i).copied().unwrap_or(stale);
                b[8 * (d * m + i)..8 * (d * m + i + 1)].copy_from_slice(&a.to_le_bytes());
            }
        }
        let numel_at = 8 * n * m;
        for (i, &x) in numel.iter().enumerate() {
            b[numel_at + 8 * i..numel_at + 8 * i + 8].copy_from_slice(&x.to_le_bytes());
        }
        let tensor_at = numel_at + 8 * m;
        let chunk_at = tensor_at + 2 * 2240;
        for (k, &(t, c)) in blocks.iter().enumerate() {
            b[tensor_at + 2 * k..tensor_at + 2 * k + 2].copy_from_slice(&t.to_le_bytes());
            b[chunk_at + 4 * k..chunk_at + 4 * k + 4].copy_from_slice(&c.to_le_bytes());
        }
        ([(0, size)], b)
    }

    #[test]
    fn no_other_reader_claims_a_foreach_kernel() {
        for name in [ADD, MUL] {
            assert_eq!(super::super::elementwise::parse(name), None, "{name}");
            assert_eq!(super::super::strided::parse(name), None, "{name}");
        }
    }

    #[test]
    fn names_give_the_lists_and_their_roles() {
        let add = parse(ADD).unwrap();
        assert_eq!((add.n, add.reads, add.result, add.elem), (2, 2, 0, 4));
        let mul = parse(MUL).unwrap();
        assert_eq!((mul.n, mul.reads, mul.result, mul.elem), (1, 1, 0, 4));
        // The scalar-list metadata is laid out otherwise; a fused optimizer's functor takes
        // other template arguments.
        assert!(
            parse(&ADD.replace(
                "TensorListMetadata<2>",
                "TensorListScalarListMetadata<float, 2>"
            ))
            .is_none()
        );
        assert!(
            parse(&ADD.replace(
                "BinaryOpListAlphaFunctor<float, 2, 2, 0>",
                "FusedSgdMathFunctor<float, 2>"
            ))
            .is_none()
        );
        // A depth that is not the metadata's, a result past the lists.
        assert!(parse(&ADD.replace("<float, 2, 2, 0>", "<float, 3, 2, 0>")).is_none());
        assert!(parse(&ADD.replace("<float, 2, 2, 0>", "<float, 2, 2, 2>")).is_none());
        assert!(parse("void at::native::vectorized_elementwise_kernel<4, x>(int)").is_none());
    }

    #[test]
    fn a_launch_touches_the_tensors_its_blocks_name_and_not_stale_slots() {
        // momentum (allocs 1, 2) += grads (allocs 3, 4); 100,000 and 70,000 floats: two
        // chunks and two; a stale slot points at alloc 9 (a weight of an earlier launch).
        let size = 400_000;
        let addr = vec![vec![0x100000, 0x200000], vec![0x300000, 0x400000]];
        let (params, buf) = metadata(
            2,
            &addr,
            &[100_000, 70_000],
            &[(0, 0), (0, 1), (1, 0), (1, 1)],
            0x900000,
        );
        let t = touches(parse(ADD).unwrap(), &params, &buf, [4, 1, 1], find(size)).unwrap();
        let got: Vec<(u64, u64, Access)> = t.iter().map(|t| (t.alloc, t.bytes, t.access)).collect();
        assert_eq!(
            got,
            vec![
                (1, 400_000, Access::Rw),
                (3, 400_000, Access::R),
                (2, 280_000, Access::Rw),
                (4, 280_000, Access::R),
            ]
        );
        // Blocks out of tensor order: the same touches.
        let (params2, buf2) = metadata(
            2,
            &addr,
            &[100_000, 70_000],
            &[(0, 0), (1, 0), (0, 1), (1, 1)],
            0x900000,
        );
        assert_eq!(
            touches(parse(ADD).unwrap(), &params2, &buf2, [4, 1, 1], find(size)),
            Some(t.clone())
        );
        // Only the first tensor's blocks: the second's slots are not touched.
        let t = touches(parse(ADD).unwrap(), &params, &buf, [2, 1, 1], find(size)).unwrap();
        assert_eq!(t.iter().map(|t| t.alloc).collect::<Vec<_>>(), vec![1, 3]);
        // As words, the stale slot would be a touch of alloc 9.
        assert!(
            buf.chunks_exact(8)
                .any(|w| u64::from_le_bytes(w.try_into().unwrap()) == 0x900000)
        );
    }

    #[test]
    fn an_out_of_place_result_is_written_whole_only_where_every_chunk_is_in_the_launch() {
        // `torch._foreach_add(a, b)`: lists a, b read, list 2 the result.
        let name = ADD
            .replace("TensorListMetadata<2>", "TensorListMetadata<3>")
            .replace("<float, 2, 2, 0>", "<float, 3, 2, 2>");
        let l = parse(&name).unwrap();
        let addr = vec![vec![0x100000], vec![0x200000], vec![0x300000]];
        let (params, buf) = metadata(3, &addr, &[100_000], &[(0, 0), (0, 1)], 0);
        let t = touches(l, &params, &buf, [2, 1, 1], find(400_000)).unwrap();
        assert_eq!(t[2].access, Access::W);
        assert_eq!((t[0].access, t[1].access), (Access::R, Access::R));
        // One chunk of two (the tensor split over two launches): not whole.
        let t = touches(l, &params, &buf, [1, 1, 1], find(400_000)).unwrap();
        assert_eq!(t[2].access, Access::Rw);
        // A result smaller than its allocation: not whole either.
        let t = touches(l, &params, &buf, [2, 1, 1], find(800_000)).unwrap();
        assert_eq!(t[2].access, Access::Rw);
    }

    #[test]
    fn what_the_layout_does_not_settle_is_left_to_the_conservative_rule() {
        let l = parse(ADD).unwrap();
        let addr = vec![vec![0x100000], vec![0x300000]];
        let (params, buf) = metadata(2, &addr, &[100_000], &[(0, 0), (0, 1)], 0);
        let find = find(400_000);
        assert!(touches(l, &params, &buf, [2, 1, 1], &find).is_some());
        // A parameter of another size (another build's metadata, or another struct).
        assert!(touches(l, &[(0, params[0].1 - 8)], &buf, [2, 1, 1], &find).is_none());
        // More blocks than the metadata holds; a 2-D grid; a block naming a slot past M.
        assert!(touches(l, &params, &buf, [2241, 1, 1], &find).is_none());
        assert!(touches(l, &params, &buf, [2, 2, 1], &find).is_none());
        let (p2, b2) = metadata(2, &addr, &[100_000], &[(0, 0), (448, 0)], 0);
        assert!(touches(l, &p2, &b2, [2, 1, 1], &find).is_none());
        // A tensor past its allocation's end, or an address in no allocation.
        let (p3, b3) = metadata(2, &addr, &[200_000], &[(0, 0)], 0);
        assert!(touches(l, &p3, &b3, [1, 1, 1], &find).is_none());
        let (p4, b4) = metadata(
            2,
            &[vec![0x100000], vec![0xa00000]],
            &[100_000],
            &[(0, 0)],
            0,
        );
        assert!(touches(l, &p4, &b4, [1, 1, 1], &find).is_none());
    }

    #[test]
    fn the_pre_cuda_13_layout_is_recognised_by_its_size() {
        // n = 1: 8 * 110 + 8 * 110 + 320 + 4 * 320 + 4 = 3364, padded to 3368.
        assert_eq!(layout(1, 3368), Some((110, 320, 1)));
        assert_eq!(layout(1, 3364), None);
        let w = pointer_words(parse(MUL).unwrap(), &[(0, 3368)]).unwrap();
        assert_eq!((w.len(), w[109]), (110, 872));
    }
}
