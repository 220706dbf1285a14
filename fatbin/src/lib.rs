//! Fatbin containers as `nvcc` embeds them in a program and hands them to the CUDA runtime
//! (`__cudaRegisterFatBinary`) or the driver (`cuModuleLoadData`): the container, its entries
//! (a cubin per architecture, PTX), and each entry's payload, decompressed. Pure: works on
//! byte slices. Used by the simulated driver (its modules) and by Marmoset (the PTX of the
//! kernels a program registers).
//!
//! Formats as measured on torch 2.15's `libtorch_cuda.so` and TensorFlow 2.21's libraries: a
//! 16-byte container header (magic 0xBA55ED50, u16 version, u16 header size, u64 size of the
//! entries), then entries with their own header (64 bytes: kind, version, header size, payload
//! size, compressed size, PTX version, arch, name offset/length, flags, decompressed size).

pub const FATBIN_MAGIC: u32 = 0xBA55_ED50;
/// Entry kinds: PTX text, a cubin.
pub const KIND_PTX: u16 = 1;
pub const KIND_CUBIN: u16 = 2;
/// Entry flags: payload compressed with zstd (CUDA 12.8+) or LZ4 (older toolkits).
pub const FLAG_ZSTD: u64 = 0x8000;
pub const FLAG_LZ4: u64 = 0x2000;

/// The wrapper `__cudaRegisterFatBinary` takes (and `cuModuleLoadData` accepts): {u32 magic,
/// u32 version, the container's address, ...}.
pub const WRAPPER_MAGIC: u32 = 0x4662_43B1;

/// Why a fatbin could not give an answer; maps to the driver's error codes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FatbinError {
    /// Not a fatbin, truncated, or an entry we cannot decode: CUDA_ERROR_INVALID_IMAGE.
    Invalid(String),
    /// No cubin in it at all (PTX only): CUDA_ERROR_NO_BINARY_FOR_GPU.
    NoBinary(String),
}

impl std::fmt::Display for FatbinError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FatbinError::Invalid(s) | FatbinError::NoBinary(s) => f.write_str(s),
        }
    }
}

pub fn bad(s: impl Into<String>) -> FatbinError {
    FatbinError::Invalid(s.into())
}

/// One entry's header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub kind: u16,
    pub arch: u32,
    pub flags: u64,
    /// Offset and length of the payload within the container slice.
    pub payload: (usize, usize),
    pub compressed_size: u64,
    pub decompressed_size: u64,
}

pub fn u16_at(b: &[u8], o: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(o..o + 2)?.try_into().ok()?))
}
pub fn u32_at(b: &[u8], o: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(o..o + 4)?.try_into().ok()?))
}
pub fn u64_at(b: &[u8], o: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(o..o + 8)?.try_into().ok()?))
}

/// The container's total length (header + entries) from its first 16 bytes.
pub fn container_len(head: &[u8]) -> Result<usize, FatbinError> {
    let magic = u32_at(head, 0).ok_or_else(|| bad("fatbin header truncated"))?;
    if magic != FATBIN_MAGIC {
        return Err(bad(format!(
            "fatbin magic {magic:#x}, expected {FATBIN_MAGIC:#x}"
        )));
    }
    let hsize = u16_at(head, 6).unwrap_or(0) as usize;
    let size = u64_at(head, 8).unwrap_or(0) as usize;
    if hsize < 16 {
        return Err(bad(format!("fatbin header size {hsize}")));
    }
    hsize
        .checked_add(size)
        .ok_or_else(|| bad("fatbin size overflows"))
}

/// The entries of one container (`data` holds exactly the container).
pub fn entries(data: &[u8]) -> Result<Vec<Entry>, FatbinError> {
    let total = container_len(data)?;
    if data.len() < total {
        return Err(bad(format!(
            "fatbin says {total} bytes, {} given",
            data.len()
        )));
    }
    let mut at = u16_at(data, 6).unwrap_or(16) as usize;
    let mut out = Vec::new();
    while at + 16 <= total {
        let e = &data[at..total];
        let kind = u16_at(e, 0).unwrap_or(0);
        let hsize = u32_at(e, 4).unwrap_or(0) as usize;
        let psize = u64_at(e, 8).unwrap_or(0) as usize;
        if hsize < 64 || hsize > e.len() || psize > e.len() - hsize {
            return Err(bad(format!(
                "fatbin entry at {at}: header {hsize} bytes, payload {psize}, {} left",
                e.len()
            )));
        }
        out.push(Entry {
            kind,
            arch: u32_at(e, 28).unwrap_or(0),
            flags: u64_at(e, 40).unwrap_or(0),
            payload: (at + hsize, psize),
            compressed_size: u32_at(e, 16).unwrap_or(0) as u64,
            decompressed_size: u64_at(e, 56).unwrap_or(0),
        });
        at += hsize + psize;
    }
    Ok(out)
}

/// The entry's payload, decompressed when flagged so.
pub fn payload(data: &[u8], e: &Entry) -> Result<Vec<u8>, FatbinError> {
    let raw = &data[e.payload.0..e.payload.0 + e.payload.1];
    let want = e.decompressed_size as usize;
    if e.flags & FLAG_ZSTD != 0 {
        let n = (e.compressed_size as usize).min(raw.len());
        let mut out = Vec::with_capacity(want);
        let mut dec = ruzstd::decoding::StreamingDecoder::new(&raw[..n])
            .map_err(|err| bad(format!("zstd payload (arch {}): {err}", e.arch)))?;
        std::io::Read::read_to_end(&mut dec, &mut out)
            .map_err(|err| bad(format!("zstd payload (arch {}): {err}", e.arch)))?;
        Ok(out)
    } else if e.flags & FLAG_LZ4 != 0 {
        // Older toolkits: an LZ4 block with the decompressed size in the entry header.
        let n = (e.compressed_size as usize).min(raw.len());
        lz4_flex::block::decompress(&raw[..n], want)
            .map_err(|err| bad(format!("LZ4 payload (arch {}): {err}", e.arch)))
    } else {
        Ok(raw.to_vec())
    }
}
