//! What Marmoset's μ-cuDNN log says, read by the micro-batching tests.

/// WD's shared workspace as the log tells it: each solve's (pool address, pool bytes, bytes
/// assigned), and each WD execution's segment (address, bytes) checked to lie within the pool of
/// the solve before it. Returns (solves, executions checked).
pub fn wd_segments_within_the_pool(log: &str, total: u64) -> (usize, usize) {
    let hex = |w: &str| {
        u64::from_str_radix(w.trim_start_matches("0x").trim_end_matches(')'), 16).unwrap()
    };
    let mut pool: Option<(u64, u64)> = None;
    let (mut solves, mut runs) = (0, 0);
    for l in log.lines() {
        if let Some(rest) = l.split("kernels share ").nth(1) {
            // "P B at 0xADDR (A B assigned; ..."
            let w: Vec<&str> = rest.split_whitespace().collect();
            let (size, at) = (w[0].parse::<u64>().unwrap(), hex(w[3]));
            let assigned: u64 = w[4].trim_start_matches('(').parse().unwrap();
            assert!(size <= total, "the pool is within the total: {l}");
            assert!(
                assigned <= size,
                "the knapsack assigns within the pool: {l}"
            );
            pool = Some((at, size));
            solves += 1;
        } else if l.contains("backend: ran") {
            let seg = l.rsplit("WD: ").next().unwrap();
            let w: Vec<&str> = seg.split_whitespace().collect();
            assert_eq!(w[1], "B", "a WD execution names its segment: {l}");
            let (bytes, at) = (w[0].parse::<u64>().unwrap(), hex(w[3]));
            let (base, size) = pool.expect("a solve before the first WD execution");
            assert!(
                at >= base && at + bytes <= base + size,
                "segment {at:#x}+{bytes} outside the pool {base:#x}+{size}: {l}"
            );
            runs += 1;
        }
    }
    (solves, runs)
}
