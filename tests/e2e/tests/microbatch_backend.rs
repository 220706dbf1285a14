//! μ-cuDNN on the cuDNN backend (graph) API: plans of one convolution (each direction) or of a
//! forward convolution with pointwise operations run as micro-batches that give the undivided
//! results; other graphs pass through.

use marmoset_e2e::*;
use microbatch_log::wd_segments_within_the_pool;
use std::process::Output;

mod microbatch_log;

/// PROG on the simulated P100 in shape mode: under the shim with `knob` (a μ-cuDNN setting and
/// its value) and a plan cache of its own (`cache` names it), or without Marmoset; it succeeded.
fn p100_shape(prog: &str, args: &[&str], knob: Option<(&str, &str)>, cache: &str) -> Output {
    let shape = ("SIMGPU_MODE", "shape");
    let o = match knob {
        Some(k) => {
            let dir = temp_path(cache);
            under_shim(
                "p100",
                &[shape, k, ("MARMOSET_CACHE_DIR", dir.to_str().unwrap())],
                prog,
                args,
            )
        }
        None => run_sim("p100", &[shape], prog, args),
    };
    ok(&o);
    o
}

fn floats(path: &std::path::Path) -> Vec<f32> {
    std::fs::read(path)
        .unwrap()
        .chunks_exact(4)
        .map(|c| f32::from_ne_bytes(c.try_into().unwrap()))
        .collect()
}

/// (line, elements) of each case backend_check printed.
fn cases(o: &Output) -> Vec<(String, usize)> {
    stdout(o)
        .lines()
        .filter(|l| l.starts_with("case="))
        .map(|l| {
            let n = l.rsplit("elems=").next().unwrap().parse().unwrap();
            (l.to_string(), n)
        })
        .collect()
}

/// The largest error of `got` against `want`, relative to the case's largest magnitude.
fn max_relative_error(want: &[f32], got: &[f32]) -> f64 {
    let scale = want
        .iter()
        .fold(0f64, |m, &v| m.max(v.abs() as f64))
        .max(1e-30);
    want.iter()
        .zip(got)
        .map(|(&a, &b)| (a as f64 - b as f64).abs() / scale)
        .fold(0.0, f64::max)
}

const CASES: &str = "40";

/// backend_check's `count` cases from `seed` run undivided on `profile`, without Marmoset (the
/// reference): every output's floats, written to `name`, and the case lines.
fn undivided(
    profile: &str,
    count: &str,
    seed: &str,
    name: &str,
) -> (Vec<f32>, Vec<(String, usize)>) {
    let out = temp_path(name);
    let plain = run_sim(
        profile,
        &[],
        "backend_check",
        &[count, seed, out.to_str().unwrap()],
    );
    ok(&plain);
    (floats(&out), cases(&plain))
}

#[test]
fn micro_batched_backend_executions_equal_undivided_ones() {
    let (want, list) = undivided("h100", CASES, "11", "backend-check-plain.bin");
    assert_eq!(list.len(), CASES.parse::<usize>().unwrap());
    for dir in ["fwd", "bwd_data", "bwd_filter", "fused"] {
        assert!(list.iter().any(|(l, _)| l.contains(&format!("dir={dir} "))));
    }
    for nhwc in ["nhwc=0", "nhwc=1"] {
        assert!(list.iter().any(|(l, _)| l.contains(nhwc)));
    }
    for beta in ["beta=0 ", "beta=1 ", "beta=-0.35 "] {
        assert!(list.iter().any(|(l, _)| l.contains(beta)), "{beta}");
    }
    for b in ["1", "2"] {
        let out = temp_path(&format!("backend-check-mb{b}.bin"));
        let o = under_shim(
            "h100",
            &[
                ("MARMOSET_WORKSPACE_LIMIT", "64MiB"),
                ("MARMOSET_TEST_MICROBATCH", b),
            ],
            "backend_check",
            &[CASES, "11", out.to_str().unwrap()],
        );
        ok(&o);
        let got = floats(&out);
        assert_eq!(got.len(), want.len());
        let log = stderr(&o);
        let ran: Vec<&str> = log.lines().filter(|l| l.contains("backend: ran")).collect();
        // Every case has N >= 2; with micro-batches of 2, those of N = 2 stay whole.
        let whole = if b == "2" {
            list.iter().filter(|(l, _)| l.contains(" n=2 ")).count()
        } else {
            0
        };
        assert_eq!(ran.len(), list.len() - whole, "{}", stderr(&o));
        for d in [
            "Fwd graph (1 ",
            "BwdData graph",
            "BwdFilter graph",
            "Fwd graph (3 ",
        ] {
            assert!(ran.iter().any(|l| l.contains(d)), "{d}");
        }
        let mut at = 0;
        for (line, n) in &list {
            let err = max_relative_error(&want[at..at + n], &got[at..at + n]);
            assert!(err < 1e-5, "micro-batches of {b}: {line}: {err:e}");
            at += n;
        }
    }
}

#[test]
fn wr_planned_backend_executions_equal_undivided_ones() {
    let (want, list) = undivided("p100", "16", "5", "backend-wr-plain.bin");
    let dir = temp_path("backend-wr-cache");
    let out = temp_path("backend-wr-mb.bin");
    let o = under_shim(
        "p100",
        &[
            // Small enough that WR's choice is not cuDNN's first heuristic for some.
            ("MARMOSET_WORKSPACE_LIMIT", "256"),
            ("MARMOSET_CACHE_DIR", dir.to_str().unwrap()),
        ],
        "backend_check",
        &["16", "5", out.to_str().unwrap()],
    );
    ok(&o);
    let log = stderr(&o);
    assert_eq!(
        log.lines()
            .filter(|l| l.contains("backend: planned"))
            .count(),
        list.len(),
        "{log}"
    );
    // The heuristics answered Marmoset's first engine first: the engine the program took and
    // the workspace its plan asked for are those of Marmoset's configuration (convolutions this
    // small never gain from micro-batches: WR's choice is an engine, and the program's plan is
    // it; the tests above and WD's run the divided executions).
    let planned: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("backend: planned"))
        .collect();
    let mut moved = 0;
    for ((case, _), plan) in list.iter().zip(&planned) {
        let parts = plan.split("images): [(").nth(1).unwrap();
        let engine = parts.split([',', ')']).nth(1).unwrap().trim();
        let ws = plan
            .split(" ms, ")
            .nth(1)
            .unwrap()
            .split(' ')
            .next()
            .unwrap();
        let got = cases(&o)
            .into_iter()
            .find(|(l, _)| l.split(' ').next() == case.split(' ').next())
            .unwrap()
            .0;
        assert!(
            got.contains(&format!(" engine={engine} ")),
            "{got} / {plan}"
        );
        assert!(got.contains(&format!(" workspace={ws} ")), "{got} / {plan}");
        moved += usize::from(!case.contains(&format!(" engine={engine} ")));
    }
    assert!(moved > 0, "some heuristics answers changed: {log}");
    assert_eq!(
        log.lines()
            .filter(|l| l.contains("backend: heuristics planned"))
            .count(),
        list.len()
    );
    let got = floats(&out);
    assert_eq!(got.len(), want.len());
    let mut at = 0;
    for (line, n) in &list {
        let err = max_relative_error(&want[at..at + n], &got[at..at + n]);
        assert!(err < 1e-5, "WR: {line}: {err:e}");
        at += n;
    }
}

#[test]
fn wd_micro_batched_backend_executions_equal_undivided_ones_in_the_shared_workspace() {
    let (want, list) = undivided("h100", CASES, "11", "backend-wd-plain.bin");
    // The test facility under WD measures micro-batches of its size alone, so every
    // configuration the knapsack can pick divides the batch; 4 KiB is less than these
    // convolutions' fastest configurations need together.
    for b in ["1", "2"] {
        let out = temp_path(&format!("backend-wd-mb{b}.bin"));
        let dir = temp_path(&format!("backend-wd-cache{b}"));
        let o = under_shim(
            "h100",
            &[
                ("MARMOSET_WORKSPACE_TOTAL", "4KiB"),
                ("MARMOSET_TEST_MICROBATCH", b),
                ("MARMOSET_CACHE_DIR", dir.to_str().unwrap()),
            ],
            "backend_check",
            &[CASES, "11", out.to_str().unwrap()],
        );
        ok(&o);
        let log = stderr(&o);
        for (l, _) in cases(&o) {
            assert!(
                l.contains(" workspace=0 "),
                "WD tells the program 0 bytes: {l}"
            );
        }
        let (solves, runs) = wd_segments_within_the_pool(&log, 4096);
        assert!(solves >= 1, "{log}");
        assert_eq!(runs, list.len(), "every case ran in WD's workspace: {log}");
        let whole = if b == "2" {
            list.iter().filter(|(l, _)| l.contains(" n=2 ")).count()
        } else {
            0
        };
        let split = log
            .lines()
            .filter(|l| l.contains("backend: ran") && !l.contains(" as 1 micro-batches"))
            .count();
        assert_eq!(split, list.len() - whole, "{log}");
        let got = floats(&out);
        assert_eq!(got.len(), want.len());
        let mut at = 0;
        for (line, n) in &list {
            let err = max_relative_error(&want[at..at + n], &got[at..at + n]);
            assert!(err < 1e-5, "WD, micro-batches of {b}: {line}: {err:e}");
            at += n;
        }
    }
}

/// Total simulated milliseconds of a layers run, and each `LAYER DIR` line's milliseconds.
fn layer_times(o: &Output, total_key: &str) -> (f64, Vec<(String, f64)>) {
    let out = stdout(o);
    let total = out
        .lines()
        .find_map(|l| match total_key {
            "total_ms=" => l.strip_prefix("total_ms=").map(|v| v.parse().unwrap()),
            _ => l
                .contains(" layers: ")
                .then(|| l.split_whitespace().nth(2).unwrap().parse().unwrap()),
        })
        .unwrap_or_else(|| panic!("no total in {out}"));
    let lines = out
        .lines()
        .filter_map(|l| {
            let ms = l.split_whitespace().find_map(|w| w.strip_prefix("ms="))?;
            let mut w = l.split_whitespace();
            Some((
                format!("{} {}", w.next()?, w.next()?),
                ms.parse::<f64>().ok()?,
            ))
        })
        .collect();
    (total, lines)
}

#[test]
fn backend_wr_speedups_match_the_legacy_path_and_the_paper_on_p100() {
    // The μ-cuDNN paper (P100, 64 MiB per layer): AlexNet 1.63x, ResNet-18 1.21x; conv2
    // forward 2.33x (Fig. 9). Figures here are simulated.
    for (net, paper) in [("alexnet", 1.63), ("resnet18", 1.21)] {
        let csv = root().join(format!("data/conv-layers/{net}.csv"));
        let args = [csv.to_str().unwrap(), "64"];
        let run = |prog: &str, wr: bool| {
            let knob = wr.then_some(("MARMOSET_WORKSPACE_LIMIT", "64MiB"));
            p100_shape(prog, &args, knob, &format!("bk-bench-{net}-{prog}"))
        };
        let (bk0, bk_layers0) = layer_times(&run("backend_layers", false), "total_ms=");
        let wr = run("backend_layers", true);
        let (bk1, bk_layers1) = layer_times(&wr, "total_ms=");
        let (lg0, _) = layer_times(&run("conv_layers", false), "layers");
        let (lg1, _) = layer_times(&run("conv_layers", true), "layers");
        let (backend, legacy) = (bk0 / bk1, lg0 / lg1);
        assert!(
            (backend / legacy - 1.0).abs() < 0.05,
            "{net}: backend {backend:.3}x, legacy {legacy:.3}x"
        );
        assert!(
            (backend / paper - 1.0).abs() < 0.15,
            "{net}: backend {backend:.3}x, paper {paper}x"
        );
        // The framework was told workspaces within the limit.
        for l in stdout(&wr).lines().filter(|l| l.contains("workspace=")) {
            let ws: u64 = l
                .split_whitespace()
                .find_map(|w| w.strip_prefix("workspace="))
                .unwrap()
                .parse()
                .unwrap();
            assert!(ws <= 64 << 20, "{l}");
        }
        if net == "alexnet" {
            let find = |v: &[(String, f64)]| v.iter().find(|l| l.0 == "conv2 fwd").unwrap().1;
            let conv2 = find(&bk_layers0) / find(&bk_layers1);
            assert!(
                (conv2 / 2.33 - 1.0).abs() < 0.25,
                "conv2 forward: {conv2:.3}x against the paper's 2.33x"
            );
        }
    }
}

#[test]
fn backend_graphs_join_wds_knapsack_like_the_legacy_calls_on_p100() {
    // AlexNet's 15 kernels sharing 64 MiB each (960 MiB): the backend path under WD within 5%
    // of the legacy path under WD, every graph told 0 bytes, every segment within the pool.
    // Figures are simulated.
    let csv = root().join("data/conv-layers/alexnet.csv");
    let args = [csv.to_str().unwrap(), "64"];
    let total: u64 = 960 << 20;
    let run = |prog: &str, wd: bool| {
        let knob = wd.then_some(("MARMOSET_WORKSPACE_TOTAL", "960MiB"));
        p100_shape(prog, &args, knob, &format!("bk-wd-{prog}"))
    };
    let (bk0, _) = layer_times(&run("backend_layers", false), "total_ms=");
    let wd = run("backend_layers", true);
    let (bk1, _) = layer_times(&wd, "total_ms=");
    let (lg0, _) = layer_times(&run("conv_layers", false), "layers");
    let (lg1, _) = layer_times(&run("conv_layers", true), "layers");
    let (backend, legacy) = (bk0 / bk1, lg0 / lg1);
    assert!(
        (backend / legacy - 1.0).abs() < 0.05,
        "backend WD {backend:.3}x, legacy WD {legacy:.3}x"
    );
    assert!(backend > 1.3, "WD gains on AlexNet: {backend:.3}x");
    let out = stdout(&wd);
    let lines: Vec<&str> = out.lines().filter(|l| l.contains("workspace=")).collect();
    assert_eq!(lines.len(), 15, "{out}");
    for l in lines {
        assert!(
            l.contains(" workspace=0 "),
            "WD tells the framework 0 bytes: {l}"
        );
    }
    let log = stderr(&wd);
    assert!(log.contains("WD: 15 kernels share 1006632960 B"), "{log}");
    let (_, runs) = wd_segments_within_the_pool(&log, total);
    assert_eq!(
        runs, 30,
        "each layer's two executions in WD's workspace: {log}"
    );
}
