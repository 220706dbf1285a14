//! Which allocations a kernel launch touches: each parameter's offset and size come from
//! `cuFuncGetParamInfo` (via `cudaGetFuncBySymbol` for runtime kernels); every 8-byte word of
//! every parameter, structs included, that holds an address inside a known allocation is a touch.
//! Kernels do not say what they read or write, so these touches are `rw`, except where the
//! kernel's name and parameters say it ([`Reader`], one reader per kind): PyTorch's elementwise
//! kernels over contiguous operands (see [`elementwise`]) and over strided ones (see
//! [`super::strided`]), kernels whose demangled signature types every parameter (see
//! [`super::signature`]: `const` pointers are read), foreach kernels, the memory-efficient
//! attention, ATen's reductions, TensorFlow's MLIR element-wise kernels ([`super::memref`]),
//! and the kernels of modules loaded as PTX text, whose PTX says ([`super::ptx`]).

use super::elementwise::{elementwise, parse};
use super::words::{Found, Operands, words};
use crate::core::registry;
use crate::ffi::{last_error, table};
use planner::trace::{Access, Touch};
use std::collections::HashMap;
use std::ffi::{CStr, c_char, c_void};
use std::sync::Arc;
use std::sync::Mutex;

type Layout = Vec<(usize, usize)>;

/// Parameter layouts by (kernel handle, is a runtime handle); None when the driver cannot say.
/// What the driver says of each kernel, by (kernel handle, is a runtime handle).
type PerKernel<T> = Mutex<Option<HashMap<(usize, bool), Option<T>>>>;

static LAYOUTS: PerKernel<Layout> = Mutex::new(None);

/// What `compute` says of a kernel, computed once (outside the lock: it calls the driver).
fn cached<T: Clone>(
    cache: &PerKernel<T>,
    key: (usize, bool),
    compute: impl FnOnce() -> Option<T>,
) -> Option<T> {
    if let Some(v) = cache
        .lock()
        .ok()?
        .get_or_insert_with(HashMap::new)
        .get(&key)
    {
        return v.clone();
    }
    let v = compute();
    if let Ok(mut g) = cache.lock() {
        g.get_or_insert_with(HashMap::new).insert(key, v.clone());
    }
    v
}

/// (offset, size) of each parameter of a kernel, if the driver can say.
fn layout(func: usize, runtime: bool) -> Option<Layout> {
    cached(&LAYOUTS, (func, runtime), || layout_uncached(func, runtime))
}

fn layout_uncached(func: usize, runtime: bool) -> Option<Layout> {
    let info = table::cuFuncGetParamInfo();
    let cufunc = driver_function(func, runtime).unwrap_or(0);
    info.filter(|_| cufunc != 0).map(|f| {
        let mut v = Vec::new();
        for i in 0..512 {
            let (mut off, mut size) = (0usize, 0usize);
            // SAFETY: valid output pointers; an index past the last parameter returns an error.
            if unsafe { f(cufunc, i, &mut off, &mut size) } != 0 {
                break;
            }
            v.push((off, size));
        }
        v
    })
}

/// Each runtime kernel's driver handle, once the runtime gave it (a `CUfunction` serves any
/// thread of the process, as the runtime's answer may not: a replay can run where the program's
/// own launches do not).
static FUNCTIONS: Mutex<Option<HashMap<usize, usize>>> = Mutex::new(None);

/// Host stubs whose fatbin was unregistered: their driver handles go with their module.
pub fn forget_functions(stubs: &[usize]) {
    if let Ok(mut g) = FUNCTIONS.lock()
        && let Some(m) = g.as_mut()
    {
        for s in stubs {
            m.remove(s);
        }
    }
}

/// The driver's handle (CUfunction) of a kernel: a runtime kernel's via `cudaGetFuncBySymbol`,
/// asked until it answers, then kept.
pub fn driver_function(func: usize, runtime: bool) -> Option<usize> {
    if !runtime {
        return Some(func);
    }
    if let Some(&f) = FUNCTIONS.lock().ok()?.as_ref().and_then(|m| m.get(&func)) {
        return Some(f);
    }
    let f = table::cudaGetFuncBySymbol()?;
    let mut cufunc = 0usize;
    // SAFETY: valid output pointer; func is the caller's kernel handle.
    let status = last_error::quietly(|| unsafe { f(&mut cufunc, func) });
    let found = (status == 0 && cufunc != 0).then_some(cufunc)?;
    if let Ok(mut g) = FUNCTIONS.lock() {
        g.get_or_insert_with(HashMap::new).insert(func, found);
    }
    Some(found)
}

/// Demangled kernel names by (kernel handle, is a runtime handle); None when the driver cannot
/// say.
static NAMES: PerKernel<Arc<str>> = Mutex::new(None);

/// A kernel's name, demangled (the driver gives the mangled one), once per kernel.
pub fn name(func: usize, runtime: bool) -> Option<Arc<str>> {
    cached(&NAMES, (func, runtime), || name_uncached(func, runtime))
}

fn name_uncached(func: usize, runtime: bool) -> Option<Arc<str>> {
    let get = table::cuFuncGetName();
    let cufunc = driver_function(func, runtime);
    cufunc.zip(get).and_then(|(f, get)| {
        let mut p: *const c_char = std::ptr::null();
        // SAFETY: valid output pointer; f is a driver handle.
        if unsafe { get(&mut p, f) } != 0 || p.is_null() {
            return None;
        }
        // SAFETY: the driver returns a NUL-terminated name that lives as long as its module.
        let mangled = unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned();
        let demangled = cpp_demangle::Symbol::new(mangled.as_bytes())
            .ok()
            .and_then(|s| s.demangle().ok())
            .unwrap_or(mangled);
        crate::core::bus::emit(planner::trace::Event::Kernel {
            func: func as u64,
            name: demangled.clone(),
        });
        Some(Arc::<str>::from(demangled))
    })
}

const BUFFER_POINTER: usize = 1;
const BUFFER_SIZE: usize = 2;

/// Each parameter's value as (address, offset in the packed buffer, size): from kernelParams
/// (one pointer per parameter) or from the packed `extra` buffer.
fn values(
    layout: &[(usize, usize)],
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> Vec<(*const u8, usize, usize)> {
    let mut values = Vec::new();
    if !params.is_null() {
        for (i, &(off, size)) in layout.iter().enumerate() {
            // SAFETY: kernelParams holds one pointer per parameter (the API's contract).
            values.push((unsafe { *params.add(i) } as *const u8, off, size));
        }
    } else if !extra.is_null() {
        let (mut buf, mut len) = (std::ptr::null::<u8>(), 0usize);
        let mut i = 0;
        loop {
            // SAFETY: extra is a NULL-terminated list of (key, value) pairs (the API's contract).
            let key = unsafe { *extra.add(i) } as usize;
            if key == 0 || i > 16 {
                break;
            }
            // SAFETY: as above; a key is followed by its value.
            let val = unsafe { *extra.add(i + 1) };
            match key {
                BUFFER_POINTER => buf = val as *const u8,
                // SAFETY: the BUFFER_SIZE value points to a size_t.
                BUFFER_SIZE if !val.is_null() => len = unsafe { *(val as *const usize) },
                _ => {}
            }
            i += 2;
        }
        for &(off, size) in layout {
            if !buf.is_null() && off + size <= len {
                // SAFETY: off + size is inside the caller's buffer of `len` bytes.
                values.push((unsafe { buf.add(off) }, off, size));
            }
        }
    }
    values
}

/// The parameters as one buffer, each at its offset; None when a parameter is missing.
fn packed(
    layout: &[(usize, usize)],
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> Option<Vec<u8>> {
    let vals = values(layout, params, extra);
    let len = layout.iter().map(|&(o, s)| o + s).max().unwrap_or(0);
    if vals.len() != layout.len() || len > 1 << 16 {
        return None;
    }
    let mut buf = vec![0u8; len];
    for (p, off, size) in vals {
        if p.is_null() {
            return None;
        }
        // SAFETY: p points to the parameter's `size` bytes; off + size <= len.
        let src = unsafe { std::slice::from_raw_parts(p, size) };
        buf[off..off + size].copy_from_slice(src);
    }
    Some(buf)
}

/// Lineage: the launch's parameters as one buffer, each at its offset (what
/// `CU_LAUNCH_PARAM_BUFFER_POINTER` takes); pointers in it stay valid while their tensors live
/// (Marmoset's virtual ranges do not move). None when the driver cannot give the layout.
pub fn param_buffer(
    func: usize,
    runtime: bool,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> Option<Vec<u8>> {
    packed(&layout(func, runtime)?, params, extra)
}

/// The allocations a launch's parameters point into.
pub fn touches(
    func: usize,
    runtime: bool,
    grid: [u32; 3],
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> Vec<Touch> {
    let Some(layout) = layout(func, runtime) else {
        return Vec::new();
    };
    let Some(buf) = packed(&layout, params, extra) else {
        return Vec::new();
    };
    let find = |w: u64| {
        let (alloc, offset) = registry::points_into(w)?;
        Some((alloc, offset, registry::allocation(alloc)?.1))
    };
    let exact = reader(func, runtime).and_then(|r| match r {
        Reader::Contiguous(o) => elementwise(o, &layout, &buf, find),
        Reader::Strided(o) => super::strided::touches(o, &layout, &buf, find),
        Reader::Typed(sig) => super::signature::touches(&sig, &layout, &buf, grid, find),
        Reader::Foreach(l) => super::multi_tensor::touches(l, &layout, &buf, grid, find),
        Reader::Attention(k) => super::attention::touches(k, &layout, &buf, grid, find),
        Reader::Reduce => super::reduce::touches(&layout, &buf, find),
        Reader::Memref(k) => super::memref::touches(k, &layout, &buf, find),
        Reader::Ptx(r) => r.touches(&layout, &buf, find),
    });
    exact.unwrap_or_else(|| pointed(&layout, &buf, find))
}

/// Where in a kernel's parameter buffer its pointers are, where its name says (an elementwise
/// kernel's operand words, a typed signature's pointers and `TensorInfo` data): a replay
/// rewrites only these words with the current addresses, not a stale word elsewhere that
/// happens to equal one. None for a kernel left to the conservative rule (any word may be one).
pub fn pointer_words(func: usize, runtime: bool) -> Option<Vec<usize>> {
    let layout = layout(func, runtime)?;
    match reader(func, runtime)? {
        Reader::Contiguous((k, _)) => {
            let &(data_off, data_size) = layout.get(2)?;
            (k > 0 && data_size == 8 * k).then(|| (0..k).map(|i| data_off + 8 * i).collect())
        }
        Reader::Strided((k, _)) => super::strided::pointer_words(k, &layout),
        Reader::Typed(sig) => sig.pointer_words(&layout),
        Reader::Foreach(l) => super::multi_tensor::pointer_words(l, &layout),
        Reader::Attention(_) => super::attention::pointer_words(&layout),
        Reader::Reduce => super::reduce::pointer_words(&layout),
        Reader::Memref(_) => super::memref::pointer_words(&layout),
        Reader::Ptx(r) => r.pointer_words(&layout),
    }
}

/// Every allocation a parameter word points into, `rw`.
fn pointed(
    layout: &[(usize, usize)],
    buf: &[u8],
    find: impl Fn(u64) -> Option<Found>,
) -> Vec<Touch> {
    let mut out: Vec<Touch> = Vec::new();
    for (_, w) in words(layout, buf) {
        if let Some((alloc, offset, _)) = find(w)
            && !out.iter().any(|t| t.alloc == alloc && t.offset == offset)
        {
            out.push(Touch {
                alloc,
                offset,
                bytes: 0,
                access: Access::Rw,
            });
        }
    }
    out
}

/// How a kernel's parameters are read exactly, from its demangled name (the parsers
/// recognise disjoint names, but the typed signature's, which reads any signature and is
/// asked last).
#[derive(Clone)]
enum Reader {
    /// A TensorIterator kernel over contiguous operands ([`parse`], [`elementwise`]).
    Contiguous(Operands),
    /// A TensorIterator kernel over strided operands ([`super::strided`]).
    Strided(super::strided::Named),
    /// A kernel whose signature types every parameter ([`super::signature`]).
    Typed(super::signature::Signature),
    /// A foreach kernel over lists of tensors ([`super::multi_tensor`]).
    Foreach(super::multi_tensor::Lists),
    /// The memory-efficient attention's forward ([`super::attention`]).
    Attention(super::attention::Attention),
    /// A reduction ([`super::reduce`]).
    Reduce,
    /// TensorFlow's MLIR element-wise kernels ([`super::memref`]).
    Memref(super::memref::Kernel),
    /// A kernel of a module loaded as PTX text ([`super::ptx`]).
    Ptx(Arc<super::ptx::Roles>),
}

/// Each kernel's [`Reader`], parsed once: one lookup per launch on the hook's path.
static READERS: PerKernel<Reader> = Mutex::new(None);

fn reader(func: usize, runtime: bool) -> Option<Reader> {
    cached(&READERS, (func, runtime), || {
        let name = name(func, runtime)?;
        parse(&name)
            .map(Reader::Contiguous)
            .or_else(|| super::strided::parse(&name).map(Reader::Strided))
            .or_else(|| super::multi_tensor::parse(&name).map(Reader::Foreach))
            .or_else(|| super::attention::parse(&name).map(Reader::Attention))
            .or_else(|| super::reduce::claims(&name).then_some(Reader::Reduce))
            .or_else(|| super::memref::parse(&name).map(Reader::Memref))
            .or_else(|| {
                (!runtime)
                    .then(|| super::modules::roles_of(func))
                    .flatten()
                    .map(Reader::Ptx)
            })
            .or_else(|| match super::signature::parse(&name) {
                // A runtime kernel whose signature leaves a pointer unplaced (a parameter of a
                // type it does not name, large enough to hold pointers: Eigen's evaluators,
                // CUB's iterators): its PTX, where the program registered it from a fatbin with
                // PTX ([`super::fatbins`]). Asked only then: a fatbin's PTX is decompressed.
                Some(sig)
                    if runtime
                        && layout(func, runtime)
                            .is_some_and(|l| sig.pointer_words(&l).is_none()) =>
                {
                    super::fatbins::roles_of(func)
                        .map(Reader::Ptx)
                        .or(Some(Reader::Typed(sig)))
                }
                Some(sig) => Some(Reader::Typed(sig)),
                None => runtime
                    .then(|| super::fatbins::roles_of(func))
                    .flatten()
                    .map(Reader::Ptx),
            })
    })
}

#[cfg(test)]
mod tests {
    use super::super::words::{element_size, le_at};
    use super::*;

    #[test]
    fn le_at_reads_little_endian_integers_and_nothing_past_the_buffer() {
        let b = [0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09];
        assert_eq!(le_at(&b, 0, 2), Some(0x0201));
        assert_eq!(le_at(&b, 1, 4), Some(0x0504_0302));
        assert_eq!(le_at(&b, 1, 8), Some(0x0908_0706_0504_0302));
        assert_eq!(le_at(&b, 6, 4), None);
        assert_eq!(le_at(&b, usize::MAX, 2), None);
        assert_eq!(le_at(&b, 0, 9), None);
    }

    /// GELU as torch 2.x names it (demangled by cpp_demangle) and lays it out: (int N at 0, an
    /// empty functor at 4, two operand pointers at 8).
    const GELU: &str = "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#2}::operator()() const::{lambda(float)#1}, std::array<char*, (unsigned long)2>, false>(int, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#2}::operator()() const::{lambda(float)#1}, std::array<char*, (unsigned long)2>)";
    const LAYOUT: [(usize, usize); 3] = [(0, 4), (4, 1), (8, 16)];

    /// Allocations 1 and 2 at 0x1000 * id, each `size` bytes.
    fn find(size: u64) -> impl Fn(u64) -> Option<Found> {
        move |w| {
            let id = w / 0x1000;
            ((1..=2).contains(&id) && w % 0x1000 < size).then_some((id, w % 0x1000, size))
        }
    }

    fn params(n: i32, out: u64, input: u64) -> Vec<u8> {
        let mut b = vec![0u8; 24];
        b[..4].copy_from_slice(&n.to_le_bytes());
        b[8..16].copy_from_slice(&out.to_le_bytes());
        b[16..24].copy_from_slice(&input.to_le_bytes());
        b
    }

    fn touch(alloc: u64, bytes: u64, access: Access) -> Touch {
        Touch {
            alloc,
            offset: 0,
            bytes,
            access,
        }
    }

    #[test]
    fn a_contiguous_elementwise_output_is_written_whole_and_its_inputs_read() {
        let t = elementwise(
            parse(GELU).unwrap(),
            &LAYOUT,
            &params(256, 0x2000, 0x1000),
            find(1024),
        );
        assert_eq!(
            t,
            Some(vec![touch(2, 1024, Access::W), touch(1, 0, Access::R)])
        );
        // c++filt's spelling of the operand count reads the same.
        let filt = GELU.replace("(unsigned long)2", "2ul");
        assert_eq!(
            elementwise(
                parse(&filt).unwrap(),
                &LAYOUT,
                &params(256, 0x2000, 0x1000),
                find(1024)
            ),
            t
        );
    }

    /// A three-operand elementwise kernel (output, two inputs): its name, its parameter layout
    /// and a buffer with `n` elements and the operands' `words`.
    fn three_operands(n: i32, words: [u64; 3]) -> (String, [(usize, usize); 3], Vec<u8>) {
        let mut b = vec![0u8; 32];
        b[..4].copy_from_slice(&n.to_le_bytes());
        for (i, w) in words.iter().enumerate() {
            b[8 + 8 * i..16 + 8 * i].copy_from_slice(&w.to_le_bytes());
        }
        let three = GELU.replace("(unsigned long)2", "(unsigned long)3");
        (three, [(0, 4), (4, 1), (8, 24)], b)
    }

    #[test]
    fn inputs_at_two_places_of_one_allocation_are_two_touches() {
        // (out, a, b) with a and b two halves of allocation 1: the replay must find both words.
        let (three, layout, b) = three_operands(64, [0x2000, 0x1000, 0x1100]);
        let t = elementwise(parse(&three).unwrap(), &layout, &b, find(512)).unwrap();
        let mut second = touch(1, 0, Access::R);
        second.offset = 0x100;
        assert_eq!(
            t,
            vec![touch(2, 0, Access::Rw), touch(1, 0, Access::R), second],
            "64 floats do not fill 512 B: the output is not whole"
        );
    }

    #[test]
    fn an_exact_in_place_update_is_rw_over_the_whole_allocation() {
        // relu_: the whole output is its own input, at the same address.
        let t = elementwise(
            parse(GELU).unwrap(),
            &LAYOUT,
            &params(256, 0x1000, 0x1000),
            find(1024),
        )
        .unwrap();
        assert_eq!(t, vec![touch(1, 1024, Access::Rw)]);
        // add_: y += identity; y read and written whole, identity read.
        let (three, layout, b) = three_operands(256, [0x1000, 0x1000, 0x2000]);
        let t = elementwise(parse(&three).unwrap(), &layout, &b, find(1024)).unwrap();
        assert_eq!(t, vec![touch(1, 1024, Access::Rw), touch(2, 0, Access::R)]);
        // The same address, but the output does not fill its allocation: extent unknown.
        let t = elementwise(
            parse(GELU).unwrap(),
            &LAYOUT,
            &params(200, 0x1000, 0x1000),
            find(1024),
        )
        .unwrap();
        assert_eq!(t, vec![touch(1, 0, Access::Rw)]);
        // An input elsewhere in the whole output's allocation: overlapping, extent unknown.
        let mut b2 = b.clone();
        b2[16..24].copy_from_slice(&0x1100u64.to_le_bytes());
        let t = elementwise(parse(&three).unwrap(), &layout, &b2, find(1024)).unwrap();
        assert_eq!(t[0], touch(1, 0, Access::Rw));
    }

    #[test]
    fn what_is_not_provably_a_whole_write_stays_rw() {
        // 200 floats do not fill an allocation of 1024 bytes (a view into a larger buffer).
        let t = elementwise(
            parse(GELU).unwrap(),
            &LAYOUT,
            &params(200, 0x2000, 0x1000),
            find(1024),
        )
        .unwrap();
        assert_eq!(t[0], touch(2, 0, Access::Rw));
        // The output starts inside its allocation.
        let t = elementwise(
            parse(GELU).unwrap(),
            &LAYOUT,
            &params(4, 0x2010, 0x1000),
            find(32),
        )
        .unwrap();
        assert_eq!(t[0].access, Access::Rw);
    }

    #[test]
    fn other_kernels_and_hidden_pointers_are_left_to_the_conservative_rule() {
        // A functor word that points into an allocation: a read (or write) the name does not
        // declare.
        let layout = [(0, 4), (8, 8), (16, 16)];
        let mut b = vec![0u8; 32];
        b[..4].copy_from_slice(&256i32.to_le_bytes());
        b[8..16].copy_from_slice(&0x3000u64.to_le_bytes());
        b[16..24].copy_from_slice(&0x2000u64.to_le_bytes());
        b[24..32].copy_from_slice(&0x1000u64.to_le_bytes());
        assert!(
            elementwise(parse(GELU).unwrap(), &layout, &b, find(1024)).is_some(),
            "{b:?}"
        );
        let wide = |w: u64| find(1024)(w).or_else(|| (w == 0x3000).then_some((3, 0, 1024)));
        assert_eq!(elementwise(parse(GELU).unwrap(), &layout, &b, wide), None);
        // Not a TensorIterator kernel, or another layout.
        let other = GELU.replace("vectorized_elementwise_kernel", "elementwise_kernel");
        assert_eq!(parse(&other), None);
        let three = GELU.replace("(unsigned long)2", "(unsigned long)3");
        assert_eq!(
            elementwise(
                parse(&three).unwrap(),
                &LAYOUT,
                &params(256, 0x2000, 0x1000),
                find(1024)
            ),
            None
        );
        // An operand that points nowhere known.
        assert_eq!(
            elementwise(
                parse(GELU).unwrap(),
                &LAYOUT,
                &params(256, 0x2000, 0x10),
                find(1024)
            ),
            None
        );
    }

    #[test]
    fn element_sizes_come_from_the_first_scalar_type() {
        assert_eq!(
            element_size("4, at::native::CUDAFunctor_add<float>"),
            Some(4)
        );
        assert_eq!(
            element_size("4, at::native::BinaryFunctor<c10::Half, c10::Half, c10::Half>"),
            Some(2)
        );
        assert_eq!(element_size("4, {lambda(double)#1}, int"), Some(8));
        assert_eq!(element_size("4, at::native::Functor<floatish>"), None);
    }
}
