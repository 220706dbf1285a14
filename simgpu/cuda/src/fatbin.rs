//! Fatbin containers as `nvcc` embeds them: finding the cubin for the device's architecture,
//! decompressing it, and reading each kernel's parameter layout from its `.nv.info.<kernel>`
//! section (what the real driver answers `cuFuncGetParamInfo` from).
//!
//! Formats as measured on torch 2.15's `libtorch_cuda.so` (docs/torch-on-simgpu.md of the shared
//! notes): a 16-byte container header (magic 0xBA55ED50, u16 version, u16 header size, u64 size
//! of the entries), then entries with their own header (64 bytes: kind, version, header size,
//! payload size, compressed size, PTX version, arch, name offset/length, flags, decompressed
//! size). Pure: works on byte slices; the FFI edge is in `modules.rs`.

pub use fatbin::{
    Entry, FATBIN_MAGIC, FatbinError, KIND_CUBIN, KIND_PTX, WRAPPER_MAGIC, bad, container_len,
    entries, payload, u16_at, u32_at,
};
use std::collections::HashMap;

/// `.nv.info` attribute formats: no value, byte, half-word, sized blob.
const EIFMT_NVAL: u8 = 1;
const EIFMT_BVAL: u8 = 2;
const EIFMT_HVAL: u8 = 3;
const EIFMT_SVAL: u8 = 4;
/// `.nv.info` attributes we read.
pub const EIATTR_KPARAM_INFO: u8 = 0x17;
pub const EIATTR_CBANK_PARAM_SIZE: u8 = 0x19;
/// The same for kernels with large parameter blocks (over 4 KiB; CUDA 12.1+ allows 32 KiB):
/// the same record with the size as a plain 32-bit word. Measured on torch's
/// `multi_tensor_apply_kernel`s (a 26,888-byte metadata struct, ten parameters, 26,960-byte bank).
pub const EIATTR_KPARAM_INFO_V2: u8 = 0x45;

/// The architectures (e.g. 90 for sm_90) of the cubins to use on a device of compute capability
/// `cc` (major * 10 + minor), and whether that is a fallback the real driver would refuse.
///
/// The real driver runs a cubin built for sm_XY on devices of the same major version and a minor
/// version of at least Y. When none fits (p100, sm_60, under a build for sm_75+), the simulator still answers from
/// the lowest cubin, so that shape-mode runs of such builds are possible; the caller says so.
pub fn choose_arch(entries: &[Entry], cc: u32) -> Result<(u32, bool), FatbinError> {
    let cubins: Vec<u32> = entries
        .iter()
        .filter(|e| e.kind == KIND_CUBIN)
        .map(|e| e.arch)
        .collect();
    if let Some(&a) = cubins
        .iter()
        .filter(|&&a| a / 10 == cc / 10 && a <= cc)
        .max()
    {
        return Ok((a, false));
    }
    cubins.iter().min().map(|&a| (a, true)).ok_or_else(|| {
        FatbinError::NoBinary(format!(
            "fatbin holds no cubin (entries: {:?})",
            entries.iter().map(|e| (e.kind, e.arch)).collect::<Vec<_>>()
        ))
    })
}

/// One kernel's parameters as the cubin describes them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KernelParams {
    /// (offset, size) in bytes, by ordinal.
    pub params: Vec<(usize, usize)>,
    /// Size of the parameter block in the constant bank, when stated.
    pub cbank_size: Option<usize>,
}

impl KernelParams {
    /// End of the last parameter: what a packed (`extra`) argument buffer must hold.
    pub fn block_len(&self) -> usize {
        self.params.iter().map(|(o, s)| o + s).max().unwrap_or(0)
    }
}

/// Parses one `.nv.info.<kernel>` section.
pub fn parse_nv_info(sec: &[u8]) -> Result<KernelParams, FatbinError> {
    let mut by_ordinal: Vec<Option<(usize, usize)>> = Vec::new();
    let mut cbank = None;
    let mut at = 0;
    while at + 2 <= sec.len() {
        let (fmt, attr) = (sec[at], sec[at + 1]);
        let val = u16_at(sec, at + 2).ok_or_else(|| bad(".nv.info record truncated"))?;
        let body = at + 4;
        at = match fmt {
            EIFMT_NVAL | EIFMT_BVAL | EIFMT_HVAL => body,
            EIFMT_SVAL => body + val as usize,
            _ => return Err(bad(format!(".nv.info format {fmt} at offset {at}"))),
        };
        if at > sec.len() {
            return Err(bad(".nv.info record runs past the section"));
        }
        match (fmt, attr) {
            (EIFMT_SVAL, EIATTR_KPARAM_INFO | EIATTR_KPARAM_INFO_V2) if val >= 12 => {
                let ordinal = u16_at(sec, body + 4).unwrap_or(0) as usize;
                let offset = u16_at(sec, body + 6).unwrap_or(0) as usize;
                let word = u32_at(sec, body + 8).unwrap_or(0) as usize;
                let size = if attr == EIATTR_KPARAM_INFO {
                    (word >> 18) & 0x3fff
                } else {
                    word
                };
                if size > 1 << 20 {
                    return Err(bad(format!("parameter {ordinal} of {size} bytes")));
                }
                if by_ordinal.len() <= ordinal {
                    by_ordinal.resize(ordinal + 1, None);
                }
                by_ordinal[ordinal] = Some((offset, size));
            }
            (EIFMT_HVAL, EIATTR_CBANK_PARAM_SIZE) => cbank = Some(val as usize),
            _ => {}
        }
    }
    let params = by_ordinal
        .into_iter()
        .enumerate()
        .map(|(i, p)| p.ok_or_else(|| bad(format!("parameter {i} has no KPARAM_INFO"))))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(KernelParams {
        params,
        cbank_size: cbank,
    })
}

/// Every kernel's parameters in one cubin (an ELF), by mangled name.
pub fn cubin_kernels(elf: &[u8]) -> Result<HashMap<String, KernelParams>, FatbinError> {
    use object::{Object, ObjectSection};
    let file = object::File::parse(elf).map_err(|e| bad(format!("cubin ELF: {e}")))?;
    let mut out = HashMap::new();
    for s in file.sections() {
        let Ok(name) = s.name() else { continue };
        let Some(kernel) = name.strip_prefix(".nv.info.") else {
            continue;
        };
        let data = s
            .data()
            .map_err(|e| bad(format!("cubin section {name}: {e}")))?;
        let p = parse_nv_info(data).map_err(|e| bad(format!("{name}: {e}")))?;
        out.insert(kernel.to_string(), p);
    }
    Ok(out)
}

/// What one fatbin gives the driver: its kernels' parameters for the chosen architecture.
#[derive(Debug, Default)]
pub struct Parsed {
    pub arch: u32,
    pub fallback: bool,
    pub kernels: HashMap<String, KernelParams>,
    /// A PTX module's kernels as text (what the host can interpret); empty for cubins.
    pub ptx: HashMap<String, std::sync::Arc<PtxEntry>>,
}

/// One PTX `.entry`: its parameters' names by ordinal and its body (between the braces).
#[derive(Debug, Default)]
pub struct PtxEntry {
    pub params: Vec<String>,
    pub body: String,
}

/// Reads a whole container for a device of compute capability `cc` (major * 10 + minor).
pub fn parse(data: &[u8], cc: u32) -> Result<Parsed, FatbinError> {
    let ents = entries(data)?;
    let (arch, fallback) = choose_arch(&ents, cc)?;
    let mut kernels = HashMap::new();
    // Arch-specific variants (sm_90a) share the arch number: take the union, first wins.
    for e in ents
        .iter()
        .filter(|e| e.kind == KIND_CUBIN && e.arch == arch)
    {
        let elf = payload(data, e)?;
        for (k, p) in cubin_kernels(&elf)? {
            kernels.entry(k).or_insert(p);
        }
    }
    Ok(Parsed {
        arch,
        fallback,
        kernels,
        ptx: HashMap::new(),
    })
}

/// Builders for tests: a cubin ELF with `.nv.info.<kernel>` sections, and a fatbin around it.
#[cfg(test)]
pub mod fixture {
    /// An `.nv.info` section: one KPARAM_INFO per (offset, size), ordinals in reverse order as
    /// nvcc writes them, and the constant-bank size.
    pub fn nv_info(params: &[(u16, u16)], cbank: u16) -> Vec<u8> {
        let mut s = Vec::new();
        // An attribute we do not read, to show records are skipped by their format.
        s.extend_from_slice(&[0x04, 0x0a, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        s.extend_from_slice(&[0x03, 0x19]);
        s.extend_from_slice(&cbank.to_le_bytes());
        // Blocks over 4 KiB use the V2 record, as nvcc does.
        let v2 = params.iter().any(|&(o, s)| o as u32 + s as u32 > 4096);
        for (i, &(off, size)) in params.iter().enumerate().rev() {
            s.extend_from_slice(&[0x04, if v2 { 0x45 } else { 0x17 }, 12, 0]);
            s.extend_from_slice(&0u32.to_le_bytes());
            s.extend_from_slice(&(i as u16).to_le_bytes());
            s.extend_from_slice(&off.to_le_bytes());
            let word = if v2 {
                size as u32
            } else {
                ((size as u32) << 18) | 0x1f000
            };
            s.extend_from_slice(&word.to_le_bytes());
        }
        s.extend_from_slice(&[0x01, 0x1b, 0, 0]);
        s
    }

    /// A minimal ELF64 with the given named sections (plus the null one and .shstrtab).
    pub fn elf(sections: &[(&str, Vec<u8>)]) -> Vec<u8> {
        let mut shstr = vec![0u8];
        let mut names = Vec::new();
        for (n, _) in sections
            .iter()
            .map(|(n, d)| (*n, d))
            .chain([(".shstrtab", &vec![])])
        {
            names.push(shstr.len() as u32);
            shstr.extend_from_slice(n.as_bytes());
            shstr.push(0);
        }
        let mut body = Vec::new();
        let mut places = Vec::new();
        for (_, d) in sections {
            places.push((64 + body.len(), d.len()));
            body.extend_from_slice(d);
        }
        places.push((64 + body.len(), shstr.len()));
        body.extend_from_slice(&shstr);
        while body.len() % 8 != 0 {
            body.push(0);
        }
        let shoff = 64 + body.len();
        let shnum = sections.len() + 2;
        let mut out = vec![
            0x7f, b'E', b'L', b'F', 2, 1, 1, 0x33, 7, 0, 0, 0, 0, 0, 0, 0,
        ];
        out.extend_from_slice(&2u16.to_le_bytes()); // ET_EXEC
        out.extend_from_slice(&190u16.to_le_bytes()); // EM_CUDA
        out.extend_from_slice(&1u32.to_le_bytes());
        out.extend_from_slice(&0u64.to_le_bytes()); // entry
        out.extend_from_slice(&0u64.to_le_bytes()); // phoff
        out.extend_from_slice(&(shoff as u64).to_le_bytes());
        out.extend_from_slice(&0x5a055au32.to_le_bytes()); // flags
        out.extend_from_slice(&64u16.to_le_bytes());
        out.extend_from_slice(&56u16.to_le_bytes());
        out.extend_from_slice(&0u16.to_le_bytes());
        out.extend_from_slice(&64u16.to_le_bytes());
        out.extend_from_slice(&(shnum as u16).to_le_bytes());
        out.extend_from_slice(&((shnum - 1) as u16).to_le_bytes());
        out.extend_from_slice(&body);
        out.extend_from_slice(&[0u8; 64]);
        for (i, (off, len)) in places.iter().enumerate() {
            let ty: u32 = if i == sections.len() { 3 } else { 0x7000_0000 };
            out.extend_from_slice(&names[i].to_le_bytes());
            out.extend_from_slice(&ty.to_le_bytes());
            out.extend_from_slice(&0u64.to_le_bytes()); // flags
            out.extend_from_slice(&0u64.to_le_bytes()); // addr
            out.extend_from_slice(&(*off as u64).to_le_bytes());
            out.extend_from_slice(&(*len as u64).to_le_bytes());
            out.extend_from_slice(&0u32.to_le_bytes());
            out.extend_from_slice(&0u32.to_le_bytes());
            out.extend_from_slice(&4u64.to_le_bytes());
            out.extend_from_slice(&0u64.to_le_bytes());
        }
        out
    }

    /// A fatbin container with one entry per (arch, cubin); zstd-compressed when `zstd`.
    pub fn fatbin(cubins: &[(u32, Vec<u8>)], zstd: bool) -> Vec<u8> {
        let mut ents = Vec::new();
        for (arch, elf) in cubins {
            let payload = if zstd {
                ruzstd::encoding::compress_to_vec(
                    &elf[..],
                    ruzstd::encoding::CompressionLevel::Fastest,
                )
            } else {
                elf.clone()
            };
            let mut padded = payload.clone();
            while padded.len() % 8 != 0 {
                padded.push(0);
            }
            let flags: u64 = 0x11 | if zstd { fatbin::FLAG_ZSTD } else { 0 };
            ents.extend_from_slice(&super::KIND_CUBIN.to_le_bytes());
            ents.extend_from_slice(&0x0101u16.to_le_bytes());
            ents.extend_from_slice(&64u32.to_le_bytes());
            ents.extend_from_slice(&(padded.len() as u64).to_le_bytes());
            ents.extend_from_slice(&(payload.len() as u32).to_le_bytes());
            ents.extend_from_slice(&0u32.to_le_bytes());
            ents.extend_from_slice(&8u16.to_le_bytes());
            ents.extend_from_slice(&1u16.to_le_bytes());
            ents.extend_from_slice(&arch.to_le_bytes());
            ents.extend_from_slice(&[0u8; 8]);
            ents.extend_from_slice(&flags.to_le_bytes());
            ents.extend_from_slice(&0u64.to_le_bytes());
            ents.extend_from_slice(&(elf.len() as u64).to_le_bytes());
            ents.extend_from_slice(&padded);
        }
        let mut out = Vec::new();
        out.extend_from_slice(&super::FATBIN_MAGIC.to_le_bytes());
        out.extend_from_slice(&1u16.to_le_bytes());
        out.extend_from_slice(&16u16.to_le_bytes());
        out.extend_from_slice(&(ents.len() as u64).to_le_bytes());
        out.extend_from_slice(&ents);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::fixture::*;
    use super::*;

    fn sample() -> (Vec<u8>, Vec<(u16, u16)>) {
        let params = vec![(0, 4), (4, 8), (16, 16)];
        let elf = elf(&[
            (".nv.info", vec![0x04, 0x2f, 0, 0]),
            (".nv.info._Z3addiPf", nv_info(&params, 32)),
            (".nv.info._Z4noopv", vec![0x03, 0x19, 0, 0]),
            (
                ".nv.info._Z3bigv",
                nv_info(&[(0, 26888), (26888, 1), (26896, 8)], 26904),
            ),
            (".text._Z3addiPf", vec![0; 16]),
        ]);
        (elf, params)
    }

    #[test]
    fn reads_kernel_params_from_a_compressed_cubin() {
        let (elf, params) = sample();
        for zstd in [false, true] {
            let fb = fatbin(&[(75, b"other".repeat(20)), (90, elf.clone())], zstd);
            let p = parse(&fb, 90).unwrap();
            assert_eq!((p.arch, p.fallback), (90, false));
            let k = &p.kernels["_Z3addiPf"];
            let want: Vec<(usize, usize)> = params
                .iter()
                .map(|&(o, s)| (o as usize, s as usize))
                .collect();
            assert_eq!(k.params, want);
            assert_eq!(k.cbank_size, Some(32));
            assert_eq!(k.block_len(), 32);
            assert_eq!(p.kernels["_Z4noopv"].params, vec![]);
            assert_eq!(
                p.kernels["_Z3bigv"].params,
                vec![(0, 26888), (26888, 1), (26896, 8)]
            );
            assert!(!p.kernels.contains_key(""));
        }
    }

    #[test]
    fn picks_the_compatible_arch_or_falls_back_to_the_lowest() {
        let (elf, _) = sample();
        let fb = fatbin(&[(80, elf.clone()), (86, elf.clone()), (90, elf)], true);
        let e = entries(&fb).unwrap();
        assert_eq!(choose_arch(&e, 89).unwrap(), (86, false));
        assert_eq!(choose_arch(&e, 80).unwrap(), (80, false));
        assert_eq!(choose_arch(&e, 100).unwrap(), (80, true));
        assert_eq!(choose_arch(&e, 60).unwrap(), (80, true));
        assert!(matches!(
            choose_arch(&[], 90),
            Err(FatbinError::NoBinary(_))
        ));
    }

    #[test]
    fn bad_input_is_an_error_not_a_crash() {
        let (elf, _) = sample();
        let fb = fatbin(&[(90, elf)], true);
        assert!(container_len(b"nope").is_err());
        for cut in [0, 10, 20, 80, fb.len() / 2, fb.len() - 1] {
            assert!(parse(&fb[..cut], 90).is_err(), "cut at {cut}");
        }
        let mut corrupt = fb.clone();
        let (start, _) = entries(&fb).unwrap()[0].payload;
        corrupt[start..start + 4].copy_from_slice(b"junk");
        assert!(parse(&corrupt, 90).is_err());
        assert!(parse_nv_info(&[0x09, 0x17, 0, 0]).is_err());
        assert!(parse_nv_info(&[0x04, 0x17, 200, 0]).is_err());
    }
}
