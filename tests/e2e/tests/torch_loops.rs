//! Unmodified PyTorch training loops that change (`examples/loops.py`: shapes drawn at random,
//! an evaluation pass, accumulation, a smaller last batch, a checkpoint, an unfreeze) under the
//! default policy at half their peak, on the simulated H100 in shape mode: each runs to its end
//! within the budget, with no trap and no contents lost, guided by plans, and where its
//! iterations come in several kinds, by plans kept and reused. (Torch's kernels compute nothing
//! on the simulated GPU: the same loops in data mode, bit for bit, are the trainer's, in
//! `loops.rs`; their speed is `scripts/bench-loops.sh`'s.) A missing .venv fails these tests
//! with the command that makes it; they never skip.

use marmoset_e2e::*;

const STEPS: usize = 12;

/// `--loop name` with `extra` arguments, without Marmoset then under the default policy at
/// half its peak, [`STEPS`] steps: the default policy's trace records.
fn within_half(model: &str, name: &str, extra: &[&str]) -> Vec<serde_json::Value> {
    within_half_for(STEPS, model, name, extra)
}

/// [`within_half`] for `n` steps.
fn within_half_for(n: usize, model: &str, name: &str, extra: &[&str]) -> Vec<serde_json::Value> {
    let steps = n.to_string();
    let mut args = vec!["--model", model, "--loop", name, "--steps", steps.as_str()];
    args.extend(extra);
    let tag = format!("loops-{model}-{name}");
    let (_, report) = torch_example(
        &["--policy", "none"],
        "loops.py",
        &args,
        &format!("{tag}-none"),
    );
    let budget = report["peak_bytes"].as_u64().expect("a peak") / 2;
    let limit = budget.to_string();
    let trace = temp_path(&format!("torch-{tag}.jsonl"));
    let (out, report) = torch_example_with(
        &["--memory-limit", &limit, "--trace", trace.to_str().unwrap()],
        &[("MARMOSET_PLAN_WAIT", "1"), ("MARMOSET_LOG", "info")],
        "loops.py",
        &args,
        &format!("{tag}-auto"),
    );
    let (so, se) = (stdout(&out), stderr(&out));
    let steps = so.lines().filter(|l| l.starts_with("step ")).count();
    assert_eq!(steps, n, "{so}{se}");
    assert!(so.contains("total device time"), "{so}");
    assert!(report["sticky_error"].is_null(), "a trap: {report}\n{se}");
    let held = report["peak_bytes"].as_u64().unwrap();
    assert!(held <= budget, "{name}: peak {held} B over {budget} B");
    let lost: Vec<&str> = se
        .lines()
        .filter(|l| l.starts_with("marmoset:") && l.contains("lost"))
        .collect();
    assert!(lost.is_empty(), "{name}: contents lost: {lost:?}");
    assert!(se.contains("guides from"), "{name}: no plan guided:\n{se}");
    take_trace(&trace)
}

/// The plans made and reused (a kind, or a cycle of kinds, found again).
fn plans(records: &[serde_json::Value]) -> (usize, usize) {
    let p = of_kind(records, "plan");
    let reused = p.iter().filter(|r| r["reused"] == true).count();
    (p.len() - reused, reused)
}

#[test]
fn images_of_three_sizes_are_guided_by_a_plan_per_size() {
    let r = within_half("cnn", "multiscale", &["--batch", "16"]);
    let (made, reused) = plans(&r);
    assert!(made >= 3 && reused >= 3, "{made} made, {reused} reused");
}

#[test]
fn a_variable_length_decoder_is_guided_by_a_plan_per_length() {
    let r = within_half("decoder", "varlen", &["--batch", "4", "--seq", "512"]);
    let (made, reused) = plans(&r);
    assert!(made >= 3 && reused >= 3, "{made} made, {reused} reused");
}

#[test]
fn training_resumes_its_plan_after_each_evaluation_pass() {
    let r = within_half("cnn", "eval", &["--batch", "16", "--every", "3"]);
    let (made, reused) = plans(&r);
    assert!(made >= 2 && reused >= 2, "{made} made, {reused} reused");
}

#[test]
fn accumulation_and_its_optimizer_steps_are_guided_as_one_cycle() {
    // Four micro-steps to an optimizer step: the second and third are one kind, the first
    // (after `zero_grad`) and the fourth (with the optimizer) others; the cycle of the four,
    // run twice in a row from the second round on, is planned as one iteration at step 12.
    let r = within_half_for(16, "cnn", "accum", &["--batch", "16", "--accum", "4"]);
    let (made, reused) = plans(&r);
    assert!(made >= 3 && reused >= 1, "{made} made, {reused} reused");
    let periods: Vec<u64> = of_kind(&r, "plan")
        .iter()
        .filter_map(|p| p["period"].as_u64())
        .collect();
    let longest = *periods.iter().max().unwrap();
    assert!(
        periods.iter().filter(|&&p| p < longest).count() >= 2 && longest > 3 * periods[0],
        "the cycle planned as one iteration: {periods:?}"
    );
}

#[test]
fn a_smaller_last_batch_and_a_checkpoint_are_passed_through() {
    for (name, extra) in [
        ("epoch", ["--batch", "16", "--every", "4"]),
        ("checkpoint", ["--batch", "16", "--every", "4"]),
    ] {
        let r = within_half("cnn", name, &extra);
        let (made, reused) = plans(&r);
        assert!(
            made >= 1 && reused >= 1,
            "{name}: {made} made, {reused} reused"
        );
    }
}

#[test]
fn an_unfrozen_backbone_is_planned_again() {
    let r = within_half("cnn", "unfreeze", &["--batch", "16", "--unfreeze-at", "5"]);
    let (made, _) = plans(&r);
    assert!(made >= 2, "{made} made");
}
