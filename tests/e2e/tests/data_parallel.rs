//! Data parallelism exact in data mode: the trainer on two simulated H100s, one process per
//! device (TRAINER_RANKS), each on its own batch, gradients averaged by the simulated NCCL's
//! all-reduce before each update. Under Marmoset, each rank within half its peak under the
//! default policy with MARMOSET_VERIFY, every rank's output (losses and the weights' checksum)
//! is bit for bit that of the run without Marmoset, and the ranks end with the same weights.

use marmoset_e2e::*;
use std::process::{Command, Output};

/// The trainer, 12 blocks deep at 64 x 64, for 6 iterations; tensors from 64 KiB are evictable.
const ARGS: [&str; 4] = ["6", "8", "64", "12"];
const RANKS: usize = 2;

/// Both ranks at once, each through `marmoset run --sim=h100x2 MARMOSET_ARGS`, in data mode;
/// each rank's output and its device's report.
fn ranks(
    marmoset_args: &[&str],
    env: &[(&str, &str)],
    name: &str,
) -> Vec<(Output, serde_json::Value)> {
    let id = temp_path(&format!("dp-{name}.id"));
    std::fs::remove_file(&id).ok();
    let children: Vec<_> = (0..RANKS)
        .map(|r| {
            let report = temp_path(&format!("dp-{name}-{r}.json"));
            let mut c = Command::new(marmoset());
            c.args(["run", "--sim=h100x2"])
                .args(marmoset_args)
                .arg("--");
            c.arg(workloads().join("trainer")).args(ARGS);
            for (k, _) in std::env::vars() {
                if k.starts_with("MARMOSET_")
                    || k.starts_with("SIMGPU_")
                    || k.starts_with("TRAINER_")
                {
                    c.env_remove(k);
                }
            }
            c.env("SIMGPU_MODE", "data")
                .env("SIMGPU_REPORT", &report)
                .env("SIMGPU_NCCL_TIMEOUT", "300")
                // NCCL's buffers small (2 MiB per rank, not 128): the trainer's own peak is
                // about 60 MiB, and half of a peak NCCL's buffers dwarf would leave no room.
                .env("NCCL_BUFFSIZE", "65536")
                .env("RANK", r.to_string())
                .env("TRAINER_RANKS", RANKS.to_string())
                .env("TRAINER_RANK", r.to_string())
                .env("TRAINER_NCCL_ID", &id)
                .env("MARMOSET_MIN_TENSOR", "65536");
            c.envs(env.iter().copied());
            c.stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped());
            (c.spawn().expect("run marmoset"), report)
        })
        .collect();
    let out = children
        .into_iter()
        .enumerate()
        .map(|(r, (c, report))| {
            let o = c.wait_with_output().unwrap();
            ok(&o);
            // Rank r works on device r: its report is the device's.
            let base = report.to_string_lossy().into_owned();
            let dev = base.replace(".json", &format!(".dev{r}.json"));
            let rep = sim_report(std::path::Path::new(&dev));
            std::fs::remove_file(&dev).ok();
            (o, rep)
        })
        .collect();
    std::fs::remove_file(&id).ok();
    out
}

fn checksum(o: &Output) -> String {
    stdout(o)
        .lines()
        .find(|l| l.starts_with("checksum "))
        .unwrap_or_else(|| panic!("no checksum: {}{}", stdout(o), stderr(o)))
        .to_string()
}

#[test]
fn two_ranks_under_a_budget_train_bit_for_bit_as_without_marmoset() {
    let plain = ranks(&["--no-shim"], &[], "plain");
    assert_eq!(
        checksum(&plain[0].0),
        checksum(&plain[1].0),
        "the ranks average their gradients: the same weights"
    );
    assert_ne!(
        stdout(&plain[0].0),
        stdout(&plain[1].0),
        "each rank trains on its own batch: its own losses"
    );
    let peak = plain
        .iter()
        .map(|(_, r)| r["peak_bytes"].as_u64().unwrap())
        .max()
        .unwrap();
    let budget = peak / 2;
    let under = ranks(
        &["--memory-limit", &budget.to_string()],
        &[("MARMOSET_VERIFY", "1"), ("MARMOSET_LOG", "info")],
        "half",
    );
    for (r, ((o, rep), (p, _))) in under.iter().zip(&plain).enumerate() {
        let at = format!("rank {r} within {budget} B (half of {peak} B)");
        exact_within(&at, o, &stdout(p), rep, budget);
        let err = stderr(o);
        assert!(
            err.contains("the plan guides from this iteration"),
            "{at}: {err}"
        );
    }
}
