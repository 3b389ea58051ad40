//! What a simulation runs.

use softib_core::verbs::types::Mtu;
pub use softib_fabric::LinkLayer;

/// Transport service of the simulated QPs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Service {
    Rc,
    /// Unreliable connected: SEND and RDMA WRITE only, nothing retried. Every message carries
    /// its operation index as immediate data (SEND with immediate, RDMA WRITE with immediate)
    /// so that the receiver can tell which messages arrived; the rest are reported as lost.
    Uc,
    /// Unreliable datagram: SENDs only, one packet per message (size ≤ MTU), the receiver
    /// verifies every datagram that arrives; lost ones are counted, not retried.
    Ud,
    /// Raw IPv6 datagrams (LRH:LNH 01; native IB only).
    RawIpv6,
    /// Raw EtherType datagrams (LRH:LNH 00; native IB only).
    RawEthertype,
    /// XRC: each QP of node A is an XRC initiator connected to its own XRC target QP on node
    /// B; the targets share one XRC domain holding `srqs` XRC SRQs, each with its own CQ. A
    /// QP's operation k goes to SRQ k mod `srqs`, so every connection reaches every SRQ and
    /// every SRQ takes messages of every connection; node B checks each message in the SRQ
    /// it landed in.
    Xrc,
    /// RD: each QP of node A is an RD QP sending to its own RD QP on node B through one of
    /// `eecs` EE context pairs (QP q uses EE context q mod `eecs`), so many QPs share few
    /// reliable connections; one message at a time per EE context.
    Rd,
}

impl Service {
    pub fn name(self) -> &'static str {
        match self {
            Service::Rc => "rc",
            Service::Uc => "uc",
            Service::Ud => "ud",
            Service::RawIpv6 => "raw-ipv6",
            Service::RawEthertype => "raw-ethertype",
            Service::Xrc => "xrc",
            Service::Rd => "rd",
        }
    }

    /// The raw datagram services (unreliable: a lost datagram is reported, not retried).
    pub fn is_raw(self) -> bool {
        matches!(self, Service::RawIpv6 | Service::RawEthertype)
    }

    /// Bytes of the header a raw message starts with (IPv6 header / RWH); 0 for the others.
    pub(crate) fn raw_header_len(self) -> u32 {
        match self {
            Service::RawIpv6 => 40,
            Service::RawEthertype => 4,
            _ => 0,
        }
    }

    /// UC, UD and raw datagrams: nothing is retried; the report counts messages delivered,
    /// lost and delivered again.
    pub fn is_unreliable(self) -> bool {
        !matches!(self, Service::Rc | Service::Xrc | Service::Rd)
    }
}

/// The operation every work request performs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    Send,
    Write,
    Read,
    Cas,
    Faa,
}

impl OpKind {
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Send => "send",
            OpKind::Write => "write",
            OpKind::Read => "read",
            OpKind::Cas => "cas",
            OpKind::Faa => "faa",
        }
    }

    pub(crate) fn is_atomic(self) -> bool {
        matches!(self, OpKind::Cas | OpKind::Faa)
    }
}

/// A simulation scenario: node A runs `ops` operations towards node B over `qps` QP pairs
/// of `service` through one switch; both links have the same latency, bandwidth and faults.
#[derive(Debug, Clone, PartialEq)]
pub struct SimConfig {
    pub service: Service,
    /// What the fabric carries: RoCEv2 over Ethernet, or native InfiniBand (LIDs 1 and 2).
    pub link: LinkLayer,
    pub op: OpKind,
    /// Message size in bytes (atomics always move 8 bytes).
    pub size: u32,
    /// Operations in total, spread evenly over the QPs.
    pub ops: u64,
    pub qps: u32,
    /// XRC: the XRC SRQs of node B (ignored by the other services).
    pub srqs: u32,
    /// RD: the EE context pairs the QPs share (ignored by the other services).
    pub eecs: u32,
    /// Outstanding work requests per QP.
    pub depth: u32,
    pub mtu: Mtu,
    /// Per-frame probabilities on every link direction.
    pub loss: f64,
    pub dup: f64,
    pub reorder: f64,
    pub corrupt: f64,
    /// One-way latency of each link (node to switch), ns.
    pub latency_ns: u64,
    /// Extra uniform delay per frame, ns (never reorders).
    pub jitter_ns: u64,
    pub bandwidth_bps: u64,
    /// Requester PSN window: most packets left unacknowledged per QP.
    pub window_psns: u32,
    /// Transport timer exponent (Ttr = 4.096 µs × 2^timeout).
    pub timeout: u8,
    pub retry_cnt: u8,
    pub seed: u64,
    /// Intervals `[from_ns, to_ns)` during which node A's link is down in both directions.
    pub link_down: Vec<(u64, u64)>,
    /// The run stops at this virtual time even if work is left (reported as not verified).
    pub max_sim_ns: u64,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            service: Service::Rc,
            link: LinkLayer::Ethernet,
            op: OpKind::Write,
            size: 65536,
            ops: 2000,
            qps: 1,
            srqs: 3,
            eecs: 2,
            depth: 16,
            mtu: Mtu::Mtu4096,
            loss: 0.0,
            dup: 0.0,
            reorder: 0.0,
            corrupt: 0.0,
            latency_ns: 1_000,
            jitter_ns: 0,
            bandwidth_bps: 100_000_000_000,
            window_psns: 32,
            timeout: 8,
            retry_cnt: 7,
            seed: 1,
            link_down: Vec::new(),
            max_sim_ns: 600_000_000_000,
        }
    }
}

impl SimConfig {
    /// The smallest transport timer exponent whose Ttr is at least twice the worst round trip
    /// of this path: four link latencies plus jitter, plus every packet the connections
    /// sharing node A's link may have in flight at once, MTU-sized and serialised on that
    /// link (each QP's PSN window, or fewer when its queue depth of messages is shorter; an
    /// RD EE context carries one message at a time). Go-back-N then recovers quickly from a
    /// lost NAK or a lost retransmission (after which the responder stays silent, C9-80),
    /// without timing out on a healthy path where many connections queue behind each other.
    pub fn path_timeout(&self) -> u8 {
        let per_msg = match self.op {
            OpKind::Cas | OpKind::Faa => 1,
            _ => u64::from(self.size.div_ceil(self.mtu.bytes())).max(1),
        };
        let (connections, messages) = match self.service {
            Service::Rd => (self.eecs.min(self.qps), 1),
            _ => (self.qps, self.depth),
        };
        let per_conn = u64::from(self.window_psns).min(per_msg * u64::from(messages));
        let packets = per_conn * u64::from(connections);
        let bits = (packets * (u64::from(self.mtu.bytes()) + 100)).saturating_mul(8);
        let ser = bits
            .saturating_mul(1_000_000_000)
            .checked_div(self.bandwidth_bps)
            .unwrap_or(0);
        let rtt = 4 * (self.latency_ns + self.jitter_ns) + ser;
        let want = rtt.saturating_mul(2);
        (1u8..=31).find(|&e| 4096u64 << e >= want).unwrap_or(31)
    }

    /// Checks the values a user can get wrong.
    pub fn validate(&self) -> Result<(), String> {
        for (name, p) in [
            ("loss", self.loss),
            ("dup", self.dup),
            ("reorder", self.reorder),
            ("corrupt", self.corrupt),
        ] {
            if !(0.0..=1.0).contains(&p) {
                return Err(format!("--{name} must be a probability in 0..=1, got {p}"));
            }
        }
        if self.qps == 0 || self.depth == 0 {
            return Err("--qps and --depth must be at least 1".into());
        }
        if self.service == Service::Rd && !(1..=1024).contains(&self.eecs) {
            return Err(format!(
                "--eecs must be 1..=1024 for --service rd, got {}",
                self.eecs
            ));
        }
        if self.service == Service::Xrc && !(1..=1024).contains(&self.srqs) {
            return Err(format!(
                "--srqs must be 1..=1024 for --service xrc, got {}",
                self.srqs
            ));
        }
        if self.size > 1 << 30 {
            return Err(format!(
                "--size {} is above softib's simulator limit of 1 GiB",
                self.size
            ));
        }
        if self.window_psns == 0 || self.window_psns > 1 << 23 {
            return Err(format!(
                "--window must be 1..=2^23 (C9-61), got {}",
                self.window_psns
            ));
        }
        if self.service == Service::Uc {
            if !matches!(self.op, OpKind::Send | OpKind::Write) {
                return Err(format!(
                    "--service uc supports --op send and --op write only (UC has no {})",
                    self.op.name().to_uppercase()
                ));
            }
            // The immediate data carries the operation index of its QP.
            if self.ops / u64::from(self.qps.max(1)) >= 1 << 32 {
                return Err("--service uc runs at most 2^32 operations per QP".into());
            }
        }
        if self.timeout > 31 || self.retry_cnt > 7 {
            return Err("--timeout must be 0..=31 and --retry 0..=7".into());
        }
        if self.service == Service::Ud {
            if self.op != OpKind::Send {
                return Err(format!(
                    "--service ud supports --op send only (UD has no {}), C9-206",
                    self.op.name()
                ));
            }
            // The first 8 bytes of a datagram name its operation (the receiver cannot rely on
            // arrival order), and a UD message is one packet (C9-200).
            if self.size < 8 || self.size > self.mtu.bytes() {
                return Err(format!(
                    "--service ud needs --size 8..={} (one packet of the MTU), got {}",
                    self.mtu.bytes(),
                    self.size
                ));
            }
        }
        if self.service.is_raw() {
            let name = self.service.name();
            if self.link != LinkLayer::InfiniBand {
                return Err(format!(
                    "--service {name} needs --link ib (raw datagrams follow an LRH)"
                ));
            }
            if self.op != OpKind::Send {
                return Err(format!("--service {name} only sends (--op send)"));
            }
            if self.qps != 1 {
                // Every raw QP of a type on a port receives every datagram of that type.
                return Err(format!(
                    "--service {name} runs one raw QP per node (--qps 1)"
                ));
            }
            let max = self.mtu.bytes() + 116 - self.service.raw_header_len();
            if self.size < 8 || self.size > max {
                return Err(format!(
                    "--size for {name} must be 8..={max} (the raw datagram, header included, may be MTU + 116 bytes)"
                ));
            }
        }
        Ok(())
    }
}
