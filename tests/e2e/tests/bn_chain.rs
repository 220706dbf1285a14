//! Recomputation of batch-norm outputs by replaying a chain: torchlike with NORM bn runs
//! ResNet's pattern as PyTorch drives cuDNN and ATen (a convolution, its batch norm into a new
//! tensor, ReLU in place; a block's second batch norm gets the skip added in place first). The
//! post-ReLU outputs are what the backward pass keeps; the shim rebuilds one by replaying the
//! batch norm (no running statistics, no saved statistics: nothing else changes) and then each
//! in-place kernel after it, on the same stream. Data mode: the results must stay bit for bit
//! those of an unlimited run, with MARMOSET_VERIFY comparing every replayed tensor with the
//! bytes it held when dropped, and the simulator's peak within the budget.

use marmoset_e2e::*;
use serde_json::Value;

/// Nine iterations (the step repeats from the sixth: BN's lazily made momentum and the data
/// loader), batch 256 of 32x32 with 4 channels (4 MiB activations), 2 blocks, 1x1
/// convolutions without bias, ReLU, batch norm.
const ARGS: [&str; 9] = ["9", "256", "32", "4", "2", "1", "relu", "nobias", "bn"];
const BN: &str = "cudnnBatchNormalizationForwardTrainingEx then ";

/// The recompute records' chains: how many kernels followed the batch norm in each.
fn chains(records: &[Value]) -> Vec<usize> {
    of_kind(records, "recompute")
        .iter()
        .filter_map(|r| {
            let api = r["api"].as_str()?;
            api.starts_with(BN).then(|| api.matches(" then ").count())
        })
        .collect()
}

#[test]
fn post_relu_batch_norm_outputs_are_recomputed_by_replaying_their_chain_bit_for_bit() {
    let plain = unlimited("torchlike", &ARGS);
    for (policy, fraction) in [("recompute", 0.3), ("auto", 0.5)] {
        let (at, records) = verified_exact("torchlike", &ARGS, policy, fraction, &plain);
        let c = chains(&records);
        let plans = of_kind(&records, "plan");
        if policy == "recompute" {
            // Both chains: BN -> relu_, and BN -> add_ -> relu_.
            assert!(c.contains(&1) && c.contains(&2), "{at}: {c:?} {plans:?}");
        }
        if policy == "auto" {
            // auto mixes: at half the peak it recomputes (convolutions, or these chains) and
            // swaps, and stays bit for bit.
            assert!(
                !of_kind(&records, "recompute").is_empty(),
                "{at}: {plans:?}"
            );
        }
    }
}

#[test]
fn a_wrong_chain_replay_is_caught_by_verify_and_visible_without_it() {
    let (peak, plain) = unlimited("torchlike", &ARGS);
    let budget = (peak as f64 * 0.5) as u64;
    let verify = ("MARMOSET_VERIFY", "1");
    let (o, records, rep) = planned("recompute", budget, &[verify], "torchlike", &ARGS);
    exact_within("recompute at 0.5 P", &o, &plain, &rep, budget);
    // Which recomputation is the first chain's (convolutions are replayed too).
    let n = 1 + of_kind(&records, "recompute")
        .iter()
        .position(|r| r["api"].as_str().is_some_and(|a| a.starts_with(BN)))
        .expect("a batch-norm chain replayed");
    let n = n.to_string();
    // That replay goes wrong: the batch norm with its alpha negated (the ReLU after it then
    // zeroes what was positive).
    let corrupt = ("MARMOSET_TEST_CORRUPT_REPLAY", n.as_str());
    let (o, _, _) = planned("recompute", budget, &[corrupt, verify], "torchlike", &ARGS);
    ok(&o);
    let err = stderr(&o);
    assert!(
        err.contains(&format!("MARMOSET_VERIFY: replaying {BN}")),
        "the log names the chain: {err}"
    );
    assert_eq!(stdout(&o), plain, "its saved bytes were put back");
    let (o, _, _) = planned("recompute", budget, &[corrupt], "torchlike", &ARGS);
    ok(&o);
    assert_ne!(
        stdout(&o),
        plain,
        "without MARMOSET_VERIFY the wrong bytes are used"
    );
}

#[test]
fn an_out_of_place_sum_after_a_batch_norm_is_recomputed_with_the_batch_norm_inside() {
    // NORM bnsum: relu_(bn2(..) + skip) with the sum out of place and the batch norm's output
    // freed right after it. The chain rebuilds the sum in its own memory: the batch norm
    // writes it there, the sum then runs in place (the folded model, the one the shim plans).
    let mut args = ARGS;
    args[8] = "bnsum";
    let (peak, plain) = unlimited("torchlike", &args);
    let budget = (peak as f64 * 0.3) as u64;
    let env = [("MARMOSET_VERIFY", "1")];
    let (o, records, rep) = planned("recompute", budget, &env, "torchlike", &args);
    exact_within("bnsum, recompute at 0.3 P", &o, &plain, &rep, budget);
    let sums = of_kind(&records, "recompute")
        .iter()
        .filter_map(|r| r["api"].as_str())
        .filter(|a| a.starts_with(BN) && a.contains("CUDAFunctor_add"))
        .count();
    assert!(sums > 0, "{:?}", of_kind(&records, "plan"));
}

/// NORM bncopy: each block's first batch norm output copied aside before its in-place ReLU,
/// whose backward reads the copy (autograd's pattern for SiLU and hardswish).
const COPY_ARGS: [&str; 9] = ["9", "256", "32", "4", "2", "1", "relu", "nobias", "bncopy"];

#[test]
fn copies_aside_of_batch_norm_outputs_are_recomputed_in_their_chain_bit_for_bit() {
    // The copy changes nothing the program computes: the same losses and weights as bn's.
    let plain = unlimited("torchlike", &COPY_ARGS);
    assert_eq!(plain.1, unlimited("torchlike", &ARGS).1);
    let (at, records) = verified_exact("torchlike", &COPY_ARGS, "recompute", 0.3, &plain);
    // The chain: the batch norm, its copy aside, the ReLU in place on its output.
    let copied: Vec<String> = of_kind(&records, "recompute")
        .iter()
        .filter_map(|r| r["api"].as_str())
        .filter(|a| a.starts_with(&format!("{BN}cudaMemcpyAsync then ")))
        .map(String::from)
        .collect();
    assert!(
        !copied.is_empty(),
        "{at}: {:?}",
        of_kind(&records, "recompute")
            .iter()
            .map(|r| r["api"].clone())
            .collect::<Vec<_>>()
    );
}

/// NORM bnlate: another operation between each batch norm and the in-place kernels on its
/// output (TensorFlow's executor interleaves ops so). No chain forms, yet the post-ReLU outputs
/// are recomputed all the same: a recomputation replays the batch norm, then each in-place
/// kernel after it, in program order (the slice of the calls that made that version), bit for
/// bit.
#[test]
fn outputs_updated_in_place_later_are_recomputed_by_replaying_what_made_them_bit_for_bit() {
    let mut args = ARGS;
    args[8] = "bnlate";
    let plain = unlimited("torchlike", &args);
    let (at, records) = verified_exact("torchlike", &args, "recompute", 0.3, &plain);
    let plans = of_kind(&records, "plan");
    let c = chains(&records);
    // The batch norm, then relu_ (the stem's and each block's first); then add_ and relu_ (each
    // block's second).
    assert!(c.contains(&1) && c.contains(&2), "{at}: {c:?} {plans:?}");
}
