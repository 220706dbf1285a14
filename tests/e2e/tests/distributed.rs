//! PyTorch's own data parallelism on a simulated machine of two H100s, as users run it:
//! `marmoset run --sim=h100x2 ... -- torchrun --nproc-per-node 2 examples/distributed.py`, one
//! process per device, NCCL between them. DDP trains ResNet-50 under a budget below its peak on
//! every rank; FSDP trains a GPT-style decoder whose all-gathers and reduce-scatters each rank's
//! trace holds as accesses to their buffers. Both models are the example's own (torch alone).
//! Shape mode; small sizes keep each run short.

use marmoset_e2e::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const RANKS: usize = 2;

/// `marmoset run --sim=h100x2 MARMOSET_ARGS -- torchrun --nproc-per-node 2
/// examples/distributed.py ARGS` in shape mode, each device's report at `report`.devN.json.
fn torchrun(marmoset_args: &[&str], args: &[&str], report: &Path) -> Output {
    let torchrun = venv_python().with_file_name("torchrun");
    let mut c = Command::new(marmoset());
    c.args(["run", "--sim=h100x2"])
        .args(marmoset_args)
        .arg("--");
    // --standalone: a rendezvous on a free port, so that tests running at once do not meet.
    c.arg(&torchrun)
        .args(["--standalone", "--nproc-per-node", &RANKS.to_string()])
        .arg(root().join("examples/distributed.py"))
        .args(args);
    for (k, _) in std::env::vars() {
        if ["MARMOSET_", "SIMGPU_", "TORCH_", "PYTORCH_", "NCCL_"]
            .iter()
            .any(|p| k.starts_with(p))
            || [
                "RANK",
                "LOCAL_RANK",
                "WORLD_SIZE",
                "MASTER_ADDR",
                "MASTER_PORT",
            ]
            .contains(&k.as_str())
        {
            c.env_remove(k);
        }
    }
    c.env("SIMGPU_MODE", "shape")
        .env("SIMGPU_REPORT", report)
        .env("OMP_NUM_THREADS", "1");
    torch_output(&mut c)
}

/// Each device's report of a run (written by the process that worked on it).
fn reports(report: &Path) -> Vec<serde_json::Value> {
    (0..RANKS)
        .map(|d| {
            let p = PathBuf::from(device_report(report, d));
            let r = sim_report(&p);
            std::fs::remove_file(&p).ok();
            r
        })
        .collect()
}

fn device_report(base: &Path, device: usize) -> String {
    let base = base.to_string_lossy();
    let (stem, ext) = base.rsplit_once('.').unwrap();
    format!("{stem}.dev{device}.{ext}")
}

/// Each rank's device time of each step, in rank order.
fn step_times(o: &Output) -> Vec<Vec<f64>> {
    let mut times = vec![Vec::new(); RANKS];
    for line in stdout(o).lines() {
        let Some(rest) = line.strip_prefix("rank ") else {
            continue;
        };
        let Some((rank, tail)) = rest.split_once(" step ") else {
            continue;
        };
        let ms = tail
            .rsplit_once(", ")
            .and_then(|(_, t)| t.strip_suffix(" ms device time)"))
            .and_then(|t| t.parse::<f64>().ok());
        if let (Ok(r), Some(ms)) = (rank.parse::<usize>(), ms) {
            times[r].push(ms);
        }
    }
    times
}

/// Every rank trained `steps` steps; `alike`: the ranks' steps took the same time (the same
/// work on every rank, and collectives that start when the last rank is ready: without
/// Marmoset; under a budget each rank runs its own plan).
fn trained(o: &Output, steps: usize, alike: bool) -> Vec<Vec<f64>> {
    ok(o);
    let times = step_times(o);
    for (r, t) in times.iter().enumerate() {
        assert_eq!(t.len(), steps, "rank {r}: {}{}", stdout(o), stderr(o));
    }
    for s in (0..steps).filter(|_| alike) {
        let (a, b) = (times[0][s], times[1][s]);
        assert!((a - b).abs() <= 0.01 * a.max(b), "step {s}: {times:?}");
    }
    times
}

/// The traces of a run at `base`: rank 0's is `base` or `base`.rank0, the others `.rank<R>`.
fn rank_traces(base: &Path) -> Vec<Vec<serde_json::Value>> {
    let name = base.file_name().unwrap().to_string_lossy().into_owned();
    let (stem, ext) = name.rsplit_once('.').unwrap();
    let mut out = Vec::new();
    for r in 0..RANKS {
        let tagged = base.with_file_name(format!("{stem}.rank{r}.{ext}"));
        let p = if tagged.exists() {
            tagged
        } else {
            base.to_path_buf()
        };
        out.push(take_trace(&p));
    }
    std::fs::remove_file(base).ok();
    out
}

fn collectives<'a>(records: &'a [serde_json::Value], api: &str) -> Vec<&'a serde_json::Value> {
    of_kind(records, "collective")
        .into_iter()
        .filter(|r| r["api"] == api)
        .collect()
}

const RESNET: &[&str] = &[
    "--model", "resnet50", "--steps", "4", "--batch", "2", "--image", "64",
];

#[test]
fn ddp_trains_on_two_simulated_devices_within_a_budget_on_each() {
    let report = temp_path("ddp-report.json");
    let plain = torchrun(&["--no-shim"], RESNET, &report);
    let alone = trained(&plain, 4, true);
    let peaks: Vec<u64> = reports(&report)
        .iter()
        .map(|r| r["peak_bytes"].as_u64().unwrap())
        .collect();
    let budget = peaks.iter().max().unwrap() * 8 / 10;
    let trace = temp_path("ddp.jsonl");
    let o = torchrun(
        &[
            "--memory-limit",
            &budget.to_string(),
            "--trace",
            trace.to_str().unwrap(),
        ],
        RESNET,
        &report,
    );
    let under = trained(&o, 4, false);
    for (d, r) in reports(&report).iter().enumerate() {
        assert!(r["sticky_error"].is_null(), "device {d}: a trap: {r}");
        let peak = r["peak_bytes"].as_u64().unwrap();
        assert!(
            peak <= budget,
            "device {d}: peak {peak} B over the budget {budget} B (alone {peaks:?})"
        );
    }
    // The report reads every rank's trace and names each step's slowest rank.
    let json = temp_path("ddp-report-ranks.json");
    let rep = Command::new(marmoset())
        .args(["report", "--simulated", "-o"])
        .arg(&json)
        .arg(&trace)
        .output()
        .unwrap();
    ok(&rep);
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    std::fs::remove_file(&json).ok();
    let ranks = v["ranks"]["ranks"].as_array().expect("a ranks section");
    assert_eq!(ranks.len(), RANKS, "{}", v["ranks"]);
    assert_eq!(
        (ranks[0]["rank"].as_u64(), ranks[1]["rank"].as_u64()),
        (Some(0), Some(1))
    );
    let slowest = v["ranks"]["slowest"].as_array().unwrap();
    assert!(!slowest.is_empty(), "{}", v["ranks"]);
    for s in slowest {
        let i = s["step"].as_u64().unwrap() as usize - 1;
        let most = ranks
            .iter()
            .map(|r| r["steps_ms"][i].as_f64().unwrap())
            .fold(f64::MIN, f64::max);
        assert_eq!(s["measured_ms"].as_f64(), Some(most), "{}", v["ranks"]);
    }
    assert!(
        stderr(&rep).contains("on its slowest rank"),
        "{}",
        stderr(&rep)
    );
    // inspect reads every rank's trace of the run too.
    let ins = Command::new(marmoset())
        .args(["inspect", "--json"])
        .arg(&trace)
        .output()
        .unwrap();
    ok(&ins);
    let v: serde_json::Value = serde_json::from_slice(&ins.stdout).unwrap();
    let inspected: Vec<u64> = v["ranks"]
        .as_array()
        .expect("a ranks list")
        .iter()
        .map(|r| r["rank"].as_u64().unwrap())
        .collect();
    assert_eq!(inspected, vec![0, 1], "{}", v["ranks"]);
    for (r, records) in rank_traces(&trace).iter().enumerate() {
        let reduces = collectives(records, "ncclAllReduce");
        assert!(
            reduces.len() >= 4,
            "rank {r}: DDP all-reduces its gradient buckets every step: {}",
            reduces.len()
        );
        // A bucket is read and written in place, on NCCL's stream.
        assert!(
            reduces.iter().all(|c| c["touches"]
                .as_array()
                .is_some_and(|t| !t.is_empty() && t.iter().all(|t| t["access"] == "rw"))),
            "rank {r}: {reduces:?}"
        );
        assert!(reduces.iter().all(|c| c["ranks"] == 2 && c["result"] == 0));
    }
    eprintln!("ddp step times alone {alone:?}, within {budget} B {under:?}");
}

#[test]
fn fsdp_gathers_and_scatters_as_accesses_on_every_rank() {
    let report = temp_path("fsdp-report.json");
    let trace = temp_path("fsdp.jsonl");
    let o = torchrun(
        &["--policy", "none", "--trace", trace.to_str().unwrap()],
        &[
            "--model",
            "gpt",
            "--parallel",
            "fsdp",
            "--layers",
            "2",
            "--seq",
            "64",
            "--batch",
            "1",
            "--steps",
            "3",
        ],
        &report,
    );
    trained(&o, 3, true);
    for (d, r) in reports(&report).iter().enumerate() {
        assert!(r["sticky_error"].is_null(), "device {d}: a trap: {r}");
    }
    for (r, records) in rank_traces(&trace).iter().enumerate() {
        let gathers = collectives(records, "ncclAllGather");
        let scatters = collectives(records, "ncclReduceScatter");
        assert!(
            gathers.len() >= 3 && scatters.len() >= 3,
            "rank {r}: {} all-gathers, {} reduce-scatters",
            gathers.len(),
            scatters.len()
        );
        // An all-gather reads this rank's shard and writes the whole parameter: twice as many
        // bytes written as read, at 2 ranks.
        for g in &gathers {
            let t = g["touches"].as_array().unwrap();
            let bytes = |a: &str| -> u64 {
                t.iter()
                    .filter(|x| x["access"] == a)
                    .map(|x| x["bytes"].as_u64().unwrap())
                    .sum()
            };
            if bytes("r") > 0 && bytes("w") > 0 {
                assert_eq!(bytes("w"), 2 * bytes("r"), "rank {r}: {g}");
            }
        }
    }
}

/// A communicator made after the program's first tensor (no `device_id` at
/// `init_process_group`: NCCL starts at the first collective): the buffers NCCL maps then with
/// the driver's VMM calls (the simulated NCCL: 128 MiB, as the profile's channels make it) are
/// counted against the budget, and the program sees that much less free memory.
#[test]
fn nccl_buffers_mapped_after_the_first_tensor_count_against_the_budget() {
    let script = temp_path("lazy_nccl.py");
    std::fs::write(
        &script,
        "import os, torch, torch.distributed as dist\n\
         torch.cuda.set_device(int(os.environ['LOCAL_RANK']))\n\
         x = torch.ones(1 << 22, device='cuda')\n\
         dist.init_process_group('nccl')\n\
         dist.all_reduce(x)\n\
         torch.cuda.synchronize()\n\
         os.write(1, f'rank {dist.get_rank()} free MiB {torch.cuda.mem_get_info()[0] >> 20}\\n'.encode())\n\
         dist.destroy_process_group()\n",
    )
    .unwrap();
    let torchrun = venv_python().with_file_name("torchrun");
    let mut c = Command::new(marmoset());
    c.args(["run", "--sim=h100x2", "--memory-limit", "600MiB", "--"])
        .arg(&torchrun)
        .args(["--standalone", "--nproc-per-node", "2"])
        .arg(&script);
    for (k, _) in std::env::vars() {
        if ["MARMOSET_", "SIMGPU_", "TORCH_", "PYTORCH_", "NCCL_"]
            .iter()
            .any(|p| k.starts_with(p))
        {
            c.env_remove(k);
        }
    }
    c.env("SIMGPU_MODE", "shape").env("MARMOSET_LOG", "info");
    let o = torch_output(&mut c);
    std::fs::remove_file(&script).ok();
    ok(&o);
    let err = stderr(&o);
    assert!(
        err.matches("134217728 B mapped by a library with the driver's VMM calls")
            .count()
            >= 2,
        "each rank counts NCCL's buffers: {err}"
    );
    let free: Vec<u64> = stdout(&o)
        .lines()
        .filter_map(|l| l.split("free MiB ").nth(1))
        .filter_map(|v| v.trim().parse().ok())
        .collect();
    assert_eq!(free.len(), 2, "{}", stdout(&o));
    // 600 MiB less NCCL's 128 MiB and the 16 MiB tensor (and what the process held first).
    assert!(free.iter().all(|&f| f <= 600 - 128 - 16), "{free:?}");
}
