//! Link model: per-direction configuration and statistics.
//!
//! Every node has one port, cabled to the switch by a full-duplex link: the **up** direction
//! carries the node's frames to the switch, the **down** direction carries the switch's frames
//! to the node. Each direction is modelled independently as a FIFO transmitter followed by a
//! wire:
//!
//! * A frame entering a direction at time `t` starts serialising at
//!   `start = max(t, end of the previous frame's serialisation)` (so `start - t` is its queueing
//!   delay), takes `ser = ceil(bytes * 8 * 10^9 / bandwidth_bps)` ns to serialise, and arrives
//!   at the far end at `start + ser + latency_ns + faults.delay_ns + jitter`, where `jitter` is
//!   uniform in `0..=jitter_ns + faults.jitter_ns`.
//! * Arrival order equals entry order: an arrival is never earlier than the previous arrival
//!   on the same direction, so jitter never reorders. Only the reorder fault and
//!   [`crate::Action::Delay`] rules hold single frames back so that later ones overtake them.
//! * The switch is store-and-forward: a frame enters the destination's down direction when it
//!   has fully arrived at the switch, plus the switch latency
//!   ([`crate::Fabric::set_switch_latency`], 0 by default).
//!
//! So a 1500-byte frame on 10 Gb/s links with 1 µs latency each way, on idle links, arrives
//! `1200 + 1000 + 1200 + 1000` ns after it was sent.

use crate::faults::Faults;

/// A direction of a node's link.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub enum Direction {
    /// Node to switch: the node's egress.
    #[default]
    Up,
    /// Switch to node: the node's ingress.
    Down,
}

/// Configuration of one direction of a link.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkConfig {
    /// Propagation delay in ns.
    pub latency_ns: u64,
    /// Line rate in bits per second; 0 means infinitely fast (no serialisation delay).
    pub bandwidth_bps: u64,
    /// The largest Ethernet payload (the interface MTU, as `ip link` shows it: the frame minus
    /// its 14-byte Ethernet header, or 18 bytes with an 802.1Q tag). Larger frames are dropped
    /// and counted in [`LinkStats::dropped_mtu`].
    pub mtu: usize,
    /// Random extra delay, uniform in `0..=jitter_ns`; it never reorders frames.
    pub jitter_ns: u64,
    /// Impairments of this direction.
    pub faults: Faults,
}

impl Default for LinkConfig {
    /// 1 µs latency, 100 Gb/s, MTU 9000 (jumbo frames, so that 4096-byte IB MTU RoCEv2 packets
    /// fit), no jitter, no faults.
    fn default() -> Self {
        LinkConfig {
            latency_ns: 1_000,
            bandwidth_bps: 100_000_000_000,
            mtu: 9_000,
            jitter_ns: 0,
            faults: Faults::default(),
        }
    }
}

impl LinkConfig {
    /// A link with the given latency and bandwidth, MTU 9000, no jitter and no faults.
    pub fn new(latency_ns: u64, bandwidth_bps: u64) -> Self {
        LinkConfig {
            latency_ns,
            bandwidth_bps,
            ..Default::default()
        }
    }

    /// No latency, infinite bandwidth, no MTU limit, no faults: frames arrive when sent.
    pub fn ideal() -> Self {
        LinkConfig {
            latency_ns: 0,
            bandwidth_bps: 0,
            mtu: usize::MAX,
            jitter_ns: 0,
            faults: Faults::default(),
        }
    }

    /// Sets the MTU.
    pub fn with_mtu(mut self, mtu: usize) -> Self {
        self.mtu = mtu;
        self
    }

    /// Sets the jitter.
    pub fn with_jitter(mut self, jitter_ns: u64) -> Self {
        self.jitter_ns = jitter_ns;
        self
    }

    /// Sets the faults.
    pub fn with_faults(mut self, faults: Faults) -> Self {
        self.faults = faults;
        self
    }

    /// Serialisation time of a `bytes`-long frame, rounded up to whole ns.
    pub fn serialisation_ns(&self, bytes: usize) -> u64 {
        serialisation_ns(bytes, self.bandwidth_bps)
    }
}

/// `ceil(bytes * 8 * 10^9 / bandwidth_bps)`, 0 for infinite (0) bandwidth, saturating.
pub fn serialisation_ns(bytes: usize, bandwidth_bps: u64) -> u64 {
    if bandwidth_bps == 0 {
        return 0;
    }
    let bits_ns = bytes as u128 * 8 * 1_000_000_000;
    let bw = u128::from(bandwidth_bps);
    u64::try_from(bits_ns.div_ceil(bw)).unwrap_or(u64::MAX)
}

/// Length of the Ethernet header of `frame`: 18 with an 802.1Q tag, else 14.
pub(crate) fn eth_header_len(frame: &[u8]) -> usize {
    if frame.len() >= 18 && frame[12] == 0x81 && frame[13] == 0x00 {
        18
    } else {
        14
    }
}

/// Counters of one link direction (or, summed, of the whole fabric).
///
/// Every frame entering the direction is counted in `sent_*`; the fabric's own copies
/// (duplicates) in `duplicated`. Once nothing is in flight,
/// `sent_frames + duplicated == delivered_frames + dropped()`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LinkStats {
    /// Frames that entered the direction (offered by the node or the switch).
    pub sent_frames: u64,
    pub sent_bytes: u64,
    /// Frames that reached the far end (the switch, or the node's endpoint).
    pub delivered_frames: u64,
    pub delivered_bytes: u64,
    /// Dropped by the random loss fault (uniform or bursty).
    pub dropped_loss: u64,
    /// Dropped because the direction was down when the frame entered or while it was on the
    /// wire.
    pub dropped_link_down: u64,
    /// Dropped for exceeding the MTU.
    pub dropped_mtu: u64,
    /// Dropped by a scripted [`crate::Rule`].
    pub dropped_rule: u64,
    /// Extra copies made (by the duplicate fault or a rule).
    pub duplicated: u64,
    /// Frames held back by the reorder fault.
    pub reordered: u64,
    /// Frames held back by a [`crate::Action::Delay`] rule.
    pub delayed: u64,
    /// Frames with one bit flipped.
    pub corrupted: u64,
    /// The longest time a frame waited for the transmitter, in ns.
    pub max_queue_delay_ns: u64,
}

impl LinkStats {
    /// All drops.
    pub fn dropped(&self) -> u64 {
        self.dropped_loss + self.dropped_link_down + self.dropped_mtu + self.dropped_rule
    }

    /// Adds `other` in (maximum for `max_queue_delay_ns`).
    pub fn accumulate(&mut self, other: &LinkStats) {
        self.sent_frames += other.sent_frames;
        self.sent_bytes += other.sent_bytes;
        self.delivered_frames += other.delivered_frames;
        self.delivered_bytes += other.delivered_bytes;
        self.dropped_loss += other.dropped_loss;
        self.dropped_link_down += other.dropped_link_down;
        self.dropped_mtu += other.dropped_mtu;
        self.dropped_rule += other.dropped_rule;
        self.duplicated += other.duplicated;
        self.reordered += other.reordered;
        self.delayed += other.delayed;
        self.corrupted += other.corrupted;
        self.max_queue_delay_ns = self.max_queue_delay_ns.max(other.max_queue_delay_ns);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serialisation_arithmetic() {
        assert_eq!(serialisation_ns(1500, 10_000_000_000), 1200);
        assert_eq!(serialisation_ns(64, 100_000_000_000), 6); // 5.12 rounds up
        assert_eq!(serialisation_ns(1, 1), 8_000_000_000);
        assert_eq!(serialisation_ns(1500, 0), 0);
        assert_eq!(serialisation_ns(usize::MAX, 1), u64::MAX);
        assert_eq!(
            LinkConfig::new(0, 25_000_000_000).serialisation_ns(4096),
            1311
        );
    }

    #[test]
    fn ethernet_header_length() {
        let mut f = [0u8; 60];
        assert_eq!(eth_header_len(&f), 14);
        f[12] = 0x81;
        assert_eq!(eth_header_len(&f), 18);
        assert_eq!(eth_header_len(&f[..16]), 14);
    }
}
