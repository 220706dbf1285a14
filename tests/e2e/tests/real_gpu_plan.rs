//! `scripts/real-gpu.sh --dry-run`: the lent GPU's plan on the simulated GPU, so that the script
//! cannot rot between lent machines. Every check and every PyTorch run of the plan runs within
//! its deadline and finishes, the table and results.json say what each did, and the runs with
//! no budget (the trace, μ-cuDNN's WR) cost about what the run without Marmoset does.

use marmoset_e2e::*;
use std::process::Command;

#[test]
fn the_real_gpu_plan_runs_whole_on_the_simulated_gpu() {
    venv_python();
    let out = temp_path("real-gpu-dry");
    let mut c = Command::new(root().join("scripts/real-gpu.sh"));
    c.arg("--dry-run").env("OUT", &out);
    without_settings(&mut c);
    let o = c.output().expect("run scripts/real-gpu.sh");
    ok(&o);
    let summary = std::fs::read_to_string(out.join("summary.txt")).expect("summary.txt");
    assert!(!summary.contains("skipped"), "{summary}");
    let elapsed: u64 = summary
        .lines()
        .find_map(|l| l.strip_prefix("elapsed: "))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no elapsed line in\n{summary}"));
    assert!(
        elapsed < 450,
        "the plan took {elapsed} s of its 450 s deadline"
    );
    let table = std::fs::read_to_string(out.join("table.md")).expect("table.md");
    assert!(table.contains("simulated"), "{table}");
    let results: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("results.json")).expect("results.json"))
            .expect("results.json is JSON");
    let checks = results["checks"].as_array().expect("checks");
    for name in [
        "conv_check",
        "conv_check-microbatched",
        "hook_bench",
        "conv_layers-alexnet",
        "conv_layers-alexnet-wr",
        "conv_layers-resnet18",
        "conv_layers-resnet18-wr",
    ] {
        let c = checks
            .iter()
            .find(|c| c["name"] == name)
            .unwrap_or_else(|| panic!("no check {name} in {checks:?}"));
        assert_eq!(c["status"], 0, "{c}");
    }
    let rows = results["torch"].as_array().expect("torch");
    let mut configs = Vec::new();
    for model in ["resnet50", "distilbert", "llama", "regnety_016"] {
        let cnn = ["resnet50", "regnety_016"].contains(&model);
        for config in [
            "plain", "traced", "auto-0.5", "lru-0.5", "auto-0.3", "wr-64MiB",
        ] {
            if config == "wr-64MiB" && !cnn {
                continue;
            }
            let row = rows
                .iter()
                .find(|r| r["model"] == model && r["config"] == config)
                .unwrap_or_else(|| panic!("no run {model} {config} in\n{table}"));
            // 134: torch's known abort at exit after a complete run (see torch_output).
            assert!(
                row["status"] == 0 || row["status"] == 134,
                "{model} {config}: {row}\n{table}"
            );
            let steps = if config == "traced" { 8 } else { 6 };
            assert_eq!(row["steps"], steps, "{model} {config}\n{table}");
            let ratio = row["ratio"].as_f64().unwrap_or(f64::NAN);
            assert!(
                ratio.is_finite() && ratio > 0.0,
                "{model} {config}\n{table}"
            );
            if config == "traced" || config == "wr-64MiB" {
                assert!(ratio < 1.25, "{model} {config}: {ratio}x\n{table}");
            }
            if config.ends_with("0.5") || config.ends_with("0.3") {
                assert!(
                    row["budget"].as_u64().is_some(),
                    "{model} {config}\n{table}"
                );
            }
            configs.push(format!("{model} {config}"));
        }
    }
    assert_eq!(rows.len(), configs.len(), "{table}");
}
