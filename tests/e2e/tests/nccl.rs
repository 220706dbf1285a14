//! The simulated NCCL between real processes: 2 and 4 ranks (one simulated device each, as
//! torchrun starts them) run the collectives and send/receive in data mode and compare bit for
//! bit with references computed independently in Python; the slowest rank sets the finish time;
//! a peer that dies is an error, not a hang; two ranks on one device are refused. Each rank is
//! `tests/nccl_rank.py`, driving the libraries of `marmoset sim-path` through ctypes.

use marmoset_e2e::*;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn sim_dir() -> PathBuf {
    let o = Command::new(marmoset()).arg("sim-path").output().unwrap();
    ok(&o);
    PathBuf::from(stdout(&o).trim())
}

/// Runs `n` ranks of `scenario` at once; returns each rank's output, in rank order.
fn ranks(n: usize, scenario: &str, env: &[(&str, &str)]) -> Vec<Output> {
    let dir = sim_dir();
    let id = temp_path(&format!("nccl-{scenario}-{n}.id"));
    let script = root().join("tests/e2e/tests/nccl_rank.py");
    let children: Vec<_> = (0..n)
        .map(|r| {
            let mut c = Command::new("python3");
            c.arg(&script)
                .arg(&dir)
                .arg(r.to_string())
                .arg(n.to_string())
                .arg(&id)
                .arg(scenario);
            for (k, _) in std::env::vars() {
                if k.starts_with("SIMGPU_") || k == "CUDA_VISIBLE_DEVICES" {
                    c.env_remove(k);
                }
            }
            c.env("LD_LIBRARY_PATH", &dir)
                .env("SIMGPU_DEVICES", n.to_string())
                .env("SIMGPU_MODE", "data")
                .env("SIMGPU_NCCL_TIMEOUT", "120");
            c.envs(env.iter().copied());
            c.stdout(Stdio::piped()).stderr(Stdio::piped());
            c.spawn().expect("python3")
        })
        .collect();
    let outs: Vec<Output> = children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect();
    std::fs::remove_file(&id).ok();
    outs
}

fn show(outs: &[Output]) -> String {
    outs.iter()
        .enumerate()
        .map(|(r, o)| format!("--- rank {r}: {:?}\n{}{}", o.status, stdout(o), stderr(o)))
        .collect()
}

fn collectives_are_exact(n: usize) {
    let outs = ranks(n, "data", &[]);
    for (r, o) in outs.iter().enumerate() {
        assert!(o.status.success(), "rank {r}:\n{}", show(&outs));
        let out = stdout(o);
        assert!(!out.contains("FAIL"), "{}", show(&outs));
        assert!(out.contains("done clean"), "{}", show(&outs));
        for check in [
            "count_rank",
            "allreduce_sum_f32",
            "allreduce_max_f32",
            "allreduce_avg_f32",
            "allreduce_sum_f16_in_place",
            "allgather",
            "reducescatter",
            "broadcast",
            "allreduce_sum_i64",
            "sendrecv_ring",
            "alltoall",
            "bad_datatype",
            "bad_root",
        ] {
            assert!(
                out.contains(&format!("ok {check}\n")),
                "{check}:\n{}",
                show(&outs)
            );
        }
    }
}

#[test]
fn two_ranks_reduce_gather_scatter_broadcast_and_exchange_bit_for_bit() {
    collectives_are_exact(2);
}

#[test]
fn four_ranks_reduce_gather_scatter_broadcast_and_exchange_bit_for_bit() {
    collectives_are_exact(4);
}

fn figure(o: &Output, key: &str) -> f64 {
    num(o, key)
}

#[test]
fn the_slowest_rank_sets_the_finish_time_for_everyone() {
    for mode in ["data", "shape"] {
        let outs = ranks(2, "timing", &[("SIMGPU_MODE", mode)]);
        for o in &outs {
            assert!(o.status.success(), "{mode}:\n{}", show(&outs));
        }
        let (b0, a0) = (figure(&outs[0], "before"), figure(&outs[0], "after"));
        let (b1, a1) = (figure(&outs[1], "before"), figure(&outs[1], "after"));
        // Rank 1 was busy for 0.5 s, rank 0 was not.
        assert!(b0 < 0.1 && b1 >= 0.5, "{mode}: before {b0} {b1}");
        assert_eq!(
            a0,
            a1,
            "{mode}: both ranks finish together:\n{}",
            show(&outs)
        );
        // 100 MB on 2 ranks of the simulated H100: 10 us + 1e8 * 1 / 480 GB/s = 218 us.
        let took = a1 - b1;
        assert!(
            (took - 218.3e-6).abs() < 5e-6,
            "{mode}: the all-reduce took {took} s after the slowest rank was ready"
        );
    }
}

#[test]
fn a_dead_peer_is_a_remote_error_not_a_hang() {
    let start = Instant::now();
    let outs = ranks(2, "dead", &[]);
    assert!(
        start.elapsed() < Duration::from_secs(60),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(outs[1].status.code(), Some(3), "{}", show(&outs));
    let out = stdout(&outs[0]);
    // ncclRemoteError = 6 (nccl.h), also the communicator's asynchronous error.
    assert!(out.contains("allreduce 6\n"), "{}", show(&outs));
    assert!(out.contains("async 6\n"), "{}", show(&outs));
    assert!(
        out.contains("rank 1") && out.contains("ended while rank 0 waited"),
        "{}",
        show(&outs)
    );
}

#[test]
fn two_ranks_on_one_device_are_refused() {
    let outs = ranks(2, "duplicate", &[]);
    for o in &outs {
        assert!(o.status.success(), "{}", show(&outs));
        // ncclInvalidUsage = 5 (nccl.h).
        assert!(stdout(o).contains("init 5\n"), "{}", show(&outs));
        assert!(
            stdout(o).contains("Duplicate GPU detected : rank 0 and rank 1"),
            "{}",
            show(&outs)
        );
    }
}
