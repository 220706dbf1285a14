//! The online policy (DTR's heuristic in process) on unmodified PyTorch, with no plan: a
//! concatenation it drops (a replay of torch's cat kernel rebuilds it) is rebuilt before the
//! program frees its inputs (tests/torch/concat_free.py), so that reading it later loses
//! nothing. The free is seen before the allocator forgets the allocation: a rebuild needs it.
//! Shape mode, simulated H100; a missing .venv fails the test with the command that makes it.

use marmoset_e2e::*;

#[test]
fn a_dropped_concatenation_is_rebuilt_before_its_inputs_are_freed() {
    let trace = temp_path("torch-online-concat.jsonl");
    let t = trace.to_str().unwrap();
    // Four inputs of 8 MiB, their 32 MiB concatenation, three more of 8 MiB: 96 MiB leaves no
    // room for the last of those beside the rest.
    let (out, report) = torch_example(
        &["--memory-limit", "96M", "--trace", t],
        "../tests/torch/concat_free.py",
        &[],
        "online-concat",
    );
    let err = stderr(&out);
    assert!(stdout(&out).contains("done"), "{}{err}", stdout(&out));
    assert!(!err.contains("lost"), "{err}");
    assert!(report["sticky_error"].is_null(), "{report}");
    let records = take_trace(&trace);
    let size = |a: &serde_json::Value| {
        of_kind(&records, "alloc")
            .into_iter()
            .find(|r| r["alloc"] == *a)
            .and_then(|r| r["size"].as_u64())
    };
    let seq = |r: &serde_json::Value| r["seq"].as_u64().unwrap();
    let mib = 1 << 20;
    let cat = of_kind(&records, "drop")
        .into_iter()
        .find(|d| size(&d["alloc"]) == Some(32 * mib))
        .unwrap_or_else(|| panic!("the concatenation dropped: {err}"));
    let rebuilt = of_kind(&records, "recompute")
        .into_iter()
        .find(|r| r["alloc"] == cat["alloc"])
        .unwrap_or_else(|| panic!("the concatenation rebuilt: {err}"));
    let made = of_kind(&records, "alloc")
        .into_iter()
        .find(|r| r["alloc"] == cat["alloc"])
        .map(seq)
        .unwrap();
    // Its inputs: the 8 MiB allocations made before it, each freed after the rebuild.
    let inputs: Vec<u64> = of_kind(&records, "alloc")
        .into_iter()
        .filter(|r| seq(r) < made && r["size"].as_u64() == Some(8 * mib))
        .map(|r| r["alloc"].as_u64().unwrap())
        .collect();
    assert_eq!(inputs.len(), 4);
    for f in of_kind(&records, "free") {
        if inputs.contains(&f["alloc"].as_u64().unwrap_or(0)) {
            assert!(
                seq(rebuilt) < seq(f),
                "rebuilt at {rebuilt}, an input freed at {f}"
            );
        }
    }
}
