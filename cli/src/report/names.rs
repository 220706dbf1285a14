//! Tensors named by what made them: the first call that wrote the allocation (its API, or its
//! kernel's name; the role the call gave it), the shape and data type of the first call that
//! describes it (cuDNN and cuBLAS records carry their tensors' dimensions, their lineage the
//! data type), and its size: "cudnnConvolutionForward y [256,8,256,256] f32, 512.00 MiB"
//! rather than an allocation id.

use super::u;
use crate::svg::bytes;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};

/// What names one allocation.
#[derive(Debug, Default, Clone)]
struct Made {
    size: u64,
    ptr: u64,
    /// The first call that wrote it, and the role that call gave it.
    writer: Option<(String, Option<String>)>,
    /// The first shape and data type a call gave it.
    dims: Option<Vec<i64>>,
    dtype: Option<&'static str>,
}

/// cudnnDataType_t as people write it.
fn cudnn_type(t: i64) -> Option<&'static str> {
    Some(match t {
        0 => "f32",
        1 => "f64",
        2 => "f16",
        3 => "i8",
        4 => "i32",
        6 => "u8",
        9 => "bf16",
        10 => "i64",
        11 => "bool",
        12 => "fp8e4m3",
        13 => "fp8e5m2",
        _ => return None,
    })
}

/// cudaDataType as people write it.
fn cuda_type(t: i64) -> Option<&'static str> {
    Some(match t {
        0 => "f32",
        1 => "f64",
        2 => "f16",
        3 => "i8",
        8 => "u8",
        10 => "i32",
        14 => "bf16",
        _ => return None,
    })
}

/// A kernel's demangled name, short: the function's own name without namespaces, return type
/// or parameters, and its first template argument that is a type (PyTorch's elementwise
/// kernels say what they compute there): `vectorized_elementwise_kernel<CUDAFunctor_add<float>>`.
pub fn kernel_name(name: &str) -> String {
    let name = name.strip_prefix("void ").unwrap_or(name);
    // Cut the parameter list: the first '(' outside template brackets.
    let mut depth = 0i32;
    let mut end = name.len();
    for (i, ch) in name.char_indices() {
        match ch {
            '<' => depth += 1,
            '>' => depth -= 1,
            '(' if depth == 0 => {
                end = i;
                break;
            }
            _ => {}
        }
    }
    let name = &name[..end];
    let (base, args) = match name.find('<') {
        Some(i) => (
            &name[..i],
            Some(&name[i + 1..name.rfind('>').unwrap_or(name.len())]),
        ),
        None => (name, None),
    };
    let strip = |s: &str| -> String {
        // The last `::` component outside template brackets.
        let mut depth = 0i32;
        let mut cut = 0;
        let b = s.as_bytes();
        for i in 0..b.len() {
            match b[i] {
                b'<' => depth += 1,
                b'>' => depth -= 1,
                b':' if depth == 0 && i + 1 < b.len() && b[i + 1] == b':' => cut = i + 2,
                _ => {}
            }
        }
        s[cut..].trim().to_string()
    };
    let mut out = strip(base);
    if let Some(args) = args {
        // Top-level template arguments.
        let mut depth = 0i32;
        let mut from = 0;
        let mut parts = Vec::new();
        for (i, ch) in args.char_indices() {
            match ch {
                '<' | '(' => depth += 1,
                '>' | ')' => depth -= 1,
                ',' if depth == 0 => {
                    parts.push(&args[from..i]);
                    from = i + 1;
                }
                _ => {}
            }
        }
        parts.push(&args[from..]);
        if let Some(t) = parts
            .iter()
            .map(|p| p.trim())
            .find(|p| !p.is_empty() && !p.chars().all(|c| c.is_ascii_digit() || c == 'u'))
        {
            out = format!("{out}<{}>", strip(t));
        }
    }
    if out.chars().count() > 60 {
        out = out.chars().take(57).collect::<String>() + "...";
    }
    out
}

/// The names of a trace's allocations, by allocation id.
pub fn names(recs: &[Value]) -> HashMap<u64, String> {
    let mut made: HashMap<u64, Made> = HashMap::new();
    // Live allocations by address (address -> size, id), to find the allocation a tensor
    // argument points into.
    let mut by_ptr: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    let mut kernels: HashMap<u64, String> = HashMap::new();
    // The lineage before a call, by thread: it describes that thread's next call.
    let mut lineage: HashMap<u64, Value> = HashMap::new();
    for r in recs {
        let kind = r["kind"].as_str().unwrap_or_default();
        let tid = u(r, "tid").unwrap_or(0);
        match kind {
            "alloc" if u(r, "result") == Some(0) => {
                if let (Some(a), Some(ptr), Some(size)) = (u(r, "alloc"), u(r, "ptr"), u(r, "size"))
                    && a != 0
                {
                    made.insert(
                        a,
                        Made {
                            size,
                            ptr,
                            ..Made::default()
                        },
                    );
                    by_ptr.insert(ptr, (size, a));
                }
                continue;
            }
            "free" => {
                if let (Some(_), Some(ptr)) = (u(r, "alloc"), u(r, "ptr")) {
                    by_ptr.remove(&ptr);
                }
                continue;
            }
            "kernel" => {
                if let (Some(f), Some(n)) = (u(r, "func"), r["name"].as_str()) {
                    kernels.insert(f, kernel_name(n));
                }
                continue;
            }
            "lineage" => {
                lineage.insert(tid, r["replay"].clone());
                continue;
            }
            _ => {}
        }
        let Some(touches) = r["touches"].as_array() else {
            continue;
        };
        let replay = lineage.remove(&tid);
        let api = r["api"].as_str().unwrap_or(kind);
        let call = match kind {
            "launch" => u(r, "func")
                .and_then(|f| kernels.get(&f).cloned())
                .unwrap_or_else(|| api.to_string()),
            "copy" => format!("{api} {}", r["dir"].as_str().unwrap_or_default()),
            _ => api.to_string(),
        };
        // The call's tensor arguments: (allocation, role, dims).
        let dtype = replay.as_ref().and_then(|l| match l["call"].as_str() {
            Some("cudnn") => l["dtype"].as_i64().and_then(cudnn_type),
            Some("gemm") => l["types"]
                .as_array()
                .and_then(|t| t.last())
                .and_then(Value::as_i64)
                .and_then(cuda_type),
            Some("lt") => l["layouts"]
                .as_array()
                .and_then(|t| t.last())
                .and_then(|d| d["ty"].as_i64())
                .and_then(cuda_type),
            _ => None,
        });
        let mut args: Vec<(u64, String, Option<Vec<i64>>)> = Vec::new();
        for t in r["tensors"].as_array().map(Vec::as_slice).unwrap_or(&[]) {
            let Some(ptr) = u(t, "ptr") else { continue };
            let Some((_, &(_, a))) = by_ptr
                .range(..=ptr)
                .next_back()
                .filter(|(p, (s, _))| ptr < **p + (*s).max(1))
            else {
                continue;
            };
            let dims = t["dims"]
                .as_array()
                .map(|d| d.iter().filter_map(Value::as_i64).collect::<Vec<_>>())
                .filter(|d| !d.is_empty());
            args.push((a, t["role"].as_str().unwrap_or_default().to_string(), dims));
        }
        for (a, role, dims) in &args {
            if let Some(m) = made.get_mut(a)
                && m.dims.is_none()
                && dims.is_some()
                && *role != "workspace"
            {
                m.dims = dims.clone();
                m.dtype = dtype;
            }
        }
        for t in touches {
            let Some(a) = u(t, "alloc") else { continue };
            if t["access"] == "r" {
                continue;
            }
            if let Some(m) = made.get_mut(&a)
                && m.writer.is_none()
            {
                let role = args
                    .iter()
                    .find(|(x, _, _)| *x == a)
                    .map(|(_, role, _)| role.clone())
                    .filter(|r| !r.is_empty());
                m.writer = Some((call.clone(), role));
            }
        }
    }
    made.into_iter()
        .map(|(a, m)| {
            let mut s = match &m.writer {
                Some((call, Some(role))) => format!("{call} {role}"),
                Some((call, None)) => call.clone(),
                None => format!("never written (allocation {a} at {:#x})", m.ptr),
            };
            if let Some(d) = &m.dims {
                let d: Vec<String> = d.iter().map(i64::to_string).collect();
                s.push_str(&format!(" [{}]", d.join(",")));
            }
            if let Some(t) = m.dtype {
                s.push(' ');
                s.push_str(t);
            }
            s.push_str(&format!(", {}", bytes(m.size as f64)));
            (a, s)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernels_are_named_by_function_and_what_they_compute() {
        assert_eq!(kernel_name("sgd"), "sgd");
        assert_eq!(
            kernel_name(
                "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>)"
            ),
            "vectorized_elementwise_kernel<CUDAFunctor_add<float>>"
        );
        assert_eq!(
            kernel_name("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm>(Params)"),
            "Kernel<cutlass_80_tensorop_s1688gemm>"
        );
    }

    #[test]
    fn a_tensor_is_named_by_its_first_writer_with_shape_and_type() {
        let lines = r#"{"seq":1,"tid":1,"kind":"alloc","api":"cudaMalloc","alloc":1,"ptr":4096,"size":3072,"result":0}
{"seq":2,"tid":1,"kind":"alloc","api":"cudaMalloc","alloc":2,"ptr":8192,"size":3072,"result":0}
{"seq":3,"tid":1,"kind":"alloc","api":"cudaMalloc","alloc":3,"ptr":16384,"size":64,"result":0}
{"seq":4,"tid":1,"kind":"copy","api":"cudaMemcpy","dir":"h2d","touches":[{"alloc":1,"access":"w"}],"result":0}
{"seq":5,"tid":1,"kind":"lineage","replay":{"call":"cudnn","dtype":0}}
{"seq":6,"tid":1,"kind":"cudnn","api":"cudnnActivationForward","tensors":[{"role":"x","ptr":4096,"dims":[2,3,8,16]},{"role":"y","ptr":8192,"dims":[2,3,8,16]}],"touches":[{"alloc":1,"access":"r"},{"alloc":2,"access":"w"}],"result":0}
{"seq":7,"tid":1,"kind":"kernel","func":9,"name":"void ns::scale<float>(int, float*)"}
{"seq":8,"tid":1,"kind":"launch","api":"cudaLaunchKernel","func":9,"touches":[{"alloc":2,"access":"rw"}],"result":0}
"#;
        let recs: Vec<Value> = lines
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let n = names(&recs);
        assert_eq!(n[&1], "cudaMemcpy h2d [2,3,8,16] f32, 3.00 KiB");
        assert_eq!(n[&2], "cudnnActivationForward y [2,3,8,16] f32, 3.00 KiB");
        assert!(n[&3].starts_with("never written"), "{}", n[&3]);
    }
}
