//! Exact touches of PyTorch's TensorIterator kernel for strided operands
//! (`elementwise_kernel<128, U, gpu_kernel_impl_nocast<F>::{lambda(int)#1}>`, ATen's
//! CUDALoops.cuh): a `.contiguous()` copy, an add with a broadcast bias. It takes `(int N,
//! closure)`, and the closure holds, in this order:
//! * an `OffsetCalculator<K>` (ATen/cuda/detail/OffsetCalculator.cuh): `int dims`, then
//!   [`MAX_DIMS`] `IntDivider<uint32_t>` (divisor, magic, shift: 12 bytes each) whose divisors
//!   are the sizes, then `uint32_t strides[MAX_DIMS][K]`, in bytes, operand by operand;
//! * `Array<char*, K>`: operand 0 the output, the others the inputs (K is F's arity + 1);
//! * F itself.
//!
//! The calculator's entries past `dims` are never initialised: they hold whatever the host's
//! stack held, stale pointers among it (in a traced BERT step, 388 of 915 copies had a word
//! there pointing into another live tensor). Read as words, such a launch touches tensors it
//! never reads; read by this layout, it touches its operands only.
//!
//! The output is written whole (`w`) only where its strides place N elements of its type
//! densely from its allocation's start to its end (torch rejects outputs with internal
//! overlap, and each element is written once); the type is the first scalar type F's name
//! gives (the copied type of a copy's `{lambda(float)#1}`, a functor's template argument).
//! Otherwise it is `rw` of unknown extent. A word of F that points into an allocation, a
//! calculator whose sizes do not multiply to N, or a closure smaller than the layout leaves
//! the kernel to the conservative rule.

use super::words::{Found, element_size, le_at, words};
use planner::trace::{Access, Touch};

/// `MAX_DIMS` of ATen's OffsetCalculator.
const MAX_DIMS: usize = 25;

/// The most operands a strided kernel's closure is searched for (TensorIterator's functors take
/// at most a few inputs).
const MAX_OPERANDS: usize = 8;

/// A strided kernel as its name gives it: the operand count (F's arity + 1) where the name says
/// it, as a lambda's parameter list does (None for a functor such as `BinaryFunctor<float,
/// float, float, MulFunctor<float>>`, whose call operator's arity its name does not show), and
/// the output's element size.
pub type Named = (Option<usize>, u64);

/// The [`Named`] operands of a strided TensorIterator kernel, from its demangled name; None for
/// any other kernel.
pub fn parse(name: &str) -> Option<Named> {
    let rest = name.strip_prefix("void at::native::elementwise_kernel<")?;
    let f = rest
        .split_once("gpu_kernel_impl_nocast<")?
        .1
        .split_once(">(at::TensorIteratorBase&")?
        .0;
    let arity = if f.ends_with('}') {
        Some(lambda_arity(f)? + 1)
    } else {
        None
    };
    Some((arity, element_size(f)?))
}

/// The operand count: the name's, or else the one the closure's size gives. The closure is the
/// calculator, the operand array and F, and each further operand adds 100 bytes of strides (a
/// 4-byte stride per dimension) and a pointer before F, at least 104 bytes once aligned: the
/// largest count whose operand array fits is the one, unless F itself holds 96 bytes or more (a
/// functor holds a scalar or two). A wrong
/// count reads pointers where F or the calculator is; [`touches`] then finds a word of F that
/// points into an allocation, or an operand word that points nowhere, and gives up.
fn operand_count(named: Option<usize>, layout: &[(usize, usize)]) -> Option<usize> {
    let &(_, size) = layout.get(1)?;
    named.or_else(|| {
        (1..=MAX_OPERANDS).rev().find(|&k| {
            let (_, data) = closure_layout(k);
            data + 8 * k <= size
        })
    })
}

/// The parameter count of a lambda type as demangled, `...::{lambda(float, bool)#1}`.
fn lambda_arity(f: &str) -> Option<usize> {
    let params = f.strip_suffix('}')?.rsplit_once("{lambda(")?.1;
    let params = params.rsplit_once(")#")?.0;
    if params.trim().is_empty() {
        return Some(0);
    }
    let (mut depth, mut n) = (0i32, 1);
    for c in params.chars() {
        match c {
            '(' | '<' | '{' | '[' => depth += 1,
            ')' | '>' | '}' | ']' => depth -= 1,
            ',' if depth == 0 => n += 1,
            _ => {}
        }
    }
    Some(n)
}

/// The calculator's size for `k` operands, and where the operand array starts in the closure.
fn closure_layout(k: usize) -> (usize, usize) {
    let calc = 4 + 12 * MAX_DIMS + 4 * MAX_DIMS * k;
    (calc, calc.div_ceil(8) * 8)
}

/// Where, in the parameter buffer, the operand pointers of a kernel are.
pub fn pointer_words(named: Option<usize>, layout: &[(usize, usize)]) -> Option<Vec<usize>> {
    let k = operand_count(named, layout)?;
    let &(closure, size) = layout.get(1)?;
    let (_, data) = closure_layout(k);
    (layout.len() == 2 && k > 0 && size >= data + 8 * k)
        .then(|| (0..k).map(|i| closure + data + 8 * i).collect())
}

/// The touches of one launch (see the module's comment); None: left to the conservative rule.
pub fn touches(
    (named, elem): Named,
    layout: &[(usize, usize)],
    buf: &[u8],
    find: impl Fn(u64) -> Option<Found>,
) -> Option<Vec<Touch>> {
    let (&(n_off, n_size), &(closure, _)) = (layout.first()?, layout.get(1)?);
    let k = operand_count(named, layout)?;
    let words_at = pointer_words(Some(k), layout)?;
    if n_size != 4 {
        return None;
    }
    let n = u64::try_from(i32::from_le_bytes(
        buf.get(n_off..n_off + 4)?.try_into().ok()?,
    ))
    .ok()?;
    let (calc, _) = closure_layout(k);
    let dims = usize::try_from(le_at(buf, closure, 4)?)
        .ok()
        .filter(|&d| d <= MAX_DIMS)?;
    // (size, the output's stride in bytes) of each dimension.
    let dim: Vec<(u64, u64)> = (0..dims)
        .map(|d| {
            let size = le_at(buf, closure + 4 + 12 * d, 4)?;
            let stride = le_at(buf, closure + 4 + 12 * MAX_DIMS + 4 * k * d, 4)?;
            Some((size, stride))
        })
        .collect::<Option<_>>()?;
    // (Checked: 25 sizes from the buffer may overflow.)
    if dim.iter().try_fold(1u64, |p, &(s, _)| p.checked_mul(s)) != Some(n) {
        return None;
    }
    // The output's strides are in bytes: one element's is its size.
    let dense = super::signature::dense(dim, elem);
    let mut out: Vec<Touch> = Vec::new();
    for (at, w) in words(layout, buf) {
        // The calculator holds integers only (and stale bytes past `dims`).
        if at < closure + calc && at >= closure {
            continue;
        }
        let found = find(w);
        let Some(i) = words_at.iter().position(|&x| x == at) else {
            if found.is_some() {
                return None;
            }
            continue;
        };
        let (alloc, offset, size) = found?;
        if i == 0 {
            let whole = dense && n > 0 && offset == 0 && n.checked_mul(elem) == Some(size);
            out.push(Touch {
                alloc,
                offset,
                bytes: if whole { size } else { 0 },
                access: if whole { Access::W } else { Access::Rw },
            });
            continue;
        }
        // An input in the output's allocation: how the two overlap is not known.
        if out[0].alloc == alloc {
            out[0].access = Access::Rw;
            out[0].bytes = 0;
        }
        if !out.iter().any(|t| t.alloc == alloc && t.offset == offset) {
            out.push(Touch {
                alloc,
                offset,
                bytes: 0,
                access: Access::R,
            });
        }
    }
    (!out.is_empty()).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `.contiguous()` copy of floats, as torch 2.x's fatbin names it (demangled).
    const COPY: &str = "void at::native::elementwise_kernel<128, 2, void at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}>(at::TensorIteratorBase&, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1} const&)::{lambda(int)#1}>(int, void at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}>(at::TensorIteratorBase&, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1} const&)::{lambda(int)#1})";
    const ADD: &str = "void at::native::elementwise_kernel<128, 2, void at::native::gpu_kernel_impl_nocast<at::native::CUDAFunctor_add<float> >(at::TensorIteratorBase&, at::native::CUDAFunctor_add<float> const&)::{lambda(int)#1}>(int, void at::native::gpu_kernel_impl_nocast<at::native::CUDAFunctor_add<float> >(at::TensorIteratorBase&, at::native::CUDAFunctor_add<float> const&)::{lambda(int)#1})";
    const MUL: &str = "void at::native::elementwise_kernel<128, 2, void at::native::gpu_kernel_impl_nocast<at::native::BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> > >(at::TensorIteratorBase&, at::native::BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> > const&)::{lambda(int)#1}>(int, void at::native::gpu_kernel_impl_nocast<at::native::BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> > >(at::TensorIteratorBase&, at::native::BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> > const&)::{lambda(int)#1})";
    /// A tensor times a scalar the functor holds (`x * 0.5` over a strided `x`).
    const SCALE: &str = "void at::native::elementwise_kernel<128, 2, void at::native::gpu_kernel_impl_nocast<at::native::BUnaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> > >(at::TensorIteratorBase&, at::native::BUnaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> > const&)::{lambda(int)#1}>(int, void at::native::gpu_kernel_impl_nocast<at::native::BUnaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> > >(at::TensorIteratorBase&, at::native::BUnaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> > const&)::{lambda(int)#1})";
    const MASKED: &str = "void at::native::elementwise_kernel<128, 2, void at::native::gpu_kernel_impl_nocast<void at::native::(anonymous namespace)::masked_scale_kernel<bool, float, float>(at::Tensor&, at::Tensor const&, at::Tensor const&, float)::{lambda(float, bool)#1}>(at::TensorIteratorBase&, void at::native::(anonymous namespace)::masked_scale_kernel<bool, float, float>(at::Tensor&, at::Tensor const&, at::Tensor const&, float)::{lambda(float, bool)#1} const&)::{lambda(int)#1}>(int, void at::native::gpu_kernel_impl_nocast<void at::native::(anonymous namespace)::masked_scale_kernel<bool, float, float>(at::Tensor&, at::Tensor const&, at::Tensor const&, float)::{lambda(float, bool)#1}>(at::TensorIteratorBase&, void at::native::(anonymous namespace)::masked_scale_kernel<bool, float, float>(at::Tensor&, at::Tensor const&, at::Tensor const&, float)::{lambda(float, bool)#1} const&)::{lambda(int)#1})";

    /// Allocations 1 to 4 at 0x1000 * id, each `size` bytes.
    fn find(size: u64) -> impl Fn(u64) -> Option<Found> {
        move |w| {
            let id = w / 0x1000;
            ((1..=4).contains(&id) && w % 0x1000 < size).then_some((id, w % 0x1000, size))
        }
    }

    /// The layout and buffer of a launch with `k` operands over `n` elements: `dims` (size,
    /// output stride in bytes) and the operands' addresses, a closure `extra` bytes longer
    /// than the operand array's end (F), and every byte of the calculator past `dims` left as
    /// `stale` (a word of the stack).
    fn launch(
        k: usize,
        n: i32,
        dims: &[(u32, u32)],
        operands: &[u64],
        extra: usize,
        stale: u64,
    ) -> ([(usize, usize); 2], Vec<u8>) {
        let (_, data) = closure_layout(k);
        let size = (data + 8 * k + extra).div_ceil(8) * 8;
        let mut b = vec![0u8; 8 + size];
        for chunk in b[8..8 + data].chunks_exact_mut(8) {
            chunk.copy_from_slice(&stale.to_le_bytes());
        }
        b[..4].copy_from_slice(&n.to_le_bytes());
        let c = 8;
        b[c..c + 4].copy_from_slice(&(dims.len() as u32).to_le_bytes());
        for (d, &(s, stride)) in dims.iter().enumerate() {
            b[c + 4 + 12 * d..c + 8 + 12 * d].copy_from_slice(&s.to_le_bytes());
            let at = c + 4 + 12 * MAX_DIMS + 4 * k * d;
            b[at..at + 4].copy_from_slice(&stride.to_le_bytes());
        }
        for (i, &p) in operands.iter().enumerate() {
            b[c + data + 8 * i..c + data + 8 * i + 8].copy_from_slice(&p.to_le_bytes());
        }
        ([(0, 4), (8, size)], b)
    }

    fn touch(alloc: u64, bytes: u64, access: Access) -> Touch {
        Touch {
            alloc,
            offset: 0,
            bytes,
            access,
        }
    }

    #[test]
    fn names_give_the_operand_count_and_the_element_size() {
        assert_eq!(parse(COPY), Some((Some(2), 4)));
        // A functor: its arity comes from the closure's size.
        assert_eq!(parse(ADD), Some((None, 4)));
        assert_eq!(parse(MUL), Some((None, 4)));
        // The copied type of a copy of halves.
        assert_eq!(
            parse(&COPY.replace("lambda(float)", "lambda(c10::Half)")),
            Some((Some(2), 2))
        );
        // A lambda of two inputs; its first scalar type (bool) is not its output's, so its
        // output is never found whole: 256 one-byte elements do not fill 1 KiB.
        assert_eq!(parse(MASKED), Some((Some(3), 1)));
        // Another kernel.
        assert_eq!(
            parse(&COPY.replace("gpu_kernel_impl_nocast", "gpu_kernel_impl")),
            None
        );
    }

    /// The launch hook keeps one reader per kernel (`launch::Reader`): the contiguous parser
    /// must not claim these names, nor this one its or the typed signature's (which reads any
    /// name, and is asked last).
    #[test]
    fn no_other_reader_claims_a_strided_kernel() {
        const GELU: &str = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, std::array<char*, (unsigned long)3>, false>(int, at::native::CUDAFunctor_add<float>, std::array<char*, (unsigned long)3>)";
        const MAX_POOL: &str = "void at::native::(anonymous namespace)::max_pool_forward_nchw<float, int>(int, float const*, long, long, long, int, int, int, int, int, int, int, int, int, int, float*, long*)";
        for name in [COPY, ADD, MASKED, MUL, SCALE] {
            assert_eq!(super::super::elementwise::parse(name), None, "{name}");
        }
        assert!(super::super::elementwise::parse(GELU).is_some());
        assert!(super::super::signature::parse(MAX_POOL).is_some());
        for name in [GELU, MAX_POOL] {
            assert_eq!(parse(name), None, "{name}");
        }
    }

    #[test]
    fn a_permuted_copy_writes_its_output_whole_and_reads_its_input() {
        // [8, 4, 8] floats read through a transpose into a dense output (strides 4, 256, 32
        // bytes: another order than the dimensions'), 1 KiB.
        let dims = [(8, 4), (4, 256), (8, 32)];
        let (layout, b) = launch(2, 256, &dims, &[0x2000, 0x1000], 8, 0);
        assert_eq!(
            touches(parse(COPY).unwrap(), &layout, &b, find(1024)),
            Some(vec![touch(2, 1024, Access::W), touch(1, 0, Access::R)])
        );
        assert_eq!(
            pointer_words(Some(2), &layout),
            Some(vec![8 + 504, 8 + 512]),
            "the operand array follows a 504-byte calculator"
        );
    }

    #[test]
    fn stale_words_past_dims_are_not_touches() {
        // The stack left a pointer into allocation 3 in the calculator's unused entries.
        let dims = [(256, 4)];
        let (layout, b) = launch(2, 256, &dims, &[0x2000, 0x1000], 8, 0x3000);
        let t = touches(parse(COPY).unwrap(), &layout, &b, find(1024)).unwrap();
        assert_eq!(t, vec![touch(2, 1024, Access::W), touch(1, 0, Access::R)]);
        // Read as words (the conservative rule), the launch would touch allocation 3 too.
        assert!(words(&layout, &b).any(|(_, w)| w == 0x3000));
    }

    #[test]
    fn a_broadcast_add_reads_both_inputs() {
        // out[64, 4] = x[64, 4] + bias[4] (the bias's stride 0 along the rows).
        let dims = [(4u32, 4u32), (64, 16)];
        let (layout, mut b) = launch(3, 256, &dims, &[0x3000, 0x1000, 0x2000], 8, 0);
        // The inputs' strides: x dense, the bias 0 along the rows.
        let s = 8 + 4 + 12 * MAX_DIMS;
        for (d, (x, bias)) in [(4u32, 4u32), (16, 0)].into_iter().enumerate() {
            b[s + 12 * d + 4..s + 12 * d + 8].copy_from_slice(&x.to_le_bytes());
            b[s + 12 * d + 8..s + 12 * d + 12].copy_from_slice(&bias.to_le_bytes());
        }
        assert_eq!(
            touches(parse(ADD).unwrap(), &layout, &b, find(1024)),
            Some(vec![
                touch(3, 1024, Access::W),
                touch(1, 0, Access::R),
                touch(2, 0, Access::R),
            ])
        );
    }

    #[test]
    fn what_is_not_provably_a_whole_write_stays_rw() {
        let copy = parse(COPY).unwrap();
        // Every other float of a 2 KiB buffer (`buf[::2].copy_(x)`): 256 elements at stride 8.
        let (layout, b) = launch(2, 256, &[(256, 8)], &[0x2000, 0x1000], 8, 0);
        let t = touches(copy, &layout, &b, find(2048)).unwrap();
        assert_eq!(t[0], touch(2, 0, Access::Rw));
        // Dense, but a view into a larger buffer.
        let (layout, b) = launch(2, 256, &[(256, 4)], &[0x2000, 0x1000], 8, 0);
        let t = touches(copy, &layout, &b, find(2048)).unwrap();
        assert_eq!(t[0], touch(2, 0, Access::Rw));
        // Dense, but from inside its allocation.
        let (layout, b) = launch(2, 4, &[(4, 4)], &[0x2010, 0x1000], 8, 0);
        let t = touches(copy, &layout, &b, find(32)).unwrap();
        assert_eq!(t[0].access, Access::Rw);
        // In place: the input is the output.
        let (layout, b) = launch(2, 256, &[(256, 4)], &[0x1000, 0x1000], 8, 0);
        let t = touches(copy, &layout, &b, find(1024)).unwrap();
        assert_eq!(t, vec![touch(1, 0, Access::Rw)]);
    }

    #[test]
    fn what_the_layout_does_not_settle_is_left_to_the_conservative_rule() {
        let copy = parse(COPY).unwrap();
        // Sizes that do not multiply to N: not the layout this module reads.
        let (layout, b) = launch(2, 300, &[(256, 4)], &[0x2000, 0x1000], 8, 0);
        assert_eq!(touches(copy, &layout, &b, find(1024)), None);
        // Sizes whose product overflows.
        let huge = [(u32::MAX, 4); 3];
        let (layout, b) = launch(2, 256, &huge, &[0x2000, 0x1000], 8, 0);
        assert_eq!(touches(copy, &layout, &b, find(1024)), None);
        // More dimensions than the calculator holds.
        let (layout, mut b) = launch(2, 256, &[(256, 4)], &[0x2000, 0x1000], 8, 0);
        b[8..12].copy_from_slice(&26u32.to_le_bytes());
        assert_eq!(touches(copy, &layout, &b, find(1024)), None);
        // F holds a word that points into an allocation.
        let (layout, mut b) = launch(2, 256, &[(256, 4)], &[0x2000, 0x1000], 8, 0);
        let f = 8 + 504 + 16;
        b[f..f + 8].copy_from_slice(&0x3000u64.to_le_bytes());
        assert_eq!(touches(copy, &layout, &b, find(1024)), None);
        // A closure too small for the operand array.
        let (layout, b) = launch(2, 256, &[(256, 4)], &[0x2000, 0x1000], 0, 0);
        let short = [layout[0], (8, layout[1].1 - 8)];
        assert_eq!(touches(copy, &short, &b, find(1024)), None);
        // An operand that points nowhere known.
        let (layout, b) = launch(2, 256, &[(256, 4)], &[0x2000, 0x10], 8, 0);
        assert_eq!(touches(copy, &layout, &b, find(1024)), None);
    }

    /// The rows of a [64, 4] float tensor scaled by a broadcast [64, 1] one (RMSNorm's
    /// `x * rsqrt(mean(x^2))`): output dense, `x` dense, the scale's stride 0 along a row.
    fn broadcast_mul(extra: usize) -> ([(usize, usize); 2], Vec<u8>) {
        let dims = [(4u32, 4u32), (64, 16)];
        let (layout, mut b) = launch(3, 256, &dims, &[0x3000, 0x1000, 0x2000], extra, 0);
        let s = 8 + 4 + 12 * MAX_DIMS;
        for (d, (x, scale)) in [(4u32, 0u32), (16, 4)].into_iter().enumerate() {
            b[s + 12 * d + 4..s + 12 * d + 8].copy_from_slice(&x.to_le_bytes());
            b[s + 12 * d + 8..s + 12 * d + 12].copy_from_slice(&scale.to_le_bytes());
        }
        (layout, b)
    }

    #[test]
    fn a_functor_s_operands_are_counted_from_the_closure_s_size() {
        // An empty functor (1 byte, the closure rounded up to 8), and one of 95 bytes: three
        // operands either way.
        for extra in [1, 95] {
            let (layout, b) = broadcast_mul(extra);
            assert_eq!(operand_count(None, &layout), Some(3), "F of {extra} bytes");
            assert_eq!(
                touches(parse(MUL).unwrap(), &layout, &b, find(1024)),
                Some(vec![
                    touch(3, 1024, Access::W),
                    touch(1, 0, Access::R),
                    touch(2, 0, Access::R),
                ])
            );
        }
        // A scalar held in F (a float): two operands, the output written whole.
        let (layout, mut b) = launch(2, 256, &[(256, 4)], &[0x2000, 0x1000], 8, 0);
        let f = 8 + 504 + 16;
        b[f..f + 4].copy_from_slice(&0.5f32.to_le_bytes());
        assert_eq!(operand_count(None, &layout), Some(2));
        assert_eq!(
            touches(parse(SCALE).unwrap(), &layout, &b, find(1024)),
            Some(vec![touch(2, 1024, Access::W), touch(1, 0, Access::R)])
        );
        assert_eq!(
            pointer_words(None, &layout),
            Some(vec![8 + 504, 8 + 512]),
            "the operand words a replay rewrites"
        );
    }

    #[test]
    fn a_count_the_closure_does_not_bear_out_is_left_to_the_conservative_rule() {
        // Two operands and an F of 120 bytes whose words past 104 hold the second operand's
        // address: counted as three, the third "operand" word is F's and the output word is
        // the second's, which is then written by a kernel that also reads it; or a pointer is
        // found in F. Either way not a whole write of a tensor no operand names.
        let (layout, mut b) = launch(2, 256, &[(256, 4)], &[0x2000, 0x1000], 120, 0);
        let f = 8 + 504 + 16;
        for w in (f..f + 120).step_by(8) {
            b[w..w + 8].copy_from_slice(&0x1000u64.to_le_bytes());
        }
        let t = touches(parse(SCALE).unwrap(), &layout, &b, find(1024));
        assert!(
            t.as_ref()
                .is_none_or(|t| t.iter().all(|x| x.access != Access::W)),
            "{t:?}"
        );
        // No closure big enough for even one operand.
        assert_eq!(operand_count(None, &[(0, 4), (8, 16)]), None);
    }
}
