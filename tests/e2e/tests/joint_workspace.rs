//! The joint plan of tensors and convolution workspaces (docs/microbatch.md, "The joint
//! plan"): under a budget with no workspace limit or total, backend convolutions run μ-cuDNN's
//! configurations: in the workspace the program provides, or a faster one in a buffer lent
//! beside it, up to the cap the memory plan chose (before a plan, from spare memory). torchlike's backend
//! convolutions in data mode: the results stay bit for bit those of an unlimited run, replays
//! of convolutions included (MARMOSET_VERIFY), and the setting turns it off.

use marmoset_e2e::*;

/// Eight iterations, 2 MiB activations, 1x1 convolutions, 4 blocks, GELU, backend convolutions
/// (as conv_replay.rs).
const ARGS: [&str; 8] = ["8", "128", "32", "4", "4", "1", "gelu", "backend"];

/// The execution lines of the joint plan in a run's log.
fn joint_lines(err: &str) -> Vec<&str> {
    err.lines().filter(|l| l.contains("; joint: ")).collect()
}

#[test]
fn under_a_budget_convolutions_run_the_joint_plan_bit_for_bit() {
    let (peak, plain) = unlimited("torchlike", &ARGS);
    for (policy, fraction) in [("recompute", 0.5), ("auto", 0.3)] {
        let budget = (peak as f64 * fraction) as u64;
        let (o, records, rep) = planned(
            policy,
            budget,
            &[("MARMOSET_VERIFY", "1")],
            "torchlike",
            &ARGS,
        );
        let at = format!("{policy} at {fraction} P");
        exact_within(&at, &o, &plain, &rep, budget);
        let err = stderr(&o);
        let lines = joint_lines(&err);
        // Every backend execution of the program ran as the joint plan chose (and each replay).
        let executions = of_kind(&records, "cudnn")
            .iter()
            .filter(|r| r["api"] == "cudnnBackendExecute")
            .count();
        assert!(
            executions >= 64,
            "{at}: backend executions traced: {executions}"
        );
        assert!(
            lines.len() >= executions,
            "{at}: joint executions {} of {executions}",
            lines.len()
        );
        if policy == "recompute" {
            let replays = of_kind(&records, "recompute")
                .iter()
                .filter(|r| r["api"] == "cudnnBackendExecute")
                .count();
            assert!(replays > 0, "{at}: convolutions recomputed as they ran");
        }
    }
}

#[test]
fn the_joint_plan_can_be_turned_off() {
    let (peak, plain) = unlimited("torchlike", &ARGS);
    let budget = (peak as f64 * 0.5) as u64;
    let (o, _, rep) = planned(
        "auto",
        budget,
        &[("MARMOSET_JOINT_WORKSPACE", "0")],
        "torchlike",
        &ARGS,
    );
    exact_within("joint off", &o, &plain, &rep, budget);
    let err = stderr(&o);
    assert!(joint_lines(&err).is_empty(), "joint off: {err}");
    assert!(!err.contains("backend: planned"), "nothing planned: {err}");
    let (o, _, _) = planned(
        "auto",
        budget,
        &[("MARMOSET_JOINT_WORKSPACE", "sometimes")],
        "torchlike",
        &ARGS,
    );
    assert!(
        stderr(&o).contains("MARMOSET_JOINT_WORKSPACE"),
        "a bad value is named: {}",
        stderr(&o)
    );
}

/// With the planned share made tiny (the test facility), every configuration that needs
/// workspace runs in a buffer lent from spare memory, which the allocator takes back when it
/// needs room: the run stays within the budget and bit for bit, replays included.
#[test]
fn faster_configurations_run_in_memory_lent_from_spare() {
    let args = ["8", "128", "32", "4", "4", "3", "gelu", "backend"];
    let (peak, plain) = unlimited("torchlike", &args);
    let budget = (peak as f64 * 0.5) as u64;
    let (o, records, rep) = planned(
        "recompute",
        budget,
        &[
            ("MARMOSET_VERIFY", "1"),
            ("MARMOSET_TEST_JOINT_SHARE", "1000000"),
        ],
        "torchlike",
        &args,
    );
    exact_within("lent workspaces", &o, &plain, &rep, budget);
    let err = stderr(&o);
    let lent = joint_lines(&err)
        .iter()
        .filter(|l| l.contains(" lent at "))
        .count();
    assert!(lent > 0, "executions in lent memory: {err}");
    let replays = of_kind(&records, "recompute")
        .iter()
        .filter(|r| r["api"] == "cudnnBackendExecute")
        .count();
    assert!(replays > 0, "convolutions recomputed");
}

/// The trace names each planned execution plan's configurations (`configs` records), and
/// `marmoset plan`'s lower bound on it covers the choice of configurations: it is at most the
/// bound of the same trace without those records.
#[test]
fn the_bound_covers_the_choice_of_configurations() {
    let (peak, _) = unlimited("torchlike", &ARGS);
    let budget = ((peak as f64 * 0.5) as u64).to_string();
    let trace = temp_path("joint-bound.jsonl");
    let o = std::process::Command::new(marmoset())
        .args(["run", "--sim=h100", "--trace"])
        .arg(&trace)
        .args(["--memory-limit", &budget, "--"])
        .arg(workloads().join("torchlike"))
        .args(ARGS)
        .env_remove("MARMOSET_POLICY")
        .env("MARMOSET_PLAN_WAIT", "1")
        .output()
        .unwrap();
    ok(&o);
    let text = std::fs::read_to_string(&trace).unwrap();
    let configs = text
        .lines()
        .filter(|l| l.contains("\"kind\":\"configs\""))
        .count();
    assert!(configs > 0, "configs records in the trace");
    let with = plan_offline(&trace, &budget, "auto");
    assert_eq!(with["lower_bound_over_configurations"], true, "{with}");
    let without_path = temp_path("joint-bound-without.jsonl");
    let without: Vec<&str> = text
        .lines()
        .filter(|l| !l.contains("\"kind\":\"configs\""))
        .collect();
    std::fs::write(&without_path, without.join("\n") + "\n").unwrap();
    let plain = plan_offline(&without_path, &budget, "auto");
    assert_eq!(plain["lower_bound_over_configurations"], false, "{plain}");
    let (a, b) = (
        with["lower_bound_time_s"].as_f64().unwrap(),
        plain["lower_bound_time_s"].as_f64().unwrap(),
    );
    assert!(
        a <= b * (1.0 + 1e-12),
        "over configurations {a} s, without {b} s"
    );
    std::fs::remove_file(&trace).ok();
    std::fs::remove_file(&without_path).ok();
}

/// Under a budget the plan chooses how much workspace a convolution may be lent with its
/// evictions (the `plan` record's `workspace_cap`): once it guides, no execution is lent more,
/// and `marmoset plan` on the trace makes the same choice (the same prediction).
#[test]
fn the_plan_chooses_the_workspace_it_lends() {
    let (peak, plain) = unlimited("torchlike", &ARGS);
    let budget = (peak as f64 * 0.5) as u64;
    let (o, records, rep) = planned(
        "auto",
        budget,
        &[("MARMOSET_VERIFY", "1")],
        "torchlike",
        &ARGS,
    );
    exact_within("joint cap", &o, &plain, &rep, budget);
    let plan = *of_kind(&records, "plan").last().expect("a plan record");
    let cap = plan["workspace_cap"]
        .as_u64()
        .unwrap_or_else(|| panic!("the plan names its cap: {plan}"));
    // The last iteration's executions (and their replays) ran under the plan.
    let err = stderr(&o);
    let lines = joint_lines(&err);
    let last = &lines[lines.len() - lines.len() / 8..];
    for l in last {
        // "...; joint: N B lent at 0x..." (or "N B of the caller's").
        let said = l.split("joint: ").nth(1).unwrap_or("");
        if said.contains(" lent at ") {
            let lent: u64 = said.split(' ').next().unwrap().parse().unwrap();
            assert!(lent <= cap, "lent {lent} B beyond the plan's {cap} B: {l}");
        }
    }
    let trace = temp_path("joint-cap.jsonl");
    let text: Vec<String> = records.iter().map(|r| r.to_string()).collect();
    std::fs::write(&trace, text.join("\n") + "\n").unwrap();
    let offline = plan_offline(&trace, &budget.to_string(), "auto");
    agrees_offline("joint cap", &offline, plan);
    std::fs::remove_file(&trace).ok();
}
