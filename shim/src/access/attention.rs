//! Exact touches of PyTorch's memory-efficient attention forward (`fmha_cutlassF_*(
//! PyTorchMemEffAttention::AttentionKernel<scalar_t, arch, aligned, kQueriesPerBlock, ...>::
//! Params)`, ATen's mem_eff_attention/kernel_forward.h): `scaled_dot_product_attention`'s
//! kernel on float inputs, as a transformer's layers call it. Its one parameter is `Params`:
//! seven pointers (query, key, value, bias, seqstart_q, seqstart_k, seqlen_k), an int, the
//! output, the output accumulator and the logsumexp, then dimensions and strides, dropout and
//! its Philox state (seed and offset by value unless a CUDA graph is being captured, when the
//! kernel writes them through the two pointers that end the struct).
//!
//! Read as words, the launch wrote the packed query/key/value tensor it only reads (`rw`), so
//! neither that tensor nor the attention's output could ever be recomputed. Read by this
//! layout: query, key, value, bias and the sequence arrays are read; the output and the
//! logsumexp are written, whole where the grid covers every (query block, head, batch) and
//! their sizes fill their allocations from the start (the output `[B, M, H, Kv]` densely, the
//! logsumexp `[B, H, M rounded up to 32]`: the kernel writes the padding too), else `rw`. A
//! captured Philox state, an accumulator buffer, or a parameter of another size is left to the
//! conservative rule.

use super::words::{Found, le_at};
use planner::trace::{Access, Touch};

/// The size of `Params` for 4-byte scalars (float accumulation), by the C layout: the Philox
/// state (seed, offset, a 64-bit intra-graph offset, the captured flag) is 32 bytes at 232.
const PARAMS: usize = 280;

/// Where its pointers are: query, key, value, bias, seqstart_q, seqstart_k, seqlen_k, then
/// output, output accumulator and logsumexp, then the captured seed and offset.
const POINTERS: [usize; 12] = [0, 8, 16, 24, 32, 40, 48, 64, 72, 80, 264, 272];

/// An attention forward kernel: its scalar size and queries per block.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Attention {
    elem: u64,
    queries_per_block: u32,
}

/// The kernel's scalar size and queries per block, from its demangled name; None for any other
/// kernel.
pub fn parse(name: &str) -> Option<Attention> {
    let rest = name.strip_prefix("fmha_cutlassF_")?;
    let args = rest
        .split_once("(PyTorchMemEffAttention::AttentionKernel<")?
        .1
        .strip_suffix(">::Params)")?;
    let a: Vec<&str> = args.split(", ").collect();
    let elem = match *a.first()? {
        "float" => 4,
        _ => return None,
    };
    Some(Attention {
        elem,
        queries_per_block: a.get(3)?.parse().ok()?,
    })
}

/// Where a replay rewrites addresses: the struct's pointer slots.
pub fn pointer_words(params: &[(usize, usize)]) -> Option<Vec<usize>> {
    let &(at, size) = params.first()?;
    (params.len() == 1 && size == PARAMS).then(|| POINTERS.iter().map(|p| at + p).collect())
}

/// The touches of one launch (see the module's comment); None: left to the conservative rule.
pub fn touches(
    k: Attention,
    params: &[(usize, usize)],
    buf: &[u8],
    grid: [u32; 3],
    find: impl Fn(u64) -> Option<Found>,
) -> Option<Vec<Touch>> {
    let &(at, size) = params.first()?;
    if params.len() != 1 || size != PARAMS || k.elem != 4 {
        return None;
    }
    let word = |off: usize| le_at(buf, at + off, 8);
    let int = |off: usize| le_at(buf, at + off, 4);
    // A CUDA graph's capture: the kernel also writes the seed and offset through pointers.
    if buf.get(at + 256).copied()? != 0 || word(72)? != 0 {
        return None;
    }
    let (head_dim_value, queries) = (int(100)?, int(104)?);
    let (o_stride_m, batches, heads) = (int(136)?, int(192)?, int(204)?);
    let covers = grid[0] as u64 * u64::from(k.queries_per_block) >= queries
        && u64::from(grid[1]) == heads
        && u64::from(grid[2]) == batches
        && int(196)? == 0
        && int(200)? == 0;
    let out_bytes = batches * queries * heads * head_dim_value * k.elem;
    let lse_bytes = batches * heads * queries.div_ceil(32) * 32 * 4;
    let mut out: Vec<Touch> = Vec::new();
    let mut add = |w: u64, access: Access, whole: Option<u64>| -> Option<()> {
        if w == 0 {
            return Some(());
        }
        let (alloc, offset, alloc_size) = find(w)?;
        let written_whole = whole.is_some_and(|b| covers && offset == 0 && b == alloc_size);
        let (access, bytes) = match access {
            Access::W if written_whole => (Access::W, alloc_size),
            Access::W => (Access::Rw, 0),
            other => (other, 0),
        };
        // Query, key and value are views of one packed tensor: one read.
        if let Some(t) = out.iter_mut().find(|t| t.alloc == alloc) {
            if t.access != access {
                t.access = Access::Rw;
                t.bytes = 0;
            }
            return Some(());
        }
        out.push(Touch {
            alloc,
            offset,
            bytes,
            access,
        });
        Some(())
    };
    for off in [0, 8, 16, 24, 32, 40, 48] {
        add(word(off)?, Access::R, None)?;
    }
    let dense = o_stride_m == heads * head_dim_value;
    add(word(64)?, Access::W, dense.then_some(out_bytes))?;
    add(word(80)?, Access::W, Some(lse_bytes))?;
    (!out.is_empty()).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// As torch 2.15's fatbin names it (demangled).
    const FMHA: &str = "fmha_cutlassF_f32_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<float, cutlass::arch::Sm80, true, 64, 64, 64, true, true>::Params)";

    /// Allocations 1 to 4 at 0x1000_0000 * id, each `size` bytes.
    fn find(size: u64) -> impl Fn(u64) -> Option<Found> {
        move |w| {
            let id = w / 0x1000_0000;
            ((1..=4).contains(&id) && w % 0x1000_0000 < size).then_some((id, w % 0x1000_0000, size))
        }
    }

    /// B = 2, M = 128, H = 4, Kv = 16: q, k, v in one packed allocation (1) at offsets 0, 64,
    /// 128; output in 2, logsumexp in 3.
    fn params() -> Vec<u8> {
        let mut b = vec![0u8; PARAMS];
        let mut put =
            |off: usize, v: u64, n: usize| b[off..off + n].copy_from_slice(&v.to_le_bytes()[..n]);
        put(0, 0x1000_0000, 8);
        put(8, 0x1000_0040, 8);
        put(16, 0x1000_0080, 8);
        put(64, 0x2000_0000, 8);
        put(80, 0x3000_0000, 8);
        put(96, 16, 4);
        put(100, 16, 4);
        put(104, 128, 4);
        put(108, 128, 4);
        put(136, 64, 4);
        put(192, 2, 4);
        put(204, 4, 4);
        put(212, 1, 1);
        put(232, 1234, 8);
        b
    }

    const OUT: u64 = 2 * 128 * 4 * 16 * 4;
    const LSE: u64 = 2 * 4 * 128 * 4;
    const GRID: [u32; 3] = [2, 4, 2];

    fn find_sizes(w: u64) -> Option<Found> {
        let id = w / 0x1000_0000;
        let size = [0, 3 * OUT, OUT, LSE][id.min(3) as usize];
        (1..=3).contains(&id).then_some((id, w % 0x1000_0000, size))
    }

    #[test]
    fn names_give_the_scalar_and_the_block() {
        let k = parse(FMHA).unwrap();
        assert_eq!((k.elem, k.queries_per_block), (4, 64));
        assert!(parse(&FMHA.replace("<float,", "<cutlass::half_t,")).is_none());
        assert!(parse("fmha_cutlassB_f32_aligned_64x64_k64_dropout_sm80(PyTorchMemEffAttention::AttentionBackwardKernel<cutlass::arch::Sm80, float, true, true, false, 64, 64, 64, false>::Params)").is_none());
        for other in [
            super::super::elementwise::parse(FMHA).is_some(),
            super::super::strided::parse(FMHA).is_some(),
            super::super::multi_tensor::parse(FMHA).is_some(),
        ] {
            // (The typed signature reads any name, and is asked last: `launch::reader`.)
            assert!(!other, "another reader claims the attention kernel");
        }
    }

    #[test]
    fn the_packed_inputs_are_read_and_the_outputs_written_whole() {
        let k = parse(FMHA).unwrap();
        let t = touches(k, &[(0, PARAMS)], &params(), GRID, find_sizes).unwrap();
        let got: Vec<(u64, u64, Access)> = t.iter().map(|t| (t.alloc, t.bytes, t.access)).collect();
        assert_eq!(
            got,
            vec![(1, 0, Access::R), (2, OUT, Access::W), (3, LSE, Access::W)]
        );
        assert_eq!(pointer_words(&[(0, PARAMS)]).unwrap(), POINTERS.to_vec());
    }

    #[test]
    fn what_is_not_provably_whole_is_rw_and_what_is_unknown_is_left_alone() {
        let k = parse(FMHA).unwrap();
        let p = params();
        let roles = |buf: &[u8], grid, find: &dyn Fn(u64) -> Option<Found>| {
            touches(k, &[(0, PARAMS)], buf, grid, find)
                .map(|t| t.iter().map(|t| t.access).collect::<Vec<_>>())
        };
        // Half the heads launched; a larger output allocation; a strided output.
        let rw = Some(vec![Access::R, Access::Rw, Access::Rw]);
        assert_eq!(roles(&p, [2, 2, 2], &find_sizes), rw);
        assert_eq!(
            roles(&p, GRID, &find(4 * OUT)),
            Some(vec![Access::R, Access::Rw, Access::Rw])
        );
        let mut strided = p.clone();
        strided[136..140].copy_from_slice(&128u32.to_le_bytes());
        assert_eq!(
            roles(&strided, GRID, &find_sizes),
            Some(vec![Access::R, Access::Rw, Access::W])
        );
        // The output written in place over the packed input: one touch, rw.
        let mut inplace = p.clone();
        inplace[64..72].copy_from_slice(&0x1000_0000u64.to_le_bytes());
        assert_eq!(
            roles(&inplace, GRID, &find_sizes),
            Some(vec![Access::Rw, Access::W])
        );
        // A captured Philox state, an accumulator, another size, an unknown pointer.
        let mut captured = p.clone();
        captured[256] = 1;
        assert_eq!(roles(&captured, GRID, &find_sizes), None);
        let mut accum = p.clone();
        accum[72..80].copy_from_slice(&0x3000_0000u64.to_le_bytes());
        assert_eq!(roles(&accum, GRID, &find_sizes), None);
        assert!(touches(k, &[(0, PARAMS - 8)], &p, GRID, find_sizes).is_none());
        let mut stray = p.clone();
        stray[24..32].copy_from_slice(&0x9000_0000u64.to_le_bytes());
        assert_eq!(roles(&stray, GRID, &find_sizes), None);
    }
}
