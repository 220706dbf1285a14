//! PyTorch's TensorIterator kernels over contiguous operands: which they are (from the
//! kernel's name) and the tensors they touch (from its parameters).

use super::words::{Found, Operands, element_size, words};
use planner::trace::{Access, Touch};

/// The operand count and output element size of a TensorIterator kernel for contiguous
/// operands, from its demangled name; None for any other kernel.
pub fn parse(name: &str) -> Option<Operands> {
    let rest = name
        .strip_prefix("void at::native::vectorized_elementwise_kernel<")
        .or_else(|| name.strip_prefix("void at::native::unrolled_elementwise_kernel<"))?;
    // The operand count: `std::array<char*, 3ul>` (c++filt) or `(unsigned long)3`.
    let k: usize = rest
        .split("std::array<char*, ")
        .nth(1)?
        .trim_start_matches("(unsigned long)")
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()?;
    Some((k, element_size(rest)?))
}

/// Exact touches of PyTorch's TensorIterator kernels over contiguous operands
/// (`vectorized_elementwise_kernel`, `unrolled_elementwise_kernel`: ATen's CUDALoops.cuh). They
/// take `(int N, functor, array of K operand pointers, ...)` and are launched for one output:
/// operand 0 is written, N elements from its start, from the others, each read. The output's
/// element size is taken as the first scalar type the name's template arguments give (the
/// functor's): the write covers the allocation only where it starts it and N such elements fill
/// it exactly, and only then is it `w` (written whole, so replaying the kernel rebuilds it).
/// Such an output that is also an input at the same address (an in-place `relu_`, `add_`) is
/// an exact read-modify-write of the whole allocation: `rw` with `bytes` the allocation's size.
/// An output of another type, a view into a larger buffer, or one an input overlaps elsewhere
/// is `rw` with `bytes` 0 (extent unknown). Any other parameter word that points into an allocation (a functor holding a device
/// pointer) leaves the kernel to the conservative rule. None: not such a kernel.
pub fn elementwise(
    (k, elem): Operands,
    layout: &[(usize, usize)],
    buf: &[u8],
    find: impl Fn(u64) -> Option<Found>,
) -> Option<Vec<Touch>> {
    let (&(n_off, n_size), &(data_off, data_size)) = (layout.first()?, layout.get(2)?);
    if k == 0 || n_size != 4 || data_size != 8 * k {
        return None;
    }
    let n = i32::from_le_bytes(buf.get(n_off..n_off + 4)?.try_into().ok()?);
    let data = data_off..data_off + data_size;
    let mut out: Vec<Touch> = Vec::new();
    for (at, w) in words(layout, buf) {
        let found = find(w);
        if !data.contains(&at) {
            if found.is_some() {
                return None;
            }
            continue;
        }
        let (alloc, offset, size) = found?;
        if at == data.start {
            let whole = n > 0 && offset == 0 && size == n as u64 * elem;
            out.push(Touch {
                alloc,
                offset,
                bytes: if whole { size } else { 0 },
                access: if whole { Access::W } else { Access::Rw },
            });
            continue;
        }
        // An input in the output's allocation: read and written. Exactly in place (the same
        // address as a whole output): an exact read-modify-write of the whole allocation, `rw`
        // over all its bytes; overlapping otherwise: `rw` of unknown extent.
        if out[0].alloc == alloc {
            // (An output's `bytes` is not 0 only where it is written whole.)
            let exact = offset == out[0].offset && out[0].bytes > 0;
            out[0].access = Access::Rw;
            if !exact {
                out[0].bytes = 0;
            }
        }
        // One touch per distinct address, so that a replay finds every operand's word.
        if !out.iter().any(|t| t.alloc == alloc && t.offset == offset) {
            out.push(Touch {
                alloc,
                offset,
                bytes: 0,
                access: Access::R,
            });
        }
    }
    Some(out)
}
