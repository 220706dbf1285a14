//! The PTX of two kernels TensorFlow 2.21 compiled at run time in a Keras fit (FloorMod over
//! int64 with a scalar divisor, and ReLU over float), interpreted over buffers, against the
//! operations' definitions.

use super::super::testmem::TestMem;
use super::super::{Skip, f32_bytes, f32s};
use crate::fatbin::KernelParams;
use std::sync::Arc;

fn entry(ptx: &str) -> (Arc<crate::fatbin::PtxEntry>, KernelParams) {
    let (parsed, _) = crate::ptx::parse(ptx).unwrap();
    (
        parsed.ptx["main_kernel"].clone(),
        parsed.kernels["main_kernel"].clone(),
    )
}

/// A parameter block: each (ordinal's) value little-endian at the entry's offsets.
fn block(k: &KernelParams, vals: &[u64]) -> Vec<u8> {
    let mut b = vec![0u8; k.block_len()];
    for (&(off, size), v) in k.params.iter().zip(vals) {
        b[off..off + size].copy_from_slice(&v.to_le_bytes()[..size]);
    }
    b
}

#[test]
fn relu_over_a_tail_and_vectors() {
    let (e, k) = entry(include_str!("relu_f32.ptx"));
    // n, then the input memref {alloc, aligned, offset, size, stride}, then the output's.
    let n = 11u64;
    let x: Vec<f32> = vec![
        -1.0,
        2.0,
        0.0,
        -0.0,
        3.5,
        f32::NAN,
        -1e-40,
        1e-40,
        7.0,
        -8.0,
        0.25,
    ];
    let mut m = TestMem::default();
    m.add(0x1000, f32_bytes(&x));
    m.add(0x2000, vec![0xee; 44 + 4]);
    let b = block(&k, &[n, 0x1000, 0x1000, 0, n, 1, 0x2000, 0x2000, 0, n, 1]);
    super::run(&e, &k, &b, [1, 1, 1], [256, 1, 1], &mut m).unwrap();
    let y = f32s(&m.bufs[&0x2000][..44]);
    for (xi, yi) in x.iter().zip(&y) {
        // max(x, 0) with NaN kept, as TensorFlow's Relu; the kernel compares with .ftz, so a
        // subnormal input counts as 0 (and is written as it was, or 0).
        let flushed = if xi.abs() < f32::MIN_POSITIVE {
            0.0
        } else {
            *xi
        };
        if xi.is_nan() {
            assert!(yi.is_nan());
        } else if flushed <= 0.0 {
            assert_eq!(*yi, 0.0, "relu({xi})");
        } else {
            assert_eq!(yi, xi);
        }
    }
    // Past n nothing is written.
    assert_eq!(m.bufs[&0x2000][44..], [0xee; 4]);
}

#[test]
fn floor_mod_int64_by_a_scalar() {
    let (e, k) = entry(include_str!("floormod_i64.ptx"));
    let a: Vec<i64> = vec![7, -7, 0, i64::MIN, 5, -1];
    for d in [3i64, -3, -1, 0] {
        let mut m = TestMem::default();
        m.add(0x1000, a.iter().flat_map(|v| v.to_le_bytes()).collect());
        m.add(0x2000, d.to_le_bytes().to_vec());
        m.add(0x3000, vec![0; 48]);
        let n = a.len() as u64;
        // {n, a[n], d (rank 0), out[n]}
        let b = block(
            &k,
            &[
                n, 0x1000, 0x1000, 0, n, 1, 0x2000, 0x2000, 0, 0x3000, 0x3000, 0, n, 1,
            ],
        );
        super::run(&e, &k, &b, [1, 1, 1], [1024, 1, 1], &mut m).unwrap();
        let got: Vec<i64> = m.bufs[&0x3000]
            .chunks(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        let want: Vec<i64> = a
            .iter()
            .map(|&x| match d {
                0 => x,
                -1 => 0,
                _ => x.rem_euclid(d) + if x.rem_euclid(d) != 0 && d < 0 { d } else { 0 },
            })
            .collect();
        assert_eq!(got, want, "divisor {d}");
    }
}

#[test]
fn a_load_from_memory_without_bytes_writes_nothing() {
    let (e, k) = entry(include_str!("relu_f32.ptx"));
    let mut m = TestMem::default();
    m.add(0x2000, vec![0xee; 8]);
    let b = block(&k, &[2, 0x1000, 0x1000, 0, 2, 1, 0x2000, 0x2000, 0, 2, 1]);
    let r = super::run(&e, &k, &b, [1, 1, 1], [256, 1, 1], &mut m);
    assert_eq!(r, Err(Skip::NoBytes));
    assert_eq!(m.bufs[&0x2000], vec![0xee; 8]);
}

#[test]
fn unknown_instructions_are_not_guessed() {
    let ptx = ".version 8.5\n.target sm_90\n.address_size 64\n\
               .visible .entry main_kernel(.param .u64 p0)\n{\n\
               .reg .b32 %r<3>;\n.reg .b64 %rd<3>;\n\
               ld.param.b64 %rd1, [p0];\n\
               popc.b32 %r1, %r2;\n\
               st.global.b32 [%rd1], %r1;\nret;\n}\n";
    let (e, k) = entry(ptx);
    let mut m = TestMem::default();
    m.add(0x1000, vec![1; 4]);
    let b = block(&k, &[0x1000]);
    let r = super::run(&e, &k, &b, [1, 1, 1], [1, 1, 1], &mut m);
    assert!(
        matches!(r, Err(Skip::Layout(ref s)) if s.contains("popc")),
        "{r:?}"
    );
    assert_eq!(m.bufs[&0x1000], vec![1; 4]);
}

#[test]
fn float_roundings_conversions_and_square_roots() {
    // y[i] = {cvt.rni.f32.f32 x, cvt.rzi.s32.f32 x, sqrt.rn.f32 |x|, rcp.rn.f32 x} for one x.
    let ptx = ".version 8.5\n.target sm_90\n.address_size 64\n\
               .visible .entry main_kernel(.param .u64 p0, .param .u64 p1)\n{\n\
               .reg .b32 %r<8>;\n.reg .b64 %rd<3>;\n\
               ld.param.b64 %rd1, [p0];\nld.param.b64 %rd2, [p1];\n\
               ld.global.f32 %r1, [%rd1];\n\
               cvt.rni.f32.f32 %r2, %r1;\ncvt.rzi.s32.f32 %r3, %r1;\n\
               abs.f32 %r4, %r1;\nsqrt.rn.f32 %r5, %r4;\nrcp.rn.f32 %r6, %r1;\n\
               st.global.v4.b32 [%rd2], {%r2, %r3, %r5, %r6};\nret;\n}\n";
    let (e, k) = entry(ptx);
    for x in [2.5f32, -3.7, 0.1, 1e10] {
        let mut m = TestMem::default();
        m.add(0x1000, x.to_le_bytes().to_vec());
        m.add(0x2000, vec![0; 16]);
        let b = block(&k, &[0x1000, 0x2000]);
        super::run(&e, &k, &b, [1, 1, 1], [1, 1, 1], &mut m).unwrap();
        let o = &m.bufs[&0x2000];
        let f = |i: usize| f32::from_le_bytes(o[i * 4..i * 4 + 4].try_into().unwrap());
        assert_eq!(f(0), x.round_ties_even(), "rni {x}");
        let i = i32::from_le_bytes(o[4..8].try_into().unwrap());
        assert_eq!(i, x as i32, "rzi {x}");
        assert_eq!(f(2), x.abs().sqrt(), "sqrt {x}");
        assert_eq!(f(3), 1.0 / x, "rcp {x}");
    }
}

#[test]
fn a_thread_reads_its_own_stores_and_the_last_store_of_a_byte_wins() {
    let ptx = ".version 8.5\n.target sm_90\n.address_size 64\n\
               .visible .entry main_kernel(.param .u64 p0)\n{\n\
               .reg .b32 %r<3>;\n.reg .b64 %rd<2>;\n\
               ld.param.b64 %rd1, [p0];\n\
               st.global.b32 [%rd1], 7;\n\
               ld.global.b32 %r1, [%rd1];\n\
               add.s32 %r2, %r1, 1;\n\
               st.global.b32 [%rd1+4], %r2;\n\
               st.global.b8 [%rd1+1], 9;\n\
               ret;\n}\n";
    let (e, k) = entry(ptx);
    let mut m = TestMem::default();
    m.add(0x1000, vec![0xff; 8]);
    let b = block(&k, &[0x1000]);
    super::run(&e, &k, &b, [1, 1, 1], [1, 1, 1], &mut m).unwrap();
    assert_eq!(m.bufs[&0x1000], vec![7, 9, 0, 0, 8, 0, 0, 0]);
}

#[test]
fn approximate_maths_is_computed_correctly_rounded() {
    // y = {rsqrt.approx.ftz, ex2.approx.ftz, lg2.approx, rcp.approx, sin.approx, cos.approx,
    //      add.sat} of one x.
    let ptx = ".version 8.5\n.target sm_90\n.address_size 64\n\
               .visible .entry main_kernel(.param .u64 p0, .param .u64 p1)\n{\n\
               .reg .f32 %f<10>;\n.reg .b64 %rd<3>;\n\
               ld.param.b64 %rd1, [p0];\nld.param.b64 %rd2, [p1];\n\
               ld.global.f32 %f1, [%rd1];\n\
               rsqrt.approx.ftz.f32 %f2, %f1;\nex2.approx.ftz.f32 %f3, %f1;\n\
               lg2.approx.f32 %f4, %f1;\nrcp.approx.f32 %f5, %f1;\n\
               sin.approx.f32 %f6, %f1;\ncos.approx.f32 %f7, %f1;\n\
               add.sat.f32 %f8, %f1, 0f3F000000;\n\
               st.global.v4.f32 [%rd2], {%f2, %f3, %f4, %f5};\n\
               st.global.v2.f32 [%rd2+16], {%f6, %f7};\n\
               st.global.f32 [%rd2+24], %f8;\nret;\n}\n";
    let (e, k) = entry(ptx);
    for x in [0.25f32, 2.0, 3.7, 0.0, -1.5] {
        let mut m = TestMem::default();
        m.add(0x1000, x.to_le_bytes().to_vec());
        m.add(0x2000, vec![0; 28]);
        let b = block(&k, &[0x1000, 0x2000]);
        super::run(&e, &k, &b, [1, 1, 1], [1, 1, 1], &mut m).unwrap();
        let o = &m.bufs[&0x2000];
        let f = |i: usize| f32::from_le_bytes(o[i * 4..i * 4 + 4].try_into().unwrap());
        let same = |a: f32, b: f64, what: &str| {
            let b = b as f32;
            assert!(
                a == b || (a.is_nan() && b.is_nan()),
                "{what}({x}) = {a}, want {b}"
            );
        };
        let xd = x as f64;
        same(f(0), 1.0 / xd.sqrt(), "rsqrt");
        same(f(1), xd.exp2(), "ex2");
        same(f(2), xd.log2(), "lg2");
        same(f(3), 1.0 / xd, "rcp");
        same(f(4), xd.sin(), "sin");
        same(f(5), xd.cos(), "cos");
        same(f(6), (xd + 0.5).clamp(0.0, 1.0), "add.sat");
    }
}

/// The interpreter's speed: a 2 MiB ReLU (524288 floats, 512 blocks of 256 threads). Run with
/// `cargo test --release -p simgpu-cuda relu_2mib -- --ignored --nocapture`.
#[test]
#[ignore]
fn relu_2mib_timing() {
    let (e, k) = entry(include_str!("relu_f32.ptx"));
    let n = 512 * 1024u64;
    let x: Vec<f32> = (0..n).map(|i| i as f32 - (n / 2) as f32).collect();
    let mut m = TestMem::default();
    m.add(0x1000_0000, f32_bytes(&x));
    m.add(0x2000_0000, vec![0; 4 * n as usize]);
    let b = block(
        &k,
        &[
            n,
            0x1000_0000,
            0x1000_0000,
            0,
            n,
            1,
            0x2000_0000,
            0x2000_0000,
            0,
            n,
            1,
        ],
    );
    let t = std::time::Instant::now();
    super::run(&e, &k, &b, [512, 1, 1], [256, 1, 1], &mut m).unwrap();
    println!("relu 2 MiB: {:.3} s", t.elapsed().as_secs_f64());
    let y = f32s(&m.bufs[&0x2000_0000]);
    assert!(x.iter().zip(&y).all(|(a, b)| a.max(0.0) == *b));
}
