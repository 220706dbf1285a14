//! The simulated driver's kernel parameters for the real torch's kernels: the fatbins of
//! `libtorch_cuda.so` (torch 2.15.0+cu132 in `.venv`, which the README's setup makes) are
//! registered with the driver as the runtime does at import, and `cuFuncGetParamInfo` is checked,
//! for a sample of kernels of each family, against the layout the kernel's demangled signature
//! implies under the C++ ABI (sizes and alignments of the parameter types; a parameter whose type
//! size cannot be derived from its name is taken as reported, and the ones after it are checked
//! from there). Fails, never skips, when `.venv` is missing.

use marmoset_e2e::*;
use std::collections::BTreeMap;
use std::ffi::{CString, c_char, c_int, c_void};
use std::path::PathBuf;

fn libtorch_cuda() -> PathBuf {
    let venv = root().join(".venv");
    let lib = std::fs::read_dir(venv.join("lib"))
        .ok()
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok())
        .map(|e| e.path().join("site-packages/torch/lib/libtorch_cuda.so"))
        .find(|p| p.is_file());
    lib.unwrap_or_else(|| {
        panic!(
            "{}: no torch/lib/libtorch_cuda.so under it; set the venv up as the README says \
             (torch 2.15.0+cu132)",
            venv.display()
        )
    })
}

/// The `.nv_fatbin` section of libtorch_cuda.so, in a read-only mapping of the file (only the
/// pages of the fatbins the driver reads are ever loaded).
fn nv_fatbin(path: &PathBuf) -> &'static [u8] {
    use object::{Object, ObjectSection};
    use std::os::fd::AsRawFd;
    let f = std::fs::File::open(path).unwrap();
    let len = f.metadata().unwrap().len() as usize;
    // SAFETY: a private read-only mapping of a file nobody writes during the test; it is never
    // unmapped, so the 'static slice stays valid.
    let file: &'static [u8] = unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_PRIVATE,
            f.as_raw_fd(),
            0,
        );
        assert_ne!(p, libc::MAP_FAILED, "mmap {}", path.display());
        std::slice::from_raw_parts(p as *const u8, len)
    };
    let elf = object::File::parse(file).unwrap();
    let sec = elf
        .section_by_name(".nv_fatbin")
        .expect("libtorch_cuda.so has a .nv_fatbin section");
    let (off, size) = sec.file_range().expect("a .nv_fatbin with file contents");
    &file[off as usize..(off + size) as usize]
}

/// Offsets of the fatbin containers in the section (each: 16-byte header with its size).
fn containers(sec: &[u8]) -> Vec<usize> {
    let mut out = Vec::new();
    let mut at = 0;
    while at + 16 <= sec.len() {
        let magic = u32::from_le_bytes(sec[at..at + 4].try_into().unwrap());
        if magic != 0xBA55_ED50 {
            at += 8; // padding between containers
            continue;
        }
        out.push(at);
        let hs = u16::from_le_bytes(sec[at + 6..at + 8].try_into().unwrap()) as usize;
        let size = u64::from_le_bytes(sec[at + 8..at + 16].try_into().unwrap()) as usize;
        at += hs + size;
    }
    out
}

type RegisterFatbin = unsafe extern "C" fn(*const c_void) -> *mut c_void;
type RegisterFunction = unsafe extern "C" fn(*mut c_void, *const c_void, *const c_char) -> c_int;
type ParamInfo = unsafe extern "C" fn(*const c_void, usize, *mut usize, *mut usize) -> c_int;

struct Driver {
    register_fatbin: RegisterFatbin,
    register_function: RegisterFunction,
    param_info: ParamInfo,
}

fn driver() -> Driver {
    let lib = build_dir().join("libsimgpu_cuda.so");
    assert!(
        lib.is_file(),
        "{} is missing: build the workspace first (cargo build --release --workspace)",
        lib.display()
    );
    let c = CString::new(lib.to_str().unwrap()).unwrap();
    // SAFETY: loading our own simulated driver library by path.
    let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    assert!(!h.is_null(), "dlopen {}", lib.display());
    let sym = |n: &std::ffi::CStr| {
        // SAFETY: a symbol look-up in a library we opened.
        let p = unsafe { libc::dlsym(h, n.as_ptr()) };
        assert!(!p.is_null(), "{n:?} missing");
        p
    };
    // SAFETY: the exported functions have these C signatures (simgpu/cuda/src/modules.rs
    // and cuFuncGetParamInfo in lib.rs).
    unsafe {
        Driver {
            register_fatbin: std::mem::transmute::<*mut c_void, RegisterFatbin>(sym(
                c"simgpuRegisterFatbinary",
            )),
            register_function: std::mem::transmute::<*mut c_void, RegisterFunction>(sym(
                c"simgpuRegisterFunction",
            )),
            param_info: std::mem::transmute::<*mut c_void, ParamInfo>(sym(c"cuFuncGetParamInfo")),
        }
    }
}

/// The top-level parameter types of a demangled kernel signature `...name<...>(T1, T2, ...)`.
fn param_types(demangled: &str) -> Vec<String> {
    let bytes = demangled.as_bytes();
    assert!(demangled.ends_with(')'), "{demangled}");
    let mut depth = 0i32;
    let mut open = None;
    for i in (0..bytes.len()).rev() {
        match bytes[i] {
            b')' | b'>' | b'}' | b']' => depth += 1,
            b'(' | b'<' | b'{' | b'[' => {
                depth -= 1;
                if depth == 0 {
                    open = Some(i);
                    break;
                }
            }
            _ => {}
        }
    }
    let inner = &demangled[open.expect("parameter list") + 1..demangled.len() - 1];
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, ch) in inner.char_indices() {
        match ch {
            '(' | '<' | '{' | '[' => depth += 1,
            ')' | '>' | '}' | ']' => depth -= 1,
            ',' if depth == 0 => {
                out.push(inner[start..i].trim().to_string());
                start = i + 1;
            }
            _ => {}
        }
    }
    if !inner.trim().is_empty() {
        out.push(inner[start..].trim().to_string());
    }
    out
}

/// Top-level template arguments of `Name<A, B, ...>`.
fn template_args(t: &str) -> Option<Vec<String>> {
    let open = t.find('<')?;
    let inner = t.get(open + 1..t.rfind('>')?)?;
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, ch) in inner.char_indices() {
        match ch {
            '(' | '<' => depth += 1,
            ')' | '>' => depth -= 1,
            ',' if depth == 0 => {
                out.push(inner[start..i].trim().to_string());
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(inner[start..].trim().to_string());
    Some(out)
}

/// (size, alignment) of a parameter type under the C++ ABI, where its name alone says.
fn size_align(t: &str) -> Option<(usize, usize)> {
    let t = t.trim();
    if t.ends_with('*') || t.ends_with('&') {
        return Some((8, 8));
    }
    let t = t.strip_suffix(" const").unwrap_or(t).trim();
    let t = t.strip_suffix(" volatile").unwrap_or(t).trim();
    let scalar = match t {
        "bool" | "char" | "signed char" | "unsigned char" => Some((1, 1)),
        "short" | "unsigned short" | "c10::Half" | "c10::BFloat16" => Some((2, 2)),
        "int" | "unsigned int" | "float" => Some((4, 4)),
        "long" | "unsigned long" | "long long" | "unsigned long long" | "double" => Some((8, 8)),
        "c10::complex<float>" => Some((8, 8)),
        "c10::complex<double>" => Some((16, 16)),
        _ => None,
    };
    if scalar.is_some() {
        return scalar;
    }
    let args = template_args(t);
    // `2ul` (c++filt) or `(unsigned long)2` (cpp_demangle).
    let count = |s: &str| {
        let s = s.trim();
        let s = s.find(')').map(|i| &s[i + 1..]).unwrap_or(s);
        s.trim_end_matches("ul")
            .trim_end_matches('u')
            .parse::<usize>()
    };
    if t.starts_with("std::array<") {
        let a = args?;
        let (s, al) = size_align(&a[0])?;
        return Some((s * count(&a[1]).ok()?, al));
    }
    if t.starts_with("at::cuda::detail::TensorInfo<") {
        // { T* data; I sizes[MAX_TENSORINFO_DIMS = 25]; I strides[25]; int dims; }
        let (i, _) = size_align(&args?[1])?;
        let raw = 8 + 2 * 25 * i + 4;
        return Some((raw.div_ceil(8) * 8, 8));
    }
    None
}

/// What the signature implies for each parameter: Some((offset, size)) where derivable, given
/// the reported layout of the parameters whose size is not (the next offset starts after them).
fn expected(types: &[String], reported: &[(usize, usize)]) -> Vec<Option<(usize, usize)>> {
    let mut at = 0usize;
    let mut out = Vec::new();
    for (t, &(roff, rsize)) in types.iter().zip(reported) {
        match size_align(t) {
            Some((s, a)) => {
                let off = at.div_ceil(a) * a;
                out.push(Some((off, s)));
                at = off + s;
            }
            None => {
                out.push(None);
                at = roff + rsize;
            }
        }
    }
    out
}

#[test]
fn param_info_for_torchs_kernels_matches_their_signatures() {
    let t0 = std::time::Instant::now();
    let sample_text = include_str!("data/torch-2.15-fatbin-sample.tsv");
    let sample: Vec<(&str, usize, &str)> = sample_text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let mut f = l.split('\t');
            (
                f.next().unwrap(),
                f.next().unwrap().parse().unwrap(),
                f.next().unwrap(),
            )
        })
        .collect();
    assert!(sample.len() >= 40, "sample of {} kernels", sample.len());

    let sec = nv_fatbin(&libtorch_cuda());
    let starts = containers(sec);
    assert_eq!(starts.len(), 476, "torch 2.15.0+cu132 has 476 fatbins");
    let drv = driver();

    // Register every fatbin as torch's import does (cheap: nothing is read yet), each through
    // the runtime's wrapper struct {magic, version, data, prelinked}.
    #[repr(C)]
    struct Wrapper {
        magic: u32,
        version: u32,
        data: *const u8,
        prelinked: *const c_void,
    }
    let wrappers: Vec<Wrapper> = starts
        .iter()
        .map(|&s| Wrapper {
            magic: 0x4662_43b1,
            version: 1,
            data: sec[s..].as_ptr(),
            prelinked: std::ptr::null(),
        })
        .collect();
    let modules: Vec<*mut c_void> = wrappers
        .iter()
        // SAFETY: live wrappers pointing into `sec`, which outlives the test's driver calls.
        .map(|w| unsafe { (drv.register_fatbin)(w as *const Wrapper as *const c_void) })
        .collect();
    assert!(modules.iter().all(|m| !m.is_null()));

    // Host stubs: distinct addresses (a real program's are its stub functions).
    let stubs = vec![0u8; sample.len() + 1];
    let names: Vec<CString> = sample
        .iter()
        .map(|(_, _, n)| CString::new(*n).unwrap())
        .collect();
    for (i, (_, module, _)) in sample.iter().enumerate() {
        // SAFETY: a module handle from the driver, a stub address, a NUL-terminated name.
        let r = unsafe {
            (drv.register_function)(
                modules[*module],
                stubs[i..].as_ptr() as *const c_void,
                names[i].as_ptr(),
            )
        };
        assert_eq!(r, 0);
    }
    // A name its fatbin does not hold: the real driver's "not found".
    let missing = c"_Z14no_such_kernelv";
    let bogus = stubs[sample.len()..].as_ptr() as *const c_void;
    // SAFETY: as above.
    assert_eq!(
        unsafe { (drv.register_function)(modules[sample[0].1], bogus, missing.as_ptr()) },
        0
    );

    let mut checked_by_family: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    let mut failures = Vec::new();
    for (i, (family, _, mangled)) in sample.iter().enumerate() {
        let stub = stubs[i..].as_ptr() as *const c_void;
        let mut reported = Vec::new();
        loop {
            let (mut off, mut size) = (usize::MAX, usize::MAX);
            // SAFETY: a registered stub and two output pointers.
            let r = unsafe { (drv.param_info)(stub, reported.len(), &mut off, &mut size) };
            if r == 1 {
                break; // CUDA_ERROR_INVALID_VALUE past the last parameter
            }
            assert_eq!(r, 0, "{mangled}: parameter {}", reported.len());
            reported.push((off, size));
            assert!(reported.len() < 512, "{mangled}: no end to its parameters");
        }
        let demangled = cpp_demangle::Symbol::new(mangled.as_bytes())
            .unwrap()
            .demangle()
            .unwrap();
        let types = param_types(&demangled);
        if types.len() != reported.len() {
            failures.push(format!(
                "{demangled}: signature has {} parameters, driver reports {}",
                types.len(),
                reported.len()
            ));
            continue;
        }
        let e = checked_by_family.entry(family).or_default();
        e.1 += types.len();
        // Whatever its type, the first parameter starts the block (reductions: one opaque
        // 1 KiB struct, nothing else to check).
        if let Some(&(off, size)) = reported.first() {
            e.0 += size_align(&types[0]).is_none() as usize;
            if off != 0 || size == 0 {
                failures.push(format!(
                    "{demangled}: first parameter at {off}, {size} bytes"
                ));
            }
        }
        for (j, want) in expected(&types, &reported).iter().enumerate() {
            let Some(want) = want else { continue };
            e.0 += 1;
            if *want != reported[j] {
                failures.push(format!(
                    "{demangled}: parameter {j} ({}) is (offset, size) {:?} by the signature, \
                     {:?} by the driver",
                    types[j], want, reported[j]
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    for (family, (checked, all)) in &checked_by_family {
        eprintln!(
            "{family}: {checked} of {all} parameters checked against the signature (the rest \
             are structs whose size the name does not give)"
        );
        assert!(*checked > 0, "{family}: no parameter could be checked");
    }
    assert!(checked_by_family.len() >= 12, "{checked_by_family:?}");
    let (mut off, mut size) = (0, 0);
    // SAFETY: as above.
    assert_eq!(
        unsafe { (drv.param_info)(bogus, 0, &mut off, &mut size) },
        500,
        "CUDA_ERROR_NOT_FOUND"
    );
    eprintln!(
        "{} kernels checked in {:.1} s (reading {} MB of fatbins, decompressing {} of them)",
        sample.len(),
        t0.elapsed().as_secs_f64(),
        sec.len() >> 20,
        sample
            .iter()
            .map(|s| s.1)
            .collect::<std::collections::HashSet<_>>()
            .len()
    );
}

#[test]
fn signature_layouts_follow_the_cpp_abi() {
    // The reference itself, on signatures whose layout is known independently (the measured
    // vectorized add kernel: (int, {float, float}, array<char*, 2>) at 0, 4, 16).
    let t = param_types(
        "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctorOnSelf_add<float>, \
         std::array<char*, 2ul> >(int, at::native::CUDAFunctorOnSelf_add<float>, std::array<char*, 2ul>)",
    );
    assert_eq!(t.len(), 3);
    assert_eq!(
        expected(&t, &[(0, 4), (4, 8), (16, 16)]),
        vec![Some((0, 4)), None, Some((16, 16))]
    );
    assert_eq!(
        size_align("at::cuda::detail::TensorInfo<float, unsigned int>"),
        Some((216, 8))
    );
    assert_eq!(size_align("std::array<c10::Half, 3ul>"), Some((6, 2)));
    assert_eq!(
        size_align("std::array<char*, (unsigned long)3>"),
        Some((24, 8))
    );
    assert_eq!(param_types("void f()"), Vec::<String>::new());
    assert_eq!(
        param_types("void k<(anonymous namespace)::F>(long, bool const*, double)"),
        vec!["long", "bool const*", "double"]
    );
}

/// A function of the simulated driver by name (the library `driver()` opened).
fn driver_fn<T: Copy>(name: &std::ffi::CStr) -> T {
    driver();
    let lib = CString::new(build_dir().join("libsimgpu_cuda.so").to_str().unwrap()).unwrap();
    // SAFETY: the library is loaded already (driver()); RTLD_NOLOAD only finds it.
    let h = unsafe { libc::dlopen(lib.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
    assert!(!h.is_null());
    // SAFETY: a symbol look-up in a loaded library.
    let p = unsafe { libc::dlsym(h, name.as_ptr()) };
    assert!(!p.is_null(), "{name:?} missing");
    assert_eq!(std::mem::size_of::<T>(), std::mem::size_of::<*mut c_void>());
    // SAFETY: T is the function pointer type of `name` (the caller's contract).
    unsafe { std::mem::transmute_copy::<*mut c_void, T>(&p) }
}

#[test]
fn a_real_elementwise_kernel_streams_its_operands_at_the_profiles_rate() {
    // CalcIgamma<float> over std::array<char*, 3> (two inputs, one output) from the real
    // fatbin, launched through cuLaunchKernel with its parameters at the offsets the driver
    // reads from the cubin; its time is its operands' bytes at the h100 profile's streaming
    // rate (0.9 of 3.35 TB/s), within 10%.
    let sample = include_str!("data/torch-2.15-fatbin-sample.tsv");
    let (module, name) = sample
        .lines()
        .find(|l| l.contains("vectorized_elementwise_kernelILi8E") && l.contains("CalcIgammaIfE"))
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            (f[1].parse::<usize>().unwrap(), f[2])
        })
        .expect("the sample holds vectorized CalcIgamma<float>");
    let sec = nv_fatbin(&libtorch_cuda());
    let start = containers(sec)[module];
    let drv = driver();
    // SAFETY: a bare fatbin container in the mapping, which lives for the process.
    let m = unsafe { (drv.register_fatbin)(sec[start..].as_ptr() as *const c_void) };
    assert!(!m.is_null());
    static STUB: u8 = 0;
    let stub = &STUB as *const u8 as *const c_void;
    let cname = CString::new(name).unwrap();
    // SAFETY: module handle, stub address, NUL-terminated name.
    assert_eq!(
        unsafe { (drv.register_function)(m, stub, cname.as_ptr()) },
        0
    );

    type Alloc = unsafe extern "C" fn(*mut u64, usize) -> c_int;
    type Launch = unsafe extern "C" fn(
        *const c_void,
        u32,
        u32,
        u32,
        u32,
        u32,
        u32,
        u32,
        *mut c_void,
        *mut *mut c_void,
        *mut *mut c_void,
    ) -> c_int;
    type EventCreate = unsafe extern "C" fn(*mut *mut c_void, u32) -> c_int;
    type EventRecord = unsafe extern "C" fn(*mut c_void, *mut c_void) -> c_int;
    type EventSync = unsafe extern "C" fn(*mut c_void) -> c_int;
    type Elapsed = unsafe extern "C" fn(*mut f32, *mut c_void, *mut c_void) -> c_int;
    type Retain = unsafe extern "C" fn(*mut *mut c_void, c_int) -> c_int;
    type SetCurrent = unsafe extern "C" fn(*mut c_void) -> c_int;
    let retain: Retain = driver_fn(c"cuDevicePrimaryCtxRetain");
    let set_current: SetCurrent = driver_fn(c"cuCtxSetCurrent");
    // A program of the driver API binds a context to its thread first, as the real one needs.
    let mut ctx: *mut c_void = std::ptr::null_mut();
    // SAFETY: an output pointer; device 0.
    assert_eq!(unsafe { retain(&mut ctx, 0) }, 0);
    // SAFETY: the context the driver gave.
    assert_eq!(unsafe { set_current(ctx) }, 0);
    let alloc: Alloc = driver_fn(c"cuMemAlloc_v2");
    let launch: Launch = driver_fn(c"cuLaunchKernel");
    let ev_create: EventCreate = driver_fn(c"cuEventCreate");
    let ev_record: EventRecord = driver_fn(c"cuEventRecord");
    let ev_sync: EventSync = driver_fn(c"cuEventSynchronize");
    let elapsed: Elapsed = driver_fn(c"cuEventElapsedTime");

    let n: i32 = 64 << 20;
    let mut bufs = [0u64; 3];
    for b in &mut bufs {
        // SAFETY: an output pointer for the address.
        assert_eq!(unsafe { alloc(b, n as usize * 4) }, 0);
    }
    // The parameters by the driver's layout: (int N, functor, std::array<char*, 3>).
    let mut layout = Vec::new();
    for i in 0..3 {
        let (mut off, mut size) = (0, 0);
        // SAFETY: a registered stub, output pointers.
        assert_eq!(unsafe { (drv.param_info)(stub, i, &mut off, &mut size) }, 0);
        layout.push((off, size));
    }
    assert_eq!(layout[0].1, 4);
    assert_eq!(layout[2].1, 24);
    let mut block = vec![0u8; layout[2].0 + 24];
    block[..4].copy_from_slice(&n.to_le_bytes());
    for (i, b) in bufs.iter().enumerate() {
        let at = layout[2].0 + 8 * i;
        block[at..at + 8].copy_from_slice(&b.to_le_bytes());
    }
    let mut args: Vec<*mut c_void> = layout
        .iter()
        .map(|&(off, _)| block[off..].as_mut_ptr() as *mut c_void)
        .collect();
    let (mut e0, mut e1) = (std::ptr::null_mut(), std::ptr::null_mut());
    // SAFETY: driver calls with valid output pointers and handles; args point at the values.
    unsafe {
        assert_eq!(ev_create(&mut e0, 0), 0);
        assert_eq!(ev_create(&mut e1, 0), 0);
        let stream = 2 as *mut c_void; // CU_STREAM_PER_THREAD
        assert_eq!(ev_record(e0, stream), 0);
        let blocks = (n as u32).div_ceil(128 * 8);
        let r = launch(
            stub,
            blocks,
            1,
            1,
            128,
            1,
            1,
            0,
            stream,
            args.as_mut_ptr(),
            std::ptr::null_mut(),
        );
        assert_eq!(r, 0);
        assert_eq!(ev_record(e1, stream), 0);
        assert_eq!(ev_sync(e1), 0);
    }
    let mut ms = 0f32;
    // SAFETY: two recorded events.
    assert_eq!(unsafe { elapsed(&mut ms, e0, e1) }, 0);
    let bytes = 3.0 * 4.0 * n as f64;
    let rate = bytes / (ms as f64 * 1e-3);
    let want = 0.9 * 3.35e12;
    assert!(
        (rate / want - 1.0).abs() < 0.1,
        "simulated {rate:e} B/s, the h100 profile streams at {want:e}"
    );
}
