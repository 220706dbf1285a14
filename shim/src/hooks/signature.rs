//! A kernel's touches from its demangled signature. torch's own kernels name their parameter
//! types (`max_pool_forward_nchw<float, int>(int, float const*, long, ..., float*, long*)`).
//! Where every parameter is a scalar or a pointer to one:
//!
//! * a pointer to `const` data is read (`r`): torch's kernels keep to const-correctness;
//! * any other pointer may be read and written: `rw`, extent unknown.
//!
//! So such a kernel no longer counts as a possible write to its inputs (a new version of each,
//! which keeps the tensors made from the old one from being recomputed), while what it writes
//! stays conservative, and the kernel itself is not replayed (a replay needs a whole write).
//!
//! A parameter of any other type (a functor, a struct) may hide pointers, and a scalar word
//! that points into an allocation may be one: such kernels are left to the conservative rule
//! (every touch `rw`). So is an allocation reached by two parameters, one of them writable.

use super::launch::{Found, words};
use planner::trace::{Access, Touch};

/// One parameter of a kernel's signature.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Param {
    Scalar,
    /// A pointer to scalars; `read_only`: to `const` data.
    Pointer {
        read_only: bool,
    },
}

/// What a kernel's demangled name says of its parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct Signature {
    params: Vec<Param>,
}

/// Scalar types as demangled.
const SCALARS: &[&str] = &[
    "float",
    "double",
    "c10::Half",
    "c10::BFloat16",
    "bool",
    "char",
    "signed char",
    "unsigned char",
    "short",
    "unsigned short",
    "int",
    "unsigned int",
    "long",
    "unsigned long",
    "long long",
    "unsigned long long",
];

fn param(ty: &str) -> Option<Param> {
    let ty = ty.trim();
    if let Some(pointee) = ty.strip_suffix('*') {
        let pointee = pointee.trim_end();
        let (base, read_only) = match pointee.strip_suffix(" const") {
            Some(b) => (b, true),
            None => (pointee, false),
        };
        return SCALARS
            .contains(&base.trim())
            .then_some(Param::Pointer { read_only });
    }
    // A scalar passed by value, possibly `const`.
    SCALARS
        .contains(&ty.strip_suffix(" const").unwrap_or(ty))
        .then_some(Param::Scalar)
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

/// The signature of a demangled kernel name; None unless every parameter is a scalar or a
/// pointer to one.
pub fn parse(name: &str) -> Option<Signature> {
    let params = parameter_types(name)?
        .into_iter()
        .map(param)
        .collect::<Option<Vec<_>>>()?;
    Some(Signature { params })
}

/// The touches of a launch of a kernel with signature `sig`, from its parameter `layout`
/// ((offset, size) of each) and packed buffer; None where the signature does not settle them
/// (see the module's comment).
pub fn touches(
    sig: &Signature,
    layout: &[(usize, usize)],
    buf: &[u8],
    find: impl Fn(u64) -> Option<Found>,
) -> Option<Vec<Touch>> {
    if sig.params.len() != layout.len() {
        return None;
    }
    let mut out: Vec<Touch> = Vec::new();
    for (&(off, size), p) in layout.iter().zip(&sig.params) {
        let bytes = buf.get(off..off + size)?;
        match *p {
            Param::Scalar => {
                if words(&[(off, size)], buf).any(|(_, w)| find(w).is_some()) {
                    return None;
                }
            }
            Param::Pointer { read_only } => {
                let Some((alloc, offset, _)) = find(u64::from_le_bytes(bytes.try_into().ok()?))
                else {
                    // NULL, or memory that is not the program's device memory.
                    continue;
                };
                let touch = Touch {
                    alloc,
                    offset,
                    bytes: 0,
                    access: if read_only { Access::R } else { Access::Rw },
                };
                if !out.contains(&touch) {
                    out.push(touch);
                }
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// As torch 2.15's fatbin names them (demangled).
    const MAX_POOL: &str = "void at::native::(anonymous namespace)::max_pool_forward_nchw<float, int>(int, float const*, long, long, long, int, int, int, int, int, int, int, int, int, int, float*, long*)";
    const MAX_POOL_BACKWARD: &str = "void at::native::(anonymous namespace)::max_pool_backward_nchw<float, float, int>(float const*, long const*, int, int, int, int, int, int, int, int, int, int, int, int, int, int, float*)";

    /// The packed layout of a kernel's parameters (4-byte scalars but `long`, 8-byte pointers,
    /// each aligned to its size) and a buffer holding `values` at them.
    fn packed(name: &str, values: &[u64]) -> (Vec<(usize, usize)>, Vec<u8>) {
        let types = parameter_types(name).unwrap();
        let (mut layout, mut at) = (Vec::new(), 0usize);
        for ty in &types {
            let size = if ty.ends_with('*') || ty.trim() == "long" {
                8
            } else {
                4
            };
            at = at.div_ceil(size) * size;
            layout.push((at, size));
            at += size;
        }
        let mut buf = vec![0u8; at];
        for (&(off, size), &v) in layout.iter().zip(values) {
            buf[off..off + size].copy_from_slice(&v.to_le_bytes()[..size]);
        }
        (layout, buf)
    }

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
            touches(&sig, &layout, &buf, find([64, 16, 32])),
            Some(vec![
                touch(1, 0, Access::R),
                touch(2, 0, Access::Rw),
                touch(3, 0, Access::Rw),
            ])
        );
        // A pointer inside an allocation: the touch says where.
        let (layout, buf) = max_pool(0x2004, 0x3000);
        let t = touches(&sig, &layout, &buf, find([64, 16, 32])).unwrap();
        assert_eq!(t[1], touch(2, 4, Access::Rw));
        // A NULL or foreign pointer is no touch.
        let (layout, buf) = max_pool(0x2000, 0);
        let t = touches(&sig, &layout, &buf, find([64, 16, 32])).unwrap();
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
            touches(&sig, &layout, &buf, find([64, 16, 32])),
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
        assert_eq!(touches(&sig, &layout, &buf, find([64, 16, 32])), None);
        // Two reads of one allocation are fine.
        let (layout, buf) = max_pool_backward(0x2000, 0x2008, 0x1000);
        let sig_b = parse(MAX_POOL_BACKWARD).unwrap();
        assert_eq!(
            touches(&sig_b, &layout, &buf, find([64, 16, 32])).map(|t| t.len()),
            Some(3)
        );
        // A scalar that points into an allocation.
        let (layout, mut buf) = max_pool(0x2000, 0x3000);
        let (off, _) = layout[2];
        buf[off..off + 8].copy_from_slice(&0x1000u64.to_le_bytes());
        assert_eq!(touches(&sig, &layout, &buf, find([64, 16, 32])), None);
        // Another layout than the name says.
        let (layout, buf) = max_pool(0x2000, 0x3000);
        assert_eq!(touches(&sig, &layout[1..], &buf, find([64, 16, 32])), None);
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
        assert_eq!(sig.params[0], Param::Pointer { read_only: false });
        assert_eq!(sig.params[1], Param::Pointer { read_only: true });
        assert_eq!(sig.params[5], Param::Pointer { read_only: true });
        assert_eq!(parameter_types("void v()"), Some(Vec::new()));
    }
}
