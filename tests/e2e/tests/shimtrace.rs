//! The shim's own traces as planner input: iterations found in the call stream, tensors named
//! across iterations whose addresses change, and `marmoset plan` finding feasible plans at 0.5
//! and 0.3 of the peak on the traces of every workload (shape and data mode).

use marmoset_e2e::*;
use planner::iteration::TensorId;
use planner::trace::{CopyDir, Event};
use std::process::Command;

/// Runs `prog` under the shim with device timings and returns its trace.
fn timed_trace(mode: &str, prog: &str, args: &[&str]) -> Vec<planner::trace::Record> {
    let (o, records) = run_shim(
        &[("MARMOSET_TRACE_TIMING", "1"), ("SIMGPU_MODE", mode)],
        prog,
        args,
    );
    ok(&o);
    let text: String = records.iter().map(|r| format!("{r}\n")).collect();
    planner::trace::read(&text).expect("a readable trace")
}

/// Call indices (in the stream the iteration detector sees) of the 4-byte loss read-backs: one
/// per iteration in both workloads.
fn loss_reads(records: &[planner::trace::Record]) -> Vec<usize> {
    records
        .iter()
        .filter(|r| r.event.api().is_some())
        .enumerate()
        .filter(|(_, r)| {
            matches!(
                r.event,
                Event::Copy {
                    dir: CopyDir::D2h,
                    size: 4,
                    ..
                }
            )
        })
        .map(|(i, _)| i)
        .collect()
}

#[test]
fn the_trainers_iterations_are_found_and_its_blobs_live_only_while_their_contents_do() {
    let records = timed_trace("shape", "trainer", &["2", "256", "256", "6"]);
    let c = planner::shimtrace::convert(&records).unwrap();
    let s = c.iteration.as_ref().expect("an iteration");
    let reads = loss_reads(&records);
    assert_eq!(reads.len(), 2);
    assert_eq!(
        s.period,
        reads[1] - reads[0],
        "one iteration between loss reads"
    );
    assert_eq!((s.iterations, s.index), (2, 1), "the second one is planned");
    // Caffe-style: every blob is allocated before the loop, so every tensor is itself.
    assert!(
        s.names
            .values()
            .all(|n| matches!(n, TensorId::Persistent { .. }))
    );
    assert_eq!(c.untimed, 0);
    // Blobs hold memory from their first write to their last read only: the model's peak is far
    // below the bytes the program allocates (16.7 GB), and no activation (512 MiB each) is
    // resident from the start.
    let allocated: u64 = records
        .iter()
        .filter_map(|r| match r.event {
            Event::Alloc { size, .. } => Some(size),
            _ => None,
        })
        .sum();
    let t = &c.trace;
    assert!(t.peak() < allocated * 6 / 10, "{} vs {allocated}", t.peak());
    assert!(
        t.storages
            .iter()
            .all(|st| !(st.constant && st.size == 256 * 8 * 256 * 256 * 4))
    );
    // The backward pass is inferred to begin after the memory load peaks, before the updates.
    let first_bwd = t.ops.iter().position(|o| o.backward).unwrap();
    assert!(t.ops[first_bwd - 1].name.starts_with("cudnn"));
    assert!(t.ops.last().unwrap().backward);
}

#[test]
fn torchlike_runs_unchanged_under_the_shim_and_its_tensors_are_named_by_position() {
    let args = ["4", "4", "16", "8", "2"];
    let plain = run_sim("h100", &[("SIMGPU_MODE", "data")], "torchlike", &args);
    ok(&plain);
    let (shim, _) = run_shim(&[("SIMGPU_MODE", "data")], "torchlike", &args);
    ok(&shim);
    assert_eq!(
        stdout(&plain),
        stdout(&shim),
        "losses and checksum identical"
    );
    let losses: Vec<f64> = stdout(&plain)
        .lines()
        .filter(|l| l.starts_with("iter "))
        .map(|l| l.rsplit(' ').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(losses.len(), 4);
    assert!(losses[3] < losses[0], "it learns: {losses:?}");

    let records = timed_trace("data", "torchlike", &args);
    let c = planner::shimtrace::convert(&records).unwrap();
    let s = c.iteration.as_ref().expect("an iteration");
    let reads = loss_reads(&records);
    assert_eq!(reads.len(), 4);
    assert_eq!(s.period, reads[3] - reads[2]);
    assert_eq!(s.period, reads[2] - reads[1]);
    // The first iteration creates the optimizer's state: iterations 2..4 repeat, the last is
    // planned.
    assert_eq!((s.iterations, s.index), (3, 2), "{s:?}");
    let allocs: Vec<(usize, u64, u64)> = records
        .iter()
        .filter(|r| r.event.api().is_some())
        .enumerate()
        .filter_map(|(i, r)| match r.event {
            Event::Alloc {
                alloc,
                ptr,
                result: 0,
                ..
            } => Some((i, alloc, ptr)),
            _ => None,
        })
        .collect();
    let mine: Vec<_> = allocs
        .iter()
        .filter(|a| a.0 >= s.start && a.0 < s.start + s.period)
        .collect();
    // Each allocation of the iteration is named by its position, and its counterpart one
    // iteration earlier sits at another address for many of them.
    let mut moved = 0;
    for (k, &&(i, id, ptr)) in mine.iter().enumerate() {
        assert!(
            matches!(s.names[&id], TensorId::Rel { back: 0, k: kk, .. } if kk == k),
            "{:?}",
            s.names[&id]
        );
        let before = allocs.iter().find(|a| a.0 == i - s.period).expect("a twin");
        moved += (before.2 != ptr) as usize;
    }
    assert!(
        moved * 2 > mine.len(),
        "addresses change: {moved} of {}",
        mine.len()
    );
    // The batch and its labels were prefetched by the iteration before: named so.
    let from_before: Vec<u64> = s
        .names
        .values()
        .filter_map(|n| match n {
            TensorId::Rel { back: 1, size, .. } => Some(*size),
            _ => None,
        })
        .collect();
    let mut sizes = from_before.clone();
    sizes.sort();
    assert_eq!(sizes, [4 * 4, 4 * 3 * 16 * 16 * 4], "{from_before:?}");
    // Weights and momentum live across iterations: constants, updated in place.
    let weights = c
        .storages
        .iter()
        .zip(&c.trace.storages)
        .filter(|(o, st)| st.constant && matches!(o.tensor, TensorId::Persistent { .. }))
        .count();
    assert!(
        weights >= 2 * 2 * 6,
        "weights, biases and their momentum: {weights}"
    );
}

/// `marmoset plan --json` on a trace file; the policy's summary.
fn plan(path: &std::path::Path, budget: &str, policy: &str) -> serde_json::Value {
    let o = Command::new(marmoset())
        .arg("plan")
        .arg(path)
        .args(["--budget", budget, "--policy", policy, "--json"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn plans_fit_half_and_three_tenths_of_the_peak_on_every_workloads_trace() {
    // Shape mode at the size, and data mode small; deep enough that the largest single
    // operation fits in 0.3 of the peak.
    let runs: [(&str, &str, &[&str]); 4] = [
        ("shape", "trainer", &["2", "256", "256", "6"]),
        ("data", "trainer", &["2", "8", "32", "10"]),
        ("shape", "torchlike", &["4", "32", "64", "16", "12"]),
        ("data", "torchlike", &["4", "4", "16", "8", "8"]),
    ];
    for (mode, prog, args) in runs {
        let (o, records) = run_shim(
            &[("MARMOSET_TRACE_TIMING", "1"), ("SIMGPU_MODE", mode)],
            prog,
            args,
        );
        ok(&o);
        let path = temp_path(&format!("{prog}-{mode}-plan.jsonl"));
        std::fs::write(
            &path,
            records.iter().map(|r| format!("{r}\n")).collect::<String>(),
        )
        .unwrap();
        for budget in ["0.5", "0.3"] {
            let v = plan(&path, budget, "auto");
            assert_eq!(
                v["feasible"], true,
                "{prog} {mode} {args:?} at {budget}: {v}"
            );
            assert!(
                v["peak_bytes_planned"].as_u64().unwrap() <= v["budget_bytes"].as_u64().unwrap()
            );
            assert_eq!(v["simulated"], true);
        }
        std::fs::remove_file(path).ok();
    }
}

/// Lineage: every kernel launch, memset and cuDNN computation is preceded by what replaying it
/// needs; the kernel's parameter buffer holds the addresses its touches were found from.
#[test]
fn every_computation_carries_its_lineage() {
    use planner::trace::Replay;
    use std::collections::HashMap;
    let records = timed_trace("data", "torchlike", &["2", "2", "8", "4", "1"]);
    let lineage: HashMap<u64, &Replay> = planner::shimtrace::lineage(&records);
    let ptrs: HashMap<u64, u64> = records
        .iter()
        .filter_map(|r| match r.event {
            Event::Alloc { alloc, ptr, .. } => Some((alloc, ptr)),
            _ => None,
        })
        .collect();
    let (mut kernels, mut convs) = (0, 0);
    for r in &records {
        let l = lineage.get(&r.seq);
        match &r.event {
            Event::Launch { touches, .. } => {
                let Some(Replay::Kernel { params, shared }) = l else {
                    panic!("no kernel lineage for {r:?}")
                };
                assert_eq!(*shared, 0);
                let words: Vec<u64> = params
                    .chunks(8)
                    .filter(|c| c.len() == 8)
                    .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
                    .collect();
                for t in touches {
                    assert!(words.contains(&(ptrs[&t.alloc] + t.offset)), "{r:?}");
                }
                kernels += 1;
            }
            Event::Memset { .. } => {
                assert_eq!(l, Some(&&Replay::Memset { value: 0, width: 1 }));
            }
            Event::Cudnn { api, .. } if api == "cudnnConvolutionForward" => {
                let Some(Replay::Cudnn {
                    alpha, beta, conv, ..
                }) = l
                else {
                    panic!("no lineage for {r:?}")
                };
                assert_eq!((*alpha, *beta), (Some(1.0), Some(0.0)));
                let c = conv.as_ref().expect("the convolution's parameters");
                assert_eq!(
                    (c.strides.as_slice(), c.groups, c.mode),
                    (&[1, 1][..], 1, 1)
                );
                convs += 1;
            }
            Event::Cudnn { api, .. } if api == "cudnnAddTensor" => {
                assert!(matches!(
                    l,
                    Some(Replay::Cudnn {
                        beta: Some(1.0),
                        ..
                    })
                ));
            }
            Event::Cudnn { api, .. } if api == "cudnnSoftmaxForward" => {
                assert!(matches!(
                    l,
                    Some(Replay::Cudnn {
                        softmax: Some((1, 1)),
                        ..
                    })
                ));
            }
            _ => {}
        }
    }
    assert!(
        kernels > 10 && convs == 2 * 4,
        "{kernels} kernels, {convs} convolutions"
    );
}

/// The executor plans from an iteration recorded while the passive policy runs under the budget:
/// the model must be the same as without a budget (evictions and restores are Marmoset's, not
/// the program's; their time is taken out of the calls they delayed).
#[test]
fn a_trace_recorded_under_the_passive_policy_gives_the_same_model() {
    let args = ["2", "64", "128", "6"];
    let free = timed_trace("shape", "trainer", &args);
    let allocated: u64 = free
        .iter()
        .filter_map(|r| match r.event {
            Event::Alloc { size, .. } => Some(size),
            _ => None,
        })
        .sum();
    let limit = (allocated / 2).to_string();
    let (o, records) = run_shim(
        &[
            ("MARMOSET_TRACE_TIMING", "1"),
            ("SIMGPU_MODE", "shape"),
            ("MARMOSET_POLICY", "lru"),
            ("MARMOSET_MEMORY_LIMIT", &limit),
        ],
        "trainer",
        &args,
    );
    ok(&o);
    let text: String = records.iter().map(|r| format!("{r}\n")).collect();
    let squeezed = planner::trace::read(&text).unwrap();
    assert!(
        squeezed
            .iter()
            .any(|r| matches!(r.event, Event::Restore { .. })),
        "the budget made it evict and restore"
    );
    let (a, b) = (
        planner::shimtrace::convert(&free).unwrap(),
        planner::shimtrace::convert(&squeezed).unwrap(),
    );
    assert_eq!(a.trace.peak(), b.trace.peak());
    assert_eq!(a.trace.ops.len(), b.trace.ops.len());
    let (ta, tb) = (a.trace.compute_time(), b.trace.compute_time());
    assert!((tb / ta - 1.0).abs() < 0.05, "{ta} s vs {tb} s (simulated)");
}
