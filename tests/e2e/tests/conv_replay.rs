//! Recomputation by replaying a convolution (Chen et al.'s and Capuchin's classic choice: a
//! convolution's output is rebuilt from its input and weight, which its own backward keeps
//! anyway). torchlike with GELU out of place and convolutions without bias: each block's first
//! convolution writes the GELU's input, which GELU's backward reads again, so the planner may
//! drop it after the forward pass and the executor rebuild it before the backward pass by
//! running the convolution again: `cudnnConvolutionForward` (CONV nobias: descriptors rebuilt
//! from the recorded shapes and parameters, the recorded algorithm) or `cudnnBackendExecute`
//! (CONV backend: the program's own execution plan, a variant pack of Marmoset's), each with a
//! workspace of Marmoset's own. Data mode: the results must stay bit for bit those of an
//! unlimited run, under every planner policy that recomputes.

use marmoset_e2e::*;
use serde_json::Value;

/// Eight iterations (the training step repeats from the third; see guided.rs), 2 MiB
/// activations, 1x1 convolutions, 4 blocks, GELU; then the convolution API (torchlike's CONV).
const ARGS: [&str; 7] = ["8", "128", "32", "4", "4", "1", "gelu"];
const LEGACY: (&str, &str) = ("nobias", "cudnnConvolutionForward");
const BACKEND: (&str, &str) = ("backend", "cudnnBackendExecute");

fn args(conv: &str) -> Vec<&str> {
    let mut a = ARGS.to_vec();
    a.push(conv);
    a
}

/// torchlike (CONV `conv`) under `policy` within `budget`, with these extra settings.
fn under(
    conv: &str,
    policy: &str,
    budget: u64,
    extra: &[(&str, &str)],
) -> (std::process::Output, Vec<Value>, Value) {
    planned(policy, budget, extra, "torchlike", &args(conv))
}

/// The recompute records, in order: whether each replayed `api`.
fn replays(records: &[Value], api: &str) -> Vec<bool> {
    of_kind(records, "recompute")
        .iter()
        .map(|r| r["api"] == api)
        .collect()
}

#[test]
fn convolution_outputs_are_recomputed_by_replaying_the_convolution_bit_for_bit() {
    for ((conv, api), runs) in [
        (
            LEGACY,
            &[
                ("recompute", 0.5),
                ("recompute", 0.3),
                ("capuchin", 0.5),
                ("auto", 0.3),
            ][..],
        ),
        (BACKEND, &[("recompute", 0.5), ("auto", 0.3)][..]),
    ] {
        let (peak, plain) = unlimited("torchlike", &args(conv));
        for &(policy, fraction) in runs {
            let budget = (peak as f64 * fraction) as u64;
            let (o, records, rep) = under(conv, policy, budget, &[("MARMOSET_VERIFY", "1")]);
            let at = format!("{conv}, {policy} at {fraction} P");
            // MARMOSET_VERIFY compared every replayed tensor with the bytes it held when
            // dropped; nothing was lost on the way.
            exact_within(&at, &o, &plain, &rep, budget);
            // auto's pick is its own (it may recompute the GELUs instead): it recomputes, and
            // stays bit for bit.
            let convs = replays(&records, api)
                .iter()
                .filter(|&&c| c || policy == "auto")
                .count();
            assert!(
                convs > 0,
                "{at}: convolution outputs recomputed by {api}: {:?}",
                of_kind(&records, "plan")
            );
        }
    }
}

#[test]
fn a_wrong_convolution_replay_is_caught_by_verify_and_visible_without_it() {
    for (conv, api) in [LEGACY, BACKEND] {
        let (peak, plain) = unlimited("torchlike", &args(conv));
        let budget = (peak as f64 * 0.3) as u64;
        // Which replay is the first convolution's (kernels are replayed too).
        let (o, records, _) = under(conv, "recompute", budget, &[("MARMOSET_VERIFY", "1")]);
        ok(&o);
        let n = 1 + replays(&records, api)
            .iter()
            .position(|&c| c)
            .expect("a convolution replayed");
        let n = n.to_string();
        // That replay goes wrong: the legacy call with its alpha negated, the backend one with
        // its output's first bytes overwritten.
        let corrupt = ("MARMOSET_TEST_CORRUPT_REPLAY", n.as_str());
        let verified = [corrupt, ("MARMOSET_VERIFY", "1")];
        let (o, _, _) = under(conv, "recompute", budget, &verified);
        ok(&o);
        let err = stderr(&o);
        assert!(
            err.contains(&format!("MARMOSET_VERIFY: replaying {api} did not give")),
            "{conv}: the log names the convolution: {err}"
        );
        assert_eq!(stdout(&o), plain, "{conv}: its saved bytes were put back");
        let (o, _, _) = under(conv, "recompute", budget, &[corrupt]);
        ok(&o);
        assert_ne!(
            stdout(&o),
            plain,
            "{conv}: without MARMOSET_VERIFY the wrong bytes are used"
        );
    }
}

/// Under μ-cuDNN (a workspace limit, micro-batches of 2 images forced) each backend execution
/// runs as Marmoset's micro-batches in the workspace they need, and its replay runs the same
/// way: convolution outputs are recomputed bit for bit, where before they were not recomputed
/// at all (a replay of the undivided plan would not fit the recorded workspace).
#[test]
fn micro_batched_convolutions_are_recomputed_as_they_ran() {
    let dir = temp_path("conv-replay-mucudnn-cache");
    std::fs::create_dir_all(&dir).unwrap();
    let micro = [
        ("MARMOSET_WORKSPACE_LIMIT", "64MiB"),
        ("MARMOSET_TEST_MICROBATCH", "2"),
        ("MARMOSET_CACHE_DIR", dir.to_str().unwrap()),
    ];
    let (peak, _) = unlimited("torchlike", &args(BACKEND.0));
    let budget = (peak as f64 * 0.5) as u64;
    // The reference: the same micro-batches without a budget (micro-batching backward-filter
    // adds its images' gradients in another order than the undivided plan).
    let mut alone = micro.to_vec();
    alone.push(("MARMOSET_POLICY", "none"));
    let (o, _) = run_shim(&alone, "torchlike", &args(BACKEND.0));
    ok(&o);
    let plain = stdout(&o);
    let mut env = micro.to_vec();
    env.push(("MARMOSET_VERIFY", "1"));
    let (o, records, rep) = under(BACKEND.0, "recompute", budget, &env);
    std::fs::remove_dir_all(&dir).ok();
    let err = stderr(&o);
    exact_within(
        "backend under μ-cuDNN, recompute at 0.5 P",
        &o,
        &plain,
        &rep,
        budget,
    );
    assert!(
        err.contains("backend: ran a Fwd graph") && err.contains("as 64 micro-batches"),
        "micro-batched: {err}"
    );
    let convs = replays(&records, BACKEND.1).iter().filter(|&&c| c).count();
    assert!(
        convs > 0,
        "convolution outputs recomputed by {}: {:?}",
        BACKEND.1,
        of_kind(&records, "recompute")
    );
}

/// torchlike's CONV backend-rebuild destroys every execution plan after each optimizer step and
/// builds it again at its next use (often at the same address): the plans the iteration was
/// recorded with are gone when the plan is made, so no convolution is recomputed through one
/// (the same run with its plans kept does recompute them, above), and the results stay exact.
/// The online policy (off here: it replays through plans alive when it drops, rebuilding before
/// a plan is destroyed) is checked on the same program below.
#[test]
fn a_destroyed_execution_plan_is_never_replayed() {
    let (peak, plain) = unlimited("torchlike", &args("backend-rebuild"));
    for fraction in [0.5, 0.3] {
        let budget = (peak as f64 * fraction) as u64;
        let (o, records, rep) = under(
            "backend-rebuild",
            "recompute",
            budget,
            &[("MARMOSET_ONLINE", "0")],
        );
        ok(&o);
        let err = stderr(&o);
        assert_eq!(stdout(&o), plain, "at {fraction} P: {err}");
        assert!(
            !replays(&records, BACKEND.1).contains(&true),
            "at {fraction} P: replayed through a destroyed plan: {:?}",
            of_kind(&records, "recompute")
        );
        // Other recomputations go on (GELU's kernel).
        assert!(!of_kind(&records, "recompute").is_empty(), "{err}");
        assert!(!err.contains("lost") && !err.contains("failed"), "{err}");
        assert!(rep["peak_bytes"].as_u64().unwrap() <= budget, "{rep}");
    }
}

/// A recomputation that finds no room within the budget (MARMOSET_TEST_REFUSE_REPLAY: the Nth
/// replay is refused, as when nothing can be evicted for its workspace or operands) runs again
/// beyond the budget: the dropped contents exist nowhere else. Results stay bit for bit.
#[test]
fn a_replay_refused_room_is_rebuilt_beyond_the_budget_and_loses_nothing() {
    let (conv, api) = LEGACY;
    let (peak, plain) = unlimited("torchlike", &args(conv));
    let budget = (peak as f64 * 0.3) as u64;
    let (o, records, _) = under(conv, "recompute", budget, &[]);
    ok(&o);
    // The first convolution's replay, and the last replay of the run.
    let all = replays(&records, api);
    let first = 1 + all.iter().position(|&c| c).expect("a convolution replayed");
    for n in [first, all.len()] {
        let n = n.to_string();
        let refused = [("MARMOSET_TEST_REFUSE_REPLAY", n.as_str())];
        let (o, records, rep) = under(conv, "recompute", budget, &refused);
        ok(&o);
        let err = stderr(&o);
        assert!(
            err.contains("within the budget failed") && err.contains("beyond the budget"),
            "replay {n}: the log says the rebuild went beyond the budget: {err}"
        );
        assert!(!err.contains("lost"), "replay {n}: {err}");
        assert_eq!(
            stdout(&o),
            plain,
            "replay {n}: the same losses and checksum"
        );
        assert!(!of_kind(&records, "recompute").is_empty());
        assert_eq!(rep["sticky_error"], Value::Null, "replay {n}: no trap");
    }
}

/// The online policy drops convolution outputs it replays through the program's execution
/// plans, which torchlike's CONV backend-rebuild destroys after every optimizer step: what it
/// dropped is rebuilt before its plan goes, and the results stay exact.
#[test]
fn the_online_policy_rebuilds_before_an_execution_plan_is_destroyed() {
    let (peak, plain) = unlimited("torchlike", &args("backend-rebuild"));
    for fraction in [0.5, 0.3] {
        let budget = (peak as f64 * fraction) as u64;
        let (o, records, rep) = under(
            "backend-rebuild",
            "recompute",
            budget,
            &[("MARMOSET_VERIFY", "1")],
        );
        exact_within(&format!("at {fraction} P"), &o, &plain, &rep, budget);
        assert!(
            replays(&records, BACKEND.1).contains(&true),
            "at {fraction} P: convolutions rebuilt through live plans: {:?}",
            of_kind(&records, "recompute")
        );
    }
}
