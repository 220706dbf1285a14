//! Framework kernels computed on the host, chosen by kernel name.
//!
//! The simulator has no code for a framework's own kernels (a fatbin's or a loaded module's): a
//! launch only takes time. Frameworks compute small values on the GPU that they read back to
//! decide what to do next (TensorFlow's shapes, step counters and loop bounds), so some kernels
//! are computed here: each entry of [`TABLE`] names a kernel by a prefix of its demangled name
//! (MLIR kernels are matched by [`mlir::parse_name`], Eigen's by their template in
//! [`eigen::find`]) with a host function that reads the launch's parameter block, as the
//! kernel's own C++ or MLIR signature lays it out, and computes what the kernel writes. A kernel
//! loaded as PTX text that no entry names is interpreted ([`ptx_exec`]).
//!
//! A host kernel computes only where every buffer it reads and writes holds bytes (data mode;
//! in shape mode, small allocations): otherwise it writes nothing and the launch keeps its time
//! only. A parameter block whose layout is not the one a host function knows is never guessed
//! at: the kernel is left uncomputed.

mod eigen;
mod mlir;
mod philox;
pub mod ptx_exec;
mod tf;
mod tf_layout;

use crate::fatbin::KernelParams;
use std::collections::HashSet;
use std::sync::Mutex;

/// What a host kernel reads its buffers from and writes its results to: the device, or a test's
/// memory.
pub trait Mem {
    /// Whether [addr, addr + len) holds bytes (a range that is not device memory holds none).
    fn holds(&self, addr: u64, len: u64) -> bool;
    /// The bytes at [addr, addr + len); callers check [`Mem::holds`] first.
    fn load(&mut self, addr: u64, len: usize) -> Vec<u8>;
    /// Writes `bytes` at `addr`; callers check [`Mem::holds`] first.
    fn store(&mut self, addr: u64, bytes: &[u8]);
}

impl Mem for crate::Device {
    fn holds(&self, addr: u64, len: u64) -> bool {
        len == 0 || self.holds_bytes(addr, len)
    }
    fn load(&mut self, addr: u64, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        // A range checked with holds() is valid: read() cannot trap on it.
        let _ = self.read(addr, &mut v, "host kernel");
        v
    }
    fn store(&mut self, addr: u64, bytes: &[u8]) {
        let _ = self.write(addr, bytes, "host kernel");
    }
}

/// Why a launch was not computed.
#[derive(Debug, PartialEq, Eq)]
pub enum Skip {
    /// A buffer it reads or writes holds no bytes (shape mode, large allocations).
    NoBytes,
    /// The parameter block is not laid out as the host function expects, or the kernel does
    /// something the host does not compute (named once: in data mode always, else at debug).
    Layout(String),
}

/// One launch as a host function sees it.
pub struct Launch<'a> {
    /// The demangled kernel name, or a loaded module's entry name.
    pub name: &'a str,
    pub params: &'a KernelParams,
    pub block: &'a [u8],
    pub grid: [u32; 3],
}

impl Launch<'_> {
    /// The bytes of the parameter at ordinal `i`, when it has `size` bytes.
    pub fn param(&self, i: usize, size: usize) -> Result<&[u8], Skip> {
        match self.params.params.get(i) {
            Some(&(off, s)) if s == size && off + s <= self.block.len() => {
                Ok(&self.block[off..off + s])
            }
            _ => Err(Skip::Layout(format!(
                "parameter {i} is not {size} bytes: {:?}",
                self.params.params
            ))),
        }
    }
    pub fn u64_at(&self, i: usize) -> Result<u64, Skip> {
        Ok(u64::from_le_bytes(
            self.param(i, 8)?.try_into().unwrap_or_default(),
        ))
    }
    pub fn i32_at(&self, i: usize) -> Result<i32, Skip> {
        Ok(i32::from_le_bytes(
            self.param(i, 4)?.try_into().unwrap_or_default(),
        ))
    }
    /// Requires exactly these parameter sizes, in order.
    pub fn expect_sizes(&self, sizes: &[usize]) -> Result<(), Skip> {
        let have: Vec<usize> = self.params.params.iter().map(|p| p.1).collect();
        if have == sizes {
            Ok(())
        } else {
            Err(Skip::Layout(format!(
                "parameter sizes {have:?}, expected {sizes:?}"
            )))
        }
    }
}

/// A host function: computes one launch into `mem`.
pub type HostFn = fn(&Launch, &mut dyn Mem) -> Result<(), Skip>;

/// Kernel name patterns and the functions that compute them: a pattern is a prefix of the
/// name, except that a loaded MLIR kernel's pattern is matched by [`mlir::parse_name`].
const TABLE: &[(&str, HostFn)] = &[
    (
        "void tensorflow::functor::FillPhiloxRandomKernelLaunch<tsl::random::UniformDistribution<tsl::random::PhiloxRandom, float> >(",
        philox::fill_uniform_f32,
    ),
    ("void tensorflow::BiasNHWCKernel<float>(", tf::bias_nhwc_f32),
    (
        "void tensorflow::BiasGradNHWC_SharedAtomics<float>(",
        tf::bias_grad_nhwc_f32,
    ),
    (
        "void tensorflow::functor::ColumnReduceKernel<float const*, float*, cuda::std::__4::plus<void> >(",
        tf::column_sum_f32,
    ),
    (
        "void tensorflow::functor::ColumnReduceMax16ColumnsKernel<float const*, float*, cuda::std::__4::plus<void> >(",
        tf::column_sum_f32,
    ),
    (
        "void tensorflow::functor::RowReduceKernel<float const*, float*, cuda::__4::maximum<void> >(",
        tf::row_max_f32,
    ),
    (
        "void tensorflow::functor::BlockReduceKernel<float*, float*, 256, tensorflow::functor::Sum<float> >(",
        tf::block_sum_f32,
    ),
    (
        "void tensorflow::functor::RowReduceKernel<float const*, float*, cuda::std::__4::plus<void> >(",
        tf::row_sum_f32,
    ),
    (
        "void tensorflow::functor::RowReduceKernel<float*, tensorflow::TransformOutputIterator<float, float, tensorflow::functor::DividesBy<float, float>, long>, tensorflow::functor::Sum<float> >(",
        tf::row_mean_f32,
    ),
    (
        "void cub::CUB_200805_SM___CUDA_ARCH_LIST__::DeviceSegmentedReduceKernel<cub::CUB_200805_SM___CUDA_ARCH_LIST__::detail::reduce::policy_hub<float, int, cuda::std::__4::plus<void> >::Policy1000, float const*, float*, cub::CUB_200805_SM___CUDA_ARCH_LIST__::TransformInputIterator<int, tensorflow::functor::RowOffset, cub::CUB_200805_SM___CUDA_ARCH_LIST__::CountingInputIterator<int, long>, long>, cub::CUB_200805_SM___CUDA_ARCH_LIST__::TransformInputIterator<int, tensorflow::functor::RowOffset, cub::CUB_200805_SM___CUDA_ARCH_LIST__::CountingInputIterator<int, long>, long>, int, cuda::std::__4::plus<void>, float, float>(",
        tf::segmented_sum_f32,
    ),
    (
        "void tensorflow::BiasGradNCHW_SharedAtomics<float>(",
        tf::bias_grad_nchw_f32,
    ),
    (
        "stream_executor::gpu::RedzoneAllocatorKernelImpl(unsigned char*, unsigned char, unsigned long, unsigned int*)",
        tf::redzone_check,
    ),
    (
        "void tensorflow::functor::SwapDimension1And2InTensor3UsingTiles<",
        tf_layout::swap_dims_1_2,
    ),
    (
        "void tensorflow::functor::ShuffleInTensor3Simple<",
        tf_layout::shuffle_3,
    ),
];

/// The host function for kernel `name`, if there is one.
pub fn find(name: &str) -> Option<HostFn> {
    if mlir::parse_name(name).is_some() {
        return Some(mlir::elementwise);
    }
    if let Some(f) = eigen::find(name) {
        return Some(f);
    }
    TABLE
        .iter()
        .find(|(p, _)| name.starts_with(p))
        .map(|&(_, f)| f)
}

/// Computes one launch of kernel `name` when a host function exists for it: `None` when there
/// is none, else whether it was computed.
pub fn run(
    name: &str,
    params: &KernelParams,
    block: &[u8],
    grid: [u32; 3],
    mem: &mut dyn Mem,
) -> Option<Result<(), Skip>> {
    let f = find(name)?;
    Some(f(
        &Launch {
            name,
            params,
            block,
            grid,
        },
        mem,
    ))
}

/// True the first time a kernel of this name is not computed (for once-per-kernel messages).
pub fn first_skip(name: &str) -> bool {
    static SAID: Mutex<Option<HashSet<String>>> = Mutex::new(None);
    let mut s = SAID.lock().unwrap_or_else(|e| e.into_inner());
    s.get_or_insert_with(HashSet::new).insert(name.to_string())
}

/// Reads `len` bytes elements of `size` bytes at `addr`, or [`Skip::NoBytes`].
pub fn load_checked(mem: &mut dyn Mem, addr: u64, len: usize) -> Result<Vec<u8>, Skip> {
    if !mem.holds(addr, len as u64) {
        return Err(Skip::NoBytes);
    }
    Ok(mem.load(addr, len))
}

pub fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

pub fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

#[cfg(test)]
pub(crate) mod testmem {
    use super::Mem;
    use std::collections::BTreeMap;

    /// Buffers at made-up addresses; anything outside them holds no bytes.
    #[derive(Default)]
    pub struct TestMem {
        pub bufs: BTreeMap<u64, Vec<u8>>,
    }

    impl TestMem {
        pub fn add(&mut self, addr: u64, bytes: Vec<u8>) {
            self.bufs.insert(addr, bytes);
        }
        fn at(&self, addr: u64, len: u64) -> Option<(u64, usize)> {
            let (&base, b) = self.bufs.range(..=addr).next_back()?;
            (addr + len <= base + b.len() as u64).then_some((base, (addr - base) as usize))
        }
    }

    impl Mem for TestMem {
        fn holds(&self, addr: u64, len: u64) -> bool {
            len == 0 || self.at(addr, len).is_some()
        }
        fn load(&mut self, addr: u64, len: usize) -> Vec<u8> {
            let (base, off) = self.at(addr, len as u64).expect("checked");
            self.bufs[&base][off..off + len].to_vec()
        }
        fn store(&mut self, addr: u64, bytes: &[u8]) {
            let (base, off) = self.at(addr, bytes.len() as u64).expect("checked");
            self.bufs.get_mut(&base).unwrap()[off..off + bytes.len()].copy_from_slice(bytes);
        }
    }
}
