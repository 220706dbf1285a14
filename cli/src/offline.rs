//! `marmoset plan`, `import` and `smartpool`: a trace (the shim's or DTR's) planned offline,
//! with the same planner code the library runs.

use super::*;

/// `marmoset report` on a trace whose allocations are an allocator's blocks
/// (`planner::blocks`): a plan of them (`--budget`) is refused with what to do; the page of the
/// run itself is drawn, after a line that says what its allocations are. A trace the reader
/// refuses is left to the report, which says why.
pub(crate) fn refuse_blocks_plan(path: &Path, planning: bool) -> Result<()> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Ok(());
    };
    let Ok((records, _)) = planner::trace::read_with_cut(&text) else {
        return Ok(());
    };
    match planner::blocks::allocator_blocks(&records) {
        Some(b) if planning => bail!("{}: {b}", path.display()),
        Some(b) => eprintln!("marmoset: {}: {b}", path.display()),
        None => {}
    }
    Ok(())
}

/// A trace to plan, and (a Marmoset trace whose run planned) how the shim's allocator held
/// memory then and the PCIe bandwidths its plan assumed.
type Planned = (Option<planner::trace::Held>, Option<(f64, f64)>);
pub(crate) fn load_model(path: &Path) -> Result<(planner::model::Trace, Planned)> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    if first.contains("\"kind\":\"header\"") {
        let records = read_trace(path, &text)?;
        if let Some(b) = planner::blocks::allocator_blocks(&records) {
            bail!("{}: {b}", path.display());
        }
        // A run the shim planned: the model of what it had recorded when it made its last
        // plan that guided, at its period, so that the plan here is the shim's. The durations
        // its guided iterations recorded since (of calls waiting for copies and replays) moved
        // the prediction by 0.8% (the BERT-like encoder under capuchin at half its peak,
        // simulated H100).
        let mut t = planner::shimtrace::convert_as_planned(&records)
            .map(|c| c.trace)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        t.lends_workspaces = planner::shimtrace::lent_workspaces(&records);
        return Ok((t, planner::shimtrace::held_and_links(&records)));
    }
    if first.contains("\"INSTRUCTION\"") {
        return planner::model::import_dtr(&text)
            .map(|t| (t, (None, None)))
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()));
    }
    let t: planner::model::Trace = serde_json::from_str(&text).map_err(|e| {
        anyhow::anyhow!(
            "{}: neither a DTR log nor an imported trace: {e}",
            path.display()
        )
    })?;
    t.validate()
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    Ok((t, (None, None)))
}

pub(crate) fn import(format: &str, log: &Path, output: &Path) -> Result<ExitCode> {
    // Writing the output over the log (the same file, by any name) would lose the log.
    use std::os::unix::fs::MetadataExt;
    if let (Ok(a), Ok(b)) = (std::fs::metadata(log), std::fs::metadata(output))
        && (a.dev(), a.ino()) == (b.dev(), b.ino())
    {
        bail!(
            "-o {}: that is the log being imported; name another file",
            output.display()
        );
    }
    let t = if format == "family" {
        // A generated model: FAMILY[:SCALE[:PROFILE]] (planner::generate).
        let spec = log.to_string_lossy();
        let mut parts = spec.split(':');
        let name = parts.next().unwrap_or_default();
        let scale: usize = parts
            .next()
            .unwrap_or("1")
            .parse()
            .context("the family's scale")?;
        let (prof, _) = simgpu_model::Profile::load(parts.next().unwrap_or("h100"))
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let Some(m) = planner::generate::family(name, scale, 8) else {
            bail!(
                "unknown family {name:?}: accepted are {}",
                planner::generate::FAMILIES.join(", ")
            );
        };
        m.trace(&prof)
    } else if format == "dtr" {
        let text = std::fs::read_to_string(log)
            .with_context(|| format!("cannot read {}", log.display()))?;
        planner::model::import_dtr(&text).map_err(|e| anyhow::anyhow!("{}: {e}", log.display()))?
    } else {
        bail!("unknown format {format:?}: accepted are dtr, family");
    };
    std::fs::write(output, serde_json::to_string(&t)?)
        .with_context(|| format!("cannot write {}", output.display()))?;
    eprintln!(
        "{}: {} operations, {} storages, peak {} B, {:.6} s of compute",
        output.display(),
        t.ops.len(),
        t.storages.len(),
        t.peak(),
        t.compute_time() + 0.0
    );
    Ok(ExitCode::SUCCESS)
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn plan(
    path: &Path,
    budget: Option<&str>,
    policy: &str,
    profile: Option<&str>,
    deadline_ms: Option<u64>,
    sweep: bool,
    explain: bool,
    json: bool,
) -> Result<ExitCode> {
    use planner::memory::{POLICIES, lower_bound, run_until};
    use planner::timeline::{Decision, Link};
    let (mut t, (held, pcie)) = load_model(path)?;
    let (mut prof, _) = simgpu_model::Profile::load(profile.unwrap_or("h100"))
        .map_err(|e| anyhow::anyhow!("--profile: {e}"))?;
    let mut link = Link::from_profile(&prof);
    // A shim's trace, no profile named: the links its plan assumed (its evictions measured).
    if let (None, Some((h2d, d2h))) = (profile, pcie) {
        prof.name = "the run's measured".into();
        prof.pcie_h2d_gbs = h2d / 1e9;
        prof.pcie_d2h_gbs = d2h / 1e9;
        link = Link { h2d, d2h };
    }
    // Budgets are the device's, fractions of the peak as recorded. The trace of a run the
    // shim planned is planned as the shim planned it: the model as its allocator held memory
    // (pages; the pool of small tensors off every budget), and each plan as the shim carries
    // it out. Any other trace: the model as recorded, each plan as planned.
    let peak = t.peak();
    if let Some(h) = &held {
        planner::shimtrace::as_held(&mut t, h);
        t.shim_carries_out = true;
    }
    let t = t;
    // Every budget is the device's, as `--memory-limit` takes it: what the process held before
    // Marmoset took over comes off it, as it did in the run. A fraction is of the program's
    // peak as recorded, so its device budget adds that memory back.
    let pre = held.map_or(0, |h| h.preexisting);
    let held_budget = |device: u64| held.map_or(device, |h| h.left_of_device(device));
    let of_peak = |f: f64| (peak as f64 * f) as u64 + pre;
    let base = t.compute_time();
    // Slowdowns and fractions of the peak are ratios: an empty trace has none to give.
    if t.ops.is_empty() || peak == 0 {
        bail!(
            "{}: no operations or no memory: nothing to plan",
            path.display()
        );
    }
    if base <= 0.0 {
        bail!(
            "{}: its operations take no time: no slowdown to plan against",
            path.display()
        );
    }
    let parse_budget = |budget: &str| -> Result<u64> {
        Ok(match budget.parse::<f64>() {
            Ok(f) if budget.contains('.') && f > 0.0 && f <= 1.0 => of_peak(f),
            _ => planner::parse_size(budget)
                .map_err(|e| anyhow::anyhow!("--budget: {e} (or a fraction of the peak, 0.5)"))?,
        })
    };
    if policy == "smartpool" && !sweep {
        return smartpool(&t, budget.map(parse_budget).transpose()?, explain, json);
    }
    // A policy's plan and the host time it took, within the deadline (measured here: the
    // planner crate reads no clock).
    let timed = |policy: &str, budget_bytes: u64| {
        let began = std::time::Instant::now();
        let pace = deadline_ms.map(|ms| planner::memory::Pace::new(ms as f64 / 1e3));
        let more = || {
            pace.as_ref()
                .is_none_or(|p| p.more(began.elapsed().as_secs_f64()))
        };
        let budget = held_budget(budget_bytes);
        let planned = run_until(policy, &t, budget, link, &more)?;
        Some((planned, began.elapsed().as_secs_f64()))
    };
    // One plan's figures, as `--json` prints them.
    let summary =
        |policy: &str, budget_bytes: u64, o: &planner::timeline::Outcome, secs: Option<f64>| {
            let bound = lower_bound(&t, held_budget(budget_bytes), link).makespan;
            serde_json::json!({
                "policy": policy,
                "profile": prof.name,
                "budget_bytes": budget_bytes,
                "peak_bytes_baseline": peak,
                "peak_bytes_planned": o.peak,
                "baseline_time_s": base,
                "planned_time_s": o.makespan,
                "overhead": o.makespan / base,
                "feasible": o.feasible,
                "swapped_bytes": o.swapped_out,
                "recomputed_ops": o.recomputed_ops,
                "stall_s": o.stall_s,
                "stalls": stall_json(&t, o),
                "lower_bound_time_s": bound.is_finite().then_some(bound),
                "lower_bound_overhead": bound.is_finite().then_some(bound / base),
                "lower_bound_over_configurations": t.at_least_configs().is_some(),
                "gap": (o.feasible && bound.is_finite()).then_some(o.makespan / bound - 1.0),
                "planning_time_s": secs,
                "held": held,
                "simulated": true,
            })
        };
    if sweep {
        let fractions = [0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2];
        // Every policy at one budget in one job (`run_all`: auto's steps are the other
        // policies), the budgets spread over the cores.
        let next = std::sync::atomic::AtomicUsize::new(0);
        let done = std::sync::Mutex::new(vec![None; fractions.len()]);
        let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
        let bar = progress::bar(fractions.len() as u64, "planning");
        std::thread::scope(|sc| {
            for _ in 0..workers.min(fractions.len()) {
                sc.spawn(|| {
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(&f) = fractions.get(i) else { break };
                        let began = std::time::Instant::now();
                        let budget = held_budget(of_peak(f));
                        let all = planner::memory::run_all(&t, budget, link);
                        let secs = began.elapsed().as_secs_f64();
                        done.lock().unwrap()[i] = Some((all, secs));
                        bar.inc(1);
                    }
                });
            }
        });
        bar.finish_and_clear();
        let runs: Vec<(planner::memory::Named, f64)> = done
            .into_inner()
            .unwrap()
            .into_iter()
            .map(|o| o.expect("every job ran"))
            .collect();
        let outcome = |pi: usize, fi: usize| {
            let (name, (_, o)) = &runs[fi].0[pi];
            assert_eq!(*name, POLICIES[pi], "run_all gives POLICIES in order");
            o
        };
        // Host time of the whole portfolio (auto) at each budget, two budgets at once.
        let secs = |pi: usize, fi: usize| (POLICIES[pi] == "auto").then_some(runs[fi].1);
        let bounds: Vec<f64> = fractions
            .iter()
            .map(|f| lower_bound(&t, held_budget(of_peak(*f)), link).makespan)
            .collect();
        if json {
            let mut results = Vec::new();
            for (pi, p) in POLICIES.iter().enumerate() {
                for (fi, f) in fractions.into_iter().enumerate() {
                    let budget_bytes = of_peak(f);
                    let o = outcome(pi, fi);
                    let mut v = summary(p, budget_bytes, o, secs(pi, fi));
                    v["budget_fraction"] = serde_json::json!(f);
                    results.push(v);
                }
            }
            let pool = planner::pool::smartpool(&t);
            let v = serde_json::json!({
                "trace": path.display().to_string(),
                "profile": prof.name,
                "simulated": true,
                "peak_bytes_baseline": peak,
                "baseline_time_s": base,
                "results": results,
                "smartpool": {
                    "pool_bytes": pool.size,
                    "peak_load_bytes": pool.peak_load,
                    "competitive_ratio": pool.ratio(),
                },
            });
            println!("{}", serde_json::to_string_pretty(&v)?);
            return Ok(ExitCode::SUCCESS);
        }
        println!(
            "{} on {} (simulated PCIe: {} GB/s in, {} GB/s out): peak {:.2} GB, {:.4} s of compute",
            path.file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_default(),
            prof.name,
            prof.pcie_h2d_gbs,
            prof.pcie_d2h_gbs,
            peak as f64 / 1e9,
            base
        );
        print!("{:<10}", "policy");
        for f in fractions {
            print!(" {f:>7}");
        }
        println!();
        for (pi, p) in POLICIES.iter().enumerate() {
            print!("{p:<10}");
            for fi in 0..fractions.len() {
                let o = outcome(pi, fi);
                if o.feasible {
                    print!(" {:>6.3}x", o.makespan / base);
                } else {
                    print!(" {:>7}", "-");
                }
            }
            println!();
        }
        print!("{:<10}", "bound");
        for b in &bounds {
            if b.is_finite() {
                print!(" {:>6.3}x", b / base);
            } else {
                print!(" {:>7}", "-");
            }
        }
        println!();
        // The optimality gap of the default policy: how far above the bound it may be.
        let auto = POLICIES.iter().position(|p| *p == "auto").unwrap();
        print!("{:<10}", "auto gap");
        for (fi, b) in bounds.iter().enumerate() {
            let o = outcome(auto, fi);
            if o.feasible && b.is_finite() {
                print!(" {:>6.1}%", 100.0 * (o.makespan / b - 1.0));
            } else {
                print!(" {:>7}", "-");
            }
        }
        println!();
        print!("{:<10}", "auto ms");
        for fi in 0..fractions.len() {
            print!(" {:>7.0}", secs(auto, fi).unwrap_or(0.0) * 1e3);
        }
        println!();
        let pool = planner::pool::smartpool(&t);
        println!(
            "smartpool: a pool of {:.4} GB for a peak load of {:.4} GB (competitive ratio {:.4})",
            pool.size as f64 / 1e9,
            pool.peak_load as f64 / 1e9,
            pool.ratio()
        );
        println!(
            "slowdown = simulated time / compute time; - = cannot keep within the budget; bound = no plan is faster; auto ms = host time to plan (every policy: two budgets at once)"
        );
        return Ok(ExitCode::SUCCESS);
    }
    let Some(budget) = budget else {
        bail!("--budget is needed (or --sweep)")
    };
    let budget_bytes = parse_budget(budget)?;
    let Some(((plan, o), secs)) = timed(policy, budget_bytes) else {
        bail!(
            "--policy: unknown policy {policy:?}: accepted are {}, smartpool",
            POLICIES.join(", ")
        );
    };
    let swapped = plan
        .iter()
        .filter(|(_, d)| matches!(d, Decision::Swap { .. }))
        .count();
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&summary(policy, budget_bytes, &o, Some(secs)))?
        );
    } else {
        println!(
            "{policy} under {budget_bytes} B ({:.1}% of the {peak} B peak), {} PCIe (simulated):",
            100.0 * budget_bytes as f64 / peak as f64,
            prof.name
        );
        println!(
            "  {}: {:.6} s against {:.6} s ({:.3}x), peak {} B, {} swaps ({} B out), {} recomputations, {:.6} s stalled",
            if o.feasible {
                "feasible"
            } else {
                "NOT feasible"
            },
            o.makespan,
            base,
            o.makespan / base,
            o.peak,
            swapped,
            o.swapped_out,
            o.recomputed_ops,
            o.stall_s
        );
        let bound = lower_bound(&t, held_budget(budget_bytes), link).makespan;
        if bound.is_finite() {
            println!(
                "  lower bound {:.6} s ({:.3}x): no plan is faster{}{}",
                bound,
                bound / base,
                if t.at_least_configs().is_some() {
                    ", whatever configurations its convolutions run"
                } else {
                    ""
                },
                if o.feasible {
                    format!("; gap {:.1}%", 100.0 * (o.makespan / bound - 1.0))
                } else {
                    String::new()
                }
            );
        } else {
            println!("  lower bound: no plan can keep within the budget");
        }
        println!("  planned in {:.1} ms of host time", secs * 1e3);
        if let Some(h) = held {
            println!(
                "  planned as the shim held memory (its plan record): {} B pages from {} B tensors, smaller ones in a {} B pool off the budget; the plan as the shim carries it out",
                h.gran, h.min_tensor, h.pool
            );
        }
        // Where an infeasible plan gives up, so the user sees how far it is.
        if let Some((op, over)) = o.worst {
            println!(
                "  over the budget at {} operations, most at op {op} ({}) by {over} B",
                o.overs.len(),
                t.ops[op].name
            );
        }
        if o.invalid {
            println!("  a recomputation would read a tensor the program has freed");
        }
    }
    if explain {
        explain_stalls(&t, &o);
        explain_replay_gaps(path);
        for (s, d) in &plan {
            let size = t.storages[*s].size;
            match d {
                Decision::Swap {
                    after,
                    trigger,
                    back,
                } => println!(
                    "  storage {s} ({size} B): swap out after op {after} ({}), in from op {trigger}, back at op {back} ({})",
                    t.ops[*after].name, t.ops[*back].name
                ),
                Decision::Recompute {
                    after,
                    back: usize::MAX,
                } => println!(
                    "  storage {s} ({size} B): drop after op {after} ({}), its last use",
                    t.ops[*after].name
                ),
                Decision::Recompute { after, back } => println!(
                    "  storage {s} ({size} B): drop after op {after}, recompute with op {} before op {back} ({})",
                    t.storages[*s]
                        .producer
                        .map(|p| t.ops[p].name.clone())
                        .unwrap_or_default(),
                    t.ops[*back].name
                ),
                Decision::Extend { until } => println!(
                    "  storage {s} ({size} B): kept past the program's free until op {until} ({}), to recompute from",
                    t.ops[*until].name
                ),
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// What the shim cannot replay in a shim's trace, for `--explain`: the calls whose outputs a
/// later call reads but no recomputation can rebuild, by name and why, the most bytes first.
fn explain_replay_gaps(path: &Path) {
    let Ok(text) = std::fs::read_to_string(path) else {
        return;
    };
    if !text.contains("\"kind\":\"header\"") {
        return;
    }
    let Ok(records) = read_trace(path, &text) else {
        return;
    };
    let Ok(c) = planner::shimtrace::convert_as_planned(&records) else {
        return;
    };
    let gaps = c.replay_gaps();
    if gaps.is_empty() {
        println!("  every call whose output is read later can be replayed");
        return;
    }
    println!("  not replayable (their outputs can only be kept or swapped), the most bytes first:");
    for g in gaps.iter().take(20) {
        println!(
            "    {:>12} B in {:>4} call(s) of {}: {}",
            g.bytes, g.calls, g.name, g.why
        );
    }
    if gaps.len() > 20 {
        let rest: u64 = gaps[20..].iter().map(|g| g.bytes).sum();
        println!("    {rest:>12} B in {} more kinds of call", gaps.len() - 20);
    }
}

/// Where a plan's stalls go, for `--explain`: by cause and pass, then the operations that
/// lost the most.
pub(crate) fn explain_stalls(t: &planner::model::Trace, o: &planner::timeline::Outcome) {
    let b = planner::timeline::stalls::breakdown(t, o, 10);
    // The causes that lost time, each with its seconds.
    let causes = |l: &planner::timeline::stalls::Lost| {
        let parts: Vec<String> = [
            ("waiting for swap-ins", l.swap_in_s),
            ("waiting for copies out to free memory", l.memory_s),
            ("recomputing", l.recompute_s),
            ("the program's copies waiting for a copy engine", l.engine_s),
        ]
        .iter()
        .filter(|x| x.1 > 0.0)
        .map(|(what, s)| format!("{s:.6} s {what}"))
        .collect();
        if parts.is_empty() {
            "0 s".to_string()
        } else {
            format!("{:.6} s: {}", l.total(), parts.join(", "))
        }
    };
    println!("  stalled {}", causes(&b.all));
    println!("    in the forward pass {}", causes(&b.forward));
    println!("    in the backward pass {}", causes(&b.backward));
    if !b.worst.is_empty() {
        println!("  the operations that lost the most:");
    }
    for (op, l) in &b.worst {
        println!("    op {op} ({}): {}", t.ops[*op].name, causes(l));
    }
}

/// The stall breakdown as `--json` gives it.
pub(crate) fn stall_json(
    t: &planner::model::Trace,
    o: &planner::timeline::Outcome,
) -> serde_json::Value {
    let b = planner::timeline::stalls::breakdown(t, o, 10);
    serde_json::json!({
        "all": b.all,
        "forward": b.forward,
        "backward": b.backward,
        "worst": b.worst.iter().map(|(op, l)| serde_json::json!({
            "op": op,
            "name": t.ops[*op].name,
            "lost": l,
        })).collect::<Vec<_>>(),
    })
}

/// `plan --policy smartpool`: SmartPool lays every tensor out in one pool (it swaps and
/// recomputes nothing): the pool's size against the peak load, and against the budget if given.
pub(crate) fn smartpool(
    t: &planner::model::Trace,
    budget: Option<u64>,
    explain: bool,
    json: bool,
) -> Result<ExitCode> {
    let pool = planner::pool::smartpool(t);
    if json {
        let v = serde_json::json!({
            "policy": "smartpool",
            "pool_bytes": pool.size,
            "peak_load_bytes": pool.peak_load,
            "competitive_ratio": pool.ratio(),
            "budget_bytes": budget,
            "feasible": budget.map(|b| pool.size <= b),
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!(
            "smartpool: a pool of {} B for a peak load of {} B (competitive ratio {:.4}){}",
            pool.size,
            pool.peak_load,
            pool.ratio(),
            match budget {
                Some(b) if pool.size <= b => format!(", within the budget of {b} B"),
                Some(b) => format!(", NOT within the budget of {b} B"),
                None => String::new(),
            }
        );
    }
    if explain {
        for (s, off) in pool.offsets.iter().enumerate() {
            let size = t.storages[s].size;
            if size > 0 {
                println!("  storage {s} ({size} B): offset {off}");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
