//! The HCA's packet interface (sans-IO): frames in through [`Hca::handle_frame`], frames out
//! through [`Hca::poll_transmit`], timers through [`Hca::poll_timeout`] /
//! [`Hca::handle_timeout`]. Every call takes the current time; the HCA never reads a clock.
//!
//! Frames are RoCEv2 Ethernet frames (Ethernet + IPv4 or IPv6 + UDP 4791 + BTH ... + ICRC), as
//! Linux rxe writes them: IPv4 when the destination GID is IPv4-mapped, DF set, TTL = the
//! address vector's hop limit, TOS = its traffic class, UDP source port 0xC000 | hash(QPN),
//! UDP checksum 0. MAC addresses are derived from GIDs ([`mac_for_gid`]), so no neighbour
//! discovery is needed in the simulator.

use softib_wire::bth::Bth;
use softib_wire::ethernet::Ethernet;
use softib_wire::grh::Grh;
use softib_wire::ipv4::Ipv4;
use softib_wire::roce::{self, IpHeader, RocePacket};
use softib_wire::transport::TransportPacket;
use softib_wire::Service;

use super::Hca;
use crate::time::Instant;
use crate::transport::Counters;
use crate::verbs::qp::Qp;
use crate::verbs::types::{Gid, QpState, QpType};

/// Largest frame the HCA builds: 4096-byte payload plus every header.
pub const MAX_FRAME: usize = 4096 + 14 + 40 + 8 + 64 + 4 + 64;

/// The Ethernet address softib uses for a GID: `02:00:a:b:c:d` for the IPv4-mapped GID of
/// a.b.c.d; for an IPv6 GID with a modified EUI-64 interface identifier (`..ff:fe..`) the MAC
/// it was derived from; otherwise `02:` followed by the last five GID bytes.
pub fn mac_for_gid(gid: &Gid) -> [u8; 6] {
    let g = gid.0;
    if let Some(v4) = ipv4_of(gid) {
        [0x02, 0x00, v4[0], v4[1], v4[2], v4[3]]
    } else if g[11] == 0xff && g[12] == 0xfe {
        [g[8] ^ 0x02, g[9], g[10], g[13], g[14], g[15]]
    } else {
        [0x02, g[11], g[12], g[13], g[14], g[15]]
    }
}

/// The IPv4 address of an IPv4-mapped GID (`::ffff:a.b.c.d`).
pub fn ipv4_of(gid: &Gid) -> Option<[u8; 4]> {
    let g = gid.0;
    (g[..10] == [0; 10] && g[10] == 0xff && g[11] == 0xff).then(|| [g[12], g[13], g[14], g[15]])
}

/// The GID of an IPv4 address (IPv4-mapped form).
pub fn gid_of_ipv4(a: [u8; 4]) -> Gid {
    let mut g = [0u8; 16];
    g[10] = 0xff;
    g[11] = 0xff;
    g[12..].copy_from_slice(&a);
    Gid(g)
}

/// UDP source port for a QP, as rxe picks it: 0xC000 plus a 14-bit hash of the QPN.
pub fn udp_source_port(qpn: u32) -> u16 {
    // hash_32 of Linux (multiplicative, golden ratio), top 14 bits.
    let h = qpn.wrapping_mul(0x61C8_8647) >> (32 - 14);
    0xC000 | h as u16
}

/// Addresses of one outgoing packet.
pub(crate) struct FrameAddrs {
    pub(crate) eth: Ethernet,
    pub(crate) ip: IpHeader,
    pub(crate) sport: u16,
}

impl Hca {
    /// Data-path counters.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Hands one received Ethernet frame to the HCA. Frames that are not RoCEv2, fail to
    /// parse, carry a bad ICRC, name no QP, carry a foreign P_Key or do not match the QP's
    /// connection are dropped and counted; nothing a frame holds can make this panic.
    pub fn handle_frame(&mut self, now: Instant, frame: &[u8]) {
        // Matched by reference: the parsed packet is large, and moving it out of the
        // `Result` costs a copy per frame.
        let parsed = RocePacket::parse(frame);
        let p = match &parsed {
            Ok(p) => p,
            Err(softib_wire::Error::UnknownOpcode(op)) if op >> 5 == 0 => {
                // A reserved RC opcode: the responder answers it (C9-84).
                self.handle_reserved_rc_opcode(now, frame);
                return;
            }
            Err(_) => {
                self.counters.malformed += 1;
                return;
            }
        };
        if !p.icrc_ok() {
            self.counters.icrc_err += 1;
            return;
        }
        let bth = p.transport.headers.bth;
        let qpn = bth.dest_qp.value();
        let Some(qp) = self.qps.get(&qpn) else {
            self.counters.no_such_qp += 1;
            return;
        };
        let Ok(info) = p.transport.info() else {
            self.counters.malformed += 1;
            return;
        };
        let service_ok = matches!((qp.qp_type, info.service), (QpType::Rc, Service::Rc));
        if !service_ok {
            self.counters.wrong_service += 1;
            return;
        }
        if !self.pkey_ok(qp, bth.pkey) {
            self.counters.bad_pkey += 1;
            return;
        }
        if !self.connection_matches(qp, p) {
            self.counters.bad_address += 1;
            return;
        }
        self.counters.rcvd_pkts += 1;
        if info.operation.is_response() {
            self.rc_handle_response(now, qpn, &p.transport);
        } else {
            self.rc_handle_request(now, qpn, &p.transport);
        }
        self.rearm_timer(qpn);
    }

    /// Writes the next frame to send into `out` (cleared first) and returns true, or returns
    /// false when nothing is ready now.
    pub fn poll_transmit(&mut self, now: Instant, out: &mut Vec<u8>) -> bool {
        while let Some(qpn) = self.tx_ready.pop_front() {
            if let Some(qp) = self.qps.get_mut(&qpn) {
                qp.transport.tx_queued = false;
            } else {
                continue;
            }
            out.clear();
            let sent = self.rc_next_packet(now, qpn, out);
            if self.rc_has_tx_work(qpn, now) {
                self.schedule_tx(qpn);
            }
            self.rearm_timer(qpn);
            if sent {
                self.counters.sent_pkts += 1;
                return true;
            }
        }
        false
    }

    /// The earliest time at which [`Hca::handle_timeout`] has work to do.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.first().map(|&(t, _)| t)
    }

    /// Runs every timer that is due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some(&(t, qpn)) = self.timers.first() {
            if t > now {
                break;
            }
            self.timers.pop_first();
            if let Some(qp) = self.qps.get_mut(&qpn) {
                qp.transport.timer_key = None;
            }
            self.rc_timeout(now, qpn);
            if self.rc_has_tx_work(qpn, now) {
                self.schedule_tx(qpn);
            }
            self.rearm_timer(qpn);
        }
    }

    /// Queues a completion of `qpn` on `cq`; on a CQ overrun the QP enters ERR (the CQ error
    /// event is queued by the CQ). Returns false in that case.
    #[inline]
    pub(crate) fn complete_or_error(
        &mut self,
        qpn: softib_wire::Qpn,
        cq: crate::verbs::CqHandle,
        wc: crate::verbs::cq::WorkCompletion,
        solicited: bool,
    ) -> bool {
        if self.push_completion(cq, wc, solicited).is_ok() {
            return true;
        }
        let _ = self.set_qp_error(qpn, crate::verbs::event::QpErrorCause::CompletionError);
        false
    }

    /// Puts a QP on the transmit list (once).
    #[inline]
    pub(crate) fn schedule_tx(&mut self, qpn: u32) {
        if let Some(qp) = self.qps.get_mut(&qpn) {
            if !qp.transport.tx_queued {
                qp.transport.tx_queued = true;
                self.tx_ready.push_back(qpn);
            }
        }
    }

    /// Re-registers the QP's earliest deadline in the timer set.
    #[inline]
    pub(crate) fn rearm_timer(&mut self, qpn: u32) {
        let Some(qp) = self.qps.get_mut(&qpn) else {
            return;
        };
        let want = if matches!(qp.attr.qp_state, QpState::Rts | QpState::Sqd) {
            match (qp.transport.req.timer, qp.transport.req.rnr_wait) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            }
        } else {
            None
        };
        if qp.transport.timer_key == want {
            return;
        }
        if let Some(old) = qp.transport.timer_key.take() {
            self.timers.remove(&(old, qpn));
        }
        if let Some(t) = want {
            qp.transport.timer_key = Some(t);
            self.timers.insert((t, qpn));
        }
    }

    /// P_Key check (IBA 10.9): the packet's P_Key matches a table entry in its low 15 bits,
    /// and at least one of the two is a full member.
    fn pkey_ok(&self, qp: &Qp, pkey: u16) -> bool {
        let Some(port) = self.port(qp.attr.port_num.max(1)) else {
            return false;
        };
        port.pkeys
            .iter()
            .any(|&e| e & 0x7fff == pkey & 0x7fff && e & 0x7fff != 0 && (e | pkey) & 0x8000 != 0)
    }

    /// For connected QPs: the packet comes from the remote GID of the QP's address vector and
    /// is addressed to the local GID it names.
    fn connection_matches(&self, qp: &Qp, p: &RocePacket<'_>) -> bool {
        let (src, dst) = ip_gids(&p.ip);
        self.connection_matches_gids(qp, src, dst)
    }

    fn connection_matches_gids(&self, qp: &Qp, src: Gid, dst: Gid) -> bool {
        let Some(grh) = qp.attr.ah_attr.grh else {
            return false;
        };
        let Some(local) = self.local_gid(qp) else {
            return false;
        };
        src == grh.dgid && dst == local
    }

    /// A frame whose BTH:OpCode is in the RC class but reserved (IBA Table 38). The transport
    /// parser cannot go past such a BTH, so the frame is checked here as far as the
    /// responder needs (framing, ICRC, QP, P_Key, connection) before the RC responder judges
    /// it; anything wrong is dropped and counted like any other bad frame.
    fn handle_reserved_rc_opcode(&mut self, now: Instant, frame: &[u8]) {
        let Some((bth, src, dst)) = reserved_opcode_frame(frame) else {
            self.counters.malformed += 1;
            return;
        };
        let qpn = bth.dest_qp.value();
        let Some(qp) = self.qps.get(&qpn) else {
            self.counters.no_such_qp += 1;
            return;
        };
        if qp.qp_type != QpType::Rc {
            self.counters.wrong_service += 1;
            return;
        }
        if !self.pkey_ok(qp, bth.pkey) {
            self.counters.bad_pkey += 1;
            return;
        }
        if !self.connection_matches_gids(qp, src, dst) {
            self.counters.bad_address += 1;
            return;
        }
        self.counters.rcvd_pkts += 1;
        self.rc_handle_reserved_opcode(now, qpn, &bth);
        self.rearm_timer(qpn);
    }

    /// The QP's source GID (from its address vector's SGID index).
    pub(crate) fn local_gid(&self, qp: &Qp) -> Option<Gid> {
        let grh = qp.attr.ah_attr.grh?;
        let port = self.port(qp.attr.port_num.max(1))?;
        port.gids.get(usize::from(grh.sgid_index)).map(|e| e.gid)
    }

    /// Ethernet, IP and UDP addressing for a packet of `qp` (connected services).
    pub(crate) fn frame_addrs(&mut self, qpn: u32) -> Option<FrameAddrs> {
        let qp = self.qps.get(&qpn)?;
        let grh = qp.attr.ah_attr.grh?;
        let local = self.local_gid(qp)?;
        let (ident, sport) = match self.udp_socket_port {
            // What an unconnected kernel UDP socket with IP_PMTUDISC_DO writes.
            Some(port) => (0, port),
            None => {
                self.ip_ident = self.ip_ident.wrapping_add(1);
                (self.ip_ident, udp_source_port(qpn))
            }
        };
        let eth = Ethernet {
            dst: mac_for_gid(&grh.dgid),
            src: mac_for_gid(&local),
            ..Ethernet::default()
        };
        let ip = match (ipv4_of(&local), ipv4_of(&grh.dgid)) {
            (Some(src), Some(dst)) => IpHeader::V4(Ipv4 {
                dscp_ecn: grh.traffic_class,
                ident,
                flags: 0b010,
                ttl: grh.hop_limit,
                src,
                dst,
                ..Ipv4::default()
            }),
            _ => IpHeader::V6(Grh {
                tclass: grh.traffic_class,
                flow_label: grh.flow_label,
                hop_lmt: grh.hop_limit,
                sgid: local.0,
                dgid: grh.dgid.0,
                ..Grh::default()
            }),
        };
        Some(FrameAddrs { eth, ip, sport })
    }

    /// Builds the frame of `t` for `qpn` into `out`; false if the QP has no usable address.
    pub(crate) fn build_frame(
        &mut self,
        qpn: u32,
        t: &TransportPacket<'_>,
        out: &mut Vec<u8>,
    ) -> bool {
        let Some(a) = self.frame_addrs(qpn) else {
            return false;
        };
        let Ok(tlen) = t.wire_len() else {
            return false;
        };
        let ip_len = match a.ip {
            IpHeader::V4(_) => softib_wire::ipv4::LEN,
            IpHeader::V6(_) => softib_wire::grh::LEN,
        };
        let len = (a.eth.header_len() + ip_len + softib_wire::udp::LEN + tlen + roce::ICRC_LEN)
            .max(softib_wire::ethernet::MIN_FRAME_LEN);
        // `out` arrives empty: only the frame's own bytes are written (no 4 KiB memset).
        out.resize(len, 0);
        match roce::build(&a.eth, &a.ip, a.sport, t, out) {
            Ok(n) => {
                out.truncate(n);
                true
            }
            Err(_) => {
                out.clear();
                false
            }
        }
    }
}

/// Source and destination GIDs of a RoCEv2 packet's IP header.
fn ip_gids(ip: &IpHeader) -> (Gid, Gid) {
    match ip {
        IpHeader::V4(v4) => (gid_of_ipv4(v4.src), gid_of_ipv4(v4.dst)),
        IpHeader::V6(v6) => (Gid(v6.sgid), Gid(v6.dgid)),
    }
}

/// The BTH and the source / destination GIDs of a RoCEv2 frame whose opcode the transport
/// parser does not know, if the frame is otherwise well formed and its ICRC is right.
fn reserved_opcode_frame(frame: &[u8]) -> Option<(Bth, Gid, Gid)> {
    let eth = Ethernet::parse(frame).ok()?;
    let l3 = frame.get(eth.header_len()..)?;
    let (ip, ip_len, total) = match eth.ether_type {
        softib_wire::ethernet::ETHERTYPE_IPV4 => {
            let v4 = Ipv4::parse(l3).ok()?;
            let fragment = v4.frag_offset != 0 || v4.flags & 0x1 != 0;
            if fragment || v4.protocol != roce::IP_PROTO_UDP {
                return None;
            }
            (IpHeader::V4(v4), v4.header_len(), usize::from(v4.total_len))
        }
        softib_wire::ethernet::ETHERTYPE_IPV6 => {
            let v6 = Grh::parse(l3).ok()?;
            if v6.ip_ver != 6 || v6.nxt_hdr != roce::IP_PROTO_UDP {
                return None;
            }
            let len = softib_wire::grh::LEN;
            (IpHeader::V6(v6), len, len + usize::from(v6.pay_len))
        }
        _ => return None,
    };
    let datagram = l3.get(..total)?;
    let (raw_ip, l4) = datagram.split_at_checked(ip_len)?;
    let udp = softib_wire::udp::Udp::parse(l4).ok()?;
    if udp.dst_port != softib_wire::udp::ROCEV2_PORT || usize::from(udp.length) != l4.len() {
        return None;
    }
    let (raw_udp, body) = l4.split_at_checked(softib_wire::udp::LEN)?;
    let icrc_ok = match ip {
        IpHeader::V4(_) => softib_wire::icrc::verify_roce_v4(raw_ip, raw_udp, body),
        IpHeader::V6(_) => softib_wire::icrc::verify_roce_v6(raw_ip, raw_udp, body),
    };
    icrc_ok.ok()?;
    let bth = Bth::parse(body).ok()?;
    let (src, dst) = ip_gids(&ip);
    Some((bth, src, dst))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macs_from_gids() {
        assert_eq!(
            mac_for_gid(&gid_of_ipv4([10, 99, 0, 2])),
            [2, 0, 10, 99, 0, 2]
        );
        let mut g = [0u8; 16];
        g[..2].copy_from_slice(&[0xfe, 0x80]);
        g[8..].copy_from_slice(&[0x50, 0x54, 0x00, 0xff, 0xfe, 0x61, 0x00, 0x11]);
        assert_eq!(mac_for_gid(&Gid(g)), [0x52, 0x54, 0x00, 0x61, 0x00, 0x11]);
        assert_eq!(ipv4_of(&gid_of_ipv4([1, 2, 3, 4])), Some([1, 2, 3, 4]));
        assert_eq!(ipv4_of(&Gid(g)), None);
    }

    #[test]
    fn rxe_udp_source_ports() {
        // rxe picks 0xC000 | (hash_32(qpn, 14) & 0x3fff): every port is in 0xC000..=0xFFFF.
        for q in [0x11u32, 0x12, 0x13, 0xffffff] {
            assert!(udp_source_port(q) >= 0xC000);
        }
        assert_ne!(udp_source_port(0x11), udp_source_port(0x12));
    }
}
