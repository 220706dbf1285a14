//! Recomputation by replaying a cuBLAS GEMM (Capuchin §4.2 on a transformer's linear layers):
//! gemm_mlp, feed-forward blocks whose first linear layer is PyTorch's addmm through cuBLASLt
//! (bias epilogue), or cublasGemmEx, or cublasSgemm_v2. The layer's output is kept for GELU's
//! backward pass; the planner may drop it after the forward pass and the executor rebuild it
//! before the backward pass by calling the recorded function again (the matmul descriptor and
//! layouts made anew from the lineage, the recorded algorithm, the current addresses). Data
//! mode: the results must stay bit for bit those of an unlimited run.

use marmoset_e2e::*;
use serde_json::Value;

/// Eight iterations (the training step repeats from the third; see guided.rs), batch 512, 8
/// features, 2048 hidden (4 MiB hidden activations, little arithmetic per byte), 6 blocks.
fn args(linear: &str) -> [&str; 6] {
    ["8", "512", "8", "2048", "6", linear]
}

fn replays_of(records: &[Value], api: &str) -> usize {
    of_kind(records, "recompute")
        .iter()
        .filter(|r| r["api"].as_str() == Some(api))
        .count()
}

#[test]
fn linear_layers_are_recomputed_by_replaying_their_gemm_bit_for_bit() {
    for (linear, api, fractions) in [
        ("lt", "cublasLtMatmul", &[0.5, 0.3][..]),
        ("gemmex", "cublasGemmEx", &[0.3]),
        ("sgemm", "cublasSgemm_v2", &[0.3]),
    ] {
        let args = args(linear);
        let plain = unlimited("gemm_mlp", &args);
        for &fraction in fractions {
            // MARMOSET_VERIFY compared every replayed tensor with the bytes it held when
            // dropped, and no difference was found.
            let (at, records) = verified_exact("gemm_mlp", &args, "recompute", fraction, &plain);
            assert!(
                replays_of(&records, api) > 0,
                "{at}: the linear layer's outputs recomputed by {api}: {:?}",
                of_kind(&records, "plan")
            );
        }
    }
}

#[test]
fn a_wrong_gemm_replay_is_caught_by_verify_and_visible_without_it() {
    let args = args("lt");
    let (peak, plain) = unlimited("gemm_mlp", &args);
    let budget = peak / 2;
    // The first recomputation (the first block's linear layer) replays with alpha negated.
    let corrupt = ("MARMOSET_TEST_CORRUPT_REPLAY", "1");
    let (o, records, _) = planned(
        "recompute",
        budget,
        &[corrupt, ("MARMOSET_VERIFY", "1")],
        "gemm_mlp",
        &args,
    );
    ok(&o);
    assert!(replays_of(&records, "cublasLtMatmul") > 0);
    let err = stderr(&o);
    assert!(
        err.contains("MARMOSET_VERIFY: replaying cublasLtMatmul"),
        "the log names the call: {err}"
    );
    assert_eq!(stdout(&o), plain, "its saved bytes were put back");
    // Without MARMOSET_VERIFY the wrong bytes reach the results.
    let (o, _, _) = planned("recompute", budget, &[corrupt], "gemm_mlp", &args);
    ok(&o);
    assert_ne!(stdout(&o), plain);
}
