//! Reading a trace: one record per non-empty line, an error naming the line, and a trace cut
//! short (a `trace_cut` mark, a record cut mid-line) read up to its last whole record.

use super::{Event, Record, SCHEMA_VERSION};

/// Reads a trace, one record per non-empty line; an error names the line and what is wrong.
/// A trace cut mid-record is read up to its last complete record (see [`read_with_cut`]).
pub fn read(text: &str) -> Result<Vec<Record>, String> {
    read_with_cut(text).map(|(records, _)| records)
}

/// Reads a trace like [`read`], and says where it was cut (see [`read_lines`]).
pub fn read_with_cut(text: &str) -> Result<(Vec<Record>, Option<String>), String> {
    let (mut out, cut) = read_lines(text, |line| {
        let r: Record = serde_json::from_str(line).map_err(|e| e.to_string())?;
        if let Event::Header { schema, .. } = &r.event
            && *schema != SCHEMA_VERSION
        {
            return Err(format!(
                "trace schema {schema}, this marmoset reads {SCHEMA_VERSION}"
            ));
        }
        Ok(r)
    })?;
    out.sort_by_key(|r| r.seq);
    Ok((out, cut))
}

/// The one reading of a trace's lines, whatever each line becomes (`parse`: a typed [`Record`],
/// or a JSON value for readers that keep kinds they do not know). Every non-empty line is
/// parsed, in file order, and a trace may end early in two ways, each read up to its last whole
/// record with a note saying so (the second value):
/// - its last line is the writer's `trace_cut` mark (a write failed: a full disk, a size limit);
/// - its last line, after a whole record, has no newline and is not JSON (a writer stopped
///   mid-record).
///
/// Any other line that does not parse is an error naming the line.
pub fn read_lines<T>(
    text: &str,
    mut parse: impl FnMut(&str) -> Result<T, String>,
) -> Result<(Vec<T>, Option<String>), String> {
    let mut out = Vec::new();
    let last = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, _)| i)
        .last();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let is_last = Some(i) == last;
        if is_last && let Some(why) = cut_mark(line) {
            let note = format!(
                "cut: writing it failed ({why}); read the {} complete records before that",
                out.len()
            );
            return Ok((out, Some(note)));
        }
        match parse(line) {
            Ok(r) => out.push(r),
            // Cut inside a record: not JSON at all, after at least one whole record (a record
            // that is whole JSON but wrong is an error wherever it stands, and a file whose
            // only line is not JSON is not a trace).
            Err(e)
                if is_last
                    && !out.is_empty()
                    && !text.ends_with('\n')
                    && serde_json::from_str::<serde::de::IgnoredAny>(line).is_err() =>
            {
                let note = format!(
                    "cut: line {} is an incomplete record ({e}); read the {} complete records before it",
                    i + 1,
                    out.len()
                );
                return Ok((out, Some(note)));
            }
            Err(e) => return Err(format!("line {}: {e}", i + 1)),
        }
    }
    Ok((out, None))
}

/// The error a `trace_cut` line names (docs/trace-schema.md), if `line` is one.
fn cut_mark(line: &str) -> Option<String> {
    if !line.contains("\"trace_cut\"") {
        return None;
    }
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    let mark = v.as_object()?.get("trace_cut")?;
    Some(
        mark.get("error")
            .and_then(serde_json::Value::as_str)
            .unwrap_or("unknown")
            .to_string(),
    )
}
