//! The time of NCCL's collectives between the devices of one machine, as nccl-tests measures
//! them.
//!
//! nccl-tests reports a *bus bandwidth* per collective: the algorithm bandwidth (`S / t`, with `S`
//! the per-rank buffer it names for that collective) times a factor that makes the figure
//! comparable with the links' speed whatever the rank count: `2(n-1)/n` for all-reduce,
//! `(n-1)/n` for all-gather, reduce-scatter, all-to-all and gather, `1` for broadcast, reduce and
//! send/receive (nccl-tests `doc/PERFORMANCE.md`). The model inverts that: a collective of `S`
//! bytes on `n` ranks takes `latency + S * factor / busbw`.
//!
//! A profile's `nccl` block gives `busbw_gbs` (the all-reduce bus bandwidth NVIDIA publishes for
//! the machine), `latency_us` (the fixed cost of one collective), and optionally
//! `ring_busbw_gbs`: the bus bandwidth of the other collectives where it differs (on H100 the
//! all-reduce runs on NVLink SHARP, the others on rings over the links).

use serde::Deserialize;

/// A profile's NCCL figures (each with its source in the profile's `sources` map under
/// `nccl.<field>`).
#[derive(Debug, Clone, Deserialize)]
pub struct NcclModel {
    /// All-reduce bus bandwidth, GB/s (10^9 bytes per second).
    pub busbw_gbs: f64,
    /// Fixed cost of one collective or send/receive, microseconds.
    pub latency_us: f64,
    /// Bus bandwidth of every collective but all-reduce, GB/s; `busbw_gbs` when absent.
    #[serde(default)]
    pub ring_busbw_gbs: Option<f64>,
    /// The channels NCCL opens between the devices (each with its own buffers); none when
    /// absent (then a communicator maps no buffers).
    #[serde(default)]
    pub channels: Option<u32>,
}

/// NCCL_BUFFSIZE's documented default: the buffer of one channel's connection, 4 MiB.
pub const DEFAULT_BUFFSIZE: u64 = 4 << 20;

/// The collectives the model times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Collective {
    AllReduce,
    AllGather,
    ReduceScatter,
    AllToAll,
    Gather,
    Broadcast,
    Reduce,
    SendRecv,
}

impl Collective {
    /// nccl-tests' bus-bandwidth factor for `n` ranks.
    pub fn bus_factor(self, n: u32) -> f64 {
        let n = f64::from(n.max(1));
        match self {
            Collective::AllReduce => 2.0 * (n - 1.0) / n,
            Collective::AllGather
            | Collective::ReduceScatter
            | Collective::AllToAll
            | Collective::Gather => (n - 1.0) / n,
            Collective::Broadcast | Collective::Reduce | Collective::SendRecv => 1.0,
        }
    }
}

impl NcclModel {
    /// The device memory one rank of a communicator of `nranks` maps for its connections: per
    /// channel, a ring's connection and a tree's, each `buffsize` bytes (NCCL_BUFFSIZE); none
    /// for a communicator of one rank.
    pub fn buffer_bytes(&self, nranks: u32, buffsize: u64) -> u64 {
        if nranks < 2 {
            return 0;
        }
        2 * u64::from(self.channels.unwrap_or(0)) * buffsize
    }

    /// Checks that every figure is positive and finite.
    pub fn validate(&self) -> Result<(), String> {
        let mut figures = vec![("busbw_gbs", self.busbw_gbs)];
        if let Some(r) = self.ring_busbw_gbs {
            figures.push(("ring_busbw_gbs", r));
        }
        for (n, v) in figures {
            if !(v.is_finite() && v > 0.0) {
                return Err(format!("nccl.{n} must be positive, is {v}"));
            }
        }
        if !(self.latency_us.is_finite() && self.latency_us >= 0.0) {
            return Err(format!(
                "nccl.latency_us must be 0 or more, is {}",
                self.latency_us
            ));
        }
        Ok(())
    }

    /// The bus bandwidth of `c`, bytes per second.
    pub fn busbw(&self, c: Collective) -> f64 {
        let gbs = match c {
            Collective::AllReduce => self.busbw_gbs,
            _ => self.ring_busbw_gbs.unwrap_or(self.busbw_gbs),
        };
        gbs * 1e9
    }

    /// Seconds collective `c` of `bytes` (the per-rank buffer as nccl-tests defines it) takes on
    /// `n` ranks.
    pub fn time(&self, c: Collective, bytes: u64, n: u32) -> f64 {
        self.latency_us * 1e-6 + bytes as f64 * c.bus_factor(n) / self.busbw(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Profile;

    fn model(name: &str) -> NcclModel {
        let (p, _) = Profile::load(name).unwrap();
        let m = p
            .nccl
            .clone()
            .unwrap_or_else(|| panic!("{name}: no nccl block"));
        m.validate().unwrap();
        for key in ["nccl.busbw_gbs", "nccl.latency_us"] {
            assert!(p.sources.contains_key(key), "{name}: no source for {key}");
        }
        if m.ring_busbw_gbs.is_some() {
            assert!(p.sources.contains_key("nccl.ring_busbw_gbs"), "{name}");
        }
        m
    }

    /// The bus bandwidth an nccl-tests run would report for one all-reduce of `bytes` on `n`.
    fn reported_busbw(m: &NcclModel, bytes: u64, n: u32) -> f64 {
        let t = m.time(Collective::AllReduce, bytes, n);
        bytes as f64 / t * Collective::AllReduce.bus_factor(n) / 1e9
    }

    #[test]
    fn a_100mb_all_reduce_reaches_the_published_bus_bandwidth_within_20_percent() {
        // H100 SXM over NVLink 4, 8 GPUs: about 480 GB/s (NVIDIA, nccl-tests issue #212).
        // P100 over NVLink 1 (DGX-1): the profile's figure (an assumption, see its sources).
        for (name, published) in [("h100", 480.0), ("p100", model("p100").busbw_gbs)] {
            let m = model(name);
            let bw = reported_busbw(&m, 100_000_000, 8);
            assert!(
                (bw / published - 1.0).abs() < 0.2,
                "{name}: {bw:.1} GB/s against {published} GB/s"
            );
        }
        assert_eq!(model("h100").busbw_gbs, 480.0);
    }

    #[test]
    fn factors_are_nccl_tests_ones() {
        assert_eq!(Collective::AllReduce.bus_factor(2), 1.0);
        assert_eq!(Collective::AllReduce.bus_factor(4), 1.5);
        assert_eq!(Collective::AllGather.bus_factor(4), 0.75);
        assert_eq!(Collective::ReduceScatter.bus_factor(8), 0.875);
        assert_eq!(Collective::AllToAll.bus_factor(2), 0.5);
        assert_eq!(Collective::Broadcast.bus_factor(8), 1.0);
        assert_eq!(Collective::SendRecv.bus_factor(2), 1.0);
        // One rank moves nothing: only the latency remains.
        assert_eq!(Collective::AllReduce.bus_factor(1), 0.0);
    }

    #[test]
    fn time_is_latency_plus_bytes_over_bus_bandwidth() {
        let m = NcclModel {
            busbw_gbs: 100.0,
            latency_us: 10.0,
            ring_busbw_gbs: Some(50.0),
            channels: None,
        };
        // 1 GB all-reduce on 2 ranks: factor 1, 10 ms + 10 us.
        let t = m.time(Collective::AllReduce, 1_000_000_000, 2);
        assert!((t - 0.01001).abs() < 1e-12, "{t}");
        // All-gather of 1 GB on 4 ranks at the ring figure: 0.75 * 1e9 / 50e9 = 15 ms.
        let t = m.time(Collective::AllGather, 1_000_000_000, 4);
        assert!((t - 0.01501).abs() < 1e-12, "{t}");
        // Small messages are latency-bound.
        assert!(m.time(Collective::Broadcast, 8, 8) < 10.001e-6);
        // Larger is never faster, more ranks never make an all-reduce faster.
        assert!(
            m.time(Collective::AllReduce, 1 << 20, 8) > m.time(Collective::AllReduce, 1 << 20, 2)
        );
        assert!(
            NcclModel {
                busbw_gbs: -1.0,
                ..m.clone()
            }
            .validate()
            .is_err()
        );
    }

    #[test]
    fn a_communicator_maps_two_buffers_per_channel() {
        let m = NcclModel {
            busbw_gbs: 1.0,
            latency_us: 0.0,
            ring_busbw_gbs: None,
            channels: Some(16),
        };
        assert_eq!(m.buffer_bytes(2, DEFAULT_BUFFSIZE), 128 << 20);
        assert_eq!(m.buffer_bytes(8, 1 << 20), 32 << 20);
        assert_eq!(m.buffer_bytes(1, DEFAULT_BUFFSIZE), 0);
        let none = NcclModel {
            channels: None,
            ..m
        };
        assert_eq!(none.buffer_bytes(4, DEFAULT_BUFFSIZE), 0);
    }
}
