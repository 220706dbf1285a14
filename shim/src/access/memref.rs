//! Exact touches of TensorFlow's MLIR-generated element-wise kernels
//! (`<Op>_GPU_DT_<input type>_DT_<output type>_kernel`, from the modules TensorFlow loads with
//! the driver: `AddV2_GPU_DT_FLOAT_DT_FLOAT_kernel`, `Cast_GPU_DT_INT32_DT_INT64_kernel`).
//!
//! Their parameters are an element count (`i32`) and one memref descriptor per operand, the
//! result's last: `{allocated pointer, aligned pointer, offset, sizes[rank], strides[rank]}`,
//! the indices `i32`. The count comes first, or, in the variants of rank 2 and above, in the
//! alignment hole after the first descriptor: a descriptor has an odd number of indices, so the
//! run of indices that holds the count is the one of even length. Each operand is read over the
//! elements its sizes and strides reach (one for a broadcast scalar of rank 0), in the input
//! type; the result is written over its own, in the output type. An operand in the result's
//! allocation makes that touch `rw`.

use super::words::{Found, le_at};
use planner::trace::{Access, Touch};

/// The element sizes an MLIR element-wise kernel reads and writes, from its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kernel {
    pub input: u64,
    pub output: u64,
}

/// TensorFlow's `DT_` type names and their sizes.
fn type_size(t: &str) -> Option<u64> {
    Some(match t {
        "BOOL" | "INT8" | "UINT8" => 1,
        "HALF" | "BFLOAT16" | "INT16" | "UINT16" => 2,
        "FLOAT" | "INT32" | "UINT32" => 4,
        "DOUBLE" | "INT64" | "UINT64" | "COMPLEX64" => 8,
        "COMPLEX128" => 16,
        _ => return None,
    })
}

/// An MLIR element-wise kernel of this naming, whose operands all have the input type: not a
/// select, whose condition is boolean whatever the name's types.
pub fn parse(name: &str) -> Option<Kernel> {
    let rest = name.strip_suffix("_kernel")?;
    let (op, types) = rest.split_once("_GPU_DT_")?;
    if op.is_empty() || op.starts_with("Select") || !op.chars().all(|c| c.is_ascii_alphanumeric()) {
        return None;
    }
    let (a, b) = types.split_once("_DT_")?;
    Some(Kernel {
        input: type_size(a)?,
        output: type_size(b)?,
    })
}

/// One descriptor: its aligned pointer, its offset, and the elements it reaches from the
/// aligned pointer (offset included; None: it reaches none).
struct Memref {
    aligned: u64,
    offset: i64,
    reach: Option<i64>,
}

/// Where each descriptor's aligned pointer and indices (offset, sizes, strides) are among the
/// parameters, from their sizes alone; None when the layout is not an element count and memrefs.
fn structure(params: &[(usize, usize)]) -> Option<Vec<(usize, Vec<usize>)>> {
    let (mut count, mut i) = (false, 0);
    if params.first()?.1 == 4 {
        count = true;
        i = 1;
    }
    let mut out = Vec::new();
    while i < params.len() {
        if params[i].1 != 8 || params.get(i + 1)?.1 != 8 {
            return None;
        }
        let mut j = i + 2;
        while j < params.len() && params[j].1 == 4 {
            j += 1;
        }
        let mut ints: Vec<usize> = (i + 2..j).collect();
        if ints.len().is_multiple_of(2) {
            if count || ints.is_empty() {
                return None;
            }
            count = true;
            ints.pop();
        }
        out.push((i + 1, ints));
        i = j;
    }
    (count && out.len() >= 2).then_some(out)
}

/// The descriptors of a launch (see the module's comment).
fn descriptors(params: &[(usize, usize)], buf: &[u8]) -> Option<Vec<Memref>> {
    let int = |i: usize| le_at(buf, params[i].0, 4).map(|v| v as u32 as i32 as i64);
    structure(params)?
        .into_iter()
        .map(|(p, idx)| {
            let ints = idx.into_iter().map(int).collect::<Option<Vec<i64>>>()?;
            let rank = ints.len() / 2;
            let (sizes, strides) = (&ints[1..1 + rank], &ints[1 + rank..]);
            let offset = ints[0];
            let mut last = offset;
            let mut reaches = offset >= 0;
            for (&s, &st) in sizes.iter().zip(strides) {
                reaches &= s > 0 && st >= 0;
                last += (s - 1) * st;
            }
            Some(Memref {
                aligned: le_at(buf, params[p].0, 8)?,
                offset,
                reach: reaches.then_some(last + 1),
            })
        })
        .collect()
}

/// The pointer slots (each descriptor's allocated and aligned pointers): a replay rewrites
/// these only.
pub fn pointer_words(params: &[(usize, usize)]) -> Option<Vec<usize>> {
    Some(
        structure(params)?
            .iter()
            .flat_map(|&(p, _)| [params[p - 1].0, params[p].0])
            .collect(),
    )
}

/// The touches of one launch (see the module's comment); None: left to the conservative rule.
pub fn touches(
    k: Kernel,
    params: &[(usize, usize)],
    buf: &[u8],
    find: impl Fn(u64) -> Option<Found>,
) -> Option<Vec<Touch>> {
    let d = descriptors(params, buf)?;
    let n = d.len();
    let mut out: Vec<Touch> = Vec::new();
    for (i, m) in d.iter().enumerate() {
        let result = i == n - 1;
        let elem = if result { k.output } else { k.input };
        let Some(reach) = m.reach else {
            if result {
                // A result that reaches nothing writes nothing; an operand so, reads nothing.
                return None;
            }
            continue;
        };
        // The result is written whole from its aligned pointer: an offset leaves bytes before
        // it that a replay would take as written.
        if result && m.offset != 0 {
            return None;
        }
        let (alloc, offset, size) = find(m.aligned)?;
        let bytes = (reach as u64).checked_mul(elem)?;
        if offset.checked_add(bytes)? > size {
            return None;
        }
        let access = if result { Access::W } else { Access::R };
        match out.iter_mut().find(|t| t.alloc == alloc) {
            Some(t) if t.access != access || t.offset != offset => t.access = Access::Rw,
            Some(t) => t.bytes = t.bytes.max(bytes),
            None => out.push(Touch {
                alloc,
                offset,
                bytes,
                access,
            }),
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Allocations 1 to 4 at 0x10000 * id, each 0x8000 bytes.
    fn find(w: u64) -> Option<Found> {
        let id = w / 0x10000;
        ((1..=4).contains(&id) && w % 0x10000 < 0x8000).then_some((id, w % 0x10000, 0x8000))
    }

    /// A parameter buffer of `{n, memrefs...}` (`count_first`) or `{memref, n, memrefs...}`,
    /// each memref (pointer, offset, sizes, strides), laid out as the driver reports: 8-byte
    /// pointers at 8-byte boundaries, 4-byte indices.
    fn launch(
        n: i32,
        refs: &[(u64, i32, &[i32], &[i32])],
        count_first: bool,
    ) -> (Vec<(usize, usize)>, Vec<u8>) {
        let (mut params, mut buf) = (Vec::new(), Vec::new());
        let put = |bytes: &[u8], params: &mut Vec<(usize, usize)>, buf: &mut Vec<u8>| {
            while !buf.len().is_multiple_of(bytes.len()) {
                buf.push(0);
            }
            params.push((buf.len(), bytes.len()));
            buf.extend_from_slice(bytes);
        };
        if count_first {
            put(&n.to_le_bytes(), &mut params, &mut buf);
        }
        for (i, (p, off, sizes, strides)) in refs.iter().enumerate() {
            put(&p.to_le_bytes(), &mut params, &mut buf);
            put(&p.to_le_bytes(), &mut params, &mut buf);
            for v in std::iter::once(off).chain(*sizes).chain(*strides) {
                put(&v.to_le_bytes(), &mut params, &mut buf);
            }
            if !count_first && i == 0 {
                put(&n.to_le_bytes(), &mut params, &mut buf);
            }
        }
        (params, buf)
    }

    #[test]
    fn names_give_the_element_sizes_and_selects_are_left_alone() {
        assert_eq!(
            parse("Mul_GPU_DT_FLOAT_DT_FLOAT_kernel"),
            Some(Kernel {
                input: 4,
                output: 4
            })
        );
        assert_eq!(
            parse("Cast_GPU_DT_INT32_DT_INT64_kernel"),
            Some(Kernel {
                input: 4,
                output: 8
            })
        );
        assert_eq!(
            parse("Less_GPU_DT_FLOAT_DT_BOOL_kernel").map(|k| k.output),
            Some(1)
        );
        for not in [
            "SelectV2_GPU_DT_FLOAT_DT_FLOAT_kernel",
            "main_kernel",
            "Mul_GPU_DT_QINT8_DT_FLOAT_kernel",
            "Mul_GPU_DT_FLOAT_DT_FLOAT",
            "void at::native::f<Mul_GPU_DT_FLOAT_DT_FLOAT_kernel>",
        ] {
            assert_eq!(parse(not), None, "{not}");
        }
    }

    #[test]
    fn operands_are_read_and_the_result_written_over_what_they_reach() {
        let k = parse("Mul_GPU_DT_FLOAT_DT_FLOAT_kernel").unwrap();
        // out[6] = a[6] * b (b a broadcast scalar of rank 0), rank 1, the count first.
        let (params, buf) = launch(
            6,
            &[
                (0x10000, 0, &[6], &[1]),
                (0x20010, 0, &[], &[]),
                (0x30000, 0, &[6], &[1]),
            ],
            true,
        );
        let t = touches(k, &params, &buf, find).unwrap();
        let got: Vec<_> = t
            .iter()
            .map(|t| (t.alloc, t.offset, t.bytes, t.access))
            .collect();
        assert_eq!(
            got,
            vec![
                (1, 0, 24, Access::R),
                (2, 0x10, 4, Access::R),
                (3, 0, 24, Access::W)
            ]
        );
        // Every allocated and aligned pointer is a pointer word, nothing else.
        let words = pointer_words(&params).unwrap();
        assert_eq!(words, vec![8, 16, 40, 48, 64, 72]);
        // Rank 2, the count after the first descriptor, a broadcast column read by stride 0.
        let (params, buf) = launch(
            6,
            &[
                (0x10000, 0, &[2, 3], &[3, 1]),
                (0x20000, 0, &[2, 3], &[1, 0]),
                (0x30000, 0, &[2, 3], &[3, 1]),
            ],
            false,
        );
        let t = touches(k, &params, &buf, find).unwrap();
        let got: Vec<_> = t.iter().map(|t| (t.alloc, t.bytes, t.access)).collect();
        assert_eq!(
            got,
            vec![(1, 24, Access::R), (2, 8, Access::R), (3, 24, Access::W)]
        );
    }

    #[test]
    fn in_place_results_are_rw_and_unknown_layouts_are_left_to_the_conservative_rule() {
        let k = parse("AddV2_GPU_DT_FLOAT_DT_FLOAT_kernel").unwrap();
        let (params, buf) = launch(
            4,
            &[(0x10000, 0, &[4], &[1]), (0x10000, 0, &[4], &[1])],
            true,
        );
        let t = touches(k, &params, &buf, find).unwrap();
        assert_eq!(t.len(), 1);
        assert_eq!((t[0].alloc, t[0].access), (1, Access::Rw));
        // A result past its allocation, one not found, a count with no descriptor after it.
        let past = launch(
            0x4000,
            &[(0x10000, 0, &[0x4000], &[1]), (0x30000, 0, &[0x4000], &[1])],
            true,
        );
        assert!(touches(k, &past.0, &past.1, find).is_none());
        let lost = launch(
            4,
            &[(0x10000, 0, &[4], &[1]), (0x90000, 0, &[4], &[1])],
            true,
        );
        assert!(touches(k, &lost.0, &lost.1, find).is_none());
        let bare = launch(4, &[], true);
        assert!(touches(k, &bare.0, &bare.1, find).is_none());
        // A result with an offset in its memref is not taken as written whole.
        let shifted = launch(
            4,
            &[(0x10000, 0, &[4], &[1]), (0x30000, 2, &[4], &[1])],
            true,
        );
        assert!(touches(k, &shifted.0, &shifted.1, find).is_none());
    }
}
