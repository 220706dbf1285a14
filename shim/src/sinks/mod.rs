//! Listeners that keep what the bus carries: the trace writer (the bus's sink) and the device
//! timings of traced calls, read back off the hot path and published as `timing` records.

pub mod timing;
pub mod trace;
