//! Dropout as ATen runs it (`torchlike ... drop`): a kernel named and laid out as
//! `fused_dropout_kernel_vec<float, float, unsigned int, 1, 4, bool>`, whose three
//! `TensorInfo` parameters hold stale bytes in their unused sizes and strides, among them the
//! next convolution's bias address, as torch's stack leaves them. The shim reads the signature:
//! each `TensorInfo` has one pointer, so the input is read and the output and mask may be
//! written, and the stale bias address is no touch (the conservative rule made it one: a new
//! version of the bias at every dropout, in PyTorch's BERT). Its output and mask are written
//! whole, and dropout is replayed with the parameter buffer its launch had in the iteration
//! under way (the generator state torch advances at every launch: the same mask drawn again;
//! `runtime::recompute::Recipe::refresh`). Data mode, under `recompute` and `auto` with
//! `MARMOSET_VERIFY=1`: the results stay bit for bit those of an unlimited run, and a wrong
//! dropout replay is caught.

use marmoset_e2e::*;
use serde_json::Value;
use std::collections::HashMap;

/// Eight iterations (guidance starts at the fifth or later; see guided.rs), 2 MiB activations,
/// 1x1 convolutions, 4 blocks, ReLU, each followed by dropout.
const ARGS: [&str; 10] = [
    "8", "128", "32", "4", "4", "1", "relu", "legacy", "none", "drop",
];
const DROPOUT: &str = "fused_dropout_kernel_vec<float, float, unsigned int, 1, 4, bool>";
/// Where torchlike leaves the stale bias address: the input TensorInfo's sizes[2..3].
const STALE: usize = 16;

/// A launch's touches and its recorded parameter buffer.
type Launch = (Vec<Value>, Vec<u8>);

/// Each dropout launch, and every allocation as (address, size, id).
fn dropout_launches(records: &[Value]) -> (Vec<Launch>, Vec<(u64, u64, u64)>) {
    let mut sorted: Vec<&Value> = records.iter().collect();
    sorted.sort_by_key(|r| r["seq"].as_u64());
    let funcs: Vec<u64> = of_kind(records, "kernel")
        .iter()
        .filter(|k| k["name"].as_str().is_some_and(|n| n.contains(DROPOUT)))
        .filter_map(|k| k["func"].as_u64())
        .collect();
    assert_eq!(funcs.len(), 1, "the dropout kernel is named in the trace");
    let (mut lineage, mut out, mut allocs) = (HashMap::new(), Vec::new(), Vec::new());
    for r in sorted {
        match r["kind"].as_str() {
            Some("alloc") if r["alloc"].as_u64().is_some_and(|a| a > 0) => allocs.push((
                r["ptr"].as_u64().unwrap(),
                r["size"].as_u64().unwrap(),
                r["alloc"].as_u64().unwrap(),
            )),
            // A lineage record describes the next call record of its thread.
            Some("lineage") => {
                lineage.insert(r["tid"].as_u64(), r["replay"]["params"].clone());
            }
            Some("launch") if funcs.contains(&r["func"].as_u64().unwrap()) => {
                let hex = lineage[&r["tid"].as_u64()].as_str().unwrap().to_string();
                let params = (0..hex.len())
                    .step_by(2)
                    .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
                    .collect();
                out.push((r["touches"].as_array().unwrap().clone(), params));
            }
            _ => {}
        }
    }
    (out, allocs)
}

/// Every dropout launch touches its input (read, 2 MiB), output and mask, and nothing else:
/// not the allocation whose address sits in the input's stale sizes.
fn touches_its_three_tensors_only(at: &str, records: &[Value]) {
    let (launches, allocs) = dropout_launches(records);
    assert!(!launches.is_empty(), "{at}: dropout launched");
    for (touches, params) in &launches {
        assert_eq!(
            params.len(),
            680,
            "{at}: three TensorInfos, n, p, a PhiloxCudaState"
        );
        let accesses: Vec<(&str, u64)> = touches
            .iter()
            .map(|t| (t["access"].as_str().unwrap(), t["bytes"].as_u64().unwrap()))
            .collect();
        // The output (2 MiB of floats) and the mask (0.5 MiB of bools) written whole.
        assert_eq!(
            accesses,
            [("r", 2 << 20), ("w", 2 << 20), ("w", 1 << 19)],
            "{at}: {touches:?}"
        );
        let stale = u64::from_le_bytes(params[STALE..STALE + 8].try_into().unwrap());
        let bias = allocs
            .iter()
            .rev()
            .find(|&&(ptr, size, _)| (ptr..ptr + size).contains(&stale))
            .map(|a| a.2)
            .unwrap_or_else(|| panic!("{at}: the stale word {stale:#x} is an allocation's"));
        assert!(
            touches.iter().all(|t| t["alloc"].as_u64() != Some(bias)),
            "{at}: the stale bias address is no touch: {touches:?}"
        );
    }
}

#[test]
fn dropout_reads_its_input_touches_no_stale_address_and_runs_bit_for_bit() {
    let plain = unlimited("torchlike", &ARGS);
    for policy in ["recompute", "auto"] {
        for fraction in [0.5, 0.3] {
            let (at, records) = verified_exact("torchlike", &ARGS, policy, fraction, &plain);
            touches_its_three_tensors_only(&at, &records);
            if policy == "recompute" {
                assert!(
                    dropout_replays(&records) > 0,
                    "{at}: dropout's outputs recomputed by its kernel: {:?}",
                    of_kind(&records, "plan")
                );
            }
        }
    }
}

fn dropout_replays(records: &[Value]) -> usize {
    of_kind(records, "recompute")
        .iter()
        .filter(|r| {
            r["api"]
                .as_str()
                .is_some_and(|a| a.contains("fused_dropout"))
        })
        .count()
}

#[test]
fn a_wrong_dropout_replay_is_caught_by_verify_and_visible_without_it() {
    let (peak, plain) = unlimited("torchlike", &ARGS);
    let budget = peak / 2;
    // The first recomputation (a dropout's) halves its first word that is no pointer: the
    // element count, half the output left as it was.
    let (o, records, _) = planned(
        "recompute",
        budget,
        &[
            ("MARMOSET_TEST_CORRUPT_REPLAY", "1"),
            ("MARMOSET_VERIFY", "1"),
        ],
        "torchlike",
        &ARGS,
    );
    ok(&o);
    assert!(dropout_replays(&records) > 0);
    let err = stderr(&o);
    assert!(
        err.contains("MARMOSET_VERIFY: replaying cudaLaunchKernel (at::native::(anonymous namespace)::fused_dropout_kernel_vec"),
        "the log names the kernel: {err}"
    );
    assert_eq!(stdout(&o), plain, "its saved bytes were put back");
}

/// `drop-res`: dropout on each block's second convolution's output, added out of place to the
/// skip and freed at once (BERT's `dropout(dense(h)) + h`): only the mask lives on. Rebuilding
/// a mask replays the convolution and the dropout as one chain, and the dropout writes its
/// output too, whose allocation the program has freed by then: the replay writes it into
/// scratch of its own (`Recipe::for_target`) and the planner counts that scratch. Before, the
/// replay found the output not live and the mask's contents were lost (PyTorch's BERT at 0.3 of
/// its peak, 30 masks in one iteration).
/// Eight channels: 4 MiB activations and 1 MiB masks (smaller tensors are pooled, never
/// moved); convolutions without a bias (`nobias`: the dropout reads the convolution's output
/// directly, and the two are one chain). Before the fix, each of the four runs lost 12 to 24
/// masks and ended with another checksum.
const RES_ARGS: [&str; 10] = [
    "8", "128", "32", "8", "4", "1", "relu", "nobias", "none", "drop-res",
];

#[test]
fn a_mask_is_rebuilt_after_its_dropout_output_was_freed_bit_for_bit() {
    let plain = unlimited("torchlike", &RES_ARGS);
    let mut masks = 0;
    for policy in ["recompute", "auto"] {
        for fraction in [0.5, 0.3] {
            let (_, records) = verified_exact("torchlike", &RES_ARGS, policy, fraction, &plain);
            // A mask: 1 MiB of bools; its output (4 MiB) freed right after the addition.
            let sizes: HashMap<u64, u64> = of_kind(&records, "alloc")
                .iter()
                .filter_map(|r| Some((r["alloc"].as_u64()?, r["size"].as_u64()?)))
                .collect();
            masks += of_kind(&records, "recompute")
                .iter()
                .filter(|r| {
                    r["api"]
                        .as_str()
                        .is_some_and(|a| a.contains("fused_dropout"))
                        && r["alloc"].as_u64().and_then(|a| sizes.get(&a)) == Some(&(1 << 20))
                })
                .count();
        }
    }
    assert!(masks > 0, "a dropout mask was rebuilt by recomputation");
}
