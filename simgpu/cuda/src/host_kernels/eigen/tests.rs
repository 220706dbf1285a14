//! The evaluators below are parameter blocks TensorFlow 2.21 passed to these kernels in a Keras
//! `Dense` fit (batch 32, 10 classes), recorded at launch; the buffers are placed at the
//! addresses they hold. Results are checked against references computed directly (softmax
//! cross-entropy from its definition, in f64).

use super::super::testmem::TestMem;
use super::super::{Skip, f32_bytes, f32s};
use crate::fatbin::KernelParams;

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn run(short: &str, block_hex: &str, m: &mut TestMem) -> Result<(), Skip> {
    let b = hex(block_hex);
    let idx = if short.ends_with("@long") { 8 } else { 4 };
    let len = b.len() - idx;
    let p = KernelParams {
        params: vec![(0, len), (len, idx)],
        cbank_size: None,
    };
    let f = super::TABLE
        .iter()
        .find(|(t, _)| *t == short)
        .map(|&(_, f)| f)
        .expect("a host kernel for the template");
    f(
        &super::Launch {
            name: "",
            params: &p,
            block: &b,
            grid: [1, 1, 1],
        },
        m,
    )
}

const B: u64 = 0x5000_0021_4600; // logits, then backprop (32 x 10)
const S: u64 = 0x5000_0021_4c00; // scratch (32)
const L: u64 = 0x5000_0021_4e00; // loss (32)
const LB: u64 = 0x5000_0021_4400; // labels (32, int64)

const ROWMAX: &str = "0046210000500000004c210000500000200000000a000000ff000000ffff7fff";
const SUB_BCAST: &str = "0046210000500000200000000a0000002053fae1187f00002053fae1187f0000a0fcc430197f00000046210000500000200000000a0000002053fae1187f0000000100e1187f00002053fae1187f0000000000000a000000200000000a0000000a000000010000000100000001000000004c210000500000200000008d5500002053fae1187f0000200000000000000040010000";
const SUM_EXP: &str = "004c210000500000200000008d5500002053fae1187f00000001000020000000010000000000000000000000000000000a000000000000000a000000010000000a000000197f00002053fae1187f0000010000008d5500000046210000500000200000000a0000002053fae1187f0000004c21000050000000000000000000002053fae1187f000020000000";
const LOSS: &str = "004e21000050000020000000187f00002053fae1187f00000001000020000000010000000000000000000000000000000a000000000000000a000000010000000a000000005000002053fae1187f0000200000000a0000000a000000010000009a99999901000000030000000000000000000000000000000046210000500000200000000a000000004c210000500000200000000a000000004421000050000020000000000000000a00000000000000004c21000050000000000000000000002053fae1187f000020000000";
const EXP: &str = "0046210000500000200000000a0000002053fae1187f00002053fae1187f000000000000000000000046210000500000200000000a0000002053fae1187f000040010000";
const GRAD: &str = "0046210000500000200000000a0000002053fae1187f00002053fae1187f0000200000000a0000000a000000010000009a99999901000000030000000000000000000000000000000046210000500000200000000a000000004c21000050000020000000197f0000004421000050000020000000000000000a0000000000000040010000";

fn logits() -> Vec<f32> {
    // Deterministic, varied values (a small LCG), some large enough to need the max shift.
    let mut s = 12345u32;
    (0..320)
        .map(|_| {
            s = s.wrapping_mul(1_103_515_245).wrapping_add(12345);
            ((s >> 8) as f32 / (1u32 << 24) as f32 - 0.5) * 40.0
        })
        .collect()
}

#[test]
fn sparse_softmax_cross_entropy_as_tensorflow_runs_it() {
    let x = logits();
    let labels: Vec<i64> = (0..32).map(|i| (i * 7 % 10) as i64).collect();
    let mut m = TestMem::default();
    m.add(B, f32_bytes(&x));
    m.add(S, vec![0; 128]);
    m.add(L, vec![0; 128]);
    m.add(LB, labels.iter().flat_map(|v| v.to_le_bytes()).collect());
    // TensorFlow's order: row max, logits - max, sum of exps, loss, exp, gradient.
    let rowmax = "void tensorflow::functor::RowReduceKernel<float const*, float*, cuda::__4::maximum<void> >(float const*, float*, int, int, cuda::__4::maximum<void>, std::iterator_traits<float const*>::value_type)";
    let b = hex(ROWMAX);
    let p = KernelParams {
        params: vec![(0, 8), (8, 8), (16, 4), (20, 4), (24, 1), (28, 4)],
        cbank_size: None,
    };
    super::super::run(rowmax, &p, &b, [8, 1, 1], &mut m)
        .unwrap()
        .unwrap();
    run(super::SUB_ROW_BCAST, SUB_BCAST, &mut m).unwrap();
    run(super::SUM_EXP, SUM_EXP, &mut m).unwrap();
    run(super::XENT_LOSS, LOSS, &mut m).unwrap();
    run(super::EXP_2D, EXP, &mut m).unwrap();
    run(super::XENT_GRAD, GRAD, &mut m).unwrap();

    let loss = f32s(&m.bufs[&L]);
    let grad = f32s(&m.bufs[&B]);
    for b in 0..32 {
        let row: Vec<f64> = x[b * 10..b * 10 + 10].iter().map(|&v| v as f64).collect();
        let z: f64 = row.iter().map(|v| v.exp()).sum();
        let lb = labels[b] as usize;
        let want = z.ln() - row[lb];
        assert!(
            (loss[b] as f64 - want).abs() <= 1e-5 * want.abs().max(1.0),
            "loss[{b}] {} vs {want}",
            loss[b]
        );
        for d in 0..10 {
            let want = row[d].exp() / z - if d == lb { 1.0 } else { 0.0 };
            let got = grad[b * 10 + d] as f64;
            assert!((got - want).abs() <= 1e-6, "grad[{b},{d}] {got} vs {want}");
        }
    }
}

#[test]
fn a_label_out_of_range_gives_nan() {
    let mut m = TestMem::default();
    m.add(B, f32_bytes(&logits()));
    m.add(S, f32_bytes(&[1.0; 32]));
    m.add(L, vec![0; 128]);
    let mut labels = vec![0i64; 32];
    labels[3] = 10;
    labels[4] = -1;
    m.add(LB, labels.iter().flat_map(|v| v.to_le_bytes()).collect());
    run(super::XENT_LOSS, LOSS, &mut m).unwrap();
    let loss = f32s(&m.bufs[&L]);
    assert!(loss[3].is_nan() && loss[4].is_nan() && !loss[5].is_nan());
}

#[test]
fn fill_update_and_relu_gradient() {
    let mut m = TestMem::default();
    // Fill: the value is read through the functor's device pointer.
    m.add(0x5000_0020_7c00, f32_bytes(&[2.5]));
    m.add(0x5000_0020_7e00, vec![0; 256]);
    run(super::FILL, "007e200000500000400000000000000060e015958d550000007c200000500000007e200000500000400000005a19ab0b60e015958d550000703b772dfd7f000040000000", &mut m).unwrap();
    assert_eq!(f32s(&m.bufs[&0x5000_0020_7e00]), vec![2.5; 64]);

    // a -= b over 640 elements.
    let a: Vec<f32> = (0..640).map(|i| i as f32 * 0.25).collect();
    let b: Vec<f32> = (0..640).map(|i| (i % 7) as f32 - 3.0).collect();
    m.add(0x5000_0020_a600, f32_bytes(&a));
    m.add(0x5000_0021_7200, f32_bytes(&b));
    run(super::SUB_1D, "00a62000005000008002000000000000503700cc187f0000503700cc187f0000fd6154331900020000a62000005000008002000000000000503700cc187f000000722100005000008002000000000000503700cc187f00008002000000000000", &mut m).unwrap();
    let want: Vec<f32> = a.iter().zip(&b).map(|(x, y)| x - y).collect();
    assert_eq!(f32s(&m.bufs[&0x5000_0020_a600]), want);

    // g * (f > 0) over 2048 elements, g in place.
    let g: Vec<f32> = (0..2048).map(|i| 1.0 + i as f32).collect();
    let f: Vec<f32> = (0..2048).map(|i| (i % 5) as f32 - 2.0).collect();
    m.add(0x5000_0021_5200, f32_bytes(&g));
    m.add(0x5000_0021_2400, f32_bytes(&f));
    let relu = "00522100005000000008000000000000503700cc187f0000503700cc187f0000e854fae1187f000000522100005000000008000000000000503700cc187f0000503700cc187f0000705bfae1187f000000242100005000000008000000000000503700cc187f0000000000000000000000242100005000000008000000000000503700cc187f00004055fae1187f00000008000000000000";
    run(super::RELU_GRAD, relu, &mut m).unwrap();
    let want: Vec<f32> = g
        .iter()
        .zip(&f)
        .map(|(g, f)| if *f > 0.0 { *g } else { 0.0 })
        .collect();
    assert_eq!(f32s(&m.bufs[&0x5000_0021_5200]), want);

    // An evaluator whose dimensions disagree (the feature map's length changed) is left alone.
    let mut bad = relu.to_string();
    bad.replace_range(176..184, "00040000");
    let before = m.bufs[&0x5000_0021_5200].clone();
    assert!(matches!(
        run(super::RELU_GRAD, &bad, &mut m),
        Err(Skip::Layout(_))
    ));
    assert_eq!(m.bufs[&0x5000_0021_5200], before);
}

#[test]
fn only_the_exact_templates_match() {
    // The demangled name of the kernel TensorFlow launches for exp over a 2-D float tensor.
    let exp = "void Eigen::internal::EigenMetaKernel<Eigen::TensorEvaluator<Eigen::TensorAssignOp<\
               Eigen::TensorMap<Eigen::Tensor<float, 2, 1, int>, 16, Eigen::MakePointer>, \
               Eigen::TensorCwiseUnaryOp<Eigen::internal::scalar_exp_op<float>, \
               Eigen::TensorMap<Eigen::Tensor<float, 2, 1, int>, 16, Eigen::MakePointer> const> \
               const> const, Eigen::GpuDevice>, int>(Eigen::TensorEvaluator<Eigen::TensorAssignOp<\
               Eigen::TensorMap<Eigen::Tensor<float, 2, 1, int>, 16, Eigen::MakePointer>, \
               Eigen::TensorCwiseUnaryOp<Eigen::internal::scalar_exp_op<float>, \
               Eigen::TensorMap<Eigen::Tensor<float, 2, 1, int>, 16, Eigen::MakePointer> const> \
               const> const, Eigen::GpuDevice>, int)";
    assert_eq!(super::short_template(exp).as_deref(), Some(super::EXP_2D));
    assert!(super::find(exp).is_some());
    // The same expression over doubles, or with long indices, is another kernel.
    assert!(super::find(&exp.replace("float", "double")).is_none());
    assert!(super::find(&exp.replace("int>", "long>")).is_none());
}

#[test]
fn broadcast_in_four_dimensions() {
    // The evaluator of a [8, 1, 1, 32] -> [8, 8, 8, 32] broadcast (a gradient of global average
    // pooling), with the output's and input's buffers at the addresses it holds.
    let block = "00795900005000000800000008000000080000002000000070160020117f000000000086117f000070160020117f00000100000008000000080000000100000008000000080000000800000020000000000800000001000020000000010000002000000020000000200000000100000000324000005000000800000001000000010000002000000070160020117f000000400000";
    let x: Vec<f32> = (0..256).map(|v| v as f32 * 0.5).collect();
    let mut m = TestMem::default();
    m.add(0x5000_0040_3200, f32_bytes(&x));
    m.add(0x5000_0059_7900, vec![0; 16384 * 4]);
    run(super::BROADCAST_4D, block, &mut m).unwrap();
    let y = f32s(&m.bufs[&0x5000_0059_7900]);
    for n in 0..8 {
        for h in 0..8 {
            for w in 0..8 {
                for c in 0..32 {
                    assert_eq!(y[((n * 8 + h) * 8 + w) * 32 + c], x[n * 32 + c]);
                }
            }
        }
    }
}
