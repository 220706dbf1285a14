//! μ-cuDNN on the cuDNN backend (graph) API: plans of one convolution (each direction) or of a
//! forward convolution with pointwise operations run as micro-batches that give the undivided
//! results; other graphs pass through.

use marmoset_e2e::*;
use std::process::{Command, Output};

/// Runs a workload under the shim (no trace) with the given environment.
fn shim(profile: &str, env: &[(&str, &str)], prog: &str, args: &[&str]) -> Output {
    let mut c = Command::new(marmoset());
    c.arg("run")
        .arg(format!("--sim={profile}"))
        .arg("--")
        .arg(workloads().join(prog))
        .args(args);
    for (k, _) in std::env::vars() {
        if k.starts_with("MARMOSET_") || k.starts_with("SIMGPU_") {
            c.env_remove(k);
        }
    }
    c.env("MARMOSET_LOG", "info");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
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

#[test]
fn micro_batched_backend_executions_equal_undivided_ones() {
    let plain_out = temp_path("backend-check-plain.bin");
    let plain = run_sim(
        "h100",
        &[],
        "backend_check",
        &[CASES, "11", plain_out.to_str().unwrap()],
    );
    ok(&plain);
    let want = floats(&plain_out);
    let list = cases(&plain);
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
        let o = shim(
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
