//! The signature reader against hand-packed parameter buffers, as torch's kernels lay them out.

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
            Some(Param::Accessor { index, dims, .. }) => (accessor_size(index, dims), 8),
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
    // The input is also the output (an allocation reached twice, once writably): one `rw` of
    // unknown extent.
    let (layout, buf) = max_pool(0x1000, 0x3000);
    assert_eq!(
        touches(&sig, &layout, &buf, ONE, find([64, 16, 32])),
        Some(vec![touch(1, 0, Access::Rw), touch(3, 0, Access::Rw)])
    );
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
    // A struct of 8 bytes or more among the parameters (here the operands' pointers), which
    // may hide pointers: nothing settled, and no words a replay could trust.
    let elementwise = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, std::array<char*, (unsigned long)3>, false>(int, at::native::CUDAFunctor_add<float>, std::array<char*, (unsigned long)3>)";
    let sig = parse(elementwise).unwrap();
    let layout = [(0, 4), (4, 4), (8, 24)];
    let mut buf = vec![0u8; 32];
    buf[8..16].copy_from_slice(&0x2000u64.to_le_bytes());
    buf[16..24].copy_from_slice(&0x1000u64.to_le_bytes());
    assert_eq!(touches(&sig, &layout, &buf, ONE, find([64, 16, 32])), None);
    assert_eq!(sig.pointer_words(&layout), None);
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
    // In place: the input's allocation written, extent unknown (no longer a whole write).
    let (layout, buf) = dropout(64, (0x1000, flat), (0x1000, flat), (0x3000, flat));
    let t = replayed(&sig, &layout, &buf, &allocs).unwrap();
    assert_eq!(t[0], touch(1, 0, Access::Rw));
    assert!(t.iter().all(|u| u.alloc != 1 || u == &t[0]), "{t:?}");
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
    // Another struct of the random state's size: it may hide pointers.
    let odd = DROPOUT.replace("at::PhiloxCudaState", "at::OtherState");
    let (layout, buf) = fine();
    assert_eq!(
        replayed(&parse(&odd).unwrap(), &layout, &buf, &allocs),
        None
    );
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
    // In place over X (one allocation reached twice, once writably): X `rw`, extent unknown.
    let t = touches(&sig, &layout, &buf, rows4, sizes(128)).unwrap();
    assert_eq!(t[0], rw(1));
    assert_eq!(t.iter().filter(|u| u.alloc == 1).count(), 1, "{t:?}");
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

/// As torch 2.15's fatbin names it (DenseNet's concatenations): the output as raw bytes, then
/// a batch of up to 128 inputs.
const CAT: &str = "void at::native::(anonymous namespace)::CatArrayBatchedCopy_vectorized<at::native::(anonymous namespace)::OpaqueType<(unsigned int)4>, unsigned int, 2, 128, 1, 16, 4>(char*, at::native::(anonymous namespace)::CatArrInputTensorMetadata<at::native::(anonymous namespace)::OpaqueType<(unsigned int)4>, unsigned int, 128, 1>, at::native::(anonymous namespace)::TensorSizeStride<unsigned int, (unsigned int)4>, int, unsigned int)";

/// CAT's layout: the output pointer; the metadata (128 pointers, 3 x 128 indices, 128 flags,
/// one TensorSizeStride of 2 x 4 indices, padded to 8): 2672 bytes at 8; a TensorSizeStride;
/// two scalars. Inputs `inputs` in its first slots, `stale` after them (an earlier batch's).
fn cat(out: u64, inputs: &[u64], stale: u64) -> (Vec<(usize, usize)>, Vec<u8>) {
    let layout = vec![(0, 8), (8, 2672), (2680, 32), (2712, 4), (2716, 4)];
    let mut buf = vec![0u8; 2720];
    buf[..8].copy_from_slice(&out.to_le_bytes());
    for (k, &p) in inputs.iter().chain([&stale]).enumerate() {
        buf[8 + 8 * k..16 + 8 * k].copy_from_slice(&p.to_le_bytes());
    }
    // Offsets and sizes after the pointers: small integers, one pair of them an address.
    buf[8 + 1024..8 + 1032].copy_from_slice(&0x2000u64.to_le_bytes());
    (layout, buf)
}

#[test]
fn a_concatenation_reads_its_inputs_and_may_write_its_output() {
    let sig = parse(CAT).expect("the cat kernel's signature");
    // A row of blocks per input.
    let rows = |n: u32| [2, n, 1];
    let (layout, buf) = cat(0x3000, &[0x1000, 0x2000], 0);
    let t = touches(&sig, &layout, &buf, rows(2), find([64, 64, 128])).unwrap();
    assert_eq!(
        t,
        vec![
            touch(3, 0, Access::Rw),
            touch(1, 0, Access::R),
            touch(2, 0, Access::R)
        ]
    );
    // A stale slot past the batch is no input; an input inside an allocation, at its offset.
    let (layout, buf) = cat(0x3000, &[0x1010], 0x2000);
    let t = touches(&sig, &layout, &buf, rows(1), find([64, 64, 128])).unwrap();
    assert_eq!(t, vec![touch(3, 0, Access::Rw), touch(1, 0x10, Access::R)]);
    // A grid that is not a row per input: not this layout.
    assert!(touches(&sig, &layout, &buf, rows(0), find([64, 64, 128])).is_none());
    assert!(touches(&sig, &layout, &buf, rows(129), find([64, 64, 128])).is_none());
    // A replay rewrites the output's word and the batch's 128.
    let words = sig.pointer_words(&layout).unwrap();
    assert_eq!(words.len(), 129);
    assert_eq!((words[0], words[1], words[128]), (0, 8, 8 + 127 * 8));
    // An input that is the output too: how they overlap is not known, one `rw`.
    let (layout, buf) = cat(0x3000, &[0x3000], 0);
    assert_eq!(
        touches(&sig, &layout, &buf, rows(1), find([64, 64, 128])),
        Some(vec![touch(3, 0, Access::Rw)])
    );
    // A batch the struct cannot hold is not this struct: a struct that may hide pointers.
    let (layout, buf) = cat(0x3000, &[0x1000, 0x2000], 0);
    let odd = parse(&CAT.replace(", 128, 1>, at::native", ", 0, 1>, at::native")).unwrap();
    assert!(touches(&odd, &layout, &buf, rows(2), find([64, 64, 128])).is_none());
    assert_eq!(
        opaque("at::native::(anonymous namespace)::OpaqueType<8u>"),
        Some(8)
    );
    assert_eq!(opaque("OpaqueType<(unsigned int)0>"), None);
}

/// ATen's depthwise convolution as torch 2.15's fatbin names it (demangled): input, output,
/// weight and bias as packed accessors, then `biasEnabled` and 15 ints.
const DEPTHWISE: &str = "void at::native::(anonymous namespace)::conv_depthwise2d_forward_kernel<3, float, int>(torch::headeronly::detail::GenericPackedTensorAccessor<torch::headeronly::detail::TensorAccessor<c10::ArrayRef<long>, float const, (unsigned long)3, torch::headeronly::DefaultPtrTraits, int>, at::detail::IndexBoundsCheck<(unsigned long)4, int>, float const, (unsigned long)4, torch::headeronly::DefaultPtrTraits, int>, torch::headeronly::detail::GenericPackedTensorAccessor<torch::headeronly::detail::TensorAccessor<c10::ArrayRef<long>, float, (unsigned long)3, torch::headeronly::DefaultPtrTraits, int>, at::detail::IndexBoundsCheck<(unsigned long)4, int>, float, (unsigned long)4, torch::headeronly::DefaultPtrTraits, int>, torch::headeronly::detail::GenericPackedTensorAccessor<torch::headeronly::detail::TensorAccessor<c10::ArrayRef<long>, float const, (unsigned long)3, torch::headeronly::DefaultPtrTraits, int>, at::detail::IndexBoundsCheck<(unsigned long)4, int>, float const, (unsigned long)4, torch::headeronly::DefaultPtrTraits, int>, torch::headeronly::detail::GenericPackedTensorAccessor<torch::headeronly::detail::TensorAccessor<c10::ArrayRef<long>, float const, (unsigned long)0, torch::headeronly::DefaultPtrTraits, int>, at::detail::IndexBoundsCheck<(unsigned long)1, int>, float const, (unsigned long)1, torch::headeronly::DefaultPtrTraits, int>, bool, int, int, int, int, int, int, int, int, int, int, int, int, int, int, int)";

/// Writes a packed accessor with 4-byte indices at `off`: its pointer, then its sizes and
/// strides (in elements).
fn accessor_at(buf: &mut [u8], off: usize, data: u64, shape: &[(u32, u32)]) {
    buf[off..off + 8].copy_from_slice(&data.to_le_bytes());
    let n = shape.len();
    for (k, &(size, stride)) in shape.iter().enumerate() {
        buf[off + 8 + 4 * k..off + 12 + 4 * k].copy_from_slice(&size.to_le_bytes());
        let t = off + 8 + 4 * (n + k);
        buf[t..t + 4].copy_from_slice(&stride.to_le_bytes());
    }
}

/// A depthwise convolution over a [1, 2, 4, 4] float input into a [1, 2, 4, 4] output with a
/// [2, 1, 3, 3] weight and no bias (a NULL accessor).
fn depthwise(input: u64, out: u64, weight: u64) -> (Vec<(usize, usize)>, Vec<u8>) {
    let (layout, mut buf) = packed(DEPTHWISE, &[]);
    let nchw = [(1, 32), (2, 16), (4, 4), (4, 1)];
    accessor_at(&mut buf, layout[0].0, input, &nchw);
    accessor_at(&mut buf, layout[1].0, out, &nchw);
    accessor_at(
        &mut buf,
        layout[2].0,
        weight,
        &[(2, 9), (1, 9), (3, 3), (3, 1)],
    );
    (layout, buf)
}

#[test]
fn packed_accessors_read_const_tensors_over_their_extent_and_may_write_the_others() {
    let sig = parse(DEPTHWISE).unwrap();
    assert!(matches!(
        sig.params[..4],
        [
            Param::Accessor {
                read_only: true,
                dims: 4,
                index: 4,
                ..
            },
            Param::Accessor {
                read_only: false,
                ..
            },
            Param::Accessor {
                read_only: true,
                ..
            },
            Param::Accessor {
                read_only: true,
                dims: 1,
                ..
            }
        ]
    ));
    let (layout, buf) = depthwise(0x1000, 0x2000, 0x3000);
    assert_eq!(layout[0], (0, 40), "a pointer and 2 x 4 ints");
    assert_eq!(layout[3], (120, 16), "the bias's: a pointer and 2 x 1 ints");
    assert_eq!(
        touches(&sig, &layout, &buf, ONE, find([128, 128, 72])),
        Some(vec![
            sized(1, 128, Access::R),
            touch(2, 0, Access::Rw),
            sized(3, 72, Access::R),
        ])
    );
    assert_eq!(
        sig.pointer_words(&layout),
        Some(vec![0, 40, 80, 120]),
        "the four accessors' data pointers"
    );
}

#[test]
fn what_a_packed_accessor_does_not_settle_is_left_to_the_conservative_rule() {
    let sig = parse(DEPTHWISE).unwrap();
    // An input whose extent runs past its allocation.
    let (layout, buf) = depthwise(0x1000, 0x2000, 0x3000);
    assert_eq!(touches(&sig, &layout, &buf, ONE, find([64, 128, 72])), None);
    // The driver's size for an accessor is not the name's.
    let (mut layout, buf) = depthwise(0x1000, 0x2000, 0x3000);
    layout[0].1 = 48;
    assert_eq!(
        touches(&sig, &layout, &buf, ONE, find([128, 128, 72])),
        None
    );
    // The input is the output: an allocation reached twice, once writably, one `rw`.
    let (layout, buf) = depthwise(0x1000, 0x1000, 0x3000);
    assert_eq!(
        touches(&sig, &layout, &buf, ONE, find([128, 128, 72])),
        Some(vec![touch(1, 0, Access::Rw), sized(3, 72, Access::R)])
    );
    // Pointer traits this module does not know: a struct that may hide pointers.
    let (layout, buf) = depthwise(0x1000, 0x2000, 0x3000);
    let odd =
        parse(&DEPTHWISE.replace("DefaultPtrTraits, int>, torch", "OtherTraits, int>, torch"))
            .unwrap();
    assert_eq!(
        touches(&odd, &layout, &buf, ONE, find([128, 128, 72])),
        None
    );
}

#[test]
fn accessors_of_any_namespace_and_index_parse() {
    let older = "void k(at::GenericPackedTensorAccessor<float const, 2ul, at::RestrictPtrTraits, long>, at::GenericPackedTensorAccessor<c10::Half, 3ul, at::DefaultPtrTraits, int>)";
    assert_eq!(
        parse(older).unwrap().params,
        vec![
            Param::Accessor {
                elem: 4,
                index: 8,
                signed: true,
                read_only: true,
                dims: 2
            },
            Param::Accessor {
                elem: 2,
                index: 4,
                signed: true,
                read_only: false,
                dims: 3
            },
        ]
    );
}

/// TensorFlow's row reduction as its fatbin names it (demangled): the reduction's functor and
/// its initial value's type alias are no scalars this module names.
const ROW_MAX: &str = "void tensorflow::functor::RowReduceKernel<float const*, float*, cuda::__4::maximum<void> >(float const*, float*, int, int, cuda::__4::maximum<void>, std::iterator_traits<float const*>::value_type)";

#[test]
fn parameters_too_small_for_a_pointer_hold_none_whatever_their_type() {
    let sig = parse(ROW_MAX).unwrap();
    // As the driver lays it out: the empty functor in 1 byte, the float in 4.
    let layout = [(0, 8), (8, 8), (16, 4), (20, 4), (24, 1), (28, 4)];
    let mut buf = vec![0u8; 32];
    buf[..8].copy_from_slice(&0x1000u64.to_le_bytes());
    buf[8..16].copy_from_slice(&0x2000u64.to_le_bytes());
    assert_eq!(
        touches(&sig, &layout, &buf, ONE, find([64, 16, 32])),
        Some(vec![touch(1, 0, Access::R), touch(2, 0, Access::Rw)])
    );
    assert_eq!(sig.pointer_words(&layout), Some(vec![0, 8]));
    // Laid out in 12 bytes (three ints), no struct holding a pointer.
    let twelve = [(0, 8), (8, 8), (16, 4), (20, 4), (24, 12), (36, 4)];
    let mut buf = vec![0u8; 40];
    buf[..8].copy_from_slice(&0x1000u64.to_le_bytes());
    buf[8..16].copy_from_slice(&0x2000u64.to_le_bytes());
    assert_eq!(
        touches(&sig, &twelve, &buf, ONE, find([64, 16, 32])).map(|t| t.len()),
        Some(2)
    );
    // Laid out in 8 bytes, the functor may hold a pointer.
    let wide = [(0, 8), (8, 8), (16, 4), (20, 4), (24, 8), (32, 4)];
    let mut buf = vec![0u8; 40];
    buf[..8].copy_from_slice(&0x1000u64.to_le_bytes());
    buf[8..16].copy_from_slice(&0x2000u64.to_le_bytes());
    assert_eq!(touches(&sig, &wide, &buf, ONE, find([64, 16, 32])), None);
    assert_eq!(sig.pointer_words(&wide), None);
}
