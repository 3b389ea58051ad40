//! Small endpoints for exercising a fabric: a UD sender, a receiver that records what arrives,
//! and a ping / pong pair with a retransmit timer. They speak real RoCEv2 (UD SEND_ONLY frames
//! built with [`softib_wire::roce::build`]) so that the fabric's rules and corruption see the
//! same frames an HCA would send.
//!
//! [`Toy`] puts them in one type so that one `Fabric<Toy>` can hold a mix.

use std::collections::VecDeque;

use softib_wire::bth::Bth;
use softib_wire::deth::Deth;
use softib_wire::ethernet::Ethernet;
use softib_wire::ipv4::Ipv4;
use softib_wire::roce::{self, IpHeader, RocePacket};
use softib_wire::transport::{TransportHeaders, TransportPacket};
use softib_wire::{Opcode, Psn, Qpn};

use crate::endpoint::Endpoint;

/// The Q_Key the toys use.
pub const QKEY: u32 = 0x1111_1111;

/// Where a toy lives: MAC, IPv4 address and UD queue pair number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Addr {
    pub mac: [u8; 6],
    pub ip: [u8; 4],
    pub qpn: u32,
}

impl Addr {
    /// Host `n`: MAC 02:00:00:00:00:n (locally administered), IP 192.0.2.n (TEST-NET-1),
    /// QPN 0x100 + n.
    pub fn host(n: u8) -> Addr {
        Addr {
            mac: [0x02, 0, 0, 0, 0, n],
            ip: [192, 0, 2, n],
            qpn: 0x100 + u32::from(n),
        }
    }
}

/// Writes a UD SEND_ONLY frame from `src` to `dst` with BTH:PSN `psn` into `out` (replacing its
/// contents).
pub fn write_ud_send(src: &Addr, dst: &Addr, psn: u32, payload: &[u8], out: &mut Vec<u8>) {
    let mut headers = TransportHeaders::new(Bth {
        opcode: Opcode::UD_SEND_ONLY,
        pkey: 0xFFFF,
        dest_qp: Qpn::new(dst.qpn),
        psn: Psn::new(psn),
        ..Default::default()
    });
    headers.deth = Some(Deth {
        qkey: QKEY,
        src_qp: Qpn::new(src.qpn),
        ..Default::default()
    });
    let transport = TransportPacket::new(headers, payload);
    let eth = Ethernet {
        dst: dst.mac,
        src: src.mac,
        ..Default::default()
    };
    let ip = IpHeader::V4(Ipv4 {
        ttl: 64,
        flags: 0b010, // DF
        src: src.ip,
        dst: dst.ip,
        ..Default::default()
    });
    out.clear();
    out.resize(payload.len() + 128, 0);
    let sport = 0xC000 | (src.qpn as u16 & 0x3FFF);
    let n = roce::build(&eth, &ip, sport, &transport, out).expect("UD SEND_ONLY frame fits");
    out.truncate(n);
}

/// The BTH:PSN of a RoCEv2 frame whose ICRC matches; `None` for anything else.
pub fn verified_psn(frame: &[u8]) -> Option<u32> {
    RocePacket::parse_verified(frame)
        .ok()
        .map(|p| p.transport.headers.bth.psn.value())
}

/// Sends `count` UD SEND_ONLY frames with PSNs 0, 1, 2, ... either all at once or one every
/// `interval_ns` (driven by its timeout).
#[derive(Debug, Clone)]
pub struct UdSender {
    src: Addr,
    dst: Addr,
    count: u64,
    sent: u64,
    payload: Vec<u8>,
    interval_ns: u64,
    next_at: u64,
    /// Frames received (the sender ignores them otherwise).
    pub received: u64,
}

impl UdSender {
    /// Sends `count` frames with `payload_len` bytes of payload each, as fast as it is polled.
    pub fn new(src: Addr, dst: Addr, count: u64, payload_len: usize) -> Self {
        UdSender {
            src,
            dst,
            count,
            sent: 0,
            payload: (0..payload_len).map(|i| i as u8).collect(),
            interval_ns: 0,
            next_at: 0,
            received: 0,
        }
    }

    /// Sends one frame every `interval_ns` instead (the first one at once).
    pub fn paced(mut self, interval_ns: u64) -> Self {
        self.interval_ns = interval_ns;
        self
    }

    /// Queues `more` frames (post work through [`crate::Fabric::node_mut`]).
    pub fn add(&mut self, more: u64) {
        self.count += more;
    }

    /// Frames sent so far.
    pub fn sent(&self) -> u64 {
        self.sent
    }
}

impl Endpoint for UdSender {
    fn handle_frame(&mut self, _now_ns: u64, _frame: &[u8]) {
        self.received += 1;
    }

    fn poll_transmit(&mut self, now_ns: u64, out: &mut Vec<u8>) -> bool {
        if self.sent >= self.count || now_ns < self.next_at {
            return false;
        }
        write_ud_send(&self.src, &self.dst, self.sent as u32, &self.payload, out);
        self.sent += 1;
        if self.interval_ns > 0 {
            self.next_at = now_ns + self.interval_ns;
        }
        true
    }

    fn poll_timeout(&self) -> Option<u64> {
        (self.sent < self.count && self.interval_ns > 0).then_some(self.next_at)
    }

    fn handle_timeout(&mut self, _now_ns: u64) {}
}

/// One frame as a [`Receiver`] saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arrival {
    pub time_ns: u64,
    /// BTH:PSN, if the frame parsed as RoCEv2.
    pub psn: Option<u32>,
    /// DETH:SrcQP, if the frame parsed as RoCEv2 with a DETH.
    pub src_qp: Option<u32>,
    /// The frame parsed and its ICRC matched.
    pub icrc_ok: bool,
    pub len: usize,
}

/// Counts (and, unless built with [`Receiver::counting`], checks and records) what arrives.
#[derive(Debug, Clone, Default)]
pub struct Receiver {
    /// Every arrival, in order (empty for a counting receiver).
    pub arrivals: Vec<Arrival>,
    pub frames: u64,
    pub bytes: u64,
    /// Frames that did not parse or whose ICRC did not match (not counted by a counting
    /// receiver).
    pub bad: u64,
    count_only: bool,
}

impl Receiver {
    /// A receiver that parses, checks the ICRC of, and records every frame.
    pub fn new() -> Self {
        Receiver::default()
    }

    /// A receiver that only counts frames and bytes.
    pub fn counting() -> Self {
        Receiver {
            count_only: true,
            ..Default::default()
        }
    }

    /// The PSNs of the recorded arrivals, in arrival order.
    pub fn psns(&self) -> Vec<Option<u32>> {
        self.arrivals.iter().map(|a| a.psn).collect()
    }
}

impl Endpoint for Receiver {
    fn handle_frame(&mut self, now_ns: u64, frame: &[u8]) {
        self.frames += 1;
        self.bytes += frame.len() as u64;
        if self.count_only {
            return;
        }
        let (psn, src_qp, icrc_ok) = match RocePacket::parse(frame) {
            Ok(p) => (
                Some(p.transport.headers.bth.psn.value()),
                p.transport.headers.deth.map(|d| d.src_qp.value()),
                p.icrc_ok(),
            ),
            Err(_) => (None, None, false),
        };
        if !icrc_ok {
            self.bad += 1;
        }
        self.arrivals.push(Arrival {
            time_ns: now_ns,
            psn,
            src_qp,
            icrc_ok,
            len: frame.len(),
        });
    }

    fn poll_transmit(&mut self, _now_ns: u64, _out: &mut Vec<u8>) -> bool {
        false
    }

    fn poll_timeout(&self) -> Option<u64> {
        None
    }

    fn handle_timeout(&mut self, _now_ns: u64) {}
}

/// Sends `count` pings one after the other (PSN 0, 1, ...), each once its predecessor's echo
/// came back, retransmitting after `timeout_ns` without an echo.
#[derive(Debug, Clone)]
pub struct Pinger {
    src: Addr,
    dst: Addr,
    count: u32,
    timeout_ns: u64,
    payload: Vec<u8>,
    next_psn: u32,
    /// Send time of the latest transmission of the outstanding ping.
    sent_at: Option<u64>,
    deadline: Option<u64>,
    need_tx: bool,
    /// Round-trip time of each ping, from its last transmission.
    pub rtts: Vec<u64>,
    /// Retransmissions after a timeout.
    pub retransmits: u32,
    /// When each timeout fired.
    pub timeouts_at: Vec<u64>,
}

impl Pinger {
    pub fn new(src: Addr, dst: Addr, count: u32, timeout_ns: u64, payload_len: usize) -> Self {
        Pinger {
            src,
            dst,
            count,
            timeout_ns,
            payload: vec![0x5A; payload_len],
            next_psn: 0,
            sent_at: None,
            deadline: None,
            need_tx: count > 0,
            rtts: Vec::new(),
            retransmits: 0,
            timeouts_at: Vec::new(),
        }
    }

    /// Pings answered.
    pub fn completed(&self) -> u32 {
        self.next_psn
    }

    /// True when every ping was answered.
    pub fn done(&self) -> bool {
        self.next_psn >= self.count
    }
}

impl Endpoint for Pinger {
    fn handle_frame(&mut self, now_ns: u64, frame: &[u8]) {
        let Some(sent_at) = self.sent_at else { return };
        if verified_psn(frame) != Some(self.next_psn) {
            return;
        }
        self.rtts.push(now_ns - sent_at);
        self.next_psn += 1;
        self.sent_at = None;
        self.deadline = None;
        self.need_tx = !self.done();
    }

    fn poll_transmit(&mut self, now_ns: u64, out: &mut Vec<u8>) -> bool {
        if !self.need_tx {
            return false;
        }
        write_ud_send(&self.src, &self.dst, self.next_psn, &self.payload, out);
        self.need_tx = false;
        self.sent_at = Some(now_ns);
        self.deadline = Some(now_ns + self.timeout_ns);
        true
    }

    fn poll_timeout(&self) -> Option<u64> {
        self.deadline
    }

    fn handle_timeout(&mut self, now_ns: u64) {
        self.deadline = None;
        if self.sent_at.is_some() {
            self.timeouts_at.push(now_ns);
            self.retransmits += 1;
            self.need_tx = true;
        }
    }
}

/// Echoes every intact frame back to its peer with the same PSN.
#[derive(Debug, Clone)]
pub struct Ponger {
    addr: Addr,
    peer: Addr,
    queue: VecDeque<u32>,
    payload: Vec<u8>,
    /// Echoes sent.
    pub echoed: u64,
}

impl Ponger {
    pub fn new(addr: Addr, peer: Addr, payload_len: usize) -> Self {
        Ponger {
            addr,
            peer,
            queue: VecDeque::new(),
            payload: vec![0xA5; payload_len],
            echoed: 0,
        }
    }
}

impl Endpoint for Ponger {
    fn handle_frame(&mut self, _now_ns: u64, frame: &[u8]) {
        if let Some(psn) = verified_psn(frame) {
            self.queue.push_back(psn);
        }
    }

    fn poll_transmit(&mut self, _now_ns: u64, out: &mut Vec<u8>) -> bool {
        let Some(psn) = self.queue.pop_front() else {
            return false;
        };
        write_ud_send(&self.addr, &self.peer, psn, &self.payload, out);
        self.echoed += 1;
        true
    }

    fn poll_timeout(&self) -> Option<u64> {
        None
    }

    fn handle_timeout(&mut self, _now_ns: u64) {}
}

/// Any of the toys.
#[derive(Debug, Clone)]
pub enum Toy {
    Sender(UdSender),
    Receiver(Receiver),
    Pinger(Pinger),
    Ponger(Ponger),
}

impl Toy {
    pub fn as_sender(&self) -> Option<&UdSender> {
        match self {
            Toy::Sender(s) => Some(s),
            _ => None,
        }
    }
    pub fn as_sender_mut(&mut self) -> Option<&mut UdSender> {
        match self {
            Toy::Sender(s) => Some(s),
            _ => None,
        }
    }
    pub fn as_receiver(&self) -> Option<&Receiver> {
        match self {
            Toy::Receiver(r) => Some(r),
            _ => None,
        }
    }
    pub fn as_pinger(&self) -> Option<&Pinger> {
        match self {
            Toy::Pinger(p) => Some(p),
            _ => None,
        }
    }
    pub fn as_ponger(&self) -> Option<&Ponger> {
        match self {
            Toy::Ponger(p) => Some(p),
            _ => None,
        }
    }
}

macro_rules! dispatch {
    ($self:ident, $e:ident => $body:expr) => {
        match $self {
            Toy::Sender($e) => $body,
            Toy::Receiver($e) => $body,
            Toy::Pinger($e) => $body,
            Toy::Ponger($e) => $body,
        }
    };
}

impl Endpoint for Toy {
    fn handle_frame(&mut self, now_ns: u64, frame: &[u8]) {
        dispatch!(self, e => e.handle_frame(now_ns, frame))
    }
    fn poll_transmit(&mut self, now_ns: u64, out: &mut Vec<u8>) -> bool {
        dispatch!(self, e => e.poll_transmit(now_ns, out))
    }
    fn poll_timeout(&self) -> Option<u64> {
        dispatch!(self, e => e.poll_timeout())
    }
    fn handle_timeout(&mut self, now_ns: u64) {
        dispatch!(self, e => e.handle_timeout(now_ns))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ud_send_frames_are_valid_rocev2() {
        let (a, b) = (Addr::host(1), Addr::host(2));
        let mut out = Vec::new();
        write_ud_send(&a, &b, 0x12_3456, &[1, 2, 3, 4, 5], &mut out);
        let p = RocePacket::parse_verified(&out).expect("valid frame");
        let bth = p.transport.headers.bth;
        assert_eq!(bth.opcode, Opcode::UD_SEND_ONLY);
        assert_eq!(bth.psn.value(), 0x12_3456);
        assert_eq!(bth.dest_qp.value(), b.qpn);
        assert_eq!(p.transport.payload, [1, 2, 3, 4, 5]);
        assert_eq!(p.eth.dst, b.mac);
        assert_eq!(verified_psn(&out), Some(0x12_3456));
        // 14 + 20 + 8 + 12 (BTH) + 8 (DETH) + 5 + 3 (pad) + 4 (ICRC)
        assert_eq!(out.len(), 74);
    }

    #[test]
    fn paced_sender_asks_for_its_next_slot() {
        let mut s = UdSender::new(Addr::host(1), Addr::host(2), 2, 10).paced(500);
        let mut out = Vec::new();
        assert!(s.poll_transmit(0, &mut out));
        assert!(!s.poll_transmit(0, &mut out));
        assert_eq!(s.poll_timeout(), Some(500));
        assert!(s.poll_transmit(500, &mut out));
        assert_eq!(s.poll_timeout(), None);
    }
}
