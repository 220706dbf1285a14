//! Exact touches of ATen's reductions (`reduce_kernel<nt, output_vec_size, ReduceOp<...>>(R)`,
//! ATen's Reduce.cuh: sums, means, norms, the bias gradients of a backward pass). Its one
//! parameter is the `ReduceOp`, by value: the functor, the identity, a `ReduceConfig`, an input
//! and an output `OffsetCalculator`, then `const void* src; const char* dst[2]; void* acc_buf;
//! void* cta_buf; int* semaphores; int64_t base_idx; bool accumulate; bool final_output; int
//! noutputs`. The head's size depends on the functor and the accumulator type; the tail does
//! not: the six pointers are the 64th to the 24th byte from the struct's end.
//!
//! The calculators' entries past their `dims` are never initialised: stale stack bytes. Read
//! as words, one ResNet-50 run had such a word equal to another live tensor's address: a
//! spurious `rw` touch, a new version of that tensor, and what was made from it no longer
//! recomputable (the same recorded iteration planned to 1.263x of its compute time without the
//! touch and 1.388x with it, `auto` at 0.3 of the peak, simulated H100). Read by the tail:
//! the input is read; the outputs, the accumulation buffer, the cross-block buffer and the
//! semaphores are `rw` (extent unknown: no output is taken as written whole); nothing else.

use super::words::{Found, le_at};
use planner::trace::{Access, Touch};

/// The tail's size: src, dst[2], acc_buf, cta_buf, semaphores, base_idx (8 bytes each), two
/// flags, padding, noutputs.
const TAIL: usize = 64;

/// Whether a kernel is a reduction of this layout, from its demangled name.
pub fn claims(name: &str) -> bool {
    name.strip_prefix("void at::native::reduce_kernel<")
        .is_some_and(|rest| rest.contains("at::native::ReduceOp<"))
}

/// The pointer slots, relative to the parameter buffer: a replay rewrites these only.
pub fn pointer_words(params: &[(usize, usize)]) -> Option<Vec<usize>> {
    let &(at, size) = params.first()?;
    (params.len() == 1 && size >= TAIL && size % 8 == 0)
        .then(|| (0..6).map(|i| at + size - TAIL + 8 * i).collect())
}

/// The touches of one launch (see the module's comment); None: left to the conservative rule.
pub fn touches(
    params: &[(usize, usize)],
    buf: &[u8],
    find: impl Fn(u64) -> Option<Found>,
) -> Option<Vec<Touch>> {
    let words = pointer_words(params)?;
    let &(at, size) = params.first()?;
    let end = at + size;
    // The tail as this layout has it, or not this layout.
    let flags = [le_at(buf, end - 8, 1)?, le_at(buf, end - 7, 1)?];
    let noutputs = le_at(buf, end - 4, 4)?;
    if flags.iter().any(|&f| f > 1) || !(1..=2).contains(&noutputs) {
        return None;
    }
    let mut out: Vec<Touch> = Vec::new();
    for (i, &w_at) in words.iter().enumerate() {
        // dst[1] only where there are two outputs.
        if i == 2 && noutputs < 2 {
            continue;
        }
        let w = le_at(buf, w_at, 8)?;
        if w == 0 {
            if i <= 1 {
                // No input or no output: not this layout.
                return None;
            }
            continue;
        }
        let (alloc, offset, _) = find(w)?;
        let access = if i == 0 { Access::R } else { Access::Rw };
        match out.iter_mut().find(|t| t.alloc == alloc) {
            Some(t) => t.access = Access::Rw,
            None => out.push(Touch {
                alloc,
                offset,
                bytes: 0,
                access,
            }),
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bias gradient's sum over a batch, as torch 2.15 names it (demangled).
    const SUM: &str = "void at::native::reduce_kernel<128, 4, at::native::ReduceOp<float, at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4, 4> >(at::native::ReduceOp<float, at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4, 4>)";

    /// Allocations 1 to 5 at 0x1000 * id, each 0x800 bytes.
    fn find(w: u64) -> Option<Found> {
        let id = w / 0x1000;
        ((1..=5).contains(&id) && w % 0x1000 < 0x800).then_some((id, w % 0x1000, 0x800))
    }

    /// A 560-byte ReduceOp whose head (functor, config, calculators) is filled with `stale`,
    /// and the tail: src, dst[0], dst[1], acc_buf, cta_buf, semaphores, then base_idx, flags,
    /// noutputs.
    fn reduce_op(ptrs: [u64; 6], flags: [u8; 2], noutputs: u32, stale: u64) -> Vec<u8> {
        let size = 560;
        let mut b = vec![0u8; size];
        for c in b[..size - TAIL].chunks_exact_mut(8) {
            c.copy_from_slice(&stale.to_le_bytes());
        }
        let t = size - TAIL;
        for (i, p) in ptrs.iter().enumerate() {
            b[t + 8 * i..t + 8 * i + 8].copy_from_slice(&p.to_le_bytes());
        }
        b[size - 8] = flags[0];
        b[size - 7] = flags[1];
        b[size - 4..].copy_from_slice(&noutputs.to_le_bytes());
        b
    }

    #[test]
    fn the_input_is_read_the_outputs_and_buffers_rw_and_stale_words_nothing() {
        assert!(claims(SUM));
        assert!(!claims(
            "void at::native::vectorized_elementwise_kernel<4, x>(int)"
        ));
        for other in [
            super::super::elementwise::parse(SUM).is_some(),
            super::super::strided::parse(SUM).is_some(),
            super::super::multi_tensor::parse(SUM).is_some(),
            super::super::attention::parse(SUM).is_some(),
        ] {
            // (The typed signature reads any name, and is asked last: `launch::reader`.)
            assert!(!other, "another reader claims the reduction");
        }
        // The head's stale words point into allocation 5: as words, a touch of it.
        let b = reduce_op(
            [0x1000, 0x2000, 0x3000, 0, 0x4000, 0x4100],
            [0, 1],
            1,
            0x5000,
        );
        let t = touches(&[(0, b.len())], &b, find).unwrap();
        let got: Vec<(u64, Access)> = t.iter().map(|t| (t.alloc, t.access)).collect();
        assert_eq!(got, vec![(1, Access::R), (2, Access::Rw), (4, Access::Rw)]);
        assert_eq!(
            pointer_words(&[(0, b.len())]).unwrap(),
            (0..6).map(|i| 496 + 8 * i).collect::<Vec<_>>()
        );
        // Two outputs: dst[1] too.
        let b = reduce_op([0x1000, 0x2000, 0x3000, 0, 0, 0], [0, 1], 2, 0);
        let t = touches(&[(0, b.len())], &b, find).unwrap();
        assert_eq!(t.iter().map(|t| t.alloc).collect::<Vec<_>>(), vec![1, 2, 3]);
        // In place (the output is the input): one touch, rw.
        let b = reduce_op([0x1000, 0x1000, 0, 0, 0, 0], [0, 1], 1, 0);
        let t = touches(&[(0, b.len())], &b, find).unwrap();
        assert_eq!((t.len(), t[0].access), (1, Access::Rw));
    }

    #[test]
    fn a_tail_that_is_not_this_layout_is_left_to_the_conservative_rule() {
        let ok = reduce_op([0x1000, 0x2000, 0, 0, 0, 0], [0, 1], 1, 0);
        assert!(touches(&[(0, ok.len())], &ok, find).is_some());
        for bad in [
            reduce_op([0x1000, 0x2000, 0, 0, 0, 0], [2, 1], 1, 0),
            reduce_op([0x1000, 0x2000, 0, 0, 0, 0], [0, 1], 3, 0),
            reduce_op([0, 0x2000, 0, 0, 0, 0], [0, 1], 1, 0),
            reduce_op([0x1000, 0, 0, 0, 0, 0], [0, 1], 1, 0),
            reduce_op([0x1000, 0x2000, 0, 0x9000, 0, 0], [0, 1], 1, 0),
        ] {
            assert!(touches(&[(0, bad.len())], &bad, find).is_none());
        }
        // Two parameters, or a size that is not a multiple of 8.
        assert!(touches(&[(0, 8), (8, ok.len() - 8)], &ok, find).is_none());
        assert!(touches(&[(0, ok.len() - 4)], &ok, find).is_none());
    }
}
