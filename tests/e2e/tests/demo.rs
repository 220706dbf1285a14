//! The main job's first part (`scripts/demo-memory.py`, issue 40's third scenario): the
//! trainer without Marmoset, under `lru` and under the default policy at 0.5 and 0.3 of its
//! peak, as one table that shows the planner at work, every figure labelled simulated, the
//! data-mode run bit for bit, and the report written.

use marmoset_e2e::*;
use std::process::Command;

/// The slowdown column of the table row that starts with `run`.
fn slowdown(table: &str, run: &str) -> f64 {
    let line = table
        .lines()
        .find(|l| l.starts_with(run))
        .unwrap_or_else(|| panic!("no row {run:?} in\n{table}"));
    line.split_whitespace()
        .find_map(|w| w.strip_suffix('x').and_then(|v| v.parse().ok()))
        .unwrap_or_else(|| panic!("no slowdown in {line:?}"))
}

#[test]
fn the_main_job_shows_the_planner_against_lru() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = temp_path("demo-out");
    let o = Command::new("python3")
        .arg(root.join("scripts/demo-memory.py"))
        .env("MARMOSET_DEMO_BIN", workloads())
        .env("MARMOSET_DEMO_OUT", &out)
        .output()
        .expect("python3");
    ok(&o);
    let text = stdout(&o);
    assert!(text.contains("simulated"), "{text}");
    for f in ["0.5", "0.3"] {
        let (lru, auto) = (
            slowdown(&text, &format!("lru at {f}")),
            slowdown(&text, &format!("default (auto) at {f}")),
        );
        assert!(
            auto < lru / 5.0,
            "at {f}: default {auto}x against lru {lru}x\n{text}"
        );
    }
    assert!(text.contains("bit for bit"), "{text}");
    assert!(out.join("report.html").exists(), "{text}");
    std::fs::remove_dir_all(&out).ok();
}
