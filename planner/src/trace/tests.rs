//! The trace's records on the wire, its reading (cuts included), and the files of one run.

use super::*;
use std::path::{Path, PathBuf};

#[test]
fn round_trip_and_shape_of_a_line() {
    let r = Record {
        seq: 7,
        t_ns: 1000,
        tid: 42,
        event: Event::Copy {
            api: "cudaMemcpyAsync".into(),
            dst: 0x5000_0000_0000,
            src: 4096,
            size: 64,
            dir: CopyDir::H2d,
            stream: Some(16),
            touches: vec![Touch {
                alloc: 3,
                offset: 0,
                bytes: 64,
                access: Access::W,
            }],
            result: 0,
        },
    };
    let line = serde_json::to_string(&r).unwrap();
    assert!(
        line.contains(r#""kind":"copy""#) && line.contains(r#""dir":"h2d""#),
        "{line}"
    );
    assert!(line.contains(r#""access":"w""#), "{line}");
    assert_eq!(read(&line).unwrap(), vec![r]);
}

/// A backend execution's lineage and unique ids round-trip; a line written before they
/// existed still parses, with no unique id.
#[test]
fn backend_lineage_and_unique_ids() {
    let line = r#"{"seq":3,"t_ns":0,"tid":1,"kind":"lineage","replay":{"call":"backend","plan":4096,"life":2}}"#;
    let r = read(line).unwrap();
    assert_eq!(
        r[0].event,
        Event::Lineage {
            replay: Replay::Backend {
                plan: 4096,
                life: 2
            }
        }
    );
    let old = r#"{"role":"x","ptr":64,"dims":[1,2],"strides":[2,1],"access":"r"}"#;
    let t: TensorArg = serde_json::from_str(old).unwrap();
    assert_eq!(t.uid, None);
    let new = TensorArg {
        uid: Some(120),
        ..t.clone()
    };
    let line = serde_json::to_string(&new).unwrap();
    assert!(line.contains(r#""uid":120"#), "{line}");
    assert!(!serde_json::to_string(&t).unwrap().contains("uid"));
    assert_eq!(serde_json::from_str::<TensorArg>(&line).unwrap(), new);
}

#[test]
fn lineage_round_trips() {
    let r = Record {
        seq: 9,
        t_ns: 0,
        tid: 1,
        event: Event::Lineage {
            replay: Replay::Cudnn {
                alpha: Some(1.0),
                beta: Some(0.0),
                dtype: Some(0),
                conv: Some(ConvParams {
                    pads: vec![1, 1],
                    strides: vec![1, 1],
                    dilations: vec![1, 1],
                    mode: 1,
                    compute: 0,
                    groups: 1,
                    math: 0,
                }),
                activation: None,
                softmax: None,
                batchnorm: Some(BatchNormParams {
                    mode: 1,
                    ops: 0,
                    epsilon: 1e-5,
                }),
            },
        },
    };
    let line = serde_json::to_string(&r).unwrap();
    assert!(
        // The field names; the value's spelling is serde_json's (the round trip checks it).
        line.contains(r#""batchnorm":{"mode":1,"ops":0,"epsilon":"#),
        "{line}"
    );
    assert!(
        line.contains(r#""kind":"lineage""#) && line.contains(r#""call":"cudnn""#),
        "{line}"
    );
    assert_eq!(read(&line).unwrap(), vec![r]);
    let k = r#"{"seq":3,"t_ns":0,"tid":1,"kind":"lineage","replay":{"call":"kernel","params":"0a00","shared":0}}"#;
    assert!(matches!(
        read(k).unwrap()[0].event,
        Event::Lineage {
            replay: Replay::Kernel { .. },
            ..
        }
    ));
}

#[test]
fn cublas_lineage_round_trips() {
    let gemm = Replay::Gemm {
        trans: [0, 1],
        types: [0, 0, 0],
        compute: 68,
        algo: -1,
        math: 0,
        alpha: 1.0,
        beta: 0.0,
    };
    let lt = Replay::Lt {
        compute: 68,
        scale: 0,
        trans: [1, 0],
        epilogue: 4,
        bias_type: None,
        layouts: vec![
            LtLayout {
                ty: 0,
                order: 0,
                rows: 768,
                cols: 3072,
                ld: 768,
                batch: 1,
                stride: 0,
            };
            4
        ],
        algo: Some("00ff".into()),
        alpha: 1.0,
        beta: 0.0,
    };
    for (replay, call) in [(gemm, "gemm"), (lt, "lt")] {
        let r = Record {
            seq: 4,
            t_ns: 0,
            tid: 1,
            event: Event::Lineage { replay },
        };
        let line = serde_json::to_string(&r).unwrap();
        assert!(line.contains(&format!(r#""call":"{call}""#)), "{line}");
        assert_eq!(read(&line).unwrap(), vec![r]);
    }
}

#[test]
fn read_names_the_bad_line_and_sorts_by_seq() {
    let a = r#"{"seq":2,"t_ns":0,"tid":1,"kind":"sync","api":"cudaDeviceSynchronize","result":0}"#;
    let b = r#"{"seq":1,"t_ns":0,"tid":1,"kind":"free","api":"cudaFree","ptr":5,"result":0}"#;
    let recs = read(&format!("{a}\n{b}\n")).unwrap();
    assert_eq!(recs.iter().map(|r| r.seq).collect::<Vec<_>>(), [1, 2]);
    let e = read(&format!("{a}\nnot json\n")).unwrap_err();
    assert!(e.starts_with("line 2:"), "{e}");
    let h = r#"{"seq":0,"t_ns":0,"tid":1,"kind":"header","schema":99,"pid":1,"policy":"none","marmoset":"x"}"#;
    assert!(read(h).unwrap_err().contains("schema 99"));
}

#[test]
fn a_trace_cut_mid_record_reads_up_to_its_last_complete_record() {
    let a = r#"{"seq":1,"t_ns":0,"tid":1,"kind":"sync","api":"cudaDeviceSynchronize","result":0}"#;
    let b = r#"{"seq":2,"t_ns":0,"tid":1,"kind":"free","api":"cudaFree","ptr":5,"result":0}"#;
    let cut = format!("{a}\n{b}\n{}", &b[..40]);
    let (recs, note) = read_with_cut(&cut).unwrap();
    assert_eq!(recs.len(), 2);
    let note = note.expect("said to be cut");
    assert!(
        note.contains("line 3") && note.contains("2 complete records"),
        "{note}"
    );
    assert_eq!(read(&cut).unwrap().len(), 2);
    // The line the writer leaves when a write fails.
    let marked = format!(
        "{a}\n{b}\n{}\n",
        r#"{"trace_cut":{"records":2,"error":"No space left on device (os error 28)"}}"#
    );
    let (recs, note) = read_with_cut(&marked).unwrap();
    assert_eq!(recs.len(), 2);
    let note = note.unwrap();
    assert!(
        note.contains("No space left") && note.contains("2 complete"),
        "{note}"
    );
    // Whole, or cut exactly at a record boundary: nothing to say.
    assert_eq!(read_with_cut(&format!("{a}\n{b}")).unwrap().1, None);
    assert_eq!(read_with_cut(&format!("{a}\n")).unwrap().1, None);
    // A bad last line that ends with its newline is not a cut: an error, as in the middle.
    let e = read_with_cut(&format!("{a}\n{}\n", &b[..40])).unwrap_err();
    assert!(e.starts_with("line 2:"), "{e}");
    let e = read_with_cut(&format!("{}\n{b}", &a[..30])).unwrap_err();
    assert!(e.starts_with("line 1:"), "{e}");
}

#[test]
fn any_line_reader_reads_the_cut_mark_the_same_way() {
    let a = r#"{"seq":1,"t_ns":0,"tid":1,"kind":"sync","api":"cudaDeviceSynchronize","result":0}"#;
    let mark = r#"{"trace_cut":{"records":1,"error":"No space left on device (os error 28)"}}"#;
    let as_value =
        |l: &str| serde_json::from_str::<serde_json::Value>(l).map_err(|e| e.to_string());
    // Blank lines after the mark change nothing; typed and untyped readers say the same.
    let text = format!("{a}\n{mark}\n\n");
    let (values, note) = read_lines(&text, as_value).unwrap();
    assert_eq!(values.len(), 1);
    assert_eq!(note, read_with_cut(&text).unwrap().1);
    assert!(note.unwrap().contains("No space left"));
    // A mark anywhere but at the end is not a record.
    let e = read_with_cut(&format!("{mark}\n{a}\n")).unwrap_err();
    assert!(e.starts_with("line 1:"), "{e}");
    // A single line that is not JSON is not a trace cut short: it is not a trace.
    assert!(
        read_with_cut("nonsense")
            .unwrap_err()
            .starts_with("line 1:")
    );
}

#[test]
fn other_processes_of_a_run_trace_beside_its_path() {
    assert_eq!(
        sibling_path(Path::new("d/t.jsonl"), "rank1"),
        Path::new("d/t.rank1.jsonl")
    );
    assert_eq!(sibling_path(Path::new("t"), "42"), Path::new("t.42"));
    assert_eq!(
        sibling_path(Path::new("/x/.trace"), "42-2"),
        Path::new("/x/.trace.42-2")
    );
    assert_eq!(
        sibling_path(Path::new("a.b/t.tar.gz"), "7"),
        Path::new("a.b/t.tar.7.gz")
    );
    let dir = std::env::temp_dir().join(format!("marmoset-siblings-{}", new_run_id()));
    std::fs::create_dir_all(&dir).unwrap();
    let header = |run: &str| {
        format!(
            "{{\"seq\":0,\"t_ns\":0,\"tid\":1,\"kind\":\"header\",\"schema\":1,\"pid\":1,\"policy\":\"none\",\"marmoset\":\"x\",\"run\":\"{run}\"}}\n"
        )
    };
    for (name, text) in [
        ("t.jsonl", header("a")),
        ("t.12.jsonl", header("a")),
        ("t.rank2.jsonl", header("b")),
        ("t.3-2.jsonl", String::new()),
        ("t.backup.jsonl", header("a")),
        ("t.jsonl.1", header("a")),
        ("u.1.jsonl", header("a")),
        ("t.rank.jsonl", header("a")),
    ] {
        std::fs::write(dir.join(name), text).unwrap();
    }
    let base = dir.join("t.jsonl");
    let names = |v: Vec<PathBuf>| -> Vec<String> {
        v.iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect()
    };
    assert_eq!(
        names(sibling_files(&base)),
        ["t.12.jsonl", "t.3-2.jsonl", "t.rank2.jsonl"]
    );
    assert_eq!(names(traces_of_run(&base, "a")), ["t.jsonl", "t.12.jsonl"]);
    assert_eq!(names(traces_of_run(&base, "b")), ["t.rank2.jsonl"]);
    assert_eq!(run_of(&dir), None);
    assert_eq!(run_of(&dir.join("t.3-2.jsonl")), None);
    std::fs::remove_dir_all(&dir).unwrap();
}
