//! `marmoset report` rendered in headless Chromium (Debian's package; scripts/setup-chromium.sh
//! installs it), and `marmoset export --chrome` checked against the trace event format's rules.
//! On real runs on the simulated GPU: the trainer under the lru policy at half its peak, and
//! the trainer guided by the default policy at 0.3 of its peak (the main job's run), whose page
//! is held to the trace and to the program's own event-timed steps.

use marmoset_e2e::*;
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A trace of the trainer under lru within half its peak (shape mode: fast), and the budget.
fn lru_trace(name: &str) -> (PathBuf, u64) {
    let report = temp_path(&format!("{name}-sim.json"));
    let o = run_sim(
        "h100",
        &[
            ("SIMGPU_MODE", "shape"),
            ("SIMGPU_REPORT", report.to_str().unwrap()),
        ],
        "trainer",
        &["1", "16", "64", "8"],
    );
    ok(&o);
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let budget = r["peak_bytes"].as_u64().unwrap() / 2;
    let trace = temp_path(&format!("{name}.jsonl"));
    let o = Command::new(marmoset())
        .args(["run", "--sim=h100", "--policy", "lru", "--memory-limit"])
        .arg(budget.to_string())
        .arg("--trace")
        .arg(&trace)
        .arg("--")
        .arg(workloads().join("trainer"))
        .args(["1", "16", "64", "8"])
        .env("SIMGPU_MODE", "shape")
        .env("MARMOSET_TRACE_TIMING", "1")
        .output()
        .unwrap();
    ok(&o);
    std::fs::remove_file(&report).ok();
    (trace, budget)
}

fn lines(trace: &Path) -> Vec<Value> {
    std::fs::read_to_string(trace)
        .unwrap()
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn chromium() -> &'static str {
    let found = Command::new("chromium").arg("--version").output();
    assert!(
        found.is_ok_and(|o| o.status.success()),
        "chromium is missing: run scripts/setup-chromium.sh (scripts/test.sh does)"
    );
    "chromium"
}

/// The part of `html` from `<svg id="ID"` to its `</svg>`.
fn svg<'a>(html: &'a str, id: &str) -> &'a str {
    let start = html
        .find(&format!("<svg id=\"{id}\""))
        .unwrap_or_else(|| panic!("no svg#{id}"));
    let end = html[start..].find("</svg>").unwrap() + start;
    &html[start..end]
}

fn attr(tag: &str, name: &str) -> f64 {
    let key = format!(" {name}=\"");
    let i = tag
        .find(&key)
        .unwrap_or_else(|| panic!("no {name} in {tag}"))
        + key.len();
    tag[i..i + tag[i..].find('"').unwrap()].parse().unwrap()
}

/// "12.00 MiB" and the like, as the axis labels write them.
fn label_bytes(s: &str) -> Option<f64> {
    let (v, unit) = s.split_once(' ')?;
    let k = match unit {
        "B" => 1.0,
        "KiB" => 1024.0,
        "MiB" => 1024.0 * 1024.0,
        "GiB" => 1024.0 * 1024.0 * 1024.0,
        _ => return None,
    };
    Some(v.parse::<f64>().ok()? * k)
}

#[test]
fn the_report_renders_in_chromium_with_both_charts_and_the_budget() {
    let browser = chromium();
    let (trace, budget) = lru_trace("report");
    let recs = lines(&trace);
    assert!(
        !of_kind(&recs, "evict").is_empty(),
        "the run moved tensors out"
    );
    let allocs = recs
        .iter()
        .filter(|r| r["kind"] == "alloc" && r["result"] == 0 && r["alloc"] != 0)
        .count();
    let html = temp_path("report.html");
    let o = Command::new(marmoset())
        .args(["report", "--simulated", "--budget"])
        .arg(budget.to_string())
        .arg(&trace)
        .arg("-o")
        .arg(&html)
        .output()
        .unwrap();
    ok(&o);
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(
        !page.contains("http://") && !page.contains("https://") && !page.contains(" src="),
        "self-contained: nothing fetched"
    );
    let profile = temp_path("chromium-profile");
    let o = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("--dump-dom")
        .arg(format!("file://{}", html.display()))
        .output()
        .expect("run chromium");
    ok(&o);
    let dom = stdout(&o);
    let log = stderr(&o);
    assert!(!log.contains("Uncaught"), "script errors:\n{log}");
    assert!(
        !dom.contains("data-errors="),
        "script errors counted in the page"
    );
    assert!(
        dom.contains(r#"data-rendered="ok""#),
        "the page's script ran to its end"
    );
    // The memory chart: two series (allocated, on the device), the legend the script built.
    let mem = svg(&dom, "memory");
    assert_eq!(mem.matches(r#"<g class="series""#).count(), 2, "{mem}");
    let legend_start = dom.find(r#"id="memory-legend""#).unwrap();
    let legend = &dom[legend_start..legend_start + dom[legend_start..].find("</div>").unwrap()];
    for item in ["allocated", "on the device", "budget", "evict", "prefetch"] {
        assert!(legend.contains(item), "legend lacks {item}: {legend}");
    }
    // The budget line: its value, and its height on the chart's own axis (from two tick labels).
    let b = mem.find(r#"id="memory-budget""#).expect("a budget line");
    let line = &mem[mem[..b].rfind('<').unwrap()..b + mem[b..].find('>').unwrap()];
    assert_eq!(attr(line, "data-bytes"), budget as f64);
    let mut ticks: Vec<(f64, f64)> = Vec::new();
    for t in mem.split("<text ").skip(1) {
        let (tag, rest) = t.split_once('>').unwrap();
        let text = &rest[..rest.find('<').unwrap()];
        if tag.contains(r#"text-anchor="end""#)
            && let Some(v) = label_bytes(text)
        {
            ticks.push((v, attr(tag, "y") - 4.0));
        }
    }
    assert!(ticks.len() >= 2, "{ticks:?}");
    let (v0, y0) = ticks[0];
    let (v1, y1) = ticks[ticks.len() - 1];
    let expected_y = y0 + (budget as f64 - v0) * (y1 - y0) / (v1 - v0);
    let y = attr(line, "y1");
    assert!(
        (y - expected_y).abs() < 0.6,
        "budget line at y {y}, its value is at y {expected_y}"
    );
    // The residency chart: one row per allocation, at most 16.
    let res = svg(&dom, "residency");
    assert_eq!(
        res.matches(r#"<g class="tensor""#).count(),
        allocs.min(16),
        "{allocs} allocations"
    );
    for state in ["resident", "moving-out", "on-host"] {
        assert!(
            res.contains(&format!("state {state}")),
            "no {state} interval"
        );
    }
    assert!(dom.contains(r#"id="decisions""#));
    assert!(dom.contains("simulated"));
    std::fs::remove_file(&trace).ok();
    std::fs::remove_file(&html).ok();
    std::fs::remove_dir_all(&profile).ok();
}

/// Renders `html` in headless Chromium; the DOM after its script ran, checked for script errors.
fn rendered(html: &Path) -> String {
    let profile = temp_path("chromium-profile-guided");
    let o = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("--dump-dom")
        .arg(format!("file://{}", html.display()))
        .output()
        .expect("run chromium");
    ok(&o);
    std::fs::remove_dir_all(&profile).ok();
    let log = stderr(&o);
    assert!(!log.contains("Uncaught"), "script errors:\n{log}");
    let dom = stdout(&o);
    assert!(!dom.contains("data-errors="), "script errors counted");
    assert!(
        dom.contains(r#"data-rendered="ok""#),
        "the script ran to its end"
    );
    dom
}

/// The opening tags in `html` that contain `needle`, in order.
fn tags<'a>(html: &'a str, needle: &str) -> Vec<&'a str> {
    html.match_indices(needle)
        .map(|(i, _)| {
            let start = html[..i].rfind('<').unwrap();
            &html[start..i + html[i..].find('>').unwrap()]
        })
        .collect()
}

/// The summary row `key`: its cells' `attr` values (whole run, then the last step).
fn summary(dom: &str, key: &str, attr_name: &str) -> Vec<f64> {
    let start = dom
        .find(&format!(r#"<tr data-key="{key}">"#))
        .unwrap_or_else(|| panic!("no summary row {key}"));
    let row = &dom[start..start + dom[start..].find("</tr>").unwrap()];
    tags(row, &format!(" {attr_name}=\""))
        .iter()
        .map(|t| attr(t, attr_name))
        .collect()
}

#[test]
fn a_guided_run_reads_like_the_run() {
    // The main job's run: the trainer at 256 x 256 with 6 blocks (15.6 GiB), 6 iterations, shape
    // mode, guided by the default policy at 0.3 of its peak (under --sim the program waits for
    // the plan); it times its own iterations with events (TRAINER_TIMES).
    let args = ["6", "256", "256", "6"];
    let (peak, _) = {
        let r = temp_path("guided-base.json");
        let o = run_sim(
            "h100",
            &[
                ("SIMGPU_MODE", "shape"),
                ("SIMGPU_REPORT", r.to_str().unwrap()),
            ],
            "trainer",
            &args,
        );
        ok(&o);
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&r).unwrap()).unwrap();
        std::fs::remove_file(&r).ok();
        (v["peak_bytes"].as_u64().unwrap(), ())
    };
    let budget = peak * 3 / 10;
    let trace = temp_path("guided.jsonl");
    let sim = temp_path("guided-sim.json");
    let mut c = Command::new(marmoset());
    c.args(["run", "--sim=h100", "--memory-limit"])
        .arg(budget.to_string())
        .arg("--trace")
        .arg(&trace)
        .arg("--")
        .arg(workloads().join("trainer"))
        .args(args);
    for (k, _) in std::env::vars() {
        if k.starts_with("MARMOSET_") || k.starts_with("SIMGPU_") {
            c.env_remove(k);
        }
    }
    let o = c
        .env("SIMGPU_MODE", "shape")
        .env("SIMGPU_REPORT", &sim)
        .env("TRAINER_TIMES", "1")
        .env("MARMOSET_TRACE_TIMING", "1")
        // The device clock is rebuilt from the records; a rebuild by the online policy in a
        // passive step is not timed on its own, and put the first step 3.8% off the program's
        // events (366.3 against 352.9 ms): the passive steps here are least recently used.
        .env("MARMOSET_ONLINE", "0")
        // One plan, as made, for the report to read (the memory feedback's replans are tested
        // in guided.rs).
        .env("MARMOSET_MEMORY_FEEDBACK", "0")
        .output()
        .unwrap();
    ok(&o);
    let err = stderr(&o);
    let program: Vec<f64> = err
        .lines()
        .find_map(|l| l.split_once("iteration times (ms, device clock):"))
        .unwrap_or_else(|| panic!("no iteration times:\n{err}"))
        .1
        .split_whitespace()
        .map(|v| v.parse().unwrap())
        .collect();
    assert_eq!(program.len(), 6);
    let sim_peak = {
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&sim).unwrap()).unwrap();
        std::fs::remove_file(&sim).ok();
        v["peak_bytes"].as_u64().unwrap()
    };
    let recs = lines(&trace);
    let plans = of_kind(&recs, "plan");
    assert_eq!(plans.len(), 1, "one plan");
    let plan = plans[0];
    // The plan recomputes (with the trainer's convolutions and their in-place bias replayable
    // as one chain, it needs no swap at this budget; the passive steps evict).
    assert!(plan["recomputes"].as_u64().unwrap() > 0);
    let predicted = plan["predicted_ms"].as_f64().unwrap();
    let sum = |kind: &str| -> f64 {
        of_kind(&recs, kind)
            .iter()
            .map(|r| r["bytes"].as_u64().unwrap() as f64)
            .sum()
    };
    // The program's peak, from its allocations and frees.
    let (mut live, mut most, mut sizes) = (0u64, 0u64, HashMap::new());
    for r in &recs {
        if r["kind"] == "alloc" && r["result"] == 0 && r["alloc"] != 0 {
            sizes.insert(r["alloc"].as_u64().unwrap(), r["size"].as_u64().unwrap());
            live += r["size"].as_u64().unwrap();
            most = most.max(live);
        } else if r["kind"] == "free"
            && let Some(s) = r["alloc"].as_u64().and_then(|a| sizes.remove(&a))
        {
            live -= s;
        }
    }

    // No --budget: the page takes it from the plan record.
    let html = temp_path("guided.html");
    let o = Command::new(marmoset())
        .args(["report", "--simulated"])
        .arg(&trace)
        .arg("-o")
        .arg(&html)
        .output()
        .unwrap();
    ok(&o);
    let dom = rendered(&html);

    // The summary, against the trace.
    assert_eq!(summary(&dom, "to-host", "data-bytes")[0], sum("evict"));
    assert_eq!(summary(&dom, "to-device", "data-bytes")[0], sum("restore"));
    let recomputed = summary(&dom, "recompute", "data-count");
    assert_eq!(recomputed[0], of_kind(&recs, "recompute").len() as f64);
    assert_eq!(
        recomputed[1],
        plan["recomputes"].as_f64().unwrap(),
        "the plan's recomputations, each step"
    );
    let mem = tags(&dom, r#"id="memory-summary""#)[0];
    assert_eq!(attr(mem, "data-peak"), most as f64);
    assert_eq!(attr(mem, "data-budget"), plan["budget"].as_f64().unwrap());
    let on_device = attr(mem, "data-peak-on-device");
    assert!(
        on_device <= plan["budget"].as_f64().unwrap() && on_device <= sim_peak as f64,
        "on the device at most {on_device}: the budget {} and the simulator's peak {sim_peak}",
        plan["budget"]
    );
    assert!(
        on_device < most as f64 * 0.35,
        "memory saved: {on_device} of {most}"
    );
    // The last step: its time is its compute, its recomputations and its stalls; the slowdown
    // their ratio; the prediction the plan's.
    let time = summary(&dom, "time", "data-ms");
    let compute = summary(&dom, "compute", "data-ms");
    let rec_ms = summary(&dom, "recompute", "data-ms");
    let stalls: f64 = ["copy-in", "copy-out", "sync"]
        .iter()
        .map(|c| summary(&dom, &format!("stall-{c}"), "data-ms")[1])
        .sum();
    assert!(
        (time[1] - (compute[1] + rec_ms[1] + stalls)).abs() < 1e-3,
        "{} = {} + {} + {stalls}",
        time[1],
        compute[1],
        rec_ms[1]
    );
    let slowdown = summary(&dom, "slowdown", "data-x");
    assert!((slowdown[1] - time[1] / compute[1]).abs() < 1e-9);
    assert!((summary(&dom, "predicted", "data-ms")[0] - predicted).abs() < 1e-9);

    // One mark per step, each the program's iteration: passive, then guided with the plan's
    // prediction; on the rebuilt device clock within 1% of the program's own event-timed steps,
    // the step where guidance starts (from the passive mechanism's placement) included.
    let steps = tags(&dom, r#"<g class="step "#);
    assert_eq!(steps.len(), program.len(), "{steps:?}");
    let modes: Vec<&str> = steps
        .iter()
        .map(|t| {
            let i = t.find("data-mode=\"").unwrap() + 11;
            &t[i..i + t[i..].find('"').unwrap()]
        })
        .collect();
    let first_guided = modes
        .iter()
        .position(|m| *m == "guided")
        .expect("guided steps");
    assert!(first_guided >= 1 && modes[..first_guided].iter().all(|m| *m == "passive"));
    assert!(
        modes[first_guided..].iter().all(|m| *m == "guided"),
        "{modes:?}"
    );
    assert!(program.len() - first_guided >= 2, "{modes:?}");
    for (i, (t, want)) in steps.iter().zip(&program).enumerate() {
        let got = attr(t, "data-measured-ms");
        assert!(
            (got / want - 1.0).abs() < 0.01,
            "step {}: {got} ms rebuilt, {want} ms by the program's events",
            i + 1
        );
        if i >= first_guided {
            assert!(
                (attr(t, "data-predicted-ms") - predicted).abs() < 1e-6,
                "{t}"
            );
        } else {
            assert!(
                !t.contains("data-predicted-ms"),
                "a passive step has no prediction"
            );
        }
    }
    assert!((time[1] - attr(steps[steps.len() - 1], "data-measured-ms")).abs() < 1e-5);
    assert!(
        (time[1] / predicted - 1.0).abs() < 0.02,
        "{} against {predicted}",
        time[1]
    );
    let chart = svg(&dom, "steps");
    assert_eq!(
        chart.matches(r#"class="predicted""#).count(),
        program.len() - first_guided
    );
    assert!(chart.contains(r#"class="baseline""#), "compute alone");

    // The clock is the device's, simulated, and the charts carry the budget.
    assert!(svg(&dom, "memory").contains("device time (ms, simulated"));
    for id in ["memory", "memory-step"] {
        assert!(
            svg(&dom, id).contains(&format!(r#"data-bytes="{}""#, plan["budget"])),
            "{id}: the budget line"
        );
    }

    // Tensors by what made them: the call, shape, type and size, never an id.
    let res = svg(&dom, "residency");
    let names: Vec<&str> = res
        .split(r#"<text class="name""#)
        .skip(1)
        .map(|t| {
            let t = &t[t.find("<title>").unwrap() + 7..];
            &t[..t.find("</title>").unwrap()]
        })
        .collect();
    assert_eq!(names.len(), 16);
    for n in &names {
        assert!(n.starts_with("cudnn") || n.starts_with("cudaMemcpy"), "{n}");
        assert!(
            n.contains(" f32, ") && n.contains("[256,") && n.ends_with("MiB"),
            "{n}"
        );
    }
    let table = &dom[dom.find(r#"id="decisions""#).unwrap()..];
    let table = &table[..table.find("</table>").unwrap()];
    for row in table.split("<tr>").skip(2).take(50) {
        let tensor = row.split("<td>").nth(3).unwrap();
        assert!(
            tensor.starts_with("cudnn") || tensor.starts_with("cudaMemcpy"),
            "{row}"
        );
    }
    std::fs::remove_file(&trace).ok();
    std::fs::remove_file(&html).ok();
}

#[test]
fn without_recorded_decisions_the_report_shows_the_plan() {
    // The trainer without a policy, timed, two iterations (the planner models one steady
    // iteration of a repeating program): the report plans it (simulated).
    let none = temp_path("none.jsonl");
    let o = Command::new(marmoset())
        .args(["run", "--sim=h100", "--trace"])
        .arg(&none)
        .arg("--")
        .arg(workloads().join("trainer"))
        .args(["2", "16", "64", "8"])
        .env("SIMGPU_MODE", "shape")
        .env("MARMOSET_TRACE_TIMING", "1")
        .output()
        .unwrap();
    ok(&o);
    let html = temp_path("plan.html");
    let o = Command::new(marmoset())
        .args(["report", "--budget", "0.5", "--policy", "capuchin"])
        .arg(&none)
        .arg("-o")
        .arg(&html)
        .output()
        .unwrap();
    ok(&o);
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(
        page.contains("marmoset plan --policy capuchin"),
        "plan shown"
    );
    let table = &page[page.find(r#"id="decisions""#).unwrap()..];
    let table = &table[..table.find("</table>").unwrap()];
    assert!(table.matches("<tr>").count() > 1, "the plan has decisions");
    assert!(svg(&page, "residency").contains("operation (program order)"));
    // A fraction that is not one is refused, naming the flag.
    let o = Command::new(marmoset())
        .args(["report", "--budget", "lots"])
        .arg(&none)
        .arg("-o")
        .arg(&html)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--budget"), "{}", stderr(&o));
    for p in [&none, &html] {
        std::fs::remove_file(p).ok();
    }
}

#[test]
fn the_chrome_export_follows_the_trace_event_format() {
    let (trace, _) = lru_trace("export");
    let recs = lines(&trace);
    let out = temp_path("trace.json");
    let o = Command::new(marmoset())
        .args(["export", "--chrome"])
        .arg(&trace)
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap();
    ok(&o);
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let events = v["traceEvents"].as_array().expect("traceEvents");
    let mut names: HashMap<u64, String> = HashMap::new();
    let mut last_ts: HashMap<(u64, u64), f64> = HashMap::new();
    let mut open: HashMap<(u64, u64), i64> = HashMap::new();
    let mut per_track: HashMap<u64, usize> = HashMap::new();
    let mut counters = 0;
    for e in events {
        // Well-formed: a name, a known phase, pid and tid; a timestamp on all but metadata.
        assert!(e["name"].is_string(), "{e}");
        let ph = e["ph"].as_str().unwrap_or_else(|| panic!("no ph: {e}"));
        assert!(["X", "B", "E", "i", "C", "M"].contains(&ph), "{e}");
        let (pid, tid) = (e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap());
        if ph == "M" {
            if e["name"] == "thread_name" {
                names.insert(tid, e["args"]["name"].as_str().unwrap().to_string());
            }
            continue;
        }
        let ts = e["ts"].as_f64().unwrap_or_else(|| panic!("no ts: {e}"));
        assert!(ts >= 0.0, "{e}");
        let key = (pid, tid);
        if ph != "C" {
            // Monotonic per track.
            let prev = last_ts.insert(key, ts).unwrap_or(0.0);
            assert!(ts >= prev, "ts goes back on track {tid}: {prev} then {e}");
        }
        match ph {
            "X" => {
                let dur = e["dur"]
                    .as_f64()
                    .unwrap_or_else(|| panic!("X without dur: {e}"));
                assert!(dur >= 0.0, "{e}");
                *per_track.entry(tid).or_default() += 1;
            }
            "B" => *open.entry(key).or_default() += 1,
            "E" => {
                let n = open.entry(key).or_default();
                *n -= 1;
                assert!(*n >= 0, "E before B on track {tid}");
            }
            "C" => {
                counters += 1;
                let args = e["args"].as_object().unwrap();
                assert!(
                    !args.is_empty() && args.values().all(Value::is_number),
                    "{e}"
                );
            }
            _ => {}
        }
    }
    assert!(open.values().all(|n| *n == 0), "B/E balanced: {open:?}");
    // Complete events on one track do not overlap (a stream or engine runs one at a time).
    let mut spans: HashMap<u64, Vec<(f64, f64)>> = HashMap::new();
    for e in events.iter().filter(|e| e["ph"] == "X") {
        let ts = e["ts"].as_f64().unwrap();
        spans
            .entry(e["tid"].as_u64().unwrap())
            .or_default()
            .push((ts, ts + e["dur"].as_f64().unwrap()));
    }
    for (tid, s) in &spans {
        for w in s.windows(2) {
            assert!(w[1].0 >= w[0].1 - 1e-6, "overlap on track {tid}: {w:?}");
        }
    }
    // Tracks: both copy engines, named, with the copies the trace timed in each direction.
    let tid_of = |label: &str| {
        *names
            .iter()
            .find(|(_, n)| n.contains(label))
            .unwrap_or_else(|| panic!("no track {label}: {names:?}"))
            .0
    };
    let timed: std::collections::HashSet<u64> = of_kind(&recs, "timing")
        .iter()
        .map(|t| t["of"].as_u64().unwrap())
        .collect();
    let count = |f: &dyn Fn(&Value) -> bool| {
        recs.iter()
            .filter(|r| {
                f(r) && (r["kind"] == "evict" || timed.contains(&r["seq"].as_u64().unwrap()))
            })
            .filter(|r| r["result"].as_i64().unwrap_or(0) == 0)
            .count()
    };
    let h2d = count(&|r| r["kind"] == "restore" || (r["kind"] == "copy" && r["dir"] == "h2d"));
    let d2h = count(&|r| r["kind"] == "evict" || (r["kind"] == "copy" && r["dir"] == "d2h"));
    assert!(h2d > 0 && d2h > 0);
    assert_eq!(per_track.get(&tid_of("host to device")).copied(), Some(h2d));
    assert_eq!(per_track.get(&tid_of("device to host")).copied(), Some(d2h));
    assert!(
        names.values().any(|n| n.starts_with("stream ")),
        "{names:?}"
    );
    assert!(counters > 0, "a memory counter track");
    std::fs::remove_file(&trace).ok();
    std::fs::remove_file(&out).ok();
}
