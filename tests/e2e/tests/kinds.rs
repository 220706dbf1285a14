//! Plans per iteration kind: a program that trains, evaluates (another kind of iteration:
//! the forward pass only), then trains again has each kind planned once (evaluation from its
//! first pass, between two kinds known); when evaluation comes again, and training after it,
//! their plans guide again from the cache, without planning. In data mode, within the budget,
//! with the output of the run without Marmoset.

use marmoset_e2e::*;
use serde_json::Value;

/// Four training iterations, four of evaluation, four of training again.
const ARGS: [&str; 4] = ["12", "16", "64", "8"];
const EVAL: (&str, &str) = ("TRAINER_EVAL", "4");

fn plans(records: &[Value]) -> Vec<&Value> {
    of_kind(records, "plan")
}

#[test]
fn a_kind_that_comes_back_is_guided_by_its_kept_plan() {
    let r = temp_path("kinds-plain.json");
    let plain = run_sim(
        "h100",
        &[EVAL, ("SIMGPU_REPORT", r.to_str().unwrap())],
        "trainer",
        &ARGS,
    );
    ok(&plain);
    assert_eq!(stdout(&plain).matches("eval loss").count(), 4);
    let peak = sim_report(&r)["peak_bytes"].as_u64().unwrap();
    let budget = peak / 2;
    let (o, records, report) = planned("auto", budget, &[EVAL], "trainer", &ARGS);
    exact_within(
        "auto at half the peak",
        &o,
        &stdout(&plain),
        &report,
        budget,
    );
    let ps = plans(&records);
    let made: Vec<&&Value> = ps.iter().filter(|p| p["reused"] != true).collect();
    let reused: Vec<&&Value> = ps.iter().filter(|p| p["reused"] == true).collect();
    // The report counts the plan cache as the records do.
    let t = temp_path("kinds-run.jsonl");
    let html = temp_path("kinds-run.html");
    std::fs::write(
        &t,
        records.iter().map(|r| format!("{r}\n")).collect::<String>(),
    )
    .unwrap();
    let out = std::process::Command::new(marmoset())
        .arg("report")
        .arg(&t)
        .arg("-o")
        .arg(&html)
        .output()
        .unwrap();
    ok(&out);
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(
        page.contains(&format!(
            r#"id="plan-cache" class="note" data-made="{}" data-reused="{}""#,
            made.len(),
            reused.len()
        )),
        "{page}"
    );
    std::fs::remove_file(&t).ok();
    std::fs::remove_file(&html).ok();
    let kind = |p: &Value| p["iteration_kind"].as_u64().expect("a plan names its kind");
    // Training planned, evaluation planned, training again from the cache.
    assert!(made.len() >= 2, "{ps:?}");
    assert!(
        !reused.is_empty(),
        "training came back and was planned again: {ps:?}"
    );
    // Replans of the memory feedback are of the kind they replan.
    let made: Vec<&&Value> = made.into_iter().filter(|p| !is_replan(p)).collect();
    assert!(made.len() >= 2, "{ps:?}");
    let training = kind(made[0]);
    assert_ne!(
        kind(made[1]),
        training,
        "evaluation is another kind: {ps:?}"
    );
    assert!(
        reused.iter().any(|p| kind(p) == training),
        "the training plan was the one reused: {ps:?}"
    );
    // Evaluation, planned from its first pass (the stretch between the program leaving the
    // training plan and training's calls coming again), is recognised when it comes again,
    // and training after it: each kept plan guides again.
    let err = stderr(&o);
    let recognised = |p: &Value| format!("a kind planned before ({} calls", p["period"]);
    let eval = err
        .find(&recognised(made[1]))
        .unwrap_or_else(|| panic!("{err}"));
    assert!(err[eval..].contains(&recognised(made[0])), "{err}");
    assert!(
        err.contains("an iteration of a new kind; planning it from this one occurrence"),
        "{err}"
    );
    // The reuse did no planning: the planning time of a look-up is far below its planning.
    let ms = |p: &Value| p["planning_ms"].as_f64().unwrap();
    assert!(ms(reused[0]) < ms(made[0]), "{ps:?}");
}

#[test]
fn inspect_counts_plans_made_and_reused() {
    // A trace with two plans of one kind, the second reused (records as the shim writes them).
    let t = temp_path("kinds-inspect.jsonl");
    let header = r#"{"seq":0,"t_ns":0,"tid":1,"kind":"header","schema":1,"pid":1,"policy":"auto","marmoset":"0"}"#;
    let plan = |seq: u64, reused: bool, ms: f64| {
        format!(
            r#"{{"seq":{seq},"t_ns":{seq},"tid":1,"kind":"plan","policy":"auto","budget":1,"start":1,"period":3,"ops":3,"swaps":1,"recomputes":0,"feasible":true,"predicted_ms":1.0,"planning_ms":{ms},"iteration_kind":77{}}}"#,
            if reused { r#","reused":true"# } else { "" }
        )
    };
    std::fs::write(
        &t,
        format!(
            "{header}\n{}\n{}\n",
            plan(1, false, 40.0),
            plan(2, true, 0.5)
        ),
    )
    .unwrap();
    let out = std::process::Command::new(marmoset())
        .arg("inspect")
        .arg(&t)
        .output()
        .unwrap();
    ok(&out);
    let text = stdout(&out);
    assert!(
        text.contains("plans: 2 for 1 iteration kind(s): 1 planned, 1 reused from the cache (50% hits), 40.5 ms planning"),
        "{text}"
    );
    std::fs::remove_file(&t).ok();
}
