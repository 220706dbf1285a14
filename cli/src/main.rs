//! `marmoset`: run programs under Marmoset (or on the simulated GPU) and work with its traces.

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

mod run;
use run::{RunArgs, run};

mod doctor;
mod export;
mod locate;
mod offline;
use offline::{import, plan, refuse_blocks_plan};
mod progress;
mod report;
mod svg;

#[derive(Parser)]
#[command(
    name = "marmoset",
    version,
    about = "Get more out of a GPU's memory without touching the training code"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Print the directory holding the simulated GPU's libraries (libcuda.so.1, libcudart.so.12,
    /// libcudart.so.13, libcudnn.so.9).
    SimPath,
    /// Run a command under Marmoset (or without it, --no-shim), on the simulated GPU with --sim.
    /// Its exit status is the command's (127: not found, 126: not runnable); SIGINT, SIGTERM and
    /// SIGHUP go on to it, and marmoset ends as it does. Sizes are at most 16 EiB.
    Run(RunArgs),
    /// μ-cuDNN offline: the best configuration and the desirable front of a convolution from its
    /// measured micro-configurations (CSV: batch,algo,time_ms,workspace_bytes); with --wd, one
    /// configuration per kernel under a total workspace.
    Microbatch {
        /// Micro-configuration tables (several with --wd).
        #[arg(long = "table", required = true, value_name = "FILE.csv")]
        tables: Vec<PathBuf>,
        /// The mini-batch size N, 1 to 65536.
        #[arg(long)]
        batch: u64,
        /// Workspace limit per kernel (WR) or in total (--wd), e.g. 64MiB.
        #[arg(long)]
        workspace: String,
        /// Micro-batch sizes: all, pow2, undivided.
        #[arg(long, default_value = "pow2")]
        sizes: String,
        /// WD: several kernels sharing one workspace of --workspace bytes.
        #[arg(long)]
        wd: bool,
        #[arg(long)]
        json: bool,
    },
    /// Import a trace from another tool: `marmoset import dtr LOG -o TRACE` (DTR's logs).
    Import {
        /// The format: dtr.
        format: String,
        log: PathBuf,
        #[arg(short = 'o', long = "output")]
        output: PathBuf,
    },
    /// What a memory policy would do with a trace under a budget, and what it would cost
    /// (simulated on a device profile's PCIe links).
    Plan {
        /// A Marmoset trace (recorded with MARMOSET_TRACE_TIMING=1), a DTR log, or a trace
        /// imported with `marmoset import`.
        trace: PathBuf,
        /// The budget: a size, or a fraction of the trace's peak (0.5).
        #[arg(long)]
        budget: Option<String>,
        /// One of: auto (the portfolio), capuchin, swap, recompute, dtr, lru, vdnn-all, vdnn-conv,
        /// autoswap, hybrid, smartpool (SmartPool lays tensors out in one pool; --budget is optional
        /// with it).
        #[arg(long, default_value = "auto")]
        policy: String,
        /// Stop the search after this many milliseconds of host time, with the best plan so far.
        #[arg(long)]
        deadline_ms: Option<u64>,
        /// Device profile for the PCIe links: h100, p100 or a profile .json. Default: h100; for
        /// a Marmoset trace whose run planned, the links the shim's plan assumed.
        #[arg(long)]
        profile: Option<String>,
        /// Every policy at 0.9 ... 0.2 of the peak.
        #[arg(long)]
        sweep: bool,
        /// The plan, tensor by tensor.
        #[arg(long)]
        explain: bool,
        #[arg(long)]
        json: bool,
    },
    /// One self-contained HTML page of a run: memory over time against the budget, the largest
    /// tensors' residency, device time by kind, the plan's decisions.
    Report {
        /// A trace written with MARMOSET_TRACE / --trace (MARMOSET_TRACE_TIMING=1 for times and
        /// a plan).
        trace: PathBuf,
        #[arg(short = 'o', long = "output", default_value = "report.html")]
        output: PathBuf,
        /// The memory budget: a size, or a fraction of the trace's peak (0.5).
        #[arg(long)]
        budget: Option<String>,
        /// The policy planned when the trace recorded no decisions.
        #[arg(long, default_value = "auto")]
        policy: String,
        /// Device profile for the plan's PCIe links: h100, p100 or a profile .json.
        #[arg(long, default_value = "h100")]
        profile: String,
        /// The trace was recorded on the simulated GPU (`marmoset run --sim`): label its device
        /// times simulated.
        #[arg(long)]
        simulated: bool,
    },
    /// Convert a trace for other tools: --chrome writes the Chrome trace event format (Perfetto).
    Export {
        /// The Chrome trace event format (JSON), for Perfetto and chrome://tracing.
        #[arg(long, required = true)]
        chrome: bool,
        trace: PathBuf,
        #[arg(short = 'o', long = "output")]
        output: PathBuf,
        /// The trace was recorded on the simulated GPU: label its device times simulated.
        #[arg(long)]
        simulated: bool,
    },
    /// Check the environment a program runs in: the CUDA libraries it loads and from where, the
    /// functions Marmoset hooks in them, settings that defeat a memory policy, the benchmark
    /// cache. Exit status 1 when it finds a problem.
    Doctor {
        /// Run the program on the simulated GPU's libraries.
        #[arg(long)]
        sim: bool,
        #[arg(long)]
        json: bool,
        /// The program to check (default: python -c "import torch", .venv/bin/python if present).
        #[arg(last = true, value_name = "CMD")]
        cmd: Vec<String>,
    },
    /// Summarise a trace: calls by kind and API, allocations, peak memory load, device time.
    Inspect {
        /// A trace written with MARMOSET_TRACE / --trace.
        trace: PathBuf,
        /// The summary as JSON.
        #[arg(long)]
        json: bool,
    },
}

fn main() -> ExitCode {
    // `marmoset plan ... | head`: a closed stdout ends the command quietly, with the status a
    // shell gives a process killed by SIGPIPE, instead of a panic report.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let msg = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .unwrap_or_default();
        if msg.starts_with("failed printing to stdout") && msg.contains("Broken pipe") {
            std::process::exit(141);
        }
        default_hook(info);
    }));
    let cli = Cli::parse();
    let r = match cli.cmd {
        Cmd::SimPath => sim_dir().map(|d| {
            println!("{}", d.display());
            ExitCode::SUCCESS
        }),
        Cmd::Run(a) => run(a),
        Cmd::Inspect { trace, json } => inspect(&trace, json),
        Cmd::Doctor { sim, json, cmd } => doctor::doctor(&doctor::Options { sim, json, cmd }),
        Cmd::Report {
            trace,
            output,
            budget,
            policy,
            profile,
            simulated,
        } => refuse_blocks_plan(&trace, budget.is_some()).and_then(|()| {
            report::report(&report::Options {
                trace: &trace,
                output: &output,
                budget: budget.as_deref(),
                policy: &policy,
                profile: &profile,
                simulated,
            })
        }),
        Cmd::Export {
            chrome: _,
            trace,
            output,
            simulated,
        } => export::export(&trace, &output, simulated),
        Cmd::Import {
            format,
            log,
            output,
        } => import(&format, &log, &output),
        Cmd::Plan {
            trace,
            budget,
            policy,
            profile,
            deadline_ms,
            sweep,
            explain,
            json,
        } => plan(
            &trace,
            budget.as_deref(),
            &policy,
            profile.as_deref(),
            deadline_ms,
            sweep,
            explain,
            json,
        ),
        Cmd::Microbatch {
            tables,
            batch,
            workspace,
            sizes,
            wd,
            json,
        } => microbatch(&tables, batch, &workspace, &sizes, wd, json),
    };
    match r {
        Ok(c) => c,
        Err(e) => {
            eprintln!("marmoset: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// The directory holding libmarmoset.so (see locate.rs: MARMOSET_LIB_DIR, the build tree, the
/// installed wheel).
fn build_dir() -> Result<PathBuf> {
    locate::lib_dir()
}

/// The simulated-GPU directory (see locate.rs).
fn sim_dir() -> Result<PathBuf> {
    locate::sim_dir()
}

fn config_json(c: &planner::microbatch::Configuration) -> serde_json::Value {
    serde_json::json!({
        "time_ms": c.time_ms,
        "workspace_bytes": c.workspace,
        "config": c.parts.iter().map(|(b, a)| serde_json::json!({"batch": b, "algo": a})).collect::<Vec<_>>(),
    })
}

fn parts_text(c: &planner::microbatch::Configuration) -> String {
    let mut groups: Vec<(u64, i32, usize)> = Vec::new();
    for &(b, a) in &c.parts {
        match groups.last_mut() {
            Some(g) if g.0 == b && g.1 == a => g.2 += 1,
            _ => groups.push((b, a, 1)),
        }
    }
    groups
        .iter()
        .map(|(b, a, k)| format!("{k} x {b} (algo {a})"))
        .collect::<Vec<_>>()
        .join(" + ")
}

fn microbatch(
    tables: &[PathBuf],
    batch: u64,
    workspace: &str,
    sizes: &str,
    wd: bool,
    json: bool,
) -> Result<ExitCode> {
    use planner::microbatch::{Sizes, desirable, fastest, read_table, wd as solve_wd};
    let limit = planner::parse_size(workspace).map_err(|e| anyhow::anyhow!("--workspace: {e}"))?;
    let sizes = Sizes::parse(sizes)
        .with_context(|| format!("--sizes {sizes:?}: accepted are {}", Sizes::ACCEPTED))?;
    if batch == 0 {
        bail!("--batch: at least 1");
    }
    if batch > planner::microbatch::MAX_BATCH {
        bail!(
            "--batch {batch}: at most {}",
            planner::microbatch::MAX_BATCH
        );
    }
    let mut loaded = Vec::new();
    for t in tables {
        let text =
            std::fs::read_to_string(t).with_context(|| format!("cannot read {}", t.display()))?;
        loaded.push(read_table(&text).map_err(|e| anyhow::anyhow!("{}: {e}", t.display()))?);
    }
    if !wd {
        if loaded.len() != 1 {
            bail!("one --table without --wd");
        }
        let Some(best) = fastest(batch, &loaded[0], limit, sizes) else {
            bail!("no configuration of the table covers a batch of {batch} within {workspace}");
        };
        let front = desirable(batch, &loaded[0], limit, sizes);
        if json {
            let v = serde_json::json!({
                "best": config_json(&best),
                "front": front.iter().map(|c| serde_json::json!({"time_ms": c.time_ms, "workspace_bytes": c.workspace, "kernels": c.parts.len()})).collect::<Vec<_>>(),
            });
            println!("{}", serde_json::to_string_pretty(&v)?);
        } else {
            println!(
                "best: {:.4} ms, workspace {} B: {}",
                best.time_ms,
                best.workspace,
                parts_text(&best)
            );
            println!("desirable front ({} configurations):", front.len());
            for c in &front {
                println!(
                    "  {:>10.4} ms {:>14} B  {}",
                    c.time_ms,
                    c.workspace,
                    parts_text(c)
                );
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    let fronts: Vec<Vec<planner::microbatch::Configuration>> = loaded
        .iter()
        .map(|t| desirable(batch, t, limit, sizes))
        .collect();
    for (t, f) in tables.iter().zip(&fronts) {
        if f.is_empty() {
            bail!(
                "{}: no configuration covers a batch of {batch} within {workspace}",
                t.display()
            );
        }
    }
    let options: Vec<Vec<(f64, u64)>> = fronts
        .iter()
        .map(|f| f.iter().map(|c| (c.time_ms, c.workspace)).collect())
        .collect();
    let Some(sol) = solve_wd(&options, limit, 2_000_000) else {
        bail!("the kernels' smallest configurations together need more than {workspace}");
    };
    let chosen: Vec<&planner::microbatch::Configuration> = sol
        .choice
        .iter()
        .zip(&fronts)
        .map(|(&j, f)| &f[j])
        .collect();
    if json {
        let v = serde_json::json!({
            "time_ms": sol.time_ms,
            "workspace_bytes": sol.workspace,
            "exact": sol.exact,
            "lower_bound_ms": sol.lower_bound_ms,
            "kernels": tables.iter().zip(&chosen).map(|(t, c)| {
                let mut j = config_json(c);
                j["table"] = serde_json::json!(t.display().to_string());
                j
            }).collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!(
            "WD: {:.4} ms in all, workspace {} B of {} B ({}; lower bound {:.4} ms)",
            sol.time_ms,
            sol.workspace,
            limit,
            if sol.exact {
                "optimal"
            } else {
                "node budget reached"
            },
            sol.lower_bound_ms
        );
        for (t, c) in tables.iter().zip(&chosen) {
            println!(
                "  {}: {:.4} ms, {} B: {}",
                t.display(),
                c.time_ms,
                c.workspace,
                parts_text(c)
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A Marmoset trace's records, up to its last complete one; a cut is said on stderr.
fn read_trace(path: &Path, text: &str) -> Result<Vec<planner::trace::Record>> {
    let (records, cut) = planner::trace::read_with_cut(text)
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    note_cut(path, cut.as_deref());
    Ok(records)
}

/// Says on stderr, once, that the trace at `path` was cut and why (`cut`: the reader's note).
pub(crate) fn note_cut(path: &Path, cut: Option<&str>) {
    if let Some(note) = cut {
        eprintln!("marmoset: {}: {note}", path.display());
    }
}

/// Says on stderr, in one line, which other traces of the same run lie beside `path` (the
/// other processes of the run: planner::trace::sibling_path).
pub(crate) fn note_siblings(path: &Path) {
    let Some(run) = planner::trace::run_of(path) else {
        return;
    };
    let others: Vec<String> = planner::trace::traces_of_run(path, &run)
        .iter()
        .filter(|p| p.as_path() != path)
        .map(|p| p.display().to_string())
        .collect();
    if !others.is_empty() {
        eprintln!(
            "marmoset: {}: the same run traced {} other process(es) beside it: {}",
            path.display(),
            others.len(),
            others.join(", ")
        );
    }
}

/// The rank a trace's header names (torchrun's RANK), if any.
fn rank_of(records: &[planner::trace::Record]) -> Option<u32> {
    match records.first().map(|r| &r.event) {
        Some(planner::trace::Event::Header { rank, .. }) => *rank,
        _ => None,
    }
}

/// The summaries of every rank of the run `path` belongs to (this trace's among them), in rank
/// order; empty when the trace is no rank's, or its run has no other rank's trace.
fn rank_summaries(
    path: &Path,
    records: &[planner::trace::Record],
) -> Vec<(u32, PathBuf, planner::inspect::Summary)> {
    let (Some(own), Some(run)) = (rank_of(records), planner::trace::run_of(path)) else {
        return Vec::new();
    };
    let mut out = vec![(
        own,
        path.to_path_buf(),
        planner::inspect::summarize(records),
    )];
    for p in planner::trace::traces_of_run(path, &run) {
        if p == path {
            continue;
        }
        let Ok(t) = std::fs::read_to_string(&p) else {
            continue;
        };
        let Ok(recs) = read_trace(&p, &t) else {
            continue;
        };
        if let Some(r) = rank_of(&recs) {
            out.push((r, p, planner::inspect::summarize(&recs)));
        }
    }
    if out.len() < 2 {
        return Vec::new();
    }
    out.sort_by_key(|x| x.0);
    out
}

fn inspect(path: &Path, json: bool) -> Result<ExitCode> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let records = read_trace(path, &text)?;
    note_siblings(path);
    let ranks = rank_summaries(path, &records);
    let blocks = planner::blocks::allocator_blocks(&records);
    if let Some(b) = &blocks {
        eprintln!("marmoset: {}: {b}", path.display());
    }
    let s = planner::inspect::summarize(&records);
    if json {
        let v = serde_json::json!({
            "records": s.records,
            "by_kind": s.by_kind,
            "by_api": s.by_api,
            "failed_calls": s.failed_calls,
            "allocations": s.allocations,
            "bytes_allocated": s.bytes_allocated,
            "peak_load_bytes": s.peak_load,
            "peak_at_seq": s.peak_at.map(|p| p.0),
            "largest": s.largest.iter().map(|(b, api, seq)| serde_json::json!({"bytes": b, "api": api, "seq": seq})).collect::<Vec<_>>(),
            "device_ms": s.device_ms,
            "evicted_bytes": s.evicted_bytes,
            "restored_bytes": s.restored_bytes,
            "evict_ms": s.evict_ms,
            "plans_made": s.plans_made,
            "plans_reused": s.plans_reused,
            "kinds": s.kinds,
            "planning_ms": s.planning_ms,
            "top_kernels": s.top_kernels.iter().map(|(name, n, ms)| serde_json::json!({"name": name, "launches": n, "device_ms": ms})).collect::<Vec<_>>(),
            "allocator_blocks": blocks.as_ref().map(|b| serde_json::json!({
                "allocations": b.allocations,
                "places": b.places,
                "bytes": b.bytes,
                "shared_bytes": b.shared_bytes,
                "advice": b.to_string(),
            })),
        });
        let mut v = v;
        if !ranks.is_empty() {
            v["ranks"] = serde_json::json!(
                ranks
                    .iter()
                    .map(|(r, p, s)| serde_json::json!({
                        "rank": r,
                        "trace": p.display().to_string(),
                        "records": s.records,
                        "device_ms": s.device_ms.values().sum::<f64>(),
                        "peak_load_bytes": s.peak_load,
                    }))
                    .collect::<Vec<_>>()
            );
        }
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print!("{s}");
        if !ranks.is_empty() {
            println!("ranks of this run ({}):", ranks.len());
            for (r, p, s) in &ranks {
                println!(
                    "  rank {r}: {} records, {:.3} ms device time, peak load {} B ({})",
                    s.records,
                    s.device_ms.values().sum::<f64>(),
                    s.peak_load,
                    p.display()
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
