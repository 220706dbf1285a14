//! Every library torch loads, as the simulated GPU serves it (`marmoset sim-path`): each name
//! torch imports (simgpu/names/, regenerated from torch by scripts/gen-torch-names.py)
//! resolves; what is not simulated answers its family's not-supported status and is named once at
//! SIMGPU_LOG=debug; and the runtime answers the calls a training step makes as the real one does.
//! The probes are Python ctypes scripts (python3 is what scripts/setup-torch.sh needs anyway).

use marmoset_e2e::*;
use std::ffi::CString;
use std::path::PathBuf;
use std::process::{Command, Output};

fn sim_dir() -> PathBuf {
    let o = Command::new(marmoset()).arg("sim-path").output().unwrap();
    ok(&o);
    PathBuf::from(stdout(&o).trim())
}

fn names() -> Vec<(String, Vec<String>)> {
    let dir = root().join("simgpu/names");
    let mut v: Vec<(String, Vec<String>)> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| {
            let file = e.file_name().into_string().unwrap();
            let so = file.strip_suffix(".txt").unwrap().to_string();
            let text = std::fs::read_to_string(e.path()).unwrap();
            let names = text
                .lines()
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
                .map(|l| l.split_whitespace().next().unwrap().to_string())
                .collect();
            (so, names)
        })
        .collect();
    v.sort();
    v
}

#[test]
fn every_name_torch_imports_resolves_in_its_simulated_library() {
    let dir = sim_dir();
    let lists = names();
    assert!(lists.len() >= 14, "{} lists", lists.len());
    let mut total = 0;
    for (so, names) in lists {
        let path = CString::new(dir.join(&so).to_string_lossy().as_bytes()).unwrap();
        // SAFETY: dlopen with a NUL-terminated path; RTLD_NOW resolves every import as Python's
        // extension loading does.
        let h = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        assert!(!h.is_null(), "{so} does not load from {}", dir.display());
        // The soname is the real library's.
        let elf = Command::new("readelf")
            .arg("-d")
            .arg(dir.join(&so))
            .output()
            .unwrap();
        assert!(
            stdout(&elf).contains(&format!("[{so}]")),
            "{so}: {}",
            stdout(&elf)
        );
        for n in names {
            let c = CString::new(n.as_str()).unwrap();
            // SAFETY: a live handle and a NUL-terminated name.
            let f = unsafe { libc::dlsym(h, c.as_ptr()) };
            assert!(!f.is_null(), "{so} does not export {n}");
            total += 1;
        }
    }
    assert!(total > 700, "{total} names");
}

fn python(script: &str, env: &[(&str, &str)]) -> Output {
    let mut c = Command::new("python3");
    c.arg("-c").arg(script).arg(sim_dir());
    for (k, _) in std::env::vars() {
        if k.starts_with("SIMGPU_") {
            c.env_remove(k);
        }
    }
    c.env("SIMGPU_MODE", "shape");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("python3")
}

/// Calls one stub per family twice; prints what each returned.
const STUBS: &str = r#"
import ctypes, sys
d = sys.argv[1]
def call(so, name, restype=ctypes.c_int):
    f = getattr(ctypes.CDLL(d + "/" + so), name)
    f.restype = restype
    return f(None), f(None)
print("cufft", *call("libcufft.so.12", "cufftCreate"))
print("cusolver", *call("libcusolver.so.12", "cusolverDnCreate"))
print("cusparse", *call("libcusparse.so.12", "cusparseCreate"))
print("cusparselt", *call("libcusparseLt.so.0", "cusparseLtInit"))
print("nccl", *call("libnccl.so.2", "ncclCommShrink"))
print("nvrtc", *call("libnvrtc.so.13", "nvrtcCreateProgram"))
print("cupti", *call("libcupti.so.13", "cuptiSubscribe"))
print("cufile_read", *call("libcufile.so.0", "cuFileRead", ctypes.c_ssize_t))
print("nvshmem_malloc", *[x or 0 for x in call("libnvshmem_host.so.3", "nvshmem_malloc", ctypes.c_void_p)])
print("cudart", *call("libcudart.so.13", "cudaGraphDestroy"))
print("driver", *call("libcuda.so.1", "cuGreenCtxDestroy"))
s = call("libnvrtc.so.13", "nvrtcGetErrorString", ctypes.c_char_p)[0]
print("string", s.decode().replace(" ", "_"))
"#;

#[test]
fn what_is_not_simulated_answers_not_supported_and_is_named_once_at_debug() {
    let o = python(STUBS, &[("SIMGPU_LOG", "debug")]);
    ok(&o);
    let out = stdout(&o);
    for (family, code) in [
        ("cufft", "16"),
        ("cusolver", "9"),
        ("cusparse", "10"),
        ("cusparselt", "10"),
        ("nccl", "5"),
        ("nvrtc", "11"),
        ("cupti", "27"),
        ("cufile_read", "-5007"),
        ("nvshmem_malloc", "0"),
        ("cudart", "801"),
        ("driver", "801"),
    ] {
        assert!(
            out.contains(&format!("{family} {code} {code}\n")),
            "{family}: {out}"
        );
    }
    assert!(out.contains("string nvrtcGetErrorString:"), "{out}");
    let err = stderr(&o);
    assert_eq!(
        err.matches("cufftCreate is not simulated").count(),
        1,
        "named once: {err}"
    );
    // Quiet without SIMGPU_LOG=debug.
    let quiet = python(STUBS, &[]);
    ok(&quiet);
    assert!(
        !stderr(&quiet).contains("not simulated"),
        "{}",
        stderr(&quiet)
    );
}

/// The runtime calls of a training step, through libcudart.so.13 as torch makes them.
const RUNTIME: &str = r#"
import ctypes, sys
d = sys.argv[1]
rt = ctypes.CDLL(d + "/libcudart.so.13")
c_int, c_void_p, c_size_t = ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t
def ck(name, *a):
    r = getattr(rt, name)(*a)
    if r != 0:
        print("FAILED", name, r); sys.exit(1)

# cudaDeviceProp (CUDA 13 layout): name at 0, totalGlobalMem at 288, major/minor at 360/364.
prop = ctypes.create_string_buffer(2048)
ck("cudaGetDeviceProperties", prop, 0)
print("name", prop.raw[:256].split(b"\0")[0].decode().replace(" ", "_"))
print("total", ctypes.c_size_t.from_buffer(prop, 288).value)
print("cc", c_int.from_buffer(prop, 360).value, c_int.from_buffer(prop, 364).value)
v = c_int()
for attr in (8, 9, 10, 12, 19, 31, 32, 37, 38, 39, 40, 78, 81, 82, 83, 89, 95, 97, 106):
    ck("cudaDeviceGetAttribute", ctypes.byref(v), attr, 0)
print("optin", (ck("cudaDeviceGetAttribute", ctypes.byref(v), 97, 0), v.value)[1])

lo, hi = c_int(), c_int()
ck("cudaDeviceGetStreamPriorityRange", ctypes.byref(lo), ctypes.byref(hi))
s = c_void_p()
ck("cudaStreamCreateWithPriority", ctypes.byref(s), 1, hi.value - 10)
p = c_int(7)
ck("cudaStreamGetPriority", s, ctypes.byref(p))
print("priority", lo.value, hi.value, p.value)

st, cid = c_int(9), ctypes.c_ulonglong(5)
ck("cudaStreamGetCaptureInfo", s, ctypes.byref(st), ctypes.byref(cid), None, None, None, None)
mode = c_int(1)
ck("cudaThreadExchangeStreamCaptureMode", ctypes.byref(mode))
print("capture", st.value, cid.value, mode.value)

# Pointer attributes: type, device, devicePointer, hostPointer.
dev, pinned = c_void_p(), c_void_p()
ck("cudaMalloc", ctypes.byref(dev), 1 << 20)
ck("cudaMallocHost", ctypes.byref(pinned), 4096)
pageable = ctypes.create_string_buffer(64)
def attrs(ptr):
    a = (ctypes.c_byte * 96)()
    ck("cudaPointerGetAttributes", a, c_void_p(ptr))
    t = c_int.from_buffer(a, 0).value
    dv = c_int.from_buffer(a, 4).value
    dp = c_void_p.from_buffer(a, 8).value or 0
    hp = c_void_p.from_buffer(a, 16).value or 0
    return t, dv, dp == ptr, hp == ptr
print("ptr_device", *attrs(dev.value + 100))
print("ptr_pinned", *attrs(pinned.value))
print("ptr_pageable", *attrs(ctypes.addressof(pageable)))

# A host function runs, off the calling thread, before the stream synchronises.
import threading
ran = []
HOSTFN = ctypes.CFUNCTYPE(None, c_void_p)
fn = HOSTFN(lambda _: ran.append(threading.get_ident()))
ck("cudaLaunchHostFunc", s, fn, None)
CB = ctypes.CFUNCTYPE(None, c_void_p, c_int, c_void_p)
cb = CB(lambda _s, status, _u: ran.append(status))
ck("cudaStreamAddCallback", s, cb, None, 0)
ck("cudaStreamSynchronize", s)
print("hostfn", len(ran), int(ran[0] != threading.get_ident()), ran[1])

# cudaMemcpy2DAsync: 4 rows of 8 bytes from a pitch of 16 to a pitch of 32, and back.
src = (ctypes.c_ubyte * 64)(*range(64))
ck("cudaMemcpy2DAsync", dev, c_size_t(32), src, c_size_t(16), c_size_t(8), c_size_t(4), 1, s)
ck("cudaStreamSynchronize", s)
e = c_void_p()
ck("cudaEventCreateWithFlags", ctypes.byref(e), 2)
ck("cudaEventRecordWithFlags", e, s, 0)
print("record_external", rt.cudaEventRecordWithFlags(e, s, 1))

# An unknown function is an invalid device function.
fa = (ctypes.c_byte * 256)()
print("funcattr_unknown", rt.cudaFuncGetAttributes(fa, c_void_p(0x1234)))
n = c_int()
print("occupancy_unknown", rt.cudaOccupancyMaxActiveBlocksPerMultiprocessor(ctypes.byref(n), c_void_p(0x1234), 256, c_size_t(0)))
print("last", rt.cudaGetLastError())
print("peer", rt.cudaDeviceEnablePeerAccess(0, 0))
"#;

#[test]
fn the_runtime_answers_what_a_training_step_asks() {
    let o = python(RUNTIME, &[]);
    ok(&o);
    let v = values_of(&stdout(&o));
    let line = |k: &str| {
        v.iter()
            .find(|(n, _)| n == k)
            .map(|(_, r)| r.clone())
            .unwrap_or_else(|| panic!("no {k} in {}{}", stdout(&o), stderr(&o)))
    };
    assert_eq!(line("name"), "NVIDIA_H100_80GB_HBM3_(simulated)");
    assert_eq!(line("total"), "85520809984");
    assert_eq!(line("cc"), "9 0");
    assert_eq!(line("optin"), "232448");
    // Priorities are clamped to the device's range [greatest, least] = [-5, 0] on sm_90.
    assert_eq!(line("priority"), "0 -5 -5");
    assert_eq!(
        line("capture"),
        "0 0 0",
        "not capturing; the old mode was global"
    );
    // cudaMemoryTypeDevice 2 / Host 1 / Unregistered 0; device -2 for unregistered memory.
    assert_eq!(line("ptr_device"), "2 0 True False");
    assert_eq!(line("ptr_pinned"), "1 0 True True");
    assert_eq!(line("ptr_pageable"), "0 -2 False True");
    assert_eq!(line("hostfn"), "2 1 0", "both ran, off the calling thread");
    assert_eq!(line("record_external"), "801");
    assert_eq!(line("funcattr_unknown"), "98");
    assert_eq!(line("occupancy_unknown"), "98");
    assert_eq!(line("last"), "98");
    assert_eq!(line("peer"), "101");
}

/// "key rest of line" pairs.
fn values_of(out: &str) -> Vec<(String, String)> {
    out.lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}
