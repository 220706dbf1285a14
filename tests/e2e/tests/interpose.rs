//! Marmoset's `dlsym` and `cuGetProcAddress` interposers among libraries that find their own
//! functions by name. Each case here sent the old interposer into unbounded recursion (a stack
//! overflow, SIGSEGV) on the first call:
//! - a cuDNN 9-shaped dispatcher: `libcudnn.so.9` forwards every API function to the one that
//!   `dlsym(sub_library, "exact name")` returns, resolved on first call (NVIDIA's is built so);
//! - the same through `cuGetProcAddress`: a `libcuda.so.1` that forwards to the driver functions
//!   it obtains from the real `cuGetProcAddress_v2`, itself found with `dlsym`;
//! - a second preload tool stacked after Marmoset that wraps a runtime function and finds the
//!   next one with `dlsym(RTLD_NEXT, ...)` in its constructor.
//!
//! The dispatchers are generated here: one x86-64 trampoline per function the real library
//! exports, jumping through a pointer resolved on the first call.
#![cfg(target_arch = "x86_64")]

use marmoset_e2e::*;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Every function a shared library exports (`nm -D --defined-only`, text symbols).
fn exported_functions(lib: &Path) -> Vec<String> {
    let o = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(lib)
        .output()
        .expect("nm");
    assert!(o.status.success(), "nm {}: {}", lib.display(), stderr(&o));
    let mut v: Vec<String> = stdout(&o)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 3 && f[1] == "T").then(|| f[2].to_string())
        })
        .collect();
    v.sort();
    v.dedup();
    assert!(
        v.len() > 10,
        "{} exports {} functions",
        lib.display(),
        v.len()
    );
    v
}

/// C source of a dispatch library: it exports every name in `names`; the first call of each
/// resolves it in the library at $DISPATCH_TARGET (opened RTLD_LOCAL by path), with
/// `dlsym(handle, "exact name")`, or, for the names in `via_get_proc` (name, base name,
/// version), with the target's `cuGetProcAddress_v2`, itself found with `dlsym`.
fn dispatcher_source(names: &[String], via_get_proc: &[(&str, &str, i32)]) -> String {
    let mut s = String::from(
        "#define _GNU_SOURCE\n#include <dlfcn.h>\n#include <stdio.h>\n#include <stdlib.h>\n\
         __attribute__((visibility(\"hidden\"))) void *dispatch_ptrs[",
    );
    s += &format!("{}];\nstatic const char *const names[] = {{\n", names.len());
    for n in names {
        s += &format!("  \"{n}\",\n");
    }
    s += "};\nstatic const struct { const char *name, *base; int version; } via[] = {\n";
    for (n, b, v) in via_get_proc {
        s += &format!("  {{\"{n}\", \"{b}\", {v}}},\n");
    }
    s += r#"  {0, 0, 0}};
typedef int (*get_proc_t)(const char *, void **, int, unsigned long long, int *);
static void *target(void) {
  static void *h;
  if (!h) {
    const char *path = getenv("DISPATCH_TARGET");
    h = path ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : 0;
    if (!h) { fprintf(stderr, "dispatcher: cannot open %s: %s\n", path ? path : "(unset)", dlerror()); abort(); }
  }
  return h;
}
__attribute__((visibility("hidden"))) void *dispatch_resolve(long k) {
  void *p = 0;
  for (int i = 0; via[i].name; i++) {
    if (__builtin_strcmp(via[i].name, names[k]) == 0) {
      get_proc_t get_proc = (get_proc_t)dlsym(target(), "cuGetProcAddress_v2");
      int status = 0;
      if (!get_proc || get_proc(via[i].base, &p, via[i].version, 0, &status) != 0) p = 0;
    }
  }
  if (!p) p = dlsym(target(), names[k]);
  if (!p) { fprintf(stderr, "dispatcher: no %s in the target\n", names[k]); abort(); }
  dispatch_ptrs[k] = p;
  return p;
}
__asm__(
  ".text\n"
  "dispatch_common:\n"
  "  push %rdi\n  push %rsi\n  push %rdx\n  push %rcx\n  push %r8\n  push %r9\n"
  "  sub $136, %rsp\n"
  "  movdqu %xmm0, 0(%rsp)\n  movdqu %xmm1, 16(%rsp)\n  movdqu %xmm2, 32(%rsp)\n  movdqu %xmm3, 48(%rsp)\n"
  "  movdqu %xmm4, 64(%rsp)\n  movdqu %xmm5, 80(%rsp)\n  movdqu %xmm6, 96(%rsp)\n  movdqu %xmm7, 112(%rsp)\n"
  "  mov %r11, %rdi\n"
  "  call dispatch_resolve\n"
  "  movdqu 0(%rsp), %xmm0\n  movdqu 16(%rsp), %xmm1\n  movdqu 32(%rsp), %xmm2\n  movdqu 48(%rsp), %xmm3\n"
  "  movdqu 64(%rsp), %xmm4\n  movdqu 80(%rsp), %xmm5\n  movdqu 96(%rsp), %xmm6\n  movdqu 112(%rsp), %xmm7\n"
  "  add $136, %rsp\n"
  "  pop %r9\n  pop %r8\n  pop %rcx\n  pop %rdx\n  pop %rsi\n  pop %rdi\n"
  "  jmp *%rax\n"
"#;
    for (k, n) in names.iter().enumerate() {
        s += &format!(
            "  \".globl {n}\\n.type {n},@function\\n{n}:\\n  mov dispatch_ptrs+{off}(%rip), %rax\\n  test %rax, %rax\\n  jz 1f\\n  jmp *%rax\\n1:\\n  mov ${k}, %r11\\n  jmp dispatch_common\\n\"\n",
            off = 8 * k
        );
    }
    s += ");\n";
    s
}

/// Builds a dispatcher with `soname` over the simulated library `target` into a fresh directory.
fn build_dispatcher(soname: &str, target: &Path, via_get_proc: &[(&str, &str, i32)]) -> PathBuf {
    let dir = temp_path(&format!("dispatch-{soname}"));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("dispatch.c");
    std::fs::write(
        &src,
        dispatcher_source(&exported_functions(target), via_get_proc),
    )
    .unwrap();
    let o = Command::new("cc")
        .args(["-shared", "-fPIC", "-O1", "-o"])
        .arg(dir.join(soname))
        .arg(&src)
        .arg(format!("-Wl,-soname,{soname}"))
        .arg("-ldl")
        .output()
        .expect("cc");
    assert!(
        o.status.success(),
        "building the dispatcher: {}",
        stderr(&o)
    );
    dir
}

/// The simulated GPU's directory (libraries under their real sonames).
fn sim_dir() -> PathBuf {
    let o = Command::new(marmoset()).arg("sim-path").output().unwrap();
    ok(&o);
    PathBuf::from(stdout(&o).trim())
}

/// Runs the trainer on the simulated GPU (h100) with `dir` ahead of the simulated libraries,
/// without and with libmarmoset.so (policy none, trace on); returns both outputs.
fn trainer_with(dir: &Path, target: &Path) -> (String, String) {
    let sim = sim_dir();
    let run = |shim: bool| {
        let mut c = Command::new(workloads().join("trainer"));
        c.arg("2");
        for (k, _) in std::env::vars() {
            if k.starts_with("MARMOSET_") || k.starts_with("SIMGPU_") || k == "LD_PRELOAD" {
                c.env_remove(k);
            }
        }
        c.env(
            "LD_LIBRARY_PATH",
            format!("{}:{}", dir.display(), sim.display()),
        )
        .env("SIMGPU_PROFILE", "h100")
        .env("DISPATCH_TARGET", target);
        if shim {
            c.env("LD_PRELOAD", build_dir().join("libmarmoset.so"))
                .env("MARMOSET_TRACE", temp_path("interpose.jsonl"));
        }
        let o = c.output().unwrap();
        ok(&o);
        stdout(&o)
    };
    (run(false), run(true))
}

#[test]
fn a_cudnn_shaped_dispatcher_gets_the_real_functions() {
    let target = sim_dir().join("libcudnn.so.9").canonicalize().unwrap();
    let dir = build_dispatcher("libcudnn.so.9", &target, &[]);
    let (plain, shim) = trainer_with(&dir, &target);
    assert!(plain.contains("loss"), "{plain}");
    assert_eq!(plain, shim, "same output with and without Marmoset");
}

#[test]
fn a_driver_dispatching_through_cu_get_proc_address_gets_the_real_functions() {
    let target = sim_dir().join("libcuda.so.1").canonicalize().unwrap();
    let dir = build_dispatcher(
        "libcuda.so.1",
        &target,
        &[
            ("cuMemAlloc_v2", "cuMemAlloc", 3020),
            ("cuMemFree_v2", "cuMemFree", 3020),
            ("cuMemAllocAsync", "cuMemAllocAsync", 11020),
            ("cuLaunchKernel", "cuLaunchKernel", 4000),
            ("cuMemcpyAsync", "cuMemcpyAsync", 4000),
        ],
    );
    let (plain, shim) = trainer_with(&dir, &target);
    assert!(plain.contains("loss"), "{plain}");
    assert_eq!(plain, shim, "same output with and without Marmoset");
}

const TOOL: &str = r#"
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stddef.h>
typedef int (*malloc_t)(void **, size_t);
static malloc_t next_malloc;
static int calls;
__attribute__((constructor)) static void init(void) {
  next_malloc = (malloc_t)dlsym(RTLD_NEXT, "cudaMalloc");
}
int cudaMalloc(void **p, size_t n) {
  calls++;
  return next_malloc ? next_malloc(p, n) : 1;
}
__attribute__((destructor)) static void fini(void) {
  Dl_info info;
  const char *where = next_malloc && dladdr((void *)next_malloc, &info) ? info.dli_fname : "?";
  fprintf(stderr, "tool: %d calls, next is in %s\n", calls, where);
}
"#;

/// Builds the tool into a directory of its own (`name`): the tests run in parallel threads of
/// one process, and one test's build must not be read half-written by another.
fn build_tool(name: &str) -> PathBuf {
    let dir = temp_path(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("tool.c"), TOOL).unwrap();
    let lib = dir.join("libtool.so");
    let o = Command::new("cc")
        .args(["-shared", "-fPIC", "-O1", "-o"])
        .arg(&lib)
        .arg(dir.join("tool.c"))
        .arg("-ldl")
        .output()
        .expect("cc");
    assert!(o.status.success(), "{}", stderr(&o));
    lib
}

/// Stacked after Marmoset (`LD_PRELOAD=tool.so marmoset run ...` puts libmarmoset.so first), the
/// tool's `dlsym(RTLD_NEXT, "cudaMalloc")` must give the function after the tool (the runtime's),
/// not the tool's own function and not our hook.
#[test]
fn a_preload_tool_after_marmoset_finds_the_next_function_after_itself() {
    let tool = build_tool("tool-after");
    let mut c = Command::new(marmoset());
    c.args(["run", "--sim=h100", "--trace"])
        .arg(temp_path("tool.jsonl"))
        .arg("--")
        .arg(workloads().join("trainer"))
        .arg("2")
        .env("LD_PRELOAD", &tool);
    for (k, _) in std::env::vars() {
        if k.starts_with("MARMOSET_") || k.starts_with("SIMGPU_") {
            c.env_remove(k);
        }
    }
    let o = c.output().unwrap();
    ok(&o);
    let line = stderr(&o)
        .lines()
        .find(|l| l.starts_with("tool:"))
        .unwrap_or_default()
        .to_string();
    // Marmoset comes first, so the program's calls reach Marmoset, which forwards to the runtime.
    assert!(line.contains("libcudart"), "{line}\n{}", stderr(&o));
}

/// Stacked before Marmoset, the tool's next function is Marmoset's hook, and the program's calls
/// go tool -> Marmoset -> runtime, each once.
#[test]
fn a_preload_tool_before_marmoset_calls_marmoset_next() {
    let tool = build_tool("tool-before");
    let shim = build_dir().join("libmarmoset.so");
    let trace = temp_path("tool-first.jsonl");
    let mut c = Command::new(marmoset());
    c.args(["run", "--sim=h100", "--no-shim", "--"])
        .arg(workloads().join("trainer"))
        .arg("2")
        .env(
            "LD_PRELOAD",
            format!("{}:{}", tool.display(), shim.display()),
        )
        .env("MARMOSET_TRACE", &trace);
    for (k, _) in std::env::vars() {
        if (k.starts_with("MARMOSET_") && k != "MARMOSET_TRACE") || k.starts_with("SIMGPU_") {
            c.env_remove(k);
        }
    }
    let o = c.output().unwrap();
    ok(&o);
    let line = stderr(&o)
        .lines()
        .find(|l| l.starts_with("tool:"))
        .unwrap_or_default()
        .to_string();
    assert!(line.contains("libmarmoset"), "{line}\n{}", stderr(&o));
    let calls: usize = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    let allocs = std::fs::read_to_string(&trace)
        .unwrap()
        .lines()
        .filter(|l| l.contains("\"api\":\"cudaMalloc\""))
        .count();
    assert!(calls > 0, "{line}");
    assert_eq!(
        calls, allocs,
        "every call the tool saw reached Marmoset once"
    );
}
