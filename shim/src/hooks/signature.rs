//! A kernel's touches from its demangled signature. torch's own kernels name their parameter
//! types (`max_pool_forward_nchw<float, int>(int, float const*, long, ..., float*, long*)`).
//! Where every parameter is a scalar, a pointer to one, an `at::cuda::detail::TensorInfo` or an
//! `at::PhiloxCudaState`:
//!
//! * a pointer to `const` data is read (`r`): torch's kernels keep to const-correctness;
//! * any other pointer may be read and written: `rw`, extent unknown;
//! * a `TensorInfo<T, I>` (ATen's strided tensor argument: `T* data; I sizes[25]; I strides[25];
//!   int dims`) has one pointer, `data`; its sizes and strides are integers, never pointer
//!   candidates (torch leaves the unused slots uninitialised, and a stale pair of 4-byte words
//!   can equal an allocation's address). A `const` T is read over the extent its dims, sizes
//!   and strides give; any other T may be written (`rw`, extent unknown), unless the kernel is
//!   one of [`WRITTEN_WHOLE`], the output fills its allocation exactly and a replay would draw
//!   as the launch did (`w`; see [`REPLAY_TAKES_CURRENT_PARAMS`]); so is a non-`const`
//!   pointer that [`WRITTEN_WHOLE`] names, where the elements it says the launch writes (from
//!   a scalar parameter, or one row per block of the grid) fill its allocation;
//! * a `PhiloxCudaState` (the random generator's seed and offset) holds no pointer, unless it
//!   was made during graph capture (`captured_`: its offset is then a device pointer).
//!
//! So such a kernel no longer counts as a possible write to its inputs (a new version of each,
//! which keeps the tensors made from the old one from being recomputed), while what it writes
//! stays conservative, and the kernel itself is not replayed (a replay needs a whole write),
//! but for the kernels of [`WRITTEN_WHOLE`].
//!
//! A parameter of any other type (a functor, another struct) may hide pointers, and a scalar
//! word that points into an allocation may be one: such kernels are left to the conservative
//! rule (every touch `rw`). So is an allocation reached by two parameters, one of them
//! writable, a captured or pointing `PhiloxCudaState`, and a `TensorInfo` whose layout or
//! extent does not fit what the name says.

use super::launch::{Found, words};
use planner::trace::{Access, Touch};

/// One parameter of a kernel's signature.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Param {
    Scalar,
    /// A pointer to scalars of `elem` bytes; `read_only`: to `const` data.
    Pointer {
        read_only: bool,
        elem: u64,
    },
    /// `at::cuda::detail::TensorInfo<T, I>` by value: `elem`, sizeof(T); `index`, sizeof(I);
    /// `signed`: I is signed; `read_only`: T is `const`.
    TensorInfo {
        elem: u64,
        index: usize,
        signed: bool,
        read_only: bool,
    },
    /// `at::PhiloxCudaState` by value.
    Philox,
}

/// What a kernel's demangled name says of its parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct Signature {
    params: Vec<Param>,
    /// From [`WRITTEN_WHOLE`]: the kernel's whole outputs.
    whole: Option<&'static Whole>,
}

/// Which parameters (by index: `TensorInfo`s or pointers) a kernel writes whole, and how many
/// elements it writes to each.
#[derive(Debug, PartialEq)]
struct Whole {
    outputs: &'static [(usize, Count)],
}

/// How many elements a launch writes to one output.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Count {
    /// The value of this scalar parameter.
    Param(usize),
    /// One per block of the grid's x dimension (a kernel with a block per row).
    Rows,
    /// One row of this scalar parameter's length per block of the grid's x dimension.
    RowsOf(usize),
}

/// ATen kernels whose non-const `TensorInfo` outputs are written whole: every element of the
/// tensor each describes, computed from the inputs read and the by-value scalars only, so that
/// launching the recorded parameters again rebuilds them bit for bit. Dropout
/// (ATen/native/cuda/Dropout.cu): `(a, b, c, totalElements, p, philox_args)` writes the output
/// b and the mask c at each of `totalElements` elements from a and a counter-based random draw
/// (Philox, seeded by value from `philox_args`). LayerNorm's forward
/// (ATen/native/cuda/layer_norm_kernel.cu, the vectorized path):
/// `(N, eps, X, gamma, beta, mean, rstd, Y)` is launched with one block per row (`blocks(M)`,
/// M rows of N), and each block writes its row's mean and rstd and its N outputs of Y from X,
/// gamma and beta alone, in a fixed reduction order.
const WRITTEN_WHOLE: &[(&str, Whole)] = &[
    (
        "at::native::(anonymous namespace)::fused_dropout_kernel_vec<",
        Whole {
            outputs: &[(1, Count::Param(3)), (2, Count::Param(3))],
        },
    ),
    (
        "at::native::(anonymous namespace)::fused_dropout_kernel<",
        Whole {
            outputs: &[(1, Count::Param(3)), (2, Count::Param(3))],
        },
    ),
    (
        "at::native::(anonymous namespace)::vectorized_layer_norm_kernel<",
        Whole {
            outputs: &[(5, Count::Rows), (6, Count::Rows), (7, Count::RowsOf(0))],
        },
    ),
];

/// Scalar types as demangled, with their sizes.
const SCALARS: &[(&str, u64)] = &[
    ("float", 4),
    ("double", 8),
    ("c10::Half", 2),
    ("c10::BFloat16", 2),
    ("bool", 1),
    ("char", 1),
    ("signed char", 1),
    ("unsigned char", 1),
    ("short", 2),
    ("unsigned short", 2),
    ("int", 4),
    ("unsigned int", 4),
    ("long", 8),
    ("unsigned long", 8),
    ("long long", 8),
    ("unsigned long long", 8),
];

/// MAX_TENSORINFO_DIMS (ATen/cuda/detail/TensorInfo.cuh).
const TENSORINFO_DIMS: usize = 25;

fn scalar(ty: &str) -> Option<u64> {
    SCALARS
        .iter()
        .find(|(name, _)| *name == ty.trim())
        .map(|&(_, size)| size)
}

/// A type without its `const` (as demanglers print it, after the type, or before it), and
/// whether it had one.
fn unconst(ty: &str) -> (&str, bool) {
    let ty = ty.trim();
    match ty
        .strip_suffix(" const")
        .or_else(|| ty.strip_prefix("const "))
    {
        Some(base) => (base.trim(), true),
        None => (ty, false),
    }
}

fn param(ty: &str) -> Option<Param> {
    let ty = ty.trim();
    if let Some(pointee) = ty.strip_suffix('*') {
        let (base, read_only) = unconst(pointee);
        return scalar(base).map(|elem| Param::Pointer { read_only, elem });
    }
    if let Some(args) = ty
        .strip_prefix("at::cuda::detail::TensorInfo<")
        .and_then(|a| a.strip_suffix('>'))
    {
        let (t, i) = args.rsplit_once(',')?;
        let (t, read_only) = unconst(t);
        let (index, signed) = match i.trim() {
            "unsigned int" => (4, false),
            "int" => (4, true),
            "unsigned long" => (8, false),
            "long" => (8, true),
            _ => return None,
        };
        return Some(Param::TensorInfo {
            elem: scalar(t)?,
            index,
            signed,
            read_only,
        });
    }
    if ty == "at::PhiloxCudaState" {
        return Some(Param::Philox);
    }
    // A scalar passed by value, possibly `const`.
    scalar(unconst(ty).0).map(|_| Param::Scalar)
}

/// The parameter types of a demangled function name: the last parenthesised group, split at
/// its top-level commas.
fn parameter_types(name: &str) -> Option<Vec<&str>> {
    let end = name.len().checked_sub(1).filter(|&e| name[e..] == *")")?;
    let mut depth = 0i32;
    let mut open = None;
    for (i, c) in name[..=end].char_indices().rev() {
        match c {
            ')' => depth += 1,
            '(' => {
                depth -= 1;
                if depth == 0 {
                    open = Some(i);
                    break;
                }
            }
            _ => {}
        }
    }
    let inner = &name[open? + 1..end];
    if inner.trim().is_empty() {
        return Some(Vec::new());
    }
    let (mut out, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '(' | '<' | '{' | '[' => depth += 1,
            ')' | '>' | '}' | ']' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&inner[start..]);
    Some(out)
}

/// The signature of a demangled kernel name; None unless every parameter is of a type this
/// module reads (see its comment).
pub fn parse(name: &str) -> Option<Signature> {
    let params = parameter_types(name)?
        .into_iter()
        .map(param)
        .collect::<Option<Vec<_>>>()?;
    let unqualified = name.strip_prefix("void ").unwrap_or(name);
    let whole = WRITTEN_WHOLE
        .iter()
        .find(|(prefix, _)| unqualified.starts_with(prefix))
        .map(|(_, w)| w)
        // Only where the parameters are what the table says they are.
        .filter(|w| {
            w.outputs.iter().all(|&(o, count)| {
                let scalar = match count {
                    Count::Param(c) | Count::RowsOf(c) => c,
                    Count::Rows => return writable(params.get(o)),
                };
                writable(params.get(o)) && params.get(scalar) == Some(&Param::Scalar)
            })
        });
    Some(Signature { params, whole })
}

/// A parameter a kernel may write: a non-`const` pointer or `TensorInfo`.
fn writable(p: Option<&Param>) -> bool {
    matches!(
        p,
        Some(Param::Pointer {
            read_only: false,
            ..
        }) | Some(Param::TensorInfo {
            read_only: false,
            ..
        })
    )
}

impl Signature {
    /// Where in the parameter buffer (its `layout`) the words are that the signature says hold
    /// pointers: a replay rewrites these and no others.
    pub fn pointer_words(&self, layout: &[(usize, usize)]) -> Option<Vec<usize>> {
        (self.params.len() == layout.len()).then(|| {
            self.params
                .iter()
                .zip(layout)
                .filter(|(p, _)| matches!(p, Param::Pointer { .. } | Param::TensorInfo { .. }))
                .map(|(_, &(off, _))| off)
                .collect()
        })
    }
}

/// A `TensorInfo<T, I>`'s size: the pointer, 2 x 25 indices and `int dims`, padded to 8.
fn tensor_info_size(index: usize) -> usize {
    (8 + 2 * TENSORINFO_DIMS * index + 4).div_ceil(8) * 8
}

/// What a `TensorInfo`'s dims, sizes and strides describe, in elements.
#[derive(Debug, PartialEq)]
struct Shape {
    /// Its elements, and the offset past its last one plus one (0 for an empty tensor).
    elements: u64,
    extent: u64,
    /// Every element at its own offset, filling 0..extent.
    dense: bool,
}

/// The shape in `info`, a `TensorInfo`'s bytes; None where dims is out of range or a size or
/// stride is negative or too large.
fn shape(info: &[u8], index: usize, signed: bool) -> Option<Shape> {
    let at = |k: usize| -> Option<u64> {
        let b = info.get(8 + k * index..8 + (k + 1) * index)?;
        let mut w = [0u8; 8];
        w[..index].copy_from_slice(b);
        let v = u64::from_le_bytes(w);
        let negative = signed && b[index - 1] & 0x80 != 0;
        (!negative).then_some(v)
    };
    let d = 8 + 2 * TENSORINFO_DIMS * index;
    let dims = i32::from_le_bytes(info.get(d..d + 4)?.try_into().ok()?);
    let dims = usize::try_from(dims)
        .ok()
        .filter(|&n| n <= TENSORINFO_DIMS)?;
    let dim: Vec<(u64, u64)> = (0..dims)
        .map(|k| Some((at(k)?, at(TENSORINFO_DIMS + k)?)))
        .collect::<Option<_>>()?;
    let elements = dim
        .iter()
        .try_fold(1u64, |n, &(size, _)| n.checked_mul(size))?;
    if elements == 0 {
        return Some(Shape {
            elements,
            extent: 0,
            dense: true,
        });
    }
    let last = dim.iter().try_fold(0u64, |o, &(size, stride)| {
        o.checked_add((size - 1).checked_mul(stride)?)
    })?;
    Some(Shape {
        elements,
        extent: last + 1,
        dense: dense(dim, 1),
    })
}

/// Whether dimensions of (size, stride) place their elements densely from offset 0: each
/// stride, smallest first, is `unit` (one element's stride) times the product of the sizes
/// below it (any order of dimensions; size-1 dimensions take no room).
pub(super) fn dense(mut dim: Vec<(u64, u64)>, unit: u64) -> bool {
    dim.retain(|&(size, _)| size > 1);
    dim.sort_by_key(|&(_, stride)| stride);
    let mut next = unit;
    dim.iter().all(|&(size, stride)| {
        let ok = stride == next;
        next = next.saturating_mul(size);
        ok
    })
}

/// Whether a replay launches the parameters the producing call had in the iteration under way.
/// It does: the executor gives each recipe the parameter buffer its launch had in this
/// iteration (`runtime::recompute::Recipe::refresh`), and brings its pointers up to date at the
/// replay. A kernel that takes a random generator's state by value draws from the offset that
/// state gives, and torch's generator advances it at every launch: with the planned iteration's
/// buffer a replay would draw another mask than the one its output was made with (the
/// simulated run of `torchlike ... drop` under `recompute`, before the executor took the
/// current buffer: every dropout replay differed from the bytes it rebuilt). Were it false, a
/// [`WRITTEN_WHOLE`] kernel with a `PhiloxCudaState` would write `rw`, never replayed.
const REPLAY_TAKES_CURRENT_PARAMS: bool = true;

/// The touches of a launch of a kernel with signature `sig`, from its parameter `layout`
/// ((offset, size) of each) and packed buffer; None where the signature does not settle them
/// (see the module's comment).
pub fn touches(
    sig: &Signature,
    layout: &[(usize, usize)],
    buf: &[u8],
    grid: [u32; 3],
    find: impl Fn(u64) -> Option<Found>,
) -> Option<Vec<Touch>> {
    touches_as(sig, layout, buf, grid, find, REPLAY_TAKES_CURRENT_PARAMS)
}

/// [`touches`], where a replay takes the current parameters (`current`) or not.
fn touches_as(
    sig: &Signature,
    layout: &[(usize, usize)],
    buf: &[u8],
    grid: [u32; 3],
    find: impl Fn(u64) -> Option<Found>,
    current: bool,
) -> Option<Vec<Touch>> {
    // A replay of a kernel that draws from a generator's state must take this iteration's.
    let replayable = current || !sig.params.contains(&Param::Philox);
    if sig.params.len() != layout.len() {
        return None;
    }
    let mut out: Vec<Touch> = Vec::new();
    for (i, (&(off, size), p)) in layout.iter().zip(&sig.params).enumerate() {
        let bytes = buf.get(off..off + size)?;
        let touch = match *p {
            Param::Scalar => {
                if words(&[(off, size)], buf).any(|(_, w)| find(w).is_some()) {
                    return None;
                }
                continue;
            }
            Param::Philox => {
                // seed_ (u64), offset_ (u64 or int64_t*), offset_intragraph_ (u32), captured_,
                // padded: 24 bytes as the header lays it out, 32 in torch 2.15's fatbins (its
                // BERT's dropout launches: the layout the driver gives ends 8 bytes later, all
                // zero). Whatever follows captured_ is checked for pointers like the rest.
                if !(24..=40).contains(&size) || size % 8 != 0 || bytes[20] != 0 {
                    return None;
                }
                if words(&[(off, size)], buf).any(|(_, w)| find(w).is_some()) {
                    return None;
                }
                continue;
            }
            Param::Pointer { read_only, elem } => {
                let Some((alloc, offset, alloc_size)) =
                    find(u64::from_le_bytes(bytes.try_into().ok()?))
                else {
                    // NULL, or memory that is not the program's device memory.
                    continue;
                };
                let whole = !read_only
                    && replayable
                    && offset == 0
                    && written(sig, i, layout, buf, grid)
                        .and_then(|n| n.checked_mul(elem))
                        .is_some_and(|b| b > 0 && b == alloc_size);
                Touch {
                    alloc,
                    offset,
                    bytes: if whole { alloc_size } else { 0 },
                    access: if read_only {
                        Access::R
                    } else if whole {
                        Access::W
                    } else {
                        Access::Rw
                    },
                }
            }
            Param::TensorInfo {
                elem,
                index,
                signed,
                read_only,
            } => {
                if size != tensor_info_size(index) {
                    return None;
                }
                let data = u64::from_le_bytes(bytes[..8].try_into().ok()?);
                let Some((alloc, offset, alloc_size)) = find(data) else {
                    continue;
                };
                let s = shape(bytes, index, signed)?;
                let extent = s.extent.checked_mul(elem)?;
                // A tensor past its allocation's end: the name and the buffer disagree.
                if offset.checked_add(extent)? > alloc_size {
                    return None;
                }
                if read_only {
                    Touch {
                        alloc,
                        offset,
                        bytes: extent,
                        access: Access::R,
                    }
                } else if replayable
                    && s.dense
                    && s.elements > 0
                    && written(sig, i, layout, buf, grid) == Some(s.elements)
                    && offset == 0
                    && extent == alloc_size
                {
                    Touch {
                        alloc,
                        offset,
                        bytes: alloc_size,
                        access: Access::W,
                    }
                } else {
                    // A partial or unknown write: as every `rw` of unknown extent (a `bytes`
                    // of the whole allocation would read as an exact in-place update).
                    Touch {
                        alloc,
                        offset,
                        bytes: 0,
                        access: Access::Rw,
                    }
                }
            }
        };
        if !out.contains(&touch) {
            out.push(touch);
        }
    }
    // An allocation reached twice, once writably: how the two overlap is not known.
    for t in &out {
        let twice = out.iter().filter(|u| u.alloc == t.alloc).count() > 1;
        if twice && t.access != Access::R {
            return None;
        }
    }
    Some(out)
}

/// How many elements a launch writes to parameter `i`, where it is one of [`WRITTEN_WHOLE`]'s
/// outputs.
fn written(
    sig: &Signature,
    i: usize,
    layout: &[(usize, usize)],
    buf: &[u8],
    grid: [u32; 3],
) -> Option<u64> {
    let w = sig.whole?;
    let &(_, count) = w.outputs.iter().find(|o| o.0 == i)?;
    let value = |c: usize| {
        let &(off, size) = layout.get(c)?;
        let b = buf.get(off..off + size).filter(|_| size <= 8)?;
        let mut v = [0u8; 8];
        v[..size].copy_from_slice(b);
        Some(u64::from_le_bytes(v))
    };
    // A block per row: the rows are the grid's x blocks (y and z are 1 for such a launch).
    let rows = (grid[1] == 1 && grid[2] == 1).then_some(u64::from(grid[0]));
    match count {
        Count::Param(c) => value(c),
        Count::Rows => rows,
        Count::RowsOf(c) => rows?.checked_mul(value(c)?),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// As torch 2.15's fatbin names them (demangled).
    const MAX_POOL: &str = "void at::native::(anonymous namespace)::max_pool_forward_nchw<float, int>(int, float const*, long, long, long, int, int, int, int, int, int, int, int, int, int, float*, long*)";
    const MAX_POOL_BACKWARD: &str = "void at::native::(anonymous namespace)::max_pool_backward_nchw<float, float, int>(float const*, long const*, int, int, int, int, int, int, int, int, int, int, int, int, int, int, float*)";

    /// The packed layout of a kernel's parameters (scalars of their size, 8-byte pointers, each
    /// aligned to its size; TensorInfo and PhiloxCudaState as torch lays them out, 8-byte
    /// aligned) and a buffer holding `values` at them (a struct's first 8 bytes).
    fn packed(name: &str, values: &[u64]) -> (Vec<(usize, usize)>, Vec<u8>) {
        let types = parameter_types(name).unwrap();
        let (mut layout, mut at) = (Vec::new(), 0usize);
        for ty in &types {
            let (size, align) = match param(ty) {
                Some(Param::TensorInfo { index, .. }) => (tensor_info_size(index), 8),
                Some(Param::Philox) => (24, 8),
                _ if ty.ends_with('*') => (8, 8),
                _ => {
                    let size = scalar(unconst(ty).0).unwrap_or(4) as usize;
                    (size, size)
                }
            };
            at = at.div_ceil(align) * align;
            layout.push((at, size));
            at += size;
        }
        let mut buf = vec![0u8; at];
        for (&(off, size), &v) in layout.iter().zip(values) {
            let n = size.min(8);
            buf[off..off + n].copy_from_slice(&v.to_le_bytes()[..n]);
        }
        (layout, buf)
    }

    /// A grid of one block.
    const ONE: [u32; 3] = [1, 1, 1];

    /// Allocations 1, 2 and 3 at 0x1000 * id, of the sizes given.
    fn find(sizes: [u64; 3]) -> impl Fn(u64) -> Option<Found> {
        move |w| {
            let id = w / 0x1000;
            let size = *sizes.get((id as usize).wrapping_sub(1))?;
            (w % 0x1000 < size).then_some((id, w % 0x1000, size))
        }
    }

    fn touch(alloc: u64, offset: u64, access: Access) -> Touch {
        Touch {
            alloc,
            offset,
            bytes: 0,
            access,
        }
    }

    /// max_pool2d(2x2) of a 1x1x4x4 float input into `out` and `mask`.
    fn max_pool(out: u64, mask: u64) -> (Vec<(usize, usize)>, Vec<u8>) {
        let mut v = vec![4, 0x1000, 1, 4, 4, 2, 2, 2, 2, 2, 2, 0, 0, 1, 1];
        v.extend([out, mask]);
        packed(MAX_POOL, &v)
    }

    #[test]
    fn max_pooling_reads_its_input_and_may_write_its_output_and_indices() {
        let sig = parse(MAX_POOL).unwrap();
        let (layout, buf) = max_pool(0x2000, 0x3000);
        assert_eq!(
            touches(&sig, &layout, &buf, ONE, find([64, 16, 32])),
            Some(vec![
                touch(1, 0, Access::R),
                touch(2, 0, Access::Rw),
                touch(3, 0, Access::Rw),
            ])
        );
        // A pointer inside an allocation: the touch says where.
        let (layout, buf) = max_pool(0x2004, 0x3000);
        let t = touches(&sig, &layout, &buf, ONE, find([64, 16, 32])).unwrap();
        assert_eq!(t[1], touch(2, 4, Access::Rw));
        // A NULL or foreign pointer is no touch.
        let (layout, buf) = max_pool(0x2000, 0);
        let t = touches(&sig, &layout, &buf, ONE, find([64, 16, 32])).unwrap();
        assert_eq!(t.len(), 2);
    }

    /// Its backward pass, from the output's gradient and the indices into the input's gradient.
    fn max_pool_backward(grad: u64, mask: u64, dx: u64) -> (Vec<(usize, usize)>, Vec<u8>) {
        let mut v = vec![grad, mask];
        v.extend([1, 1, 4, 4, 2, 2, 2, 2, 2, 2, 0, 0, 1, 1]);
        v.push(dx);
        packed(MAX_POOL_BACKWARD, &v)
    }

    #[test]
    fn the_backward_pass_reads_the_gradient_and_indices_and_may_write_the_input_gradient() {
        let sig = parse(MAX_POOL_BACKWARD).unwrap();
        let (layout, buf) = max_pool_backward(0x2000, 0x3000, 0x1000);
        assert_eq!(
            touches(&sig, &layout, &buf, ONE, find([64, 16, 32])),
            Some(vec![
                touch(2, 0, Access::R),
                touch(3, 0, Access::R),
                touch(1, 0, Access::Rw),
            ])
        );
    }

    #[test]
    fn what_the_signature_does_not_settle_is_left_to_the_conservative_rule() {
        let sig = parse(MAX_POOL).unwrap();
        // The input is also the output (an allocation reached twice, once writably).
        let (layout, buf) = max_pool(0x1000, 0x3000);
        assert_eq!(touches(&sig, &layout, &buf, ONE, find([64, 16, 32])), None);
        // Two reads of one allocation are fine.
        let (layout, buf) = max_pool_backward(0x2000, 0x2008, 0x1000);
        let sig_b = parse(MAX_POOL_BACKWARD).unwrap();
        assert_eq!(
            touches(&sig_b, &layout, &buf, ONE, find([64, 16, 32])).map(|t| t.len()),
            Some(3)
        );
        // A scalar that points into an allocation.
        let (layout, mut buf) = max_pool(0x2000, 0x3000);
        let (off, _) = layout[2];
        buf[off..off + 8].copy_from_slice(&0x1000u64.to_le_bytes());
        assert_eq!(touches(&sig, &layout, &buf, ONE, find([64, 16, 32])), None);
        // Another layout than the name says.
        let (layout, buf) = max_pool(0x2000, 0x3000);
        assert_eq!(
            touches(&sig, &layout[1..], &buf, ONE, find([64, 16, 32])),
            None
        );
        // A functor or a struct among the parameters.
        let elementwise = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, std::array<char*, (unsigned long)3>, false>(int, at::native::CUDAFunctor_add<float>, std::array<char*, (unsigned long)3>)";
        assert_eq!(parse(elementwise), None);
        let reduce = "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float, float, float>, unsigned int, float, 4, 4> >(at::native::ReduceOp<float, at::native::MeanOps<float, float, float, float>, unsigned int, float, 4, 4>)";
        assert_eq!(parse(reduce), None);
        // A name without a parameter list (an extern "C" kernel), or a pointer to a pointer.
        assert_eq!(parse("sgd_"), None);
        assert_eq!(parse("void k(float**, int)"), None);
    }

    #[test]
    fn signatures_parse_past_nested_template_arguments() {
        let softmax = "void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, true, false, 32>(float*, float const*, int, int, int, bool const*, int, bool)";
        let sig = parse(softmax).unwrap();
        assert_eq!(sig.params.len(), 8);
        assert_eq!(
            sig.params[0],
            Param::Pointer {
                read_only: false,
                elem: 4
            }
        );
        assert_eq!(
            sig.params[1],
            Param::Pointer {
                read_only: true,
                elem: 4
            }
        );
        assert_eq!(
            sig.params[5],
            Param::Pointer {
                read_only: true,
                elem: 1
            }
        );
        assert_eq!(parameter_types("void v()"), Some(Vec::new()));
    }

    /// ATen's dropout as torch 2.x's fatbins name it, demangled by c++filt and cpp_demangle.
    const DROPOUT_MANGLED: &str = "_ZN2at6native12_GLOBAL__N_124fused_dropout_kernel_vecIffjLi1ELi4EbEEvNS_4cuda6detail10TensorInfoIKT_T1_EENS5_IS6_S8_EENS5_IT4_S8_EES8_T0_NS_15PhiloxCudaStateE";
    const DROPOUT: &str = "void at::native::(anonymous namespace)::fused_dropout_kernel_vec<float, float, unsigned int, 1, 4, bool>(at::cuda::detail::TensorInfo<float const, unsigned int>, at::cuda::detail::TensorInfo<float, unsigned int>, at::cuda::detail::TensorInfo<bool, unsigned int>, unsigned int, float, at::PhiloxCudaState)";

    /// Allocations 1 to 4 at 0x1000 * id, of the sizes given.
    fn find4(sizes: [u64; 4]) -> impl Fn(u64) -> Option<Found> {
        move |w| {
            let id = w / 0x1000;
            let size = *sizes.get((id as usize).wrapping_sub(1))?;
            (w % 0x1000 < size).then_some((id, w % 0x1000, size))
        }
    }

    /// Writes a TensorInfo<_, I> (I of `index` bytes) at `off`: its pointer, `shape` as (size,
    /// stride) per dimension, dims; the unused slots keep what the buffer held.
    fn info(buf: &mut [u8], off: usize, index: usize, data: u64, shape: &[(u64, u64)]) {
        buf[off..off + 8].copy_from_slice(&data.to_le_bytes());
        for (k, &(size, stride)) in shape.iter().enumerate() {
            let s = off + 8 + k * index;
            buf[s..s + index].copy_from_slice(&size.to_le_bytes()[..index]);
            let t = off + 8 + (TENSORINFO_DIMS + k) * index;
            buf[t..t + index].copy_from_slice(&stride.to_le_bytes()[..index]);
        }
        let d = off + 8 + 2 * TENSORINFO_DIMS * index;
        buf[d..d + 4].copy_from_slice(&(shape.len() as i32).to_le_bytes());
    }

    /// Dropout of n floats: a (input) at `a`, b (output) and c (mask) as `(pointer, shape)`,
    /// p = 0.9 kept, the Philox seed and offset by value. Every unused size and stride slot
    /// holds stale bytes, and a's sizes[2..3] the address of allocation 4 (a bias the kernel
    /// never touches), c's strides[4..5] the input's address, as torch's stack may leave them.
    fn dropout(
        n: u64,
        a: (u64, &[(u64, u64)]),
        b: (u64, &[(u64, u64)]),
        c: (u64, &[(u64, u64)]),
    ) -> (Vec<(usize, usize)>, Vec<u8>) {
        let (layout, mut buf) = packed(DROPOUT, &[0, 0, 0, n, 0.9f32.to_bits() as u64, 42]);
        for (&(off, size), _) in layout.iter().zip(0..3) {
            for (k, byte) in buf[off + 8..off + size].iter_mut().enumerate() {
                *byte = (k as u8).wrapping_mul(37) | 0x80;
            }
        }
        let (a_off, b_off, c_off) = (layout[0].0, layout[1].0, layout[2].0);
        buf[a_off + 16..a_off + 24].copy_from_slice(&0x4000u64.to_le_bytes());
        let c_strides = c_off + 8 + (TENSORINFO_DIMS + 4) * 4;
        buf[c_strides..c_strides + 8].copy_from_slice(&a.0.to_le_bytes());
        info(&mut buf, a_off, 4, a.0, a.1);
        info(&mut buf, b_off, 4, b.0, b.1);
        info(&mut buf, c_off, 4, c.0, c.1);
        // PhiloxCudaState: seed_ 42 (written above), offset_ 7, not captured.
        let (ph, _) = layout[5];
        buf[ph + 8..ph + 16].copy_from_slice(&7u64.to_le_bytes());
        (layout, buf)
    }

    /// The touches where a replay takes the current parameters (see
    /// [`REPLAY_TAKES_CURRENT_PARAMS`]).
    fn replayed(
        sig: &Signature,
        layout: &[(usize, usize)],
        buf: &[u8],
        find: impl Fn(u64) -> Option<Found>,
    ) -> Option<Vec<Touch>> {
        touches_as(sig, layout, buf, ONE, find, true)
    }

    fn sized(alloc: u64, bytes: u64, access: Access) -> Touch {
        Touch {
            alloc,
            offset: 0,
            bytes,
            access,
        }
    }

    #[test]
    fn dropout_reads_its_input_and_writes_its_output_and_mask_whole_past_stale_slots() {
        let demangled = cpp_demangle::Symbol::new(DROPOUT_MANGLED.as_bytes())
            .unwrap()
            .demangle()
            .unwrap();
        assert_eq!(demangled, DROPOUT);
        let sig = parse(DROPOUT).unwrap();
        let flat: &[(u64, u64)] = &[(64, 1)];
        let (layout, buf) = dropout(64, (0x1000, flat), (0x2000, flat), (0x3000, flat));
        assert_eq!(
            layout.iter().map(|l| l.0).collect::<Vec<_>>(),
            [0, 216, 432, 648, 652, 656],
            "three 216-byte TensorInfos, then totalElements, p and the Philox state"
        );
        let allocs = find4([256, 256, 64, 16]);
        // The conservative rule would see the bias in a's stale sizes.
        assert!(words(&layout, &buf).any(|(_, w)| allocs(w).is_some_and(|f| f.0 == 4)));
        assert_eq!(
            replayed(&sig, &layout, &buf, &allocs),
            Some(vec![
                sized(1, 256, Access::R),
                sized(2, 256, Access::W),
                sized(3, 64, Access::W),
            ])
        );
        // torch 2.15's fatbins give the generator state 32 bytes: read the same.
        let mut wide = layout.clone();
        wide[5].1 = 32;
        let mut wide_buf = buf.clone();
        wide_buf.extend([0u8; 8]);
        assert_eq!(
            replayed(&sig, &wide, &wide_buf, &allocs),
            replayed(&sig, &layout, &buf, &allocs)
        );
        // Were a replay to take the recorded generator state, dropout's outputs would stay `rw`.
        assert_eq!(
            touches_as(&sig, &layout, &buf, ONE, &allocs, false),
            Some(vec![
                sized(1, 256, Access::R),
                sized(2, 0, Access::Rw),
                sized(3, 0, Access::Rw),
            ])
        );
        assert_eq!(
            touches(&sig, &layout, &buf, ONE, &allocs),
            replayed(&sig, &layout, &buf, &allocs)
        );
        // A replay rewrites the three data pointers, not the stale copy of a's in c's strides.
        assert_eq!(sig.pointer_words(&layout), Some(vec![0, 216, 432]));
        // Dense in another order of dimensions (a permuted output: every element written).
        let perm: &[(u64, u64)] = &[(4, 1), (16, 4)];
        let (layout, buf) = dropout(64, (0x1000, flat), (0x2000, perm), (0x3000, perm));
        let t = replayed(&sig, &layout, &buf, &allocs).unwrap();
        assert_eq!(t[1], sized(2, 256, Access::W));
        // The input's extent is what its shape reaches: a strided view of half its allocation.
        let half: &[(u64, u64)] = &[(32, 1)];
        let (layout, buf) = dropout(32, (0x1000, &[(32, 2)]), (0x2000, half), (0x3000, half));
        let t = replayed(&sig, &layout, &buf, find4([256, 128, 32, 16])).unwrap();
        assert_eq!(t[0], sized(1, 63 * 4, Access::R));
        assert_eq!(t[1], sized(2, 128, Access::W));
    }

    #[test]
    fn a_dropout_output_not_provably_whole_is_rw_of_unknown_extent() {
        let sig = parse(DROPOUT).unwrap();
        let flat: &[(u64, u64)] = &[(64, 1)];
        let allocs = find4([256, 512, 64, 16]);
        let rw = |alloc| sized(alloc, 0, Access::Rw);
        // Strided: every other float of 512 bytes.
        let strided: &[(u64, u64)] = &[(64, 2)];
        let (layout, buf) = dropout(64, (0x1000, flat), (0x2000, strided), (0x3000, flat));
        let t = replayed(&sig, &layout, &buf, &allocs).unwrap();
        assert_eq!(
            (t[1].clone(), t[2].clone()),
            (rw(2), sized(3, 64, Access::W))
        );
        // Dense, but a quarter of its allocation, at its start or inside it.
        let (layout, buf) = dropout(
            32,
            (0x1000, &[(32, 1)]),
            (0x2000, &[(32, 1)]),
            (0x3000, &[(32, 1)]),
        );
        let t = replayed(&sig, &layout, &buf, &allocs).unwrap();
        assert_eq!(t[1], rw(2));
        let (layout, buf) = dropout(
            32,
            (0x1000, &[(32, 1)]),
            (0x2080, &[(32, 1)]),
            (0x3000, &[(32, 1)]),
        );
        let t = replayed(&sig, &layout, &buf, &allocs).unwrap();
        assert_eq!(t[1].access, Access::Rw);
        assert_eq!(t[1].offset, 0x80);
        // Fewer elements written than the output holds.
        let (layout, buf) = dropout(60, (0x1000, flat), (0x2000, flat), (0x3000, flat));
        let t = replayed(&sig, &layout, &buf, find4([256, 256, 64, 16])).unwrap();
        assert_eq!((t[1].clone(), t[2].clone()), (rw(2), rw(3)));
        // Another kernel with the same parameters: not known to write whole.
        let other = DROPOUT.replace("fused_dropout_kernel_vec", "other_kernel");
        let (layout, buf) = dropout(64, (0x1000, flat), (0x2000, flat), (0x3000, flat));
        let t = touches(
            &parse(&other).unwrap(),
            &layout,
            &buf,
            ONE,
            find4([256, 256, 64, 16]),
        );
        assert_eq!(
            t,
            Some(vec![sized(1, 256, Access::R), rw(2), rw(3)]),
            "const read, the rest may be written"
        );
    }

    #[test]
    fn what_a_tensor_info_or_philox_state_does_not_settle_is_left_to_the_conservative_rule() {
        let sig = parse(DROPOUT).unwrap();
        let flat: &[(u64, u64)] = &[(64, 1)];
        let allocs = find4([256, 256, 64, 16]);
        let fine = || dropout(64, (0x1000, flat), (0x2000, flat), (0x3000, flat));
        let (layout, buf) = fine();
        assert!(replayed(&sig, &layout, &buf, &allocs).is_some());
        // Captured during a CUDA graph: the offset is a device pointer.
        let (ph, _) = layout[5];
        let mut captured = buf.clone();
        captured[ph + 8..ph + 16].copy_from_slice(&0x4000u64.to_le_bytes());
        captured[ph + 20] = 1;
        assert_eq!(replayed(&sig, &layout, &captured, &allocs), None);
        captured[ph + 8..ph + 16].copy_from_slice(&7u64.to_le_bytes());
        assert_eq!(replayed(&sig, &layout, &captured, &allocs), None);
        // Not captured, but a word of it points into an allocation.
        let mut pointing = buf.clone();
        pointing[ph..ph + 8].copy_from_slice(&0x4000u64.to_le_bytes());
        assert_eq!(replayed(&sig, &layout, &pointing, &allocs), None);
        // In place: the input's allocation written.
        let (layout, buf) = dropout(64, (0x1000, flat), (0x1000, flat), (0x3000, flat));
        assert_eq!(replayed(&sig, &layout, &buf, &allocs), None);
        // A shape past the allocation's end, dims out of range, a TensorInfo of another size.
        let (layout, buf) = dropout(64, (0x1000, &[(65, 1)]), (0x2000, flat), (0x3000, flat));
        assert_eq!(replayed(&sig, &layout, &buf, &allocs), None);
        let (layout, mut buf) = fine();
        let d = 8 + 2 * TENSORINFO_DIMS * 4;
        buf[d..d + 4].copy_from_slice(&26i32.to_le_bytes());
        assert_eq!(replayed(&sig, &layout, &buf, &allocs), None);
        let (mut layout, buf) = fine();
        layout[0].1 = 208;
        assert_eq!(replayed(&sig, &layout, &buf, &allocs), None);
        // A TensorInfo of another struct, an unknown index type.
        let odd = DROPOUT.replace("TensorInfo<bool, unsigned int>", "TensorInfo<bool, short>");
        assert_eq!(parse(&odd), None);
        let odd = DROPOUT.replace("at::PhiloxCudaState", "at::OtherState");
        assert_eq!(parse(&odd), None);
    }

    #[test]
    fn sixty_four_bit_indices_and_the_plain_kernel_read_alike() {
        let plain = "void at::native::(anonymous namespace)::fused_dropout_kernel<float, float, unsigned long, -1, 1, bool>(at::cuda::detail::TensorInfo<float const, unsigned long>, at::cuda::detail::TensorInfo<float, unsigned long>, at::cuda::detail::TensorInfo<bool, unsigned long>, unsigned long, float, at::PhiloxCudaState)";
        let sig = parse(plain).unwrap();
        assert!(sig.whole.is_some());
        let (layout, mut buf) = packed(plain, &[0, 0, 0, 64, 0.9f32.to_bits() as u64, 42]);
        assert_eq!(layout[0], (0, 416));
        assert_eq!(layout[3], (1248, 8));
        for (i, data) in [0x1000u64, 0x2000, 0x3000].into_iter().enumerate() {
            info(&mut buf, layout[i].0, 8, data, &[(8, 8), (8, 1)]);
        }
        assert_eq!(
            replayed(&sig, &layout, &buf, find4([256, 256, 64, 16])),
            Some(vec![
                sized(1, 256, Access::R),
                sized(2, 256, Access::W),
                sized(3, 64, Access::W),
            ])
        );
    }

    /// As torch 2.15's fatbins name it (demangled).
    const LAYER_NORM: &str = "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float, false>(int, float, float const*, float const*, float const*, float*, float*, float*)";

    /// LayerNorm of `rows` rows of 8 floats: X at 0x1000, gamma and beta in 0x2000, mean at
    /// 0x3000, rstd at 0x4000, Y at `y`.
    fn layer_norm(y: u64) -> (Vec<(usize, usize)>, Vec<u8>) {
        let eps = u64::from(1e-5f32.to_bits());
        packed(
            LAYER_NORM,
            &[8, eps, 0x1000, 0x2000, 0x2020, 0x3000, 0x4000, y],
        )
    }

    #[test]
    fn layer_norm_writes_its_mean_rstd_and_output_whole_one_row_per_block() {
        let sig = parse(LAYER_NORM).unwrap();
        let (layout, buf) = layer_norm(0x1000);
        // X (4 rows of 8 floats), gamma and beta (one allocation, two reads), mean, rstd; Y is
        // X's allocation again below.
        let sizes = |y: u64| {
            move |w: u64| {
                let id = w / 0x1000;
                let size = *[128u64, 64, 16, 16, y].get((id as usize).wrapping_sub(1))?;
                (w % 0x1000 < size).then_some((id, w % 0x1000, size))
            }
        };
        let (layout5, buf5) = layer_norm(0x5000);
        let rows4 = [4, 1, 1];
        assert_eq!(
            touches(&sig, &layout5, &buf5, rows4, sizes(128)),
            Some(vec![
                touch(1, 0, Access::R),
                touch(2, 0, Access::R),
                touch(2, 0x20, Access::R),
                sized(3, 16, Access::W),
                sized(4, 16, Access::W),
                sized(5, 128, Access::W),
            ])
        );
        // Another grid: the rows are not what the outputs hold.
        let rw = |alloc| sized(alloc, 0, Access::Rw);
        let t = touches(&sig, &layout5, &buf5, [2, 1, 1], sizes(128)).unwrap();
        assert_eq!(t[3..], [rw(3), rw(4), rw(5)]);
        let t = touches(&sig, &layout5, &buf5, [4, 2, 1], sizes(128)).unwrap();
        assert_eq!(t[3..], [rw(3), rw(4), rw(5)]);
        // Y larger than its rows: written in part.
        let t = touches(&sig, &layout5, &buf5, rows4, sizes(256)).unwrap();
        assert_eq!(
            t[3..],
            [sized(3, 16, Access::W), sized(4, 16, Access::W), rw(5)]
        );
        // In place over X (one allocation reached twice, once writably): not settled.
        assert_eq!(touches(&sig, &layout, &buf, rows4, sizes(128)), None);
        // A replay rewrites the six pointers, not N or eps.
        assert_eq!(
            sig.pointer_words(&layout),
            Some(vec![8, 16, 24, 32, 40, 48])
        );
        // Another kernel with the same parameters: its outputs may be written in part.
        let other = parse(&LAYER_NORM.replace("vectorized_layer_norm_kernel", "other")).unwrap();
        let t = touches(&other, &layout5, &buf5, rows4, sizes(128)).unwrap();
        assert_eq!(t[3..], [rw(3), rw(4), rw(5)]);
    }
}
