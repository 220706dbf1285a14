//! The micro-configuration table as μ-cuDNN's benchmarks write it: CSV, one row per
//! micro-configuration.

use super::Micro;

/// Reads a micro-configuration table: CSV with the header `batch,algo,time_ms,workspace_bytes`,
/// one row per micro-configuration. Errors name the line.
pub fn read_table(text: &str) -> Result<Vec<Micro>, String> {
    let mut out = Vec::new();
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    let (_, header) = lines
        .next()
        .ok_or("empty table: expected the header batch,algo,time_ms,workspace_bytes")?;
    let cols: Vec<String> = header
        .trim_start_matches('\u{feff}')
        .split(',')
        .map(|c| c.trim().to_string())
        .collect();
    let idx = |name: &str| {
        cols.iter()
            .position(|c| c == name)
            .ok_or(format!("line 1: no column {name:?}"))
    };
    let (ib, ia, it, iw) = (
        idx("batch")?,
        idx("algo")?,
        idx("time_ms")?,
        idx("workspace_bytes")?,
    );
    for (i, line) in lines {
        let f: Vec<&str> = line.split(',').map(str::trim).collect();
        let get = |j: usize| {
            f.get(j)
                .copied()
                .ok_or(format!("line {}: too few columns", i + 1))
        };
        let batch: u64 = get(ib)?
            .parse()
            .map_err(|_| format!("line {}: batch {:?} is not a whole number", i + 1, f[ib]))?;
        let algo: i32 = get(ia)?
            .parse()
            .map_err(|_| format!("line {}: algo {:?} is not an integer", i + 1, f[ia]))?;
        let time_ms: f64 = get(it)?
            .parse()
            .map_err(|_| format!("line {}: time_ms {:?} is not a number", i + 1, f[it]))?;
        let workspace: u64 = get(iw)?.parse().map_err(|_| {
            format!(
                "line {}: workspace_bytes {:?} is not a whole number",
                i + 1,
                f[iw]
            )
        })?;
        if batch == 0 || !time_ms.is_finite() || time_ms < 0.0 {
            return Err(format!(
                "line {}: batch must be at least 1 and time_ms a non-negative number",
                i + 1
            ));
        }
        out.push(Micro {
            batch,
            algo,
            time_ms,
            workspace,
        });
    }
    Ok(out)
}
