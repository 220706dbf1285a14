//! Training loops that do not repeat one iteration exactly (docs/loops.md): batches of several
//! sizes in turn or drawn at random, an epoch whose last batch is smaller, an evaluation pass
//! every few steps, gradient accumulation, a checkpoint that copies every weight to the host, a
//! backbone unfrozen part-way. Each is the trainer with one of its loop options, in data mode,
//! under the default policy (`auto`) and under `lru` at 0.5 and 0.3 of the peak of its run
//! without Marmoset: its losses, checkpoints and checksum bit for bit those of that run, the
//! simulator's peak within the budget, no trap, no contents lost, and under `auto` a plan that
//! guided part of the run.
//!
//! Sizes: batch 16 of 64 x 64 images, two blocks of 1 x 1 convolutions (TRAINER_KERNEL=1, so
//! that data mode's arithmetic stays small per byte), each activation one 2 MiB page of the
//! allocator; tensors from 64 KiB are evictable. A run takes a few seconds.

use marmoset_e2e::*;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// The trainer's ITERATIONS, BATCH, WIDTH and DEPTH for a loop of `iterations`.
fn args(iterations: &'static str) -> [&'static str; 4] {
    [iterations, "16", "64", "2"]
}

/// Smaller tensors stay in the pool and, at these sizes, would fill much of the budget.
const MIN_TENSOR: (&str, &str) = ("MARMOSET_MIN_TENSOR", "65536");
const KERNEL: (&str, &str) = ("TRAINER_KERNEL", "1");

/// A loop: its name, the trainer's options and its iteration count.
struct Loop {
    name: &'static str,
    env: &'static [(&'static str, &'static str)],
    iterations: &'static str,
}

/// Three batch sizes in turn (a multi-scale loop, as far as the batch goes: the weights of the
/// trainer's classifier are sized by the image).
const CYCLE: Loop = Loop {
    name: "cycle",
    env: &[("TRAINER_SHAPES", "16,8,12")],
    iterations: "12",
};
/// Four batch sizes drawn by a seeded generator (a decoder's random sequence lengths).
const SEEDED: Loop = Loop {
    name: "seeded",
    env: &[
        ("TRAINER_SHAPES", "16,12,8,4"),
        ("TRAINER_SHAPES_SEED", "7"),
    ],
    iterations: "12",
};
/// Epochs of four batches, the last smaller.
const EPOCH: Loop = Loop {
    name: "epoch",
    env: &[("TRAINER_SHAPES", "16,16,16,6")],
    iterations: "12",
};
/// An evaluation pass after every three training iterations.
const EVAL: Loop = Loop {
    name: "eval",
    env: &[("TRAINER_EVAL_EVERY", "3")],
    iterations: "12",
};
/// Gradients accumulated over four iterations, then one update.
const ACCUM: Loop = Loop {
    name: "accum",
    env: &[("TRAINER_ACCUM", "4")],
    iterations: "12",
};
/// Every weight and bias copied to the host after every second update.
const CHECKPOINT: Loop = Loop {
    name: "checkpoint",
    env: &[("TRAINER_CHECKPOINT", "2")],
    iterations: "8",
};
/// The backbone frozen for four iterations, then trained: the calls change once, then repeat.
const UNFREEZE: Loop = Loop {
    name: "unfreeze",
    env: &[("TRAINER_UNFREEZE", "4")],
    iterations: "10",
};

fn env(l: &Loop) -> Vec<(&'static str, &'static str)> {
    let mut e = vec![KERNEL];
    e.extend_from_slice(l.env);
    e
}

/// The loop without Marmoset: its peak and its output, once per loop and test process.
fn plain(l: &Loop) -> (u64, String) {
    static PLAIN: OnceLock<Mutex<HashMap<&'static str, (u64, String)>>> = OnceLock::new();
    let cache = PLAIN.get_or_init(|| Mutex::new(HashMap::new()));
    if let Some(p) = cache.lock().unwrap().get(l.name) {
        return p.clone();
    }
    let r = temp_path(&format!("loops-{}-plain.json", l.name));
    let mut e = env(l);
    e.push(("SIMGPU_REPORT", r.to_str().unwrap()));
    let o = run_sim("h100", &e, "trainer", &args(l.iterations));
    ok(&o);
    let peak = sim_report(&r)["peak_bytes"].as_u64().expect("a peak");
    std::fs::remove_file(&r).ok();
    let p = (peak, stdout(&o));
    cache.lock().unwrap().insert(l.name, p.clone());
    p
}

/// The loop under `policy` at 0.5 and 0.3 of its peak, held to [`exact_within`] against the run
/// without Marmoset (with MARMOSET_VERIFY under `auto`: every recomputation checked against the
/// bytes it rebuilds); under `auto` the plan guided part of the run, under `lru` nothing was
/// planned. Returns each run's records.
fn under(l: &Loop, policy: &str) -> Vec<Vec<Value>> {
    let (peak, out) = plain(l);
    let mut runs = Vec::new();
    for fraction in [0.5, 0.3] {
        let at = format!("the {} loop under {policy} at {fraction} P", l.name);
        let budget = (peak as f64 * fraction) as u64;
        let mut e = env(l);
        e.push(MIN_TENSOR);
        if policy == "auto" {
            e.push(("MARMOSET_VERIFY", "1"));
        }
        let (o, records, report) = planned(policy, budget, &e, "trainer", &args(l.iterations));
        exact_within(&at, &o, &out, &report, budget);
        let err = stderr(&o);
        if policy == "lru" {
            assert!(
                of_kind(&records, "plan").is_empty(),
                "{at}: lru plans nothing"
            );
            assert!(!of_kind(&records, "evict").is_empty(), "{at}: lru evicts");
        } else {
            assert!(
                err.contains("the plan guides from this iteration"),
                "{at}: no plan guided: {err}"
            );
        }
        runs.push(records);
    }
    runs
}

/// The lines of `out` that contain `has`.
fn lines<'a>(out: &'a str, has: &str) -> Vec<&'a str> {
    out.lines().filter(|l| l.contains(has)).collect()
}

/// Plans made and plans reused from the kinds' cache, over a run's records.
fn plans_made_reused(records: &[Value]) -> (usize, usize) {
    let p = of_kind(records, "plan");
    let reused = p.iter().filter(|p| p["reused"] == true).count();
    (p.len() - reused, reused)
}

#[test]
fn batches_of_three_sizes_in_turn_under_auto() {
    let (_, out) = plain(&CYCLE);
    let batches: Vec<&str> = lines(&out, " batch ")
        .iter()
        .map(|l| l.split_whitespace().nth(3).unwrap())
        .collect();
    assert_eq!(batches[..4], ["16", "8", "12", "16"], "{out}");
    under(&CYCLE, "auto");
}

#[test]
fn batches_of_three_sizes_in_turn_under_lru() {
    under(&CYCLE, "lru");
}

#[test]
fn batches_of_four_sizes_drawn_at_random_under_auto() {
    let (_, out) = plain(&SEEDED);
    let batches: Vec<&str> = lines(&out, " batch ")
        .iter()
        .map(|l| l.split_whitespace().nth(3).unwrap())
        .collect();
    // Drawn, not in turn: some size follows itself, and every size comes.
    assert!(batches.windows(2).any(|w| w[0] == w[1]), "{out}");
    for b in ["16", "12", "8", "4"] {
        assert!(batches.contains(&b), "{b}: {out}");
    }
    under(&SEEDED, "auto");
}

#[test]
fn batches_of_four_sizes_drawn_at_random_under_lru() {
    under(&SEEDED, "lru");
}

#[test]
fn an_epoch_whose_last_batch_is_smaller_under_auto() {
    let (_, out) = plain(&EPOCH);
    assert_eq!(lines(&out, " batch 6 ").len(), 3, "{out}");
    // The epoch's three full batches are one kind, planned once and then reused after each
    // smaller batch.
    for records in under(&EPOCH, "auto") {
        let (made, reused) = plans_made_reused(&records);
        assert!(made >= 1 && reused >= 1, "{made} made, {reused} reused");
    }
}

#[test]
fn an_epoch_whose_last_batch_is_smaller_under_lru() {
    under(&EPOCH, "lru");
}

#[test]
fn an_evaluation_pass_every_three_steps_under_auto() {
    let (_, out) = plain(&EVAL);
    assert_eq!(lines(&out, "eval loss").len(), 3, "{out}");
    for records in under(&EVAL, "auto") {
        let (made, reused) = plans_made_reused(&records);
        assert!(made >= 1 && reused >= 1, "{made} made, {reused} reused");
    }
}

#[test]
fn an_evaluation_pass_every_three_steps_under_lru() {
    under(&EVAL, "lru");
}

#[test]
fn four_steps_of_gradient_accumulation_under_auto() {
    let (_, out) = plain(&ACCUM);
    // The weights change only at each fourth iteration: the losses come in fours.
    let losses: Vec<&str> = lines(&out, " loss ")
        .iter()
        .map(|l| l.split_whitespace().last().unwrap())
        .collect();
    assert_eq!(losses.len(), 12, "{out}");
    for four in losses.chunks(4) {
        assert!(four.iter().all(|l| *l == four[0]), "{out}");
    }
    assert_ne!(losses[0], losses[4], "{out}");
    under(&ACCUM, "auto");
}

#[test]
fn four_steps_of_gradient_accumulation_under_lru() {
    under(&ACCUM, "lru");
}

#[test]
fn a_checkpoint_every_two_updates_under_auto() {
    let (_, out) = plain(&CHECKPOINT);
    let ckpt = lines(&out, "checkpoint ");
    assert_eq!(ckpt.len(), 4, "{out}");
    // The last checkpoint is the final weights.
    let last = ckpt[3].split_whitespace().last().unwrap();
    assert!(out.contains(&format!("checksum {last}")), "{out}");
    under(&CHECKPOINT, "auto");
}

#[test]
fn a_checkpoint_every_two_updates_under_lru() {
    under(&CHECKPOINT, "lru");
}

/// The plan of the frozen iterations drops the backbone's activations after their last read
/// there (the next forward pass overwrites them); the first unfrozen iteration's backward pass
/// reads them before the tracker sees the program leave the plan. Those drops are guarded
/// (`virt::online::dead`): each is rebuilt from the calls that made it when read, and
/// MARMOSET_VERIFY checks every rebuild against the bytes dropped.
#[test]
fn a_backbone_unfrozen_after_four_steps_under_auto() {
    under(&UNFREEZE, "auto");
}

#[test]
fn a_backbone_unfrozen_after_four_steps_under_lru() {
    let (_, out) = plain(&UNFREEZE);
    assert_eq!(lines(&out, " loss ").len(), 10, "{out}");
    under(&UNFREEZE, "lru");
}

#[test]
fn a_bad_loop_option_stops_the_trainer_with_its_name() {
    for (k, v) in [
        ("TRAINER_SHAPES", "16,0"),
        ("TRAINER_SHAPES", "17"),
        ("TRAINER_ACCUM", "0"),
        ("TRAINER_EVAL_EVERY", "x"),
        ("TRAINER_KERNEL", "2"),
    ] {
        let o = run_sim("h100", &[(k, v)], "trainer", &["1", "16", "16", "0"]);
        assert_eq!(o.status.code(), Some(2), "{k}={v}: {}", stderr(&o));
        assert!(stderr(&o).contains(k), "{k}={v}: {}", stderr(&o));
    }
}
