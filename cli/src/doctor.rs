//! `marmoset doctor [--sim] [--json] [-- CMD ...]`: checks the environment a program runs in and
//! says what to fix. It runs the program (default: `python -c "import torch"`) with the dynamic
//! loader's own log (`LD_DEBUG=files,libs`) and reads from it which CUDA-family libraries load, from
//! where and why (RPATH, LD_LIBRARY_PATH, the system cache), and which were wanted and not found;
//! counts each loaded library's exported functions against those libmarmoset.so exports (its
//! hooks); names the nvidia-* wheel trap (a DT_RPATH into `nvidia/*/lib` beside torch, searched
//! before LD_LIBRARY_PATH); checks the settings that defeat a memory policy and whether the
//! benchmark cache is writable.

use anyhow::{Context, Result};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

pub struct Options {
    pub sim: bool,
    pub json: bool,
    pub cmd: Vec<String>,
}

/// Library name prefixes of the CUDA family, with the family each belongs to.
const FAMILIES: &[(&str, &str)] = &[
    ("libcudart", "runtime"),
    ("libcuda.", "driver"),
    ("libcudnn", "cuDNN"),
    ("libcublasLt", "cuBLASLt"),
    ("libcublas", "cuBLAS"),
    ("libcufft", "cuFFT"),
    ("libcurand", "cuRAND"),
    ("libcusparseLt", "cuSPARSELt"),
    ("libcusparse", "cuSPARSE"),
    ("libcusolver", "cuSOLVER"),
    ("libnccl", "NCCL"),
    ("libnvrtc", "NVRTC"),
    ("libnvJitLink", "nvJitLink"),
    ("libcupti", "CUPTI"),
    ("libnvToolsExt", "NVTX"),
    ("libnvtx", "NVTX"),
    ("libcufile", "cuFile"),
    ("libnvshmem", "NVSHMEM"),
    ("libcudss", "cuDSS"),
    ("libnvjpeg", "nvJPEG"),
];

fn family(name: &str) -> Option<&'static str> {
    FAMILIES
        .iter()
        .find(|(p, _)| name.starts_with(p))
        .map(|(_, f)| *f)
}

#[derive(Debug, Default)]
struct LoaderLog {
    /// Loaded objects in load order: (path, how the loader found it).
    loaded: Vec<(String, String)>,
    /// Names searched for: name -> who wanted it.
    wanted: BTreeMap<String, String>,
}

/// Reads `LD_DEBUG=files,libs` output (one or more processes).
fn parse_loader_log(text: &str) -> LoaderLog {
    let mut log = LoaderLog::default();
    let mut search = String::new();
    let mut tried: HashMap<String, String> = HashMap::new();
    let mut last_try = String::new();
    let mut seen = BTreeSet::new();
    let mut add = |log: &mut LoaderLog, tried: &HashMap<String, String>, file: &str| {
        if seen.insert(file.to_string()) {
            let origin = tried
                .get(file)
                .cloned()
                .unwrap_or_else(|| "a path given in full".into());
            log.loaded.push((file.to_string(), origin));
        }
    };
    for line in text.lines() {
        // "     PID:\tmessage"
        let msg = line.split_once(":\t").map_or(line, |(_, m)| m).trim();
        if let Some(rest) = msg.strip_prefix("search path=") {
            search = rest
                .rsplit_once('(')
                .map_or("", |(_, k)| k.trim_end_matches(')'))
                .to_string();
        } else if let Some(rest) = msg.strip_prefix("search cache=") {
            search = format!("the loader cache {rest}");
        } else if let Some(p) = msg.strip_prefix("trying file=") {
            last_try = p.trim().to_string();
            tried.insert(last_try.clone(), search.clone());
        } else if let Some(p) = msg.strip_prefix("calling init: ") {
            add(&mut log, &tried, p.trim());
        } else if let Some(rest) = msg.strip_prefix("file=") {
            let (file, how) = rest.split_once(" [").unwrap_or((rest, ""));
            if how.contains("generating link map") {
                // A searched name: the file is the last one the loader tried.
                let path = if file.contains('/') {
                    file.to_string()
                } else if Path::new(&last_try).file_name() == Some(std::ffi::OsStr::new(file)) {
                    last_try.clone()
                } else {
                    continue;
                };
                add(&mut log, &tried, &path);
            } else if let Some((_, by)) = how.split_once("needed by ") {
                log.wanted
                    .entry(file.to_string())
                    .or_insert_with(|| by.split(" [").next().unwrap_or(by).to_string());
            } else if let Some((_, by)) = how.split_once("dynamically loaded by ") {
                log.wanted.entry(file.to_string()).or_insert_with(|| {
                    format!("dlopen in {}", by.split(" [").next().unwrap_or(by))
                });
            }
        }
    }
    log
}

/// The functions a shared library defines and exports.
fn exported_functions(path: &Path) -> Result<BTreeSet<String>> {
    let data = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let elf = goblin::elf::Elf::parse(&data)
        .map_err(|e| anyhow::anyhow!("{}: not an ELF shared library: {e}", path.display()))?;
    let mut out = BTreeSet::new();
    for sym in elf.dynsyms.iter() {
        let global = matches!(
            sym.st_bind(),
            goblin::elf::sym::STB_GLOBAL | goblin::elf::sym::STB_WEAK
        );
        if sym.is_function()
            && global
            && sym.st_shndx != 0
            && sym.st_value != 0
            && let Some(name) = elf.dynstrtab.get_at(sym.st_name)
        {
            out.insert(name.to_string());
        }
    }
    Ok(out)
}

/// DT_RPATH entries of a shared library ($ORIGIN resolved). RUNPATH is searched after
/// LD_LIBRARY_PATH and is no trap; RPATH is searched before it.
fn rpaths(path: &Path) -> Vec<PathBuf> {
    let Ok(data) = std::fs::read(path) else {
        return Vec::new();
    };
    let Ok(elf) = goblin::elf::Elf::parse(&data) else {
        return Vec::new();
    };
    let origin = path.parent().unwrap_or(Path::new("/"));
    elf.rpaths
        .iter()
        .flat_map(|r| r.split(':'))
        .filter(|r| !r.is_empty())
        .map(|r| {
            PathBuf::from(
                r.replace("$ORIGIN", &origin.to_string_lossy())
                    .replace("${ORIGIN}", &origin.to_string_lossy()),
            )
        })
        .collect()
}

/// A directory of an nvidia-* wheel (`.../nvidia/NAME/lib`).
fn is_nvidia_wheel_dir(p: &Path) -> bool {
    let s = p.to_string_lossy();
    s.contains("/nvidia/")
}

struct Finding {
    problem: bool,
    topic: &'static str,
    text: String,
}

fn default_program() -> Vec<String> {
    let venv = Path::new(".venv/bin/python");
    let py = if venv.is_file() {
        venv.to_string_lossy().into_owned()
    } else {
        "python3".into()
    };
    vec![py, "-c".into(), "import torch".into()]
}

fn settings(cmd: &[String], findings: &mut Vec<Finding>) {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let conf = env("PYTORCH_CUDA_ALLOC_CONF")
        .map(|v| ("PYTORCH_CUDA_ALLOC_CONF", v))
        .or_else(|| env("PYTORCH_ALLOC_CONF").map(|v| ("PYTORCH_ALLOC_CONF", v)));
    match &conf {
        Some((var, v)) => {
            let pairs: Vec<(String, String)> = v
                .split(',')
                .filter_map(|kv| kv.split_once(':'))
                .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
                .collect();
            let get = |k: &str| pairs.iter().find(|p| p.0 == k).map(|p| p.1.as_str());
            if get("expandable_segments").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
                findings.push(Finding {
                    problem: true,
                    topic: "settings",
                    text: format!("{var}={v} has expandable_segments:True: PyTorch maps and unmaps memory itself, so Marmoset refuses every memory policy (calls pass through). Fix: remove expandable_segments:True (Marmoset needs one allocation per tensor)."),
                });
            }
            if get("backend") != Some("cudaMallocAsync") {
                findings.push(Finding {
                    problem: true,
                    topic: "settings",
                    text: format!("{var}={v} keeps PyTorch's caching allocator: it carves tensors out of large cached blocks, so a memory policy sees blocks, not tensors. Marmoset sets backend:cudaMallocAsync itself only when {var} is unset (it never overrides yours). Fix: add backend:cudaMallocAsync, or unset {var}."),
                });
            }
        }
        None => findings.push(Finding {
            problem: false,
            topic: "settings",
            text: "PYTORCH_CUDA_ALLOC_CONF is unset: under a memory policy Marmoset sets backend:cudaMallocAsync (one allocation per tensor).".into(),
        }),
    }
    if env("PYTORCH_NO_CUDA_MEMORY_CACHING").as_deref() == Some("1") {
        findings.push(Finding {
            problem: false,
            topic: "settings",
            text: "PYTORCH_NO_CUDA_MEMORY_CACHING=1: one allocation per tensor, but every free is a cudaFree that synchronises the device; backend:cudaMallocAsync is faster.".into(),
        });
    }
    if env("TORCH_CUDNN_V8_API_DISABLED").as_deref() == Some("0") {
        findings.push(Finding {
            problem: true,
            topic: "settings",
            text: "TORCH_CUDNN_V8_API_DISABLED=0 keeps cuDNN's graph API, which μ-cuDNN's micro-batching does not split. Fix: unset it (Marmoset sets 1 when micro-batching).".into(),
        });
    }
    // TensorFlow: its allocator and its executor's threads.
    match env("TF_GPU_ALLOCATOR") {
        Some(v) if v.trim() != "cuda_malloc_async" => findings.push(Finding {
            problem: true,
            topic: "settings",
            text: format!("TF_GPU_ALLOCATOR={v} keeps TensorFlow's BFC allocator, which takes the whole device in one allocation: a memory policy sees no tensor, and a trace cannot be planned. Marmoset sets cuda_malloc_async itself only when TF_GPU_ALLOCATOR is unset (it never overrides yours). Fix: TF_GPU_ALLOCATOR=cuda_malloc_async, or unset it."),
        }),
        Some(_) => {}
        None => findings.push(Finding {
            problem: false,
            topic: "settings",
            text: "TF_GPU_ALLOCATOR is unset: under a memory policy or a trace Marmoset sets cuda_malloc_async (TensorFlow makes one allocation per tensor).".into(),
        }),
    }
    if let Some(v) = env("TF_NUM_INTEROP_THREADS").filter(|v| v.trim() != "1") {
        findings.push(Finding {
            problem: true,
            topic: "settings",
            text: format!("TF_NUM_INTEROP_THREADS={v}: TensorFlow's executor issues independent ops from several threads, in an order that changes from step to step, so a planner policy finds no repeating iteration to guide. Fix: unset it (Marmoset sets 1 under a planner policy or a trace), or set 1."),
        });
    }
    // Data parallelism: settings of PyTorch's NCCL process group that defeat a policy.
    if let Some(v) = env("TORCH_DIST_USE_NCCL2").filter(|v| v != "0") {
        findings.push(Finding {
            problem: true,
            topic: "settings",
            text: format!("TORCH_DIST_USE_NCCL2={v} keeps PyTorch's default NCCL process group, which reads the caching allocator's snapshot when a group is made or destroyed: under a memory policy (backend:cudaMallocAsync) the process aborts. Fix: unset it (Marmoset sets 0, PyTorch's stock group)."),
        });
    }
    if env("TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK").as_deref() == Some("1") {
        findings.push(Finding {
            problem: true,
            topic: "settings",
            text: "TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK=1 registers the caching allocator's segments with NCCL: it needs the caching allocator (backend:cudaMallocAsync has none to register), and a registered buffer that a memory policy evicts would leave NCCL a range that is no longer mapped. Fix: unset it for runs under a memory policy.".into(),
        });
    }
    // CUDA graphs replay captured work without calling CUDA: nothing to interpose.
    let graph_words = [
        "torch.cuda.graph(",
        "CUDAGraph",
        "make_graphed_callables",
        "reduce-overhead",
        "cudagraphs",
    ];
    for var in [
        "TORCHINDUCTOR_CUDAGRAPHS",
        "TORCHINDUCTOR_TRITON_CUDAGRAPHS",
    ] {
        if env(var).as_deref() == Some("1") {
            findings.push(Finding {
                problem: true,
                topic: "settings",
                text: format!("{var}=1: CUDA graphs replay captured kernels and allocations without calling CUDA, so a memory policy cannot see or move what they use. Fix: unset it for runs under a memory policy."),
            });
        }
    }
    for arg in cmd.iter().filter(|a| a.ends_with(".py")) {
        if let Ok(src) = std::fs::read_to_string(arg) {
            let found: Vec<&str> = graph_words
                .iter()
                .copied()
                .filter(|w| src.contains(w))
                .collect();
            if !found.is_empty() {
                findings.push(Finding {
                    problem: true,
                    topic: "settings",
                    text: format!("{arg} uses CUDA graphs ({}): captured work replays without calling CUDA, so a memory policy cannot see or move the tensors it uses. Fix: run without graphs under a memory policy.", found.join(", ")),
                });
            }
        }
    }
}

fn cache_dir() -> Option<PathBuf> {
    let env = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    env("MARMOSET_CACHE_DIR")
        .map(PathBuf::from)
        .or_else(|| env("XDG_CACHE_HOME").map(|d| PathBuf::from(d).join("marmoset")))
        .or_else(|| env("HOME").map(|d| PathBuf::from(d).join(".cache/marmoset")))
}

fn check_cache(findings: &mut Vec<Finding>) -> Option<PathBuf> {
    let dir = cache_dir();
    let r = dir.as_ref().map(|d| {
        std::fs::create_dir_all(d).and_then(|_| {
            let probe = d.join(format!(".doctor-{}", std::process::id()));
            std::fs::write(&probe, b"ok").and_then(|_| std::fs::remove_file(&probe))
        })
    });
    match (&dir, r) {
        (Some(d), Some(Ok(()))) => findings.push(Finding {
            problem: false,
            topic: "cache",
            text: format!("the benchmark cache {} is writable", d.display()),
        }),
        (Some(d), Some(Err(e))) => findings.push(Finding {
            problem: true,
            topic: "cache",
            text: format!("the benchmark cache {} is not writable ({e}): μ-cuDNN measures every convolution again in each process. Fix: set MARMOSET_CACHE_DIR to a writable directory.", d.display()),
        }),
        _ => findings.push(Finding {
            problem: true,
            topic: "cache",
            text: "no benchmark cache directory (neither MARMOSET_CACHE_DIR, XDG_CACHE_HOME nor HOME is set). Fix: set MARMOSET_CACHE_DIR.".into(),
        }),
    }
    dir
}

pub fn doctor(o: &Options) -> Result<ExitCode> {
    let cmd = if o.cmd.is_empty() {
        default_program()
    } else {
        o.cmd.clone()
    };
    let logdir = std::env::temp_dir().join(format!("marmoset-doctor-{}", std::process::id()));
    std::fs::create_dir_all(&logdir)
        .with_context(|| format!("cannot create {}", logdir.display()))?;
    let mut c = Command::new(&cmd[0]);
    c.args(&cmd[1..])
        .env("LD_DEBUG", "files,libs")
        .env("LD_DEBUG_OUTPUT", logdir.join("ld"))
        .stdin(Stdio::null());
    if o.sim {
        let dir = crate::locate::sim_dir()?;
        let mut path = dir.into_os_string();
        if let Some(old) = std::env::var_os("LD_LIBRARY_PATH").filter(|o| !o.is_empty()) {
            path.push(":");
            path.push(old);
        }
        c.env("LD_LIBRARY_PATH", path);
    }
    let out = c
        .output()
        .with_context(|| format!("cannot run {}", cmd[0]))?;
    let mut text = String::new();
    for e in std::fs::read_dir(&logdir)?.flatten() {
        text.push_str(&std::fs::read_to_string(e.path()).unwrap_or_default());
    }
    std::fs::remove_dir_all(&logdir).ok();
    let log = parse_loader_log(&text);

    let shim = crate::locate::lib_dir()
        .map(|d| d.join("libmarmoset.so"))
        .ok()
        .filter(|p| p.is_file());
    let hooks = shim.as_ref().map(|p| exported_functions(p)).transpose()?;
    let mut findings = Vec::new();
    let mut libs = Vec::new();
    let mut coverage: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    let ld_library_path = std::env::var("LD_LIBRARY_PATH").unwrap_or_default();
    for (path, origin) in &log.loaded {
        let p = Path::new(path);
        let name = p
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let Some(fam) = family(&name) else { continue };
        let exports = exported_functions(p).unwrap_or_default();
        let (hooked, not_hooked): (Vec<&String>, Vec<&String>) = match &hooks {
            Some(h) => exports.iter().partition(|f| h.contains(*f)),
            None => (Vec::new(), Vec::new()),
        };
        let e = coverage.entry(fam).or_default();
        e.0 += exports.len();
        e.1 += hooked.len();
        if is_nvidia_wheel_dir(p) && origin.starts_with("RPATH") {
            findings.push(Finding {
                // A trap on the simulated GPU; on a GPU, these are the libraries meant to run.
                problem: o.sim,
                topic: "rpath",
                text: format!("{name} loaded from {} through the {origin}: DT_RPATH is searched before LD_LIBRARY_PATH{}, so this nvidia-* wheel's library wins over any other (the simulated GPU's under `marmoset run --sim` included). Fix: `pip uninstall` the nvidia-* wheels when you mean to use other CUDA libraries, or keep them and know these are what runs.",
                    p.parent().map(|d| d.display().to_string()).unwrap_or_default(),
                    if ld_library_path.is_empty() { String::new() } else { format!(" ({ld_library_path})") }),
            });
        }
        libs.push(json!({
            "name": name,
            "path": path,
            "found_through": origin,
            "family": fam,
            "exported_functions": exports.len(),
            "hooked": hooked.len(),
            "hooked_functions": hooked,
            "not_hooked_functions": not_hooked,
        }));
    }
    // nvidia-* wheels beside torch: every DT_RPATH of a loaded object that reaches into one.
    let mut trap_dirs: BTreeMap<PathBuf, (String, Vec<String>)> = BTreeMap::new();
    for (path, _) in &log.loaded {
        for r in rpaths(Path::new(path)) {
            if !is_nvidia_wheel_dir(&r) || !r.is_dir() {
                continue;
            }
            let mut held: Vec<String> = std::fs::read_dir(&r)
                .map(|d| {
                    d.flatten()
                        .map(|e| e.file_name().to_string_lossy().into_owned())
                        .filter(|n| n.contains(".so"))
                        .collect()
                })
                .unwrap_or_default();
            if held.is_empty() {
                continue;
            }
            held.sort();
            let dir = r.canonicalize().unwrap_or(r);
            trap_dirs.entry(dir).or_insert((path.clone(), held));
        }
    }
    for (dir, (by, held)) in &trap_dirs {
        findings.push(Finding {
            problem: o.sim,
            topic: "rpath",
            text: format!("nvidia-* wheel beside torch: {} holds {}; {by} names it in its DT_RPATH, which the loader searches before LD_LIBRARY_PATH: these libraries load instead of the ones LD_LIBRARY_PATH points at. Fix: `pip uninstall` those nvidia-* wheels when you mean to run on other CUDA libraries (the simulated GPU included).",
                dir.display(), held.join(", ")),
        });
    }
    let loaded_names: BTreeSet<String> = log
        .loaded
        .iter()
        .filter_map(|(p, _)| {
            Path::new(p)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
        })
        .collect();
    let missing: Vec<(String, String)> = log
        .wanted
        .iter()
        .filter(|(n, _)| family(n).is_some() && !n.starts_with('/') && !loaded_names.contains(*n))
        .map(|(n, by)| (n.clone(), by.clone()))
        .collect();
    for (n, by) in &missing {
        findings.push(Finding {
            problem: true,
            topic: "libraries",
            text: format!("{n} is wanted by {by} and was not found: the program cannot use CUDA (or does not start). Fix: install it (the CUDA toolkit, or the nvidia-* wheel that carries it){}.",
                if o.sim { "; on the simulated GPU, it is one the simulator does not provide yet" } else { "" }),
        });
    }
    if log.loaded.is_empty() {
        findings.push(Finding {
            problem: true,
            topic: "libraries",
            text: "the dynamic loader's log is empty: the program is static, setuid, or ignores LD_DEBUG; nothing can be said about its libraries".into(),
        });
    } else if libs.is_empty() {
        findings.push(Finding {
            problem: true,
            topic: "libraries",
            text: format!(
                "{} loaded no CUDA library{}: Marmoset has nothing to interpose. {}",
                cmd.join(" "),
                if out.status.success() {
                    ""
                } else {
                    " (it failed, below)"
                },
                if o.sim {
                    ""
                } else {
                    "On a machine without a GPU, try `marmoset doctor --sim`."
                }
            ),
        });
    }
    settings(&cmd, &mut findings);
    let cache = check_cache(&mut findings);
    let problems = findings.iter().filter(|f| f.problem).count();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let last_err = stderr
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .to_string();
    if o.json {
        let v = json!({
            "program": cmd,
            "simulated_gpu": o.sim,
            "exit_code": out.status.code(),
            "program_error": if out.status.success() { None } else { Some(&last_err) },
            "libmarmoset": shim.as_ref().map(|p| p.display().to_string()),
            "hooks": hooks.as_ref().map(BTreeSet::len),
            "libraries": libs,
            "missing": missing.iter().map(|(n, by)| json!({"name": n, "wanted_by": by})).collect::<Vec<_>>(),
            "coverage": coverage.iter().map(|(f, (e, h))| (f.to_string(), json!({"exported_functions": e, "hooked": h}))).collect::<serde_json::Map<_, _>>(),
            "cache_dir": cache.map(|c| c.display().to_string()),
            "findings": findings.iter().map(|f| json!({"problem": f.problem, "topic": f.topic, "text": f.text})).collect::<Vec<_>>(),
            "problems": problems,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!(
            "marmoset doctor: `{}`{} exited with {}",
            cmd.join(" "),
            if o.sim { " on the simulated GPU" } else { "" },
            out.status
                .code()
                .map_or("a signal".to_string(), |c| c.to_string())
        );
        if !out.status.success() && !last_err.is_empty() {
            println!("  its last error line: {last_err}");
        }
        match &shim {
            Some(p) => println!(
                "libmarmoset.so: {} ({} exported functions: the hooks)",
                p.display(),
                hooks.as_ref().map_or(0, BTreeSet::len)
            ),
            None => println!("libmarmoset.so: not found (set MARMOSET_LIB_DIR): hooks not counted"),
        }
        println!("\nCUDA-family libraries it loaded ({}):", libs.len());
        for l in &libs {
            println!(
                "  {:<24} {}\n    found through {}; {}: {} of {} exported functions hooked",
                l["name"].as_str().unwrap_or_default(),
                l["path"].as_str().unwrap_or_default(),
                l["found_through"].as_str().unwrap_or_default(),
                l["family"].as_str().unwrap_or_default(),
                l["hooked"],
                l["exported_functions"]
            );
        }
        if !missing.is_empty() {
            println!("\nwanted and not found ({}):", missing.len());
            for (n, by) in &missing {
                println!("  {n} (wanted by {by})");
            }
        }
        if !coverage.is_empty() {
            println!("\nhook coverage by family:");
            for (f, (e, h)) in &coverage {
                println!("  {f:<12} {h:>5} of {e:>5} exported functions hooked");
            }
        }
        println!();
        for f in &findings {
            println!(
                "{} [{}] {}",
                if f.problem { "PROBLEM" } else { "ok     " },
                f.topic,
                f.text
            );
        }
        println!(
            "\n{problems} problem{} found",
            if problems == 1 { "" } else { "s" }
        );
    }
    Ok(if problems == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loader_log_says_what_loaded_from_where_and_what_is_missing() {
        let log = "\
     10:\tfile=libtorch_fake.so [0];  dynamically loaded by /usr/bin/python3 [0]
     10:\tfind library=libcudnn.so.9 [0]; searching
     10:\t search path=/site/torch/lib/../../nvidia/cudnn/lib\t\t(RPATH from file /site/torch/lib/libtorch_fake.so)
     10:\t  trying file=/site/torch/lib/../../nvidia/cudnn/lib/libcudnn.so.9
     10:\tfile=libcudnn.so.9 [0];  needed by /site/torch/lib/libtorch_fake.so [0]
     10:\tfile=/site/torch/lib/../../nvidia/cudnn/lib/libcudnn.so.9 [0];  generating link map
     10:\tfile=libcublasLt.so.13 [0];  needed by /site/torch/lib/libtorch_fake.so [0]
     10:\t search cache=/etc/ld.so.cache
     10:\t  trying file=/lib/x/libz.so.1
     10:\tfile=/lib/x/libz.so.1 [0];  generating link map
";
        let l = parse_loader_log(log);
        assert_eq!(
            l.loaded,
            [
                (
                    "/site/torch/lib/../../nvidia/cudnn/lib/libcudnn.so.9".to_string(),
                    "RPATH from file /site/torch/lib/libtorch_fake.so".to_string()
                ),
                (
                    "/lib/x/libz.so.1".to_string(),
                    "the loader cache /etc/ld.so.cache".to_string()
                )
            ]
        );
        assert_eq!(
            l.wanted["libcublasLt.so.13"],
            "/site/torch/lib/libtorch_fake.so"
        );
        assert_eq!(family("libcublasLt.so.13"), Some("cuBLASLt"));
        assert_eq!(family("libcuda.so.1"), Some("driver"));
        assert_eq!(family("libz.so.1"), None);
    }
}
