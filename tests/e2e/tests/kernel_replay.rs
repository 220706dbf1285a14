//! Recomputation by replaying a kernel (Capuchin §4.2 on PyTorch's own kernels): torchlike with
//! GELU out of place (`ACT gelu`), whose kernels are named and laid out as ATen's contiguous
//! elementwise kernels are in torch's fatbins. The shim reads their roles from the name and
//! parameters (output first, written whole; the rest read), so the planner may drop GELU's
//! output after the forward pass and the executor rebuild it before the backward pass by
//! launching the recorded kernel again with the current addresses. Data mode: the results must
//! stay bit for bit those of an unlimited run.

use marmoset_e2e::*;
use serde_json::Value;

/// Eight iterations (the training step repeats from the third; see guided.rs), 2 MiB
/// activations, 1x1 convolutions, 4 blocks, GELU.
const ARGS: [&str; 7] = ["8", "128", "32", "4", "4", "1", "gelu"];
/// What a replay of GELU's kernel is called in the trace and the logs.
const GELU: &str = "at::native::GeluFunctor<float>";

/// torchlike under `recompute` within `budget`, with these extra settings.
fn under(budget: u64, extra: &[(&str, &str)]) -> (std::process::Output, Vec<Value>, Value) {
    planned("recompute", budget, extra, "torchlike", &ARGS)
}

fn kernel_replays(records: &[Value]) -> usize {
    of_kind(records, "recompute")
        .iter()
        .filter(|r| r["api"].as_str().is_some_and(|a| a.contains(GELU)))
        .count()
}

#[test]
fn gelu_outputs_are_recomputed_by_replaying_their_kernel_bit_for_bit() {
    let (peak, plain) = unlimited("torchlike", &ARGS);
    for fraction in [0.5, 0.3] {
        let budget = (peak as f64 * fraction) as u64;
        let (o, records, rep) = under(budget, &[("MARMOSET_VERIFY", "1")]);
        // MARMOSET_VERIFY compared every replayed tensor with the bytes it held when dropped.
        exact_within(&format!("at {fraction} P"), &o, &plain, &rep, budget);
        assert!(
            kernel_replays(&records) > 0,
            "at {fraction} P: GELU's outputs recomputed by its kernel: {:?}",
            of_kind(&records, "plan")
        );
    }
}

#[test]
fn a_wrong_kernel_replay_is_caught_by_verify_and_visible_without_it() {
    let (peak, plain) = unlimited("torchlike", &ARGS);
    let budget = peak / 2;
    // The first replay launches with half the element count: half the tensor left unwritten.
    let corrupt = ("MARMOSET_TEST_CORRUPT_REPLAY", "1");
    let (o, records, _) = under(budget, &[corrupt, ("MARMOSET_VERIFY", "1")]);
    ok(&o);
    assert!(kernel_replays(&records) > 0);
    let err = stderr(&o);
    assert!(
        err.contains("MARMOSET_VERIFY: replaying cudaLaunchKernel (at::native::vectorized_elementwise_kernel<4, at::native::GeluFunctor<float>"),
        "the log names the kernel: {err}"
    );
    assert_eq!(stdout(&o), plain, "its saved bytes were put back");
    // Without MARMOSET_VERIFY the wrong bytes reach the results: the replay is what the
    // program computes with, not a copy kept aside.
    let (o, _, _) = under(budget, &[corrupt]);
    ok(&o);
    assert_ne!(stdout(&o), plain);
}

/// torchlike with the test's own activation kernels (`ACT softsign`): a family named nowhere
/// in Marmoset, whose name types its parameters (`mm_test::softsign_forward(int, float const*,
/// float*)`) but does not say whether the kernel reads its output too. Its output is allocated
/// right before the launch, so the launch writes it first: a replay on fresh memory rebuilds it.
const SOFTSIGN_ARGS: [&str; 7] = ["8", "128", "32", "4", "4", "1", "softsign"];
const SOFTSIGN: &str = "mm_test::softsign_forward";

fn softsign_replays(records: &[Value]) -> usize {
    of_kind(records, "recompute")
        .iter()
        .filter(|r| r["api"].as_str().is_some_and(|a| a.contains(SOFTSIGN)))
        .count()
}

#[test]
fn a_kernel_family_never_seen_is_replayed_from_its_first_write_bit_for_bit() {
    let (peak, plain) = unlimited("torchlike", &SOFTSIGN_ARGS);
    for fraction in [0.5, 0.3] {
        let budget = (peak as f64 * fraction) as u64;
        let (o, records, rep) = planned(
            "recompute",
            budget,
            &[("MARMOSET_VERIFY", "1")],
            "torchlike",
            &SOFTSIGN_ARGS,
        );
        exact_within(&format!("at {fraction} P"), &o, &plain, &rep, budget);
        assert!(
            softsign_replays(&records) > 0,
            "at {fraction} P: the test kernel's outputs recomputed by replaying it: {:?}",
            of_kind(&records, "plan")
        );
    }
}

#[test]
fn a_wrong_replay_of_a_kernel_family_never_seen_is_caught_by_verify() {
    let (peak, plain) = unlimited("torchlike", &SOFTSIGN_ARGS);
    let budget = peak / 2;
    let corrupt = ("MARMOSET_TEST_CORRUPT_REPLAY", "1");
    let (o, records, _) = planned(
        "recompute",
        budget,
        &[corrupt, ("MARMOSET_VERIFY", "1")],
        "torchlike",
        &SOFTSIGN_ARGS,
    );
    ok(&o);
    assert!(softsign_replays(&records) > 0);
    let err = stderr(&o);
    assert!(
        err.contains("MARMOSET_VERIFY: replaying cudaLaunchKernel (mm_test::softsign_forward"),
        "the log names the kernel: {err}"
    );
    assert_eq!(stdout(&o), plain, "its saved bytes were put back");
    let (o, _, _) = planned("recompute", budget, &[corrupt], "torchlike", &SOFTSIGN_ARGS);
    ok(&o);
    assert_ne!(stdout(&o), plain);
}
