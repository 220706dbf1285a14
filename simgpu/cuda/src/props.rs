//! Device attributes (`cuDeviceGetAttribute`, `CUdevice_attribute` numbering of CUDA 13.2), the
//! device's UUID and PCI bus id. What a profile states (SM count, memory, compute capability) comes
//! from it; what follows from the architecture comes from [`Arch`]; the rest is what any CUDA 13
//! GPU on Linux reports. Every value is the simulated device's.

use crate::device::{Device, INVALID_VALUE};
use std::ffi::c_int;

/// Per-architecture limits: CUDA C++ Programming Guide, "Features and Technical Specifications"
/// (compute capabilities 6.0 and 9.0); clocks, bus width and L2 from the P100 and H100
/// whitepapers (P100 SXM2: 1480 MHz boost, 4096-bit HBM2 at 715 MHz, 4 MB L2; H100 SXM5:
/// 1980 MHz boost, 5120-bit HBM3 at 2619 MHz, 50 MB L2).
pub struct Arch {
    pub shared_per_block_optin: c_int,
    pub shared_per_sm: c_int,
    pub reserved_shared_per_block: c_int,
    pub clock_khz: c_int,
    pub mem_clock_khz: c_int,
    pub bus_width: c_int,
    pub l2_bytes: c_int,
    /// The PCI device id (e.g. 0x2330 for H100 SXM5 80GB) in the high half, NVIDIA's vendor id
    /// in the low half, as CU_DEVICE_ATTRIBUTE_GPU_PCI_DEVICE_ID reports it.
    pub pci_device: u32,
    /// Greatest stream priority (numerically lowest); the least is 0.
    pub greatest_priority: c_int,
}

pub fn arch(cc: [i32; 2]) -> Arch {
    match cc[0] {
        9.. => Arch {
            shared_per_block_optin: 232448,
            shared_per_sm: 233472,
            reserved_shared_per_block: 1024,
            clock_khz: 1980000,
            mem_clock_khz: 2619000,
            bus_width: 5120,
            l2_bytes: 50 << 20,
            pci_device: 0x2330_10de,
            greatest_priority: -5,
        },
        8 => Arch {
            shared_per_block_optin: 166912,
            shared_per_sm: 167936,
            reserved_shared_per_block: 1024,
            clock_khz: 1410000,
            mem_clock_khz: 1593000,
            bus_width: 5120,
            l2_bytes: 40 << 20,
            pci_device: 0x20b2_10de,
            greatest_priority: -5,
        },
        _ => Arch {
            shared_per_block_optin: 49152,
            shared_per_sm: 65536,
            reserved_shared_per_block: 0,
            clock_khz: 1480000,
            mem_clock_khz: 715000,
            bus_width: 4096,
            l2_bytes: 4 << 20,
            pci_device: 0x15f9_10de,
            greatest_priority: -1,
        },
    }
}

/// The PCI bus of the first simulated device (domain 0, device 0); device `i` sits on bus
/// `PCI_BUS + i`.
pub const PCI_BUS: c_int = 0x1b;

/// The value of device attribute `attr`, or CUDA_ERROR_INVALID_VALUE for one we do not know.
/// `physical` is the device's index in the machine.
pub fn attribute(d: &Device, attr: c_int, physical: u32) -> Result<c_int, c_int> {
    let cc = d.profile.compute_capability;
    let a = arch(cc);
    let hopper = cc[0] >= 9;
    let ampere_plus = cc[0] >= 8;
    let v = match attr {
        1 => 1024,                         // MAX_THREADS_PER_BLOCK
        2 | 3 => 1024,                     // MAX_BLOCK_DIM_X, Y
        4 => 64,                           // MAX_BLOCK_DIM_Z
        5 => i32::MAX,                     // MAX_GRID_DIM_X
        6 | 7 => 65535,                    // MAX_GRID_DIM_Y, Z
        8 => 49152,                        // MAX_SHARED_MEMORY_PER_BLOCK
        9 => 65536,                        // TOTAL_CONSTANT_MEMORY
        10 => 32,                          // WARP_SIZE
        11 => i32::MAX,                    // MAX_PITCH
        12 => 65536,                       // MAX_REGISTERS_PER_BLOCK
        13 => a.clock_khz,                 // CLOCK_RATE
        14 => 512,                         // TEXTURE_ALIGNMENT
        15 => 1,                           // GPU_OVERLAP
        16 => d.profile.sm_count as c_int, // MULTIPROCESSOR_COUNT
        17 => 0,                           // KERNEL_EXEC_TIMEOUT
        18 => 0,                           // INTEGRATED
        19 => 1,                           // CAN_MAP_HOST_MEMORY
        20 => 0,                           // COMPUTE_MODE (default)
        21 => 131072,                      // MAXIMUM_TEXTURE1D_WIDTH
        22 => 131072,                      // MAXIMUM_TEXTURE2D_WIDTH
        23 => 65536,                       // MAXIMUM_TEXTURE2D_HEIGHT
        24..=26 => 16384,                  // MAXIMUM_TEXTURE3D_*
        27 | 28 => 32768,                  // MAXIMUM_TEXTURE2D_LAYERED_WIDTH, HEIGHT
        29 => 2048,                        // MAXIMUM_TEXTURE2D_LAYERED_LAYERS
        30 => 512,                         // SURFACE_ALIGNMENT
        31 => 1,                           // CONCURRENT_KERNELS
        32 => 1,                           // ECC_ENABLED
        33 => PCI_BUS + physical as c_int, // PCI_BUS_ID
        34 => 0,                           // PCI_DEVICE_ID
        35 => 0,                           // TCC_DRIVER
        36 => a.mem_clock_khz,             // MEMORY_CLOCK_RATE
        37 => a.bus_width,                 // GLOBAL_MEMORY_BUS_WIDTH
        38 => a.l2_bytes,                  // L2_CACHE_SIZE
        39 => 2048,                        // MAX_THREADS_PER_MULTIPROCESSOR
        40 => 2, // ASYNC_ENGINE_COUNT: the simulator models one H2D and one D2H engine
        41 => 1, // UNIFIED_ADDRESSING
        // Texture and surface limits (the same for compute capabilities 6.x to 9.x).
        42 => 32768,                    // MAXIMUM_TEXTURE1D_LAYERED_WIDTH
        43 => 2048,                     // MAXIMUM_TEXTURE1D_LAYERED_LAYERS
        44 => 1,                        // CAN_TEX2D_GATHER
        45 | 46 => 32768,               // MAXIMUM_TEXTURE2D_GATHER_*
        47 | 48 => 8192,                // MAXIMUM_TEXTURE3D_WIDTH/HEIGHT_ALTERNATE
        49 => 32768,                    // MAXIMUM_TEXTURE3D_DEPTH_ALTERNATE
        50 => 0,                        // PCI_DOMAIN_ID
        51 => 32,                       // TEXTURE_PITCH_ALIGNMENT
        52 | 53 => 32768,               // MAXIMUM_TEXTURECUBEMAP_(LAYERED_)WIDTH
        54 => 2046,                     // MAXIMUM_TEXTURECUBEMAP_LAYERED_LAYERS
        55 => 32768,                    // MAXIMUM_SURFACE1D_WIDTH
        56 => 131072,                   // MAXIMUM_SURFACE2D_WIDTH
        57 => 65536,                    // MAXIMUM_SURFACE2D_HEIGHT
        58..=60 => 16384,               // MAXIMUM_SURFACE3D_*
        61 => 32768,                    // MAXIMUM_SURFACE1D_LAYERED_WIDTH
        62 => 2048,                     // MAXIMUM_SURFACE1D_LAYERED_LAYERS
        63 | 64 => 32768,               // MAXIMUM_SURFACE2D_LAYERED_WIDTH, HEIGHT
        65 => 2048,                     // MAXIMUM_SURFACE2D_LAYERED_LAYERS
        66 | 67 => 32768,               // MAXIMUM_SURFACECUBEMAP_(LAYERED_)WIDTH
        68 => 2046,                     // MAXIMUM_SURFACECUBEMAP_LAYERED_LAYERS
        69 => 1 << 28,                  // MAXIMUM_TEXTURE1D_LINEAR_WIDTH
        70 => 131072,                   // MAXIMUM_TEXTURE2D_LINEAR_WIDTH
        71 => 65000,                    // MAXIMUM_TEXTURE2D_LINEAR_HEIGHT
        72 => 2097120,                  // MAXIMUM_TEXTURE2D_LINEAR_PITCH
        73 | 74 => 32768,               // MAXIMUM_TEXTURE2D_MIPMAPPED_*
        77 => 32768,                    // MAXIMUM_TEXTURE1D_MIPMAPPED_WIDTH
        75 => cc[0],                    // COMPUTE_CAPABILITY_MAJOR
        76 => cc[1],                    // COMPUTE_CAPABILITY_MINOR
        78 => 1,                        // STREAM_PRIORITIES_SUPPORTED
        79 | 80 => 1,                   // GLOBAL_L1_CACHE_SUPPORTED, LOCAL_L1_CACHE_SUPPORTED
        81 => a.shared_per_sm,          // MAX_SHARED_MEMORY_PER_MULTIPROCESSOR
        82 => 65536,                    // MAX_REGISTERS_PER_MULTIPROCESSOR
        83 => 1,                        // MANAGED_MEMORY
        84 | 85 => 0,                   // MULTI_GPU_BOARD, MULTI_GPU_BOARD_GROUP_ID
        86 => 0,                        // HOST_NATIVE_ATOMIC_SUPPORTED (no NVLink to the host)
        87 => 2, // SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO (FP64 is half FP32 on P100, H100)
        88 => 0, // PAGEABLE_MEMORY_ACCESS
        89 => 1, // CONCURRENT_MANAGED_ACCESS
        90 => 1, // COMPUTE_PREEMPTION_SUPPORTED
        91 => 1, // CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM
        92..=94 => 0, // CAN_USE_STREAM_MEM_OPS_V1 and friends (removed in CUDA 12)
        95 => 1, // COOPERATIVE_LAUNCH
        96 => 0, // COOPERATIVE_MULTI_DEVICE_LAUNCH (deprecated)
        97 => a.shared_per_block_optin, // MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
        98 => 0, // CAN_FLUSH_REMOTE_WRITES
        99 => 1, // HOST_REGISTER_SUPPORTED
        100 | 101 => 0, // PAGEABLE_..._HOST_PAGE_TABLES, DIRECT_MANAGED_MEM_ACCESS_FROM_HOST
        102 => 1, // VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED
        103 => 1, // HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED
        104 | 105 => 0, // WIN32 handle types
        106 => 32, // MAX_BLOCKS_PER_MULTIPROCESSOR
        107 => 0, // GENERIC_COMPRESSION_SUPPORTED
        // Persisting L2 and access-policy windows exist from 8.0 (programming guide).
        108 => {
            if ampere_plus {
                a.l2_bytes / 4 * 3
            } else {
                0
            }
        }
        109 => {
            if ampere_plus {
                134213632
            } else {
                0
            }
        }
        110 => 0,                           // GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED
        111 => a.reserved_shared_per_block, // RESERVED_SHARED_MEMORY_PER_BLOCK
        112 => ampere_plus as c_int,        // SPARSE_CUDA_ARRAY_SUPPORTED
        113 => 1,                           // READ_ONLY_HOST_REGISTER_SUPPORTED
        114 => 1,                           // TIMELINE_SEMAPHORE_INTEROP_SUPPORTED
        115 => 1,                           // MEMORY_POOLS_SUPPORTED
        116..=118 => 0,                     // GPU_DIRECT_RDMA_*
        119 => 1,                           // MEMPOOL_SUPPORTED_HANDLE_TYPES: POSIX fd
        120 => hopper as c_int,             // CLUSTER_LAUNCH (9.0)
        121 => 1,                           // DEFERRED_MAPPING_CUDA_ARRAY_SUPPORTED
        122 | 123 => 1,                     // 64-bit stream mem ops, wait value NOR
        124 => 0,                           // DMA_BUF_SUPPORTED
        125 => 1,                           // IPC_EVENT_SUPPORTED
        126 => {
            if hopper {
                4
            } else {
                1
            }
        } // MEM_SYNC_DOMAIN_COUNT
        127 => hopper as c_int,             // TENSOR_MAP_ACCESS_SUPPORTED (TMA, 9.0)
        128 => 0,                           // HANDLE_TYPE_FABRIC_SUPPORTED
        129 => 0,                           // UNIFIED_FUNCTION_POINTERS
        130 => 0,                           // NUMA_CONFIG: none
        131 => -1,                          // NUMA_ID
        132 => 0,                           // MULTICAST_SUPPORTED
        133 => 0,                           // MPS_ENABLED
        134 => -1,                          // HOST_NUMA_ID
        135 => 0,                           // D3D12_CIG_SUPPORTED (Windows)
        136 | 137 => 0, // MEM_DECOMPRESS_ALGORITHM_MASK, _MAXIMUM_LENGTH: no decompression engine
        138 => 0,       // VULKAN_CIG_SUPPORTED
        139 => a.pci_device as c_int, // GPU_PCI_DEVICE_ID
        140 => 0,       // GPU_PCI_SUBSYSTEM_ID
        141..=148 => 0, // host NUMA / host pools / DMA-BUF / atomic reduction
        _ => {
            unknown(attr);
            return Err(INVALID_VALUE);
        }
    };
    Ok(v)
}

/// SIMGPU_LOG=debug: names, once each, an attribute asked for that the simulator does not know.
fn unknown(attr: c_int) {
    use std::collections::HashSet;
    use std::sync::{LazyLock, Mutex};
    static DEBUG: LazyLock<bool> =
        LazyLock::new(|| std::env::var("SIMGPU_LOG").is_ok_and(|v| v == "debug"));
    static SAID: LazyLock<Mutex<HashSet<c_int>>> = LazyLock::new(Default::default);
    if *DEBUG && SAID.lock().is_ok_and(|mut s| s.insert(attr)) {
        eprintln!("simgpu: cuDeviceGetAttribute: attribute {attr} is not simulated");
    }
}

/// The device's UUID (16 bytes): fixed, so runs are reproducible, and marked by the profile's
/// name so that two profiles do not look like one device.
pub fn uuid(d: &Device, physical: u32) -> [u8; 16] {
    let mut u = *b"simgpu-\0\0\0\0\0\0\0\0\0";
    for (i, b) in d.profile.name.bytes().take(8).enumerate() {
        u[7 + i] = b;
    }
    u[15] = physical as u8;
    u
}

/// "domain:bus:device.function", as cuDeviceGetPCIBusId writes it.
pub fn pci_bus_id(physical: u32) -> String {
    format!("0000:{:02X}:00.0", PCI_BUS + physical as c_int)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every attribute of CUDA 12.9's `CUdevice_attribute` (1 to 143, the range TensorFlow 2.21's
    /// CUDA 12 build can ask for) is answered on both profiles, with the published figures where
    /// a framework reads them (H100 SXM5 and P100 SXM2 whitepapers, CUDA programming guide).
    #[test]
    fn every_cuda_12_attribute_is_answered_on_both_profiles() {
        for profile in ["h100", "h200", "p100"] {
            let d = Device::for_test(profile);
            for a in 1..=143 {
                assert!(attribute(&d, a, 0).is_ok(), "{profile}: attribute {a}");
            }
        }
        let h = Device::for_test("h100");
        let p = Device::for_test("p100");
        // (attribute, H100 SXM5, P100 SXM2)
        for (a, hv, pv) in [
            (16, 132, 56),              // MULTIPROCESSOR_COUNT
            (13, 1_980_000, 1_480_000), // CLOCK_RATE (kHz, boost)
            (36, 2_619_000, 715_000),   // MEMORY_CLOCK_RATE (kHz)
            (37, 5120, 4096),           // GLOBAL_MEMORY_BUS_WIDTH
            (38, 50 << 20, 4 << 20),    // L2_CACHE_SIZE
            (75, 9, 6),                 // COMPUTE_CAPABILITY_MAJOR
            (76, 0, 0),                 // COMPUTE_CAPABILITY_MINOR
            (39, 2048, 2048),           // MAX_THREADS_PER_MULTIPROCESSOR
            (81, 233_472, 65_536),      // MAX_SHARED_MEMORY_PER_MULTIPROCESSOR
            (97, 232_448, 49_152),      // MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
            (120, 1, 0),                // CLUSTER_LAUNCH (9.0)
            (136, 0, 0),                // MEM_DECOMPRESS_ALGORITHM_MASK (Blackwell's engine)
        ] {
            assert_eq!(attribute(&h, a, 0), Ok(hv), "h100: attribute {a}");
            assert_eq!(attribute(&p, a, 0), Ok(pv), "p100: attribute {a}");
        }
        assert_eq!(attribute(&h, 0, 0), Err(INVALID_VALUE));
        assert_eq!(attribute(&h, 10_000, 0), Err(INVALID_VALUE));
    }
}
