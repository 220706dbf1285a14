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
//! * a `GenericPackedTensorAccessor<..., T, N, PtrTraits, I>` (ATen's packed accessor, what
//!   `packed_accessor32/64` hands a kernel: `T* data; I sizes[N]; I strides[N]`, whatever
//!   the template arguments before T) is read as a `TensorInfo` of N dimensions: one pointer,
//!   a `const` T read over its extent, any other T `rw`;
//! * a `PhiloxCudaState` (the random generator's seed and offset) holds no pointer, unless it
//!   was made during graph capture (`captured_`: its offset is then a device pointer);
//! * a `CatArrInputTensorMetadata<T, I, n, s>` (ATen's batch of inputs to a concatenation:
//!   `const T* input[n]`, then offsets, sizes, element counts, flags and strides, all
//!   integers) holds `n` slots of pointers to `const` data: the launch's grid has a row of
//!   blocks per input (`blockIdx.y` picks its slot), so the first `gridDim.y` are read and the
//!   rest hold stale words from an earlier batch, no pointers. A `TensorSizeStride<I, n>` holds
//!   integers only.
//!
//! ATen's `OpaqueType<N>` (the element a concatenation or copy moves as raw bytes) is a scalar
//! of N bytes.
//!
//! So such a kernel no longer counts as a possible write to its inputs (a new version of each,
//! which keeps the tensors made from the old one from being recomputed), while what it writes
//! stays conservative, and the kernel itself is not replayed (a replay needs a whole write),
//! but for the kernels of [`WRITTEN_WHOLE`].
//!
//! A parameter of any other type (a functor, another struct, a type alias such as
//! `std::iterator_traits<float const*>::value_type`) holds no pointer where the driver lays it
//! out in fewer than 8 bytes (an empty functor, TensorFlow's reductions' `Sum<float>`, takes
//! one) or in a size no multiple of 8 (a struct with a pointer is aligned to 8, and its size
//! is a multiple of its alignment: TensorFlow's `Dimension<3>` takes 12). Another may hide
//! pointers, and a scalar word that points into an allocation may
//! be one: such kernels are left to the conservative rule (every touch `rw`). So is a captured
//! or pointing `PhiloxCudaState`, and a `TensorInfo` whose layout or extent does not fit what
//! the name says. An allocation reached by two parameters, one of them writable (TensorFlow
//! forwards an input's buffer as the output), is one `rw` of unknown extent.
//!
//! Other readers claim their kernels first (see `launch::reader`): this one takes what is left.

use super::words::{Found, words};
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
    /// A packed tensor accessor by value: as a `TensorInfo` of `dims` dimensions, without
    /// its `dims` field.
    Accessor {
        elem: u64,
        index: usize,
        signed: bool,
        read_only: bool,
        dims: usize,
    },
    /// `at::PhiloxCudaState` by value.
    Philox,
    /// `CatArrInputTensorMetadata<T, I, n, s>` by value: `n` input pointers to `const` data.
    CatInputs {
        n: usize,
    },
    /// `TensorSizeStride<I, n>` by value: sizes and strides, integers only.
    Integers,
    /// A type of no other kind (a functor, a struct, a type alias): no pointer where the
    /// driver lays it out in fewer than 8 bytes (an empty functor takes 1, `value_type` of a
    /// `float const*` 4) or in a size no multiple of 8; otherwise it may hide pointers, and the
    /// launch is left to the conservative rule.
    Opaque,
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
    let ty = ty.trim();
    SCALARS
        .iter()
        .find(|(name, _)| *name == ty)
        .map(|&(_, size)| size)
        .or_else(|| opaque(ty))
}

/// ATen's `OpaqueType<N>` (any namespace; N as the demangler prints it, `(unsigned int)4` or
/// `4u`): N bytes.
fn opaque(ty: &str) -> Option<u64> {
    let (_, n) = ty.strip_suffix('>')?.rsplit_once("OpaqueType<")?;
    let n = n
        .trim()
        .trim_start_matches("(unsigned int)")
        .trim_end_matches('u');
    n.parse().ok().filter(|&n| n > 0)
}

/// The batch `n` of a `CatArrInputTensorMetadata<T, I, n, s>` (any namespace).
fn cat_inputs(ty: &str) -> Option<usize> {
    let (_, args) = ty
        .strip_suffix('>')?
        .rsplit_once("CatArrInputTensorMetadata<")?;
    let args = parameter_list(args);
    let [t, _, n, _] = args.as_slice() else {
        return None;
    };
    scalar(t)?;
    n.trim().parse().ok().filter(|&n| n > 0)
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

/// An index type's size and signedness.
fn index_type(i: &str) -> Option<(usize, bool)> {
    match i.trim() {
        "unsigned int" => Some((4, false)),
        "int" => Some((4, true)),
        "unsigned long" => Some((8, false)),
        "long" => Some((8, true)),
        _ => None,
    }
}

/// A `GenericPackedTensorAccessor<..., T, N, PtrTraits, I>` (any namespace; its last four
/// template arguments are T, N, the pointer traits and I, whatever comes before them).
fn accessor(ty: &str) -> Option<Param> {
    let (class, args) = ty.strip_suffix('>')?.split_once('<')?;
    if class.rsplit_once("::").map_or(class, |x| x.1) != "GenericPackedTensorAccessor" {
        return None;
    }
    let args = parameter_list(args);
    let [t, n, traits, i] = args.get(args.len().checked_sub(4)?..)? else {
        return None;
    };
    let traits = traits.trim();
    if !(traits.ends_with("DefaultPtrTraits") || traits.ends_with("RestrictPtrTraits")) {
        return None;
    }
    let dims = n
        .trim()
        .trim_start_matches("(unsigned long)")
        .trim_end_matches("ul")
        .parse()
        .ok()
        .filter(|&d: &usize| d <= TENSORINFO_DIMS)?;
    let (t, read_only) = unconst(t);
    let (index, signed) = index_type(i)?;
    Some(Param::Accessor {
        elem: scalar(t)?,
        index,
        signed,
        read_only,
        dims,
    })
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
        let (index, signed) = index_type(i)?;
        return Some(Param::TensorInfo {
            elem: scalar(t)?,
            index,
            signed,
            read_only,
        });
    }
    if let Some(a) = accessor(ty) {
        return Some(a);
    }
    if ty == "at::PhiloxCudaState" {
        return Some(Param::Philox);
    }
    if let Some(n) = cat_inputs(ty) {
        return Some(Param::CatInputs { n });
    }
    if ty
        .rsplit_once("::")
        .map_or(ty, |x| x.1)
        .starts_with("TensorSizeStride<")
    {
        return Some(Param::Integers);
    }
    // A scalar passed by value, possibly `const`; any other type is opaque.
    Some(scalar(unconst(ty).0).map_or(Param::Opaque, |_| Param::Scalar))
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
    Some(parameter_list(inner))
}

/// A list of types or template arguments split at its top-level commas.
fn parameter_list(inner: &str) -> Vec<&str> {
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
    out
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
        }) | Some(Param::Accessor {
            read_only: false,
            ..
        })
    )
}

impl Signature {
    /// Where in the parameter buffer (its `layout`) the words are that the signature says hold
    /// pointers: a replay rewrites these and no others.
    /// None where an opaque parameter may hide pointers (the launch's touches are then the
    /// conservative rule's, from any word).
    pub fn pointer_words(&self, layout: &[(usize, usize)]) -> Option<Vec<usize>> {
        let hidden = self
            .params
            .iter()
            .zip(layout)
            .any(|(p, &(_, size))| *p == Param::Opaque && size >= 8 && size % 8 == 0);
        (self.params.len() == layout.len() && !hidden).then(|| {
            self.params
                .iter()
                .zip(layout)
                .flat_map(|(p, &(off, _))| {
                    let n = match p {
                        Param::Pointer { .. }
                        | Param::TensorInfo { .. }
                        | Param::Accessor { .. } => 1,
                        Param::CatInputs { n } => *n,
                        Param::Scalar | Param::Philox | Param::Integers | Param::Opaque => 0,
                    };
                    (0..n).map(move |k| off + 8 * k)
                })
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

/// A packed accessor's size: the pointer and 2 x `dims` indices, padded to 8.
fn accessor_size(index: usize, dims: usize) -> usize {
    (8 + 2 * dims * index).div_ceil(8) * 8
}

/// The shape in `info`, the bytes of a strided tensor argument: its pointer, then `slots`
/// sizes and `slots` strides, then, where `dims` is None (a `TensorInfo`), `int dims`; None
/// where dims is out of range or a size or stride is negative or too large.
fn shape(
    info: &[u8],
    index: usize,
    signed: bool,
    slots: usize,
    dims: Option<usize>,
) -> Option<Shape> {
    let at = |k: usize| -> Option<u64> {
        let b = info.get(8 + k * index..8 + (k + 1) * index)?;
        let mut w = [0u8; 8];
        w[..index].copy_from_slice(b);
        let v = u64::from_le_bytes(w);
        let negative = signed && b[index - 1] & 0x80 != 0;
        (!negative).then_some(v)
    };
    let dims = match dims {
        Some(d) => d,
        None => {
            let d = 8 + 2 * slots * index;
            let dims = i32::from_le_bytes(info.get(d..d + 4)?.try_into().ok()?);
            usize::try_from(dims).ok()?
        }
    };
    if dims > slots {
        return None;
    }
    let dim: Vec<(u64, u64)> = (0..dims)
        .map(|k| Some((at(k)?, at(slots + k)?)))
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
            Param::Integers => continue,
            // Too small for a pointer, or of a size a struct holding one cannot have (a
            // pointer aligns its struct to 8, and a struct's size is a multiple of its
            // alignment): nothing to read or write through it.
            Param::Opaque if size < 8 || size % 8 != 0 => continue,
            Param::Opaque => return None,
            Param::CatInputs { n } => {
                // One row of blocks per input: more rows than slots is not this layout.
                let inputs = grid[1] as usize;
                if size < 8 * n || inputs == 0 || inputs > n {
                    return None;
                }
                // The inputs, read; the slots after them and the integers are no pointers.
                for k in 0..inputs {
                    let word = u64::from_le_bytes(bytes[8 * k..8 * k + 8].try_into().ok()?);
                    if let Some((alloc, offset, _)) = find(word) {
                        let t = Touch {
                            alloc,
                            offset,
                            bytes: 0,
                            access: Access::R,
                        };
                        if !out.contains(&t) {
                            out.push(t);
                        }
                    }
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
            }
            | Param::Accessor {
                elem,
                index,
                signed,
                read_only,
                ..
            } => {
                let (slots, dims, expected) = match *p {
                    Param::Accessor { dims, .. } => (dims, Some(dims), accessor_size(index, dims)),
                    _ => (TENSORINFO_DIMS, None, tensor_info_size(index)),
                };
                if size != expected {
                    return None;
                }
                let data = u64::from_le_bytes(bytes[..8].try_into().ok()?);
                let Some((alloc, offset, alloc_size)) = find(data) else {
                    continue;
                };
                let s = shape(bytes, index, signed, slots, dims)?;
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
                    // of the whole allocation would read as an exact update in place).
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
    Some(aliased(out))
}

/// The touches with each allocation reached twice, once writably (TensorFlow hands a kernel
/// its input's buffer as its output where nothing else reads the input), as one `rw` of
/// unknown extent from the lowest offset: how the two overlap is not known, and the kernel may
/// read and write anywhere the two reach. Other touches stay as they are.
fn aliased(out: Vec<Touch>) -> Vec<Touch> {
    let twice_written = |a: u64| {
        out.iter().filter(|u| u.alloc == a).count() > 1
            && out.iter().any(|u| u.alloc == a && u.access != Access::R)
    };
    let mut merged: Vec<Touch> = Vec::with_capacity(out.len());
    for t in &out {
        if !twice_written(t.alloc) {
            merged.push(t.clone());
        } else if let Some(m) = merged.iter_mut().find(|m| m.alloc == t.alloc) {
            m.offset = m.offset.min(t.offset);
        } else {
            let t = t.clone();
            merged.push(Touch {
                alloc: t.alloc,
                offset: t.offset,
                bytes: 0,
                access: Access::Rw,
            });
        }
    }
    merged
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
mod tests;
