//! The HCA's packet interface (sans-IO): frames in through [`Hca::handle_frame`], frames out
//! through [`Hca::poll_transmit`], timers through [`Hca::poll_timeout`] /
//! [`Hca::handle_timeout`]. Every call takes the current time; the HCA never reads a clock.
//!
//! The framing is chosen by the link layer of the port (the services only produce and consume
//! "address vector + transport packet"):
//!
//! * **Ethernet** ports speak RoCEv2 (Ethernet + IPv4 or IPv6 + UDP 4791 + BTH ... + ICRC), as
//!   Linux rxe writes it: IPv4 when the destination GID is IPv4-mapped, DF set, TTL = the
//!   address vector's hop limit, TOS = its traffic class, UDP source port 0xC000 | hash(QPN),
//!   UDP checksum 0. MAC addresses are derived from GIDs ([`mac_for_gid`]), so no neighbour
//!   discovery is needed in the simulator.
//! * **InfiniBand** ports speak native IB (LRH [GRH] BTH ... ICRC VCRC, IBA 7.7): LRH:DLID and
//!   SL from the address vector, SLID = the port's base LID | the address vector's source path
//!   bits (masked to the port's LMC), VL 0, LVer 0; a GRH (LNH 0b11) only when the address
//!   vector is global, otherwise LNH 0b10. On receipt LRH:PktLen, the VCRC and the ICRC are
//!   checked, the DLID must be one of the port's LIDs (base .. base + 2^LMC - 1), the
//!   permissive LID 0xFFFF or the MLID of a multicast group with a local UD QP attached, and a
//!   connected QP accepts only packets whose SLID is its address vector's DLID and whose GRH
//!   (present exactly when its address vector is global) carries its remote and local GIDs.
//!   Packets for a UD QP or the multicast QPN go to the UD responder with their LRH and GRH.
//!   Raw datagrams (LNH 0b00 / 0b01) go to the raw QPs (see `hca/raw.rs`).
//!
//! [`Hca::handle_frame`] and [`Hca::poll_transmit`] carry the frames of port 1.

use softib_wire::bth::Bth;
use softib_wire::error::Field;
use softib_wire::ethernet::Ethernet;
use softib_wire::grh::Grh;
use softib_wire::ipv4::Ipv4;
use softib_wire::lrh::{Lnh, Lrh};
use softib_wire::native::{self, NativeBody, NativePacket};
use softib_wire::opcode::Opcode;
use softib_wire::roce::{self, IpHeader, RocePacket};
use softib_wire::transport::{TransportHeaders, TransportPacket};
use softib_wire::Service;

use super::requester::Tx;
use super::ud::UdSource;
use super::Hca;
use crate::time::Instant;
use crate::transport::Counters;
use crate::verbs::ah::{self, AhAttr};
use crate::verbs::device::PortConfig;
use crate::verbs::qp::Qp;
use crate::verbs::types::{Gid, LinkLayer, QpState, QpType};

/// The permissive LID: accepted by every port (IBA 7.11.1).
pub const PERMISSIVE_LID: u16 = 0xFFFF;
/// First multicast LID; 0xC000..=0xFFFE are multicast.
pub const MULTICAST_LID_BASE: u16 = 0xC000;

/// Largest frame the HCA builds: 4096-byte payload plus every header.
pub const MAX_FRAME: usize = 4096 + 14 + 40 + 8 + 64 + 4 + 64;

/// What [`Hca::poll_transmit_batched`] gave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transmitted {
    /// Nothing is ready now.
    Nothing,
    /// A frame, written to the frame buffer.
    Frame,
    /// Datagrams (BTH .. ICRC) appended to the batch, where `starts` says, for IPv4
    /// address `dst`.
    Datagrams {
        /// The IPv4 destination.
        dst: [u8; 4],
    },
}

/// A driver's batch of datagrams, lent to the HCA for one [`Hca::poll_transmit_batched`].
#[derive(Debug)]
pub(crate) struct DatagramBatch<'a> {
    /// The datagrams, back to back.
    pub(crate) bytes: &'a mut Vec<u8>,
    /// Where each datagram appended by this call starts in `bytes`.
    pub(crate) starts: &'a mut Vec<usize>,
    /// How many datagrams the batch takes at most.
    pub(crate) room: usize,
    /// The IPv4 destination of the datagrams appended.
    pub(crate) dst: Option<[u8; 4]>,
}

/// The Ethernet address softib uses for a GID: for a multicast GID the IP multicast MAC
/// (`01:00:5e` + the low 23 bits of an IPv4-mapped group, RFC 1112; `33:33` + the last four
/// bytes of an IPv6 group, RFC 2464); `02:00:a:b:c:d` for the IPv4-mapped GID of a.b.c.d; for
/// an IPv6 GID with a modified EUI-64 interface identifier (`..ff:fe..`) the MAC it was
/// derived from; otherwise `02:` followed by the last five GID bytes.
#[inline(always)]
pub fn mac_for_gid(gid: &Gid) -> [u8; 6] {
    let g = gid.0;
    if g[0] == 0xff {
        [0x33, 0x33, g[12], g[13], g[14], g[15]]
    } else if let Some(v4) = ipv4_of(gid) {
        if v4[0] & 0xf0 == 0xe0 {
            [0x01, 0x00, 0x5e, v4[1] & 0x7f, v4[2], v4[3]]
        } else {
            [0x02, 0x00, v4[0], v4[1], v4[2], v4[3]]
        }
    } else if g[11] == 0xff && g[12] == 0xfe {
        [g[8] ^ 0x02, g[9], g[10], g[13], g[14], g[15]]
    } else {
        [0x02, g[11], g[12], g[13], g[14], g[15]]
    }
}

/// The IPv4 address of an IPv4-mapped GID (`::ffff:a.b.c.d`).
#[inline]
pub fn ipv4_of(gid: &Gid) -> Option<[u8; 4]> {
    let g = gid.0;
    // Bytes 0..10 zero and bytes 10..12 0xff: the top 96 bits are ::ffff.
    (u128::from_be_bytes(g) >> 32 == 0xffff).then(|| [g[12], g[13], g[14], g[15]])
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

/// Where a received transport packet came from, as its link layer saw it.
#[derive(Clone, Copy)]
pub(crate) enum PacketSource<'a> {
    /// RoCEv2: the IP header.
    Roce(&'a IpHeader),
    /// Native IB: the LRH, and the GRH when LRH:LNH says one follows.
    Native { lrh: &'a Lrh, grh: Option<&'a Grh> },
}

/// True when `dlid` addresses `port`: one of its LIDs (base .. base + 2^LMC - 1) or the
/// permissive LID. LID 0 and multicast LIDs are not the port's.
pub(crate) fn dlid_is_port(port: &PortConfig, dlid: u16) -> bool {
    if dlid == PERMISSIVE_LID {
        return true;
    }
    if dlid == 0 || dlid >= MULTICAST_LID_BASE {
        return false;
    }
    let mask = lmc_mask(port);
    dlid & !mask == port.lid & !mask
}

/// The path-bit mask of a port's LMC (LMC is at most 7).
pub(crate) fn lmc_mask(port: &PortConfig) -> u16 {
    (1u16 << port.lmc.min(7)) - 1
}

/// The LRH of a packet leaving `port` towards `av` (LNH and PktLen are set by the builder).
pub(crate) fn lrh_for(port: &PortConfig, av: &AhAttr) -> Lrh {
    Lrh {
        vl: 0,
        lver: 0,
        sl: av.sl & 0x0F,
        dlid: av.dlid,
        slid: port.lid | (u16::from(av.src_path_bits) & lmc_mask(port)),
        ..Lrh::default()
    }
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

    /// Hands one frame received on port 1 to the HCA: a RoCEv2 Ethernet frame on an Ethernet
    /// port, a native IB packet (LRH first, VCRC last) on an InfiniBand port. Frames that do not
    /// parse, carry a bad ICRC / VCRC, are not addressed to the port, name no QP, carry a
    /// foreign P_Key or do not match the QP's connection are dropped and counted; nothing a
    /// frame holds can make this panic. Packets for a UD QP or for the multicast QPN 0xFFFFFF
    /// go to the UD responder (`ud.rs`) on either link layer, which runs and counts the checks
    /// of its service.
    pub fn handle_frame(&mut self, now: Instant, frame: &[u8]) {
        self.receive_frame(now, frame, false, true);
    }

    /// [`Hca::handle_frame`] for a RoCEv2 frame whose ICRC the caller has already verified
    /// over exactly these bytes (a UDP runtime that checks the ICRC while it rebuilds the
    /// frame): every other check runs as there; only the ICRC is not computed a second time.
    /// On an InfiniBand port this is [`Hca::handle_frame`].
    pub fn handle_frame_icrc_verified(&mut self, now: Instant, frame: &[u8]) {
        self.receive_frame(now, frame, true, true);
    }

    /// A RoCEv2 packet received over IPv4 from `src` to `dst` whose ICRC the caller has
    /// verified, offered to the express path where it lies: `datagram` is the UDP payload
    /// (BTH .. ICRC). True when the express path took it, as it would have taken its frame
    /// from [`Hca::handle_frame_icrc_verified`]; false, with nothing changed, when it did not:
    /// the caller then hands the rebuilt frame to [`Hca::handle_frame_declined`]. A UDP
    /// runtime need not rebuild the frame of the common packet, nor this parse it.
    #[inline]
    pub fn handle_v4_datagram_verified(
        &mut self,
        now: Instant,
        src: [u8; 4],
        dst: [u8; 4],
        datagram: &[u8],
    ) -> bool {
        if !self.express || self.native_link() {
            return false;
        }
        match roce::ExpressPacket::parse_datagram(src, dst, datagram) {
            Some(x) => self.rc_express_frame(now, &x),
            None => false,
        }
    }

    /// [`Hca::handle_frame_icrc_verified`] for the frame of a datagram
    /// [`Hca::handle_v4_datagram_verified`] declined: the express path is not tried again.
    pub fn handle_frame_declined(&mut self, now: Instant, frame: &[u8]) {
        self.receive_frame(now, frame, true, false);
    }

    #[inline(always)]
    fn receive_frame(&mut self, now: Instant, frame: &[u8], icrc_verified: bool, express: bool) {
        if self.native_link() {
            self.handle_native_frame(now, frame);
            return;
        }
        if express && self.express {
            if let Some(x) = RocePacket::parse_express(frame) {
                if (icrc_verified || x.icrc_ok()) && self.rc_express_frame(now, &x.packet) {
                    return;
                }
            }
        }
        // Matched by reference: the parsed packet is large, and moving it out of the
        // `Result` costs a copy per frame.
        let parsed = RocePacket::parse(frame);
        let p = match &parsed {
            Ok(p) => p,
            Err(softib_wire::Error::UnknownOpcode(op)) if matches!(op >> 5, 0 | 2 | 3 | 5) => {
                self.handle_reserved_opcode(now, frame, *op);
                return;
            }
            Err(_) => {
                self.counters.malformed += 1;
                return;
            }
        };
        if !icrc_verified && !p.icrc_ok() {
            self.counters.icrc_err += 1;
            return;
        }
        let qpn = p.transport.headers.bth.dest_qp.value();
        // (An RD packet goes to the EE context its RDETH names, whatever QP BTH names.)
        let rd = p.transport.headers.rdeth.is_some();
        if !rd && (qpn == super::ud::MCAST_QPN || self.is_ud_qp(qpn)) {
            let src = UdSource {
                from: PacketSource::Roce(&p.ip),
                sl: p.eth.vlan.map_or(0, |v| v.pcp),
            };
            self.ud_dispatch(qpn, &p.transport, src);
            return;
        }
        self.handle_transport(now, &p.transport, PacketSource::Roce(&p.ip));
    }

    /// A frame [`RocePacket::parse_express`] read, after the checks [`Hca::handle_transport`]
    /// makes of it (an RC QP, its P_Key, its connection): a request goes to the responder's
    /// express path ([`Hca::rc_express_handle_request`], [`Hca::rc_express_read_request`],
    /// [`Hca::rc_express_atomic_request`]), a response to the completer (a READ response
    /// packet and an ATOMIC ACK to [`Hca::rc_express_rd_atomic_response`] first). False, with nothing
    /// changed, when the general path is to take the frame.
    #[inline]
    fn rc_express_frame(&mut self, now: Instant, x: &roce::ExpressPacket<'_>) -> bool {
        let qpn = x.bth.dest_qp.value();
        let Some(qp) = self.qps.get(&qpn) else {
            return false;
        };
        // A stream's packets come alike: checked once (see `express_from`).
        let from = super::ExpressFrom {
            qpn,
            pkey: x.bth.pkey,
            src: x.src,
            dst: x.dst,
        };
        if self.express_from != Some(from) {
            if qp.qp_type != QpType::Rc
                || !self.pkey_ok(qp, x.bth.pkey)
                || !self.connection_matches_v4(qp, x.src, x.dst)
            {
                return false;
            }
            self.express_from = Some(from);
        }
        let op = x.bth.opcode;
        if op == Opcode::RC_RDMA_READ_REQUEST {
            // (`parse_datagram` reads a RETH for it.)
            let Some(reth) = x.reth else {
                return false;
            };
            if !self.rc_express_read_request(qpn, &x.bth, reth) {
                return false;
            }
            self.counters.rcvd_pkts += 1;
        } else if let Some(a) = x.atomic_eth {
            // COMPARE_SWAP or FETCH_ADD.
            if !self.rc_express_atomic_request(qpn, &x.bth, a) {
                return false;
            }
            self.counters.rcvd_pkts += 1;
        } else if x.aeth.is_some() || op == Opcode::RC_RDMA_READ_RESPONSE_MIDDLE {
            // An ACK, a READ response packet or an ATOMIC ACK: the completer's work without
            // the frame's parse (a READ response packet and an ATOMIC ACK in fewer steps where
            // they can).
            let mut headers = TransportHeaders::new(x.bth);
            headers.aeth = x.aeth;
            headers.atomic_ack_eth = x.atomic_ack_eth;
            let t = TransportPacket {
                headers,
                payload: x.payload,
                pad: &[],
            };
            self.counters.rcvd_pkts += 1;
            let taken = match op {
                Opcode::RC_RDMA_READ_RESPONSE_FIRST
                | Opcode::RC_RDMA_READ_RESPONSE_MIDDLE
                | Opcode::RC_RDMA_READ_RESPONSE_LAST
                | Opcode::RC_RDMA_READ_RESPONSE_ONLY => {
                    self.rc_express_rd_atomic_response(now, qpn, &t, x.payload)
                }
                Opcode::RC_ATOMIC_ACKNOWLEDGE => match x.atomic_ack_eth {
                    // softib memory holds 64-bit atomic operands in little-endian byte order.
                    Some(a) => self.rc_express_rd_atomic_response(
                        now,
                        qpn,
                        &t,
                        &a.orig_remote_data.to_le_bytes(),
                    ),
                    None => false,
                },
                _ => false,
            };
            if !taken {
                self.rc_handle_response(now, qpn, &t);
            }
            self.rearm_timer(qpn);
        } else {
            // The responder's work leaves the requester's deadlines and the QP's state as
            // they were (but for a CQ overrun, which re-arms there): no timer to re-arm.
            if !self.rc_express_handle_request(qpn, &x.bth, x.reth, x.immdt, x.payload) {
                return false;
            }
            self.counters.rcvd_pkts += 1;
        }
        true
    }

    /// True when `qpn` names a UD QP.
    #[inline(always)]
    fn is_ud_qp(&self, qpn: u32) -> bool {
        self.qps.get(&qpn).is_some_and(|q| q.qp_type == QpType::Ud)
    }

    /// A packet for the multicast QPN or a UD QP: to the UD responder (`ud.rs`).
    fn ud_dispatch(&mut self, qpn: u32, t: &TransportPacket<'_>, src: UdSource<'_>) {
        if qpn == super::ud::MCAST_QPN {
            self.ud_handle_mcast(t, src);
        } else {
            self.ud_handle_packet(qpn, t, src);
        }
    }

    /// True when port 1 speaks native InfiniBand.
    #[inline(always)]
    pub(crate) fn native_link(&self) -> bool {
        self.ports
            .first()
            .is_some_and(|p| p.link_layer == LinkLayer::InfiniBand)
    }

    /// A frame (either framing) whose opcode is reserved in the RC, RD or XRC class (answered
    /// by the responder, C9-84, o9-51) or in the UD class (silently dropped and counted,
    /// C9-206).
    fn handle_reserved_opcode(&mut self, now: Instant, frame: &[u8], op: u8) {
        if op >> 5 == 3 {
            self.handle_reserved_ud_opcode(frame);
        } else {
            self.handle_reserved_rc_opcode(now, frame);
        }
    }

    /// A native IB packet received on port 1 (see [`Hca::handle_frame`]).
    fn handle_native_frame(&mut self, now: Instant, frame: &[u8]) {
        let parsed = NativePacket::parse(frame);
        let p = match &parsed {
            Ok(p) => p,
            Err(softib_wire::Error::UnknownOpcode(op)) if matches!(op >> 5, 0 | 2 | 3 | 5) => {
                self.handle_reserved_opcode(now, frame, *op);
                return;
            }
            Err(softib_wire::Error::BadField {
                field: Field::Ipv6NextHeader,
                ..
            }) => {
                // C9-208: a raw IPv6 packet that claims to carry an IBA transport header.
                self.counters.raw_iba_next_header += 1;
                return;
            }
            Err(softib_wire::Error::Length {
                field: Field::LrhPktLen,
                ..
            }) => {
                self.counters.bad_pkt_len += 1;
                return;
            }
            Err(_) => {
                self.counters.malformed += 1;
                return;
            }
        };
        if !p.vcrc_ok() {
            self.counters.vcrc_err += 1;
            return;
        }
        if !self.dlid_accepted(p.lrh.dlid) {
            self.counters.wrong_dlid += 1;
            return;
        }
        match &p.body {
            NativeBody::Iba { grh, transport, .. } => {
                if !p.icrc_ok() {
                    self.counters.icrc_err += 1;
                    return;
                }
                let from = PacketSource::Native {
                    lrh: &p.lrh,
                    grh: grh.as_ref(),
                };
                let qpn = transport.headers.bth.dest_qp.value();
                let rd = transport.headers.rdeth.is_some();
                if !rd && (qpn == super::ud::MCAST_QPN || self.is_ud_qp(qpn)) {
                    let src = UdSource { from, sl: p.lrh.sl };
                    self.ud_dispatch(qpn, transport, src);
                    return;
                }
                self.handle_transport(now, transport, from);
            }
            body => self.raw_receive(1, &p.lrh, body),
        }
    }

    /// The transport packet of a frame whose framing and CRCs are good: QP, service, P_Key and
    /// connection checks (a packet on an armed alternate path may migrate the QP, see
    /// `apm.rs`), then the RC requester or responder, or the UC responder.
    #[inline(always)]
    fn handle_transport(&mut self, now: Instant, t: &TransportPacket<'_>, from: PacketSource<'_>) {
        let bth = t.headers.bth;
        let Ok(info) = t.info() else {
            self.counters.malformed += 1;
            return;
        };
        // An RD packet belongs to the EE context its RDETH names; BTH:DestQP names the QP
        // behind it (`rd.rs`).
        let qpn = match (info.service, t.headers.rdeth) {
            (Service::Rd, Some(r)) => super::rd::EEC_KEY | r.eecn.value(),
            _ => bth.dest_qp.value(),
        };
        let Some(qp) = self.qps.get(&qpn) else {
            self.counters.no_such_qp += 1;
            return;
        };
        // An XRC initiator takes only responses, an XRC target only requests.
        let is_response = info.operation.is_response();
        let service_ok = matches!(
            (qp.qp_type, info.service),
            (QpType::Rc, Service::Rc) | (QpType::Uc, Service::Uc)
        ) || (qpn & super::rd::EEC_KEY != 0 && info.service == Service::Rd)
            || (qp.qp_type == QpType::XrcSend && info.service == Service::Xrc && is_response)
            || (qp.qp_type == QpType::XrcRecv && info.service == Service::Xrc && !is_response);
        if !service_ok {
            self.counters.wrong_service += 1;
            return;
        }
        if !self.pkey_ok(qp, bth.pkey) {
            self.counters.bad_pkey += 1;
            return;
        }
        if !self.connection_matches(qp, from) {
            let gids = match from {
                PacketSource::Roce(ip) => Some(ip_gids(ip)),
                PacketSource::Native { grh, .. } => grh.map(|g| (Gid(g.sgid), Gid(g.dgid))),
            };
            let migrated =
                gids.is_some_and(|(src, dst)| self.migrate_on_request(qpn, src, dst, bth.mig_req));
            if !migrated {
                self.counters.bad_address += 1;
                return;
            }
        }
        self.counters.rcvd_pkts += 1;
        match info.service {
            // UC has requests only (its opcodes are SEND and RDMA WRITE) and no timers.
            Service::Uc => self.uc_handle_request(qpn, t),
            _ if is_response => self.rc_handle_response(now, qpn, t),
            _ => self.rc_handle_request(now, qpn, t),
        }
        self.rearm_timer(qpn);
    }

    /// Writes the next frame to send into `out` (replacing what it held) and returns true, or
    /// clears `out` and returns false when nothing is ready now.
    ///
    /// The frame is written over the bytes `out` already holds, which only grows when the
    /// frame is longer than the last one: a caller that passes the same buffer every time
    /// saves the zero-fill of a fresh one.
    pub fn poll_transmit(&mut self, now: Instant, out: &mut Vec<u8>) -> bool {
        self.transmit(now, out, None)
    }

    /// [`Hca::poll_transmit`], with the datagram batch of [`Hca::poll_transmit_batched`] when
    /// there is one. One body for both (not inlined into each): the packet builders it calls
    /// then have one call site each and are inlined into it.
    #[inline(never)]
    fn transmit(
        &mut self,
        now: Instant,
        out: &mut Vec<u8>,
        mut batch: Option<&mut DatagramBatch<'_>>,
    ) -> bool {
        self.tx_placeable = false;
        while let Some(qpn) = self.tx_ready.pop_front() {
            let qp_type = match self.qps.get_mut(&qpn) {
                Some(qp) => {
                    qp.transport.tx_queued = false;
                    qp.qp_type
                }
                None => continue,
            };
            let (sent, more) = match qp_type {
                QpType::Uc => {
                    let sent = self.uc_next_packet(qpn, out);
                    (sent, self.uc_has_tx_work(qpn))
                }
                QpType::Ud => {
                    let sent = self.ud_next_packet(now, qpn, out);
                    (sent, self.ud_has_tx_work(qpn))
                }
                QpType::RawIpv6 | QpType::RawEthertype => {
                    if self.raw_transmit(qpn, out) {
                        return true;
                    }
                    continue;
                }
                // An RD QP's messages leave through its EE contexts (`rd_kick`), which run
                // as RC QPs do.
                QpType::Rd if qpn & super::rd::EEC_KEY == 0 => (false, false),
                QpType::Rc | QpType::XrcSend | QpType::XrcRecv | QpType::Rd => {
                    // After a packet the QP stays on the list while anything is left to send
                    // (the next `rc_next_packet` checks windows and credits anyway); when it
                    // sent nothing, only if it really can send, so a blocked QP leaves the list.
                    match self.rc_next_packet(now, qpn, out, batch.as_deref_mut()) {
                        Tx::SentListed => {
                            self.counters.sent_pkts += 1;
                            return true;
                        }
                        Tx::Sent => (true, self.rc_may_have_tx_work(qpn)),
                        Tx::Nothing => (false, self.rc_has_tx_work(qpn, now)),
                    }
                }
            };
            if more {
                self.schedule_tx(qpn);
            }
            self.rearm_timer(qpn);
            if sent {
                self.counters.sent_pkts += 1;
                return true;
            }
        }
        out.clear();
        false
    }

    /// [`Hca::poll_transmit`] for a driver whose UDP socket writes the IP and UDP headers
    /// (with [`HcaConfig::udp_socket_port`]): the common requests (the requester's express
    /// path) are appended to `bytes` as their datagrams alone, BTH .. ICRC, as many of one
    /// QP in a row as it has ready, up to `room` of them; `starts` receives where each
    /// begins ([`Transmitted::Datagrams`]; the 4 bytes in front of the first are the
    /// batch's, or filler when it was shorter). Every other packet is written to `frame` as
    /// `poll_transmit` writes it ([`Transmitted::Frame`]). The datagrams are the UDP payloads
    /// of the frames as many `poll_transmit` calls would have written, with the same state
    /// changes, so the driver skips copying them out of frames, and the steps shared by one
    /// QP's packets are taken once for all of them. [`Hca::tx_placeable`] speaks of the last
    /// one.
    ///
    /// [`HcaConfig::udp_socket_port`]: crate::HcaConfig::udp_socket_port
    #[inline]
    pub fn poll_transmit_batched(
        &mut self,
        now: Instant,
        frame: &mut Vec<u8>,
        bytes: &mut Vec<u8>,
        starts: &mut Vec<usize>,
        room: usize,
    ) -> Transmitted {
        starts.clear();
        if self.udp_socket_port.is_none() || room == 0 {
            return if self.poll_transmit(now, frame) {
                Transmitted::Frame
            } else {
                Transmitted::Nothing
            };
        }
        let mut batch = DatagramBatch {
            bytes,
            starts,
            room,
            dst: None,
        };
        let sent = self.transmit(now, frame, Some(&mut batch));
        match (sent, batch.dst) {
            (false, _) => Transmitted::Nothing,
            (true, Some(dst)) => Transmitted::Datagrams { dst },
            (true, None) => Transmitted::Frame,
        }
    }

    /// [`Hca::poll_transmit`] for a raw QP: true when a packet was written.
    #[cold]
    fn raw_transmit(&mut self, qpn: u32, out: &mut Vec<u8>) -> bool {
        let sent = self.raw_next_packet(qpn, out);
        if self.raw_has_tx_work(qpn) {
            self.schedule_tx(qpn);
        }
        if sent {
            self.counters.sent_pkts += 1;
        }
        sent
    }

    /// Tells the HCA that the `now` its caller passes may lag true time by up to `lag` (a
    /// coarse clock, read for its cost; 0, the default, for an exact one). Every timer it
    /// starts then runs `lag` longer, so that none expires early in true time: a transport
    /// timer never before Ttr (C9-141), an RNR wait never before the interval of the NAK
    /// (C9-130). Timers expire as late as `lag` plus the caller's own delay in reporting
    /// them.
    pub fn set_clock_lag(&mut self, lag: core::time::Duration) {
        self.clock_lag = lag;
    }

    /// Turns the express paths on (the default) or off: the requester's for common requests,
    /// the responder's for common requests and ACKs read straight from the frame. Both ways
    /// give the same packets and state; off leaves everything to the general path, which is
    /// what the equivalence tests compare against.
    pub fn set_express_path(&mut self, on: bool) {
        self.express = on;
    }

    /// When to call [`Hca::handle_timeout`] next: never later than the earliest time at which
    /// it has work to do, and sometimes earlier. A timer that stopped or moved later keeps its
    /// entry until that entry's time (a request arms the transport timer and its ACK stops it,
    /// message after message: the entry is kept rather than taken out and put back each
    /// time); the call at that time then finds nothing due and registers the real deadline.
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
    #[inline(always)]
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
            schedule(qp, &mut self.tx_ready, qpn);
        }
    }

    /// Re-registers the QP's earliest deadline in the timer set.
    #[inline]
    pub(crate) fn rearm_timer(&mut self, qpn: u32) {
        if let Some(qp) = self.qps.get_mut(&qpn) {
            rearm(qp, &mut self.timers, qpn);
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

    /// For connected QPs: the packet comes from the remote port of the QP's address vector and
    /// is addressed to the local port it names. RoCEv2: source and destination GIDs. Native IB:
    /// LRH:SLID is the address vector's DLID, and a GRH is present exactly when the address
    /// vector is global, carrying its remote GID as source and the local GID as destination.
    #[inline]
    fn connection_matches(&self, qp: &Qp, from: PacketSource<'_>) -> bool {
        match from {
            PacketSource::Roce(IpHeader::V4(v4)) => self.connection_matches_v4(qp, v4.src, v4.dst),
            PacketSource::Roce(ip) => {
                let (src, dst) = ip_gids(ip);
                self.connection_matches_gids(qp, src, dst)
            }
            PacketSource::Native { lrh, grh } => {
                let av = &qp.attr.ah_attr;
                if lrh.slid != av.dlid {
                    return false;
                }
                match (grh, av.grh) {
                    (None, None) => true,
                    (Some(g), Some(_)) => {
                        self.connection_matches_gids(qp, Gid(g.sgid), Gid(g.dgid))
                    }
                    _ => false,
                }
            }
        }
    }

    /// [`Hca::connection_matches`] for an IPv4 packet from `src` to `dst`, without building
    /// the IPv4-mapped GIDs: a GID is `gid_of_ipv4(a)` exactly when `ipv4_of` gives `a` back.
    #[inline]
    fn connection_matches_v4(&self, qp: &Qp, src: [u8; 4], dst: [u8; 4]) -> bool {
        let (Some(grh), Some(local)) = (qp.attr.ah_attr.grh, self.local_gid(qp)) else {
            return false;
        };
        ipv4_of(&grh.dgid) == Some(src) && ipv4_of(&local) == Some(dst)
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

    /// A frame whose BTH:OpCode is in the RC or XRC class but reserved (IBA Table 38). The
    /// transport parser cannot go past such a BTH, so the frame is checked here as far as the
    /// responder needs (framing, ICRC, QP, P_Key, connection) before the RC responder judges
    /// it; anything wrong is dropped and counted like any other bad frame.
    fn handle_reserved_rc_opcode(&mut self, now: Instant, frame: &[u8]) {
        if self.native_link() {
            let Some((bth, lrh, grh, t)) = reserved_opcode_native(frame) else {
                self.counters.malformed += 1;
                return;
            };
            if !self
                .port(1)
                .is_some_and(|port| dlid_is_port(port, lrh.dlid))
            {
                self.counters.wrong_dlid += 1;
                return;
            }
            let from = PacketSource::Native {
                lrh: &lrh,
                grh: grh.as_ref(),
            };
            self.handle_reserved_bth(now, &bth, t, from);
            return;
        }
        let Some((bth, ip, t)) = reserved_opcode_frame(frame) else {
            self.counters.malformed += 1;
            return;
        };
        self.handle_reserved_bth(now, &bth, t, PacketSource::Roce(&ip));
    }

    /// The checks of [`Hca::handle_transport`] for a BTH with a reserved RC, RD or XRC opcode
    /// (an XRC one is for an XRC target: only a responder judges requests). `t` is the
    /// transport bytes from the BTH on: every RD packet has an RDETH after the BTH, which names
    /// the EE context that judges it, and every RD request a DETH after that, which names the
    /// requesting QP the answer goes to.
    fn handle_reserved_bth(&mut self, now: Instant, bth: &Bth, t: &[u8], from: PacketSource<'_>) {
        let mut rd_src = None;
        let qpn = if bth.opcode.0 >> 5 == 2 {
            let after = t.get(softib_wire::bth::LEN..).unwrap_or_default();
            let rdeth = softib_wire::rdeth::Rdeth::parse(after);
            let deth = after
                .get(softib_wire::rdeth::LEN..)
                .and_then(|d| softib_wire::deth::Deth::parse(d).ok());
            let (Ok(rdeth), Some(deth)) = (rdeth, deth) else {
                self.counters.malformed += 1;
                return;
            };
            rd_src = Some(deth.src_qp.value());
            super::rd::eec_key(rdeth.eecn)
        } else {
            bth.dest_qp.value()
        };
        let Some(qp) = self.qps.get(&qpn) else {
            self.counters.no_such_qp += 1;
            return;
        };
        let service_ok = match bth.opcode.0 >> 5 {
            0 => qp.qp_type == QpType::Rc,
            2 => qpn & super::rd::EEC_KEY != 0,
            5 => qp.qp_type == QpType::XrcRecv,
            _ => false,
        };
        if !service_ok {
            self.counters.wrong_service += 1;
            return;
        }
        if !self.pkey_ok(qp, bth.pkey) {
            self.counters.bad_pkey += 1;
            return;
        }
        if !self.connection_matches(qp, from) {
            self.counters.bad_address += 1;
            return;
        }
        self.counters.rcvd_pkts += 1;
        self.rc_handle_reserved_opcode(now, qpn, bth, rd_src);
        self.rearm_timer(qpn);
    }

    /// The QP's source GID (from its address vector's SGID index).
    pub(crate) fn local_gid(&self, qp: &Qp) -> Option<Gid> {
        let grh = qp.attr.ah_attr.grh?;
        let port = self.port(qp.attr.port_num.max(1))?;
        port.gids.get(usize::from(grh.sgid_index)).map(|e| e.gid)
    }

    /// Builds the frame of `t` for connected QP `qpn` (towards its address vector) into `out`;
    /// false if the QP has no usable address.
    #[inline]
    pub(crate) fn build_frame(
        &mut self,
        qpn: u32,
        t: &TransportPacket<'_>,
        out: &mut Vec<u8>,
    ) -> bool {
        let ident = self.next_ip_ident();
        let Some(qp) = self.qps.get(&qpn) else {
            return false;
        };
        let (built, current) = self.frame_into_qp(qp, ident, t, out);
        if !current {
            self.refresh_tx_headers(qpn);
        }
        built
    }

    /// [`Hca::frame_into`] for connected QP `qp` towards its own address vector. On a RoCE
    /// port the frame is built from the QP's cached headers ([`TxHeaders`]) when they are
    /// those of its current address vector, local GID and UDP source port, and by the general
    /// path otherwise; the second value is false in that case, and the caller then refreshes
    /// the cache ([`Hca::refresh_tx_headers`]) for the next packet.
    #[inline(always)]
    pub(crate) fn frame_into_qp(
        &self,
        qp: &Qp,
        ident: u16,
        t: &TransportPacket<'_>,
        out: &mut Vec<u8>,
    ) -> (bool, bool) {
        let av = &qp.attr.ah_attr;
        let Some(port) = self.port(qp.attr.port_num.max(1)) else {
            return (false, true);
        };
        if port.link_layer == LinkLayer::InfiniBand {
            return (build_native_frame(port, av, t, out), true);
        }
        let qpn = qp.qpn.value();
        let (ident, sport) = self.roce_ident_sport(ident, qpn);
        let Some(h) = qp
            .transport
            .tx_headers
            .as_ref()
            .filter(|h| h.is_for(port, av, sport))
        else {
            return (
                self.frame_into(qp.attr.port_num, av, ident, qpn, t, out),
                false,
            );
        };
        (build_roce_frame(&h.template, ident, t, out), true)
    }

    /// Brings `qpn`'s cached RoCEv2 headers ([`TxHeaders`]) up to date with its address
    /// vector, the local GID it names and its UDP source port (none when the QP has no usable
    /// RoCE address).
    #[cold]
    pub(crate) fn refresh_tx_headers(&mut self, qpn: u32) {
        let Some(qp) = self.qps.get_mut(&qpn) else {
            return;
        };
        let sport = match self.udp_socket_port {
            Some(port) => port,
            None => udp_source_port(qpn),
        };
        let av = &qp.attr.ah_attr;
        qp.transport.tx_headers = ah::port_config(&self.ports, qp.attr.port_num.max(1))
            .filter(|port| port.link_layer != LinkLayer::InfiniBand)
            .and_then(|port| {
                let a = roce_addrs(port, av, 0, sport)?;
                let grh = av.grh?;
                Some(TxHeaders {
                    grh,
                    sport,
                    template: roce::HeaderTemplate::new(&a.eth, &a.ip, sport),
                    prefix: roce::V4PrefixCrc::default(),
                })
            });
    }

    /// The IPv4 Identification and UDP source port of a RoCEv2 packet sent by `src_qpn`, with
    /// `ident` drawn for it.
    #[inline(always)]
    fn roce_ident_sport(&self, ident: u16, src_qpn: u32) -> (u16, u16) {
        match self.udp_socket_port {
            // What an unconnected kernel UDP socket with IP_PMTUDISC_DO writes.
            Some(port) => (0, port),
            None => (ident, udp_source_port(src_qpn)),
        }
    }

    /// Builds the frame of `t`, sent by `src_qpn` through `port_num` towards `av`, into `out`
    /// (empty on entry), framed as the port's link layer wants; false if the address vector is
    /// unusable or the packet does not fit. Datagram services address each packet by AH.
    #[inline]
    pub(crate) fn build_frame_to(
        &mut self,
        port_num: u8,
        av: &AhAttr,
        src_qpn: u32,
        t: &TransportPacket<'_>,
        out: &mut Vec<u8>,
    ) -> bool {
        let ident = self.next_ip_ident();
        self.frame_into(port_num, av, ident, src_qpn, t, out)
    }

    /// The IPv4 identification of the next RoCEv2 packet.
    #[inline(always)]
    fn next_ip_ident(&mut self) -> u16 {
        self.ip_ident = self.ip_ident.wrapping_add(1);
        self.ip_ident
    }

    /// [`Hca::build_frame_to`] with the IPv4 identification already drawn (the requester
    /// builds a frame while it borrows the payload from a memory region, and stores the
    /// identification it used afterwards).
    #[inline(always)]
    pub(crate) fn frame_into(
        &self,
        port_num: u8,
        av: &AhAttr,
        ident: u16,
        src_qpn: u32,
        t: &TransportPacket<'_>,
        out: &mut Vec<u8>,
    ) -> bool {
        let Some(port) = self.port(port_num.max(1)) else {
            return false;
        };
        if port.link_layer == LinkLayer::InfiniBand {
            return build_native_frame(port, av, t, out);
        }
        let (ident, sport) = self.roce_ident_sport(ident, src_qpn);
        let Some(a) = roce_addrs(port, av, ident, sport) else {
            return false;
        };
        build_roce_frame(
            &roce::HeaderTemplate::new(&a.eth, &a.ip, a.sport),
            ident,
            t,
            out,
        )
    }
}

/// The RoCEv2 headers of a connected QP's packets ([`roce::HeaderTemplate`]), with the inputs
/// they were derived from. They are used only while those inputs are unchanged
/// ([`TxHeaders::is_for`], checked per packet), so no change of the QP's address vector, of
/// the GID table or of the UDP source port needs to invalidate them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TxHeaders {
    /// The address vector's GRH fields (destination GID, SGID index, flow label, hop limit,
    /// traffic class).
    grh: crate::verbs::ah::GlobalRoute,
    /// The UDP source port.
    sport: u16,
    template: roce::HeaderTemplate,
    /// The ICRC's CRC over the template's headers up to the UDP ports, for the last IP
    /// total length of a datagram ([`roce::HeaderTemplate::append_v4_datagram`]).
    prefix: roce::V4PrefixCrc,
}

impl TxHeaders {
    /// True when these are the headers of packets on `port` towards `av` from UDP port
    /// `sport`: everything [`roce_addrs`] derives them from is unchanged.
    #[inline(always)]
    fn is_for(&self, port: &PortConfig, av: &AhAttr, sport: u16) -> bool {
        let Some(grh) = av.grh.as_ref() else {
            return false;
        };
        let Some(local) = port.gids.get(usize::from(grh.sgid_index)) else {
            return false;
        };
        // The local GID is the template's source address (and its MAC follows from it).
        self.sport == sport && self.grh == *grh && self.template.source_is(&local.gid.0)
    }

    /// The header template, and the prefix CRC kept beside it, when these are the headers of
    /// packets on `port` (a RoCE port) towards `av` from UDP port `sport`
    /// ([`TxHeaders::is_for`]).
    #[inline(always)]
    pub(crate) fn datagram_parts(
        &mut self,
        port: &PortConfig,
        av: &AhAttr,
        sport: u16,
    ) -> Option<(&roce::HeaderTemplate, &mut roce::V4PrefixCrc)> {
        (port.link_layer != LinkLayer::InfiniBand && self.is_for(port, av, sport))
            .then_some((&self.template, &mut self.prefix))
    }
}

/// Builds the RoCEv2 frame of `t` with headers `h` and IPv4 Identification `ident` into `out`
/// (resized to the frame); false (and `out` empty) if the packet does not fit.
#[inline(always)]
fn build_roce_frame(
    h: &roce::HeaderTemplate,
    ident: u16,
    t: &TransportPacket<'_>,
    out: &mut Vec<u8>,
) -> bool {
    let Ok(tlen) = t.wire_len() else {
        out.clear();
        return false;
    };
    let len = (h.header_len() + tlen + roce::ICRC_LEN).max(softib_wire::ethernet::MIN_FRAME_LEN);
    fill_frame(out, len, |buf| h.build(ident, t, buf))
}

/// Sizes `out` to `len` bytes and lets `build` write the frame into it (every byte: only the
/// bytes beyond what `out` held are zero-filled first), keeping the length `build` reports;
/// false and `out` empty if it fails.
#[inline(always)]
fn fill_frame<E>(
    out: &mut Vec<u8>,
    len: usize,
    build: impl FnOnce(&mut [u8]) -> Result<usize, E>,
) -> bool {
    out.resize(len, 0);
    match build(out) {
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

/// Ethernet, IP and UDP addressing of a RoCEv2 packet on `port` towards `av` (`ident`: the
/// IPv4 identification, `sport`: the UDP source port).
#[inline(always)]
fn roce_addrs(port: &PortConfig, av: &AhAttr, ident: u16, sport: u16) -> Option<FrameAddrs> {
    // By reference: the GIDs are not copied out of the address vector and the GID table.
    let grh = av.grh.as_ref()?;
    let local = &port.gids.get(usize::from(grh.sgid_index))?.gid;
    let eth = Ethernet {
        dst: mac_for_gid(&grh.dgid),
        src: mac_for_gid(local),
        ..Ethernet::default()
    };
    let ip = match (ipv4_of(local), ipv4_of(&grh.dgid)) {
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

/// A native IB packet on `port` towards `av`: LRH from the port and `av`, a GRH when `av` is
/// global.
fn build_native_frame(
    port: &PortConfig,
    av: &AhAttr,
    t: &TransportPacket<'_>,
    out: &mut Vec<u8>,
) -> bool {
    let lrh = lrh_for(port, av);
    let grh = match av.grh {
        Some(g) => {
            let Some(local) = port.gids.get(usize::from(g.sgid_index)) else {
                return false;
            };
            Some(Grh {
                tclass: g.traffic_class,
                flow_label: g.flow_label,
                hop_lmt: g.hop_limit,
                sgid: local.gid.0,
                dgid: g.dgid.0,
                ..Grh::default()
            })
        }
        None => None,
    };
    let Ok(tlen) = t.wire_len() else {
        out.clear();
        return false;
    };
    let grh_len = if grh.is_some() {
        softib_wire::grh::LEN
    } else {
        0
    };
    let len = softib_wire::lrh::LEN + grh_len + tlen + native::ICRC_LEN + native::VCRC_LEN;
    fill_frame(out, len, |buf| native::build(&lrh, grh.as_ref(), t, buf))
}

/// Source and destination GIDs of a RoCEv2 packet's IP header.
pub(crate) fn ip_gids(ip: &IpHeader) -> (Gid, Gid) {
    match ip {
        IpHeader::V4(v4) => (gid_of_ipv4(v4.src), gid_of_ipv4(v4.dst)),
        IpHeader::V6(v6) => (Gid(v6.sgid), Gid(v6.dgid)),
    }
}

/// The BTH and the IP header of a RoCEv2 frame whose opcode the transport parser does not
/// know, if the frame is otherwise well formed and its ICRC is right.
/// The third value is the transport bytes from the BTH to the ICRC.
pub(crate) fn reserved_opcode_frame(frame: &[u8]) -> Option<(Bth, IpHeader, &[u8])> {
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
    let t = body.get(..body.len().checked_sub(softib_wire::icrc::LEN)?)?;
    Some((bth, ip, t))
}

/// The BTH, LRH and GRH of a native IB packet whose opcode the transport parser does not know,
/// if the packet is otherwise well formed and its VCRC and ICRC are right.
/// The fourth value is the transport bytes from the BTH to the ICRC.
pub(crate) fn reserved_opcode_native(frame: &[u8]) -> Option<(Bth, Lrh, Option<Grh>, &[u8])> {
    let lrh = Lrh::parse(frame).ok()?;
    if lrh.lver != 0 || !lrh.lnh.is_iba_transport() {
        return None;
    }
    let covered = usize::from(lrh.pkt_len) * 4;
    if covered + native::VCRC_LEN != frame.len() || covered < softib_wire::lrh::LEN {
        return None;
    }
    let (raw, vcrc) = frame.split_at(covered);
    if softib_wire::vcrc::compute(raw) != softib_wire::vcrc::get(vcrc).ok()? {
        return None;
    }
    let after = &raw[softib_wire::lrh::LEN..];
    let (grh, grh_bytes, t) = if lrh.lnh == Lnh::IbaGlobal {
        let g = Grh::parse(after).ok()?;
        let (gb, t) = after.split_at_checked(softib_wire::grh::LEN)?;
        (Some(g), Some(gb), t)
    } else {
        (None, None, after)
    };
    let split = t.len().checked_sub(native::ICRC_LEN)?;
    let (tb, icrc) = t.split_at(split);
    if softib_wire::icrc::native(grh_bytes, tb) != softib_wire::icrc::get(icrc).ok()? {
        return None;
    }
    let bth = Bth::parse(tb).ok()?;
    Some((bth, lrh, grh, tb))
}

/// The UDP source port of `qpn`'s packets, and whether a socket writes the IP and UDP headers
/// (then it is the socket's port, [`HcaConfig::udp_socket_port`]).
///
/// [`HcaConfig::udp_socket_port`]: crate::HcaConfig::udp_socket_port
#[inline(always)]
pub(crate) fn express_sport(udp_socket_port: Option<u16>, qpn: u32) -> (bool, u16) {
    match udp_socket_port {
        Some(port) => (true, port),
        None => (false, udp_source_port(qpn)),
    }
}

/// Writes an express packet (BTH as its wire bytes, extension headers, payload) with the QP's
/// cached headers: appended to the lent batch as its datagram alone, or else as a frame into
/// `out` with IPv4 Identification `wire_ident`. False, with nothing appended, when the packet
/// does not fit the template's fast form.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn write_express(
    template: &roce::HeaderTemplate,
    prefix: &mut roce::V4PrefixCrc,
    batch: Option<&mut DatagramBatch<'_>>,
    wire_ident: u16,
    bth: [u8; softib_wire::bth::LEN],
    ext: &[u8],
    payload: &[u8],
    out: &mut Vec<u8>,
) -> bool {
    match batch {
        Some(b) => match template.append_v4_datagram(prefix, bth, ext, payload, b.bytes) {
            Some(start) => {
                b.starts.push(start);
                true
            }
            None => false,
        },
        None => template.build_v4_express(wire_ident, bth, ext, payload, out),
    }
}

/// Puts `qp` (number `qpn`) on the transmit list `tx_ready` (once).
#[inline(always)]
pub(crate) fn schedule(qp: &mut Qp, tx_ready: &mut std::collections::VecDeque<u32>, qpn: u32) {
    if !qp.transport.tx_queued {
        qp.transport.tx_queued = true;
        tx_ready.push_back(qpn);
    }
}

/// Registers `qp`'s earliest deadline (number `qpn`) in the timer set `timers`.
#[inline(always)]
pub(crate) fn rearm(
    qp: &mut Qp,
    timers: &mut std::collections::BTreeSet<(Instant, u32)>,
    qpn: u32,
) {
    let want = if matches!(qp.attr.qp_state, QpState::Rts | QpState::Sqd) {
        match (qp.transport.req.timer, qp.transport.req.rnr_wait) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    } else {
        None
    };
    // The set holds at most one entry per QP, never later than the QP's earliest deadline. A
    // deadline that went away or moved later keeps the entry: it fires early, and
    // `handle_timeout` finds nothing due and registers the real one. The common path (a
    // request arms the timer, its ACK disarms it, the next request arms it a little later)
    // then touches the set once per timeout rather than twice per message.
    match (qp.transport.timer_key, want) {
        (_, None) => {}
        (Some(k), Some(t)) if k <= t => {}
        (old, Some(t)) => {
            if let Some(old) = old {
                timers.remove(&(old, qpn));
            }
            qp.transport.timer_key = Some(t);
            timers.insert((t, qpn));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_of_inverts_gid_of_ipv4() {
        let addrs = [
            [127, 0, 0, 1],
            [127, 0, 0, 2],
            [0; 4],
            [255; 4],
            [10, 1, 2, 3],
        ];
        let mut gids: Vec<Gid> = addrs.iter().map(|&a| gid_of_ipv4(a)).collect();
        let mut v6 = gid_of_ipv4([127, 0, 0, 1]);
        v6.0[9] = 1;
        gids.push(v6);
        gids.push(Gid([
            0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1,
        ]));
        gids.push(Gid([0; 16]));
        for g in &gids {
            for &a in &addrs {
                assert_eq!(ipv4_of(g) == Some(a), *g == gid_of_ipv4(a), "{g:?} {a:?}");
            }
        }
    }

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
    fn frames_follow_the_port_link_layer() {
        use crate::verbs::device::HcaConfig;
        use softib_wire::opcode::Opcode;
        use softib_wire::transport::TransportHeaders;
        let mut headers = TransportHeaders::new(Bth {
            opcode: Opcode(0x64), // UD SEND only
            ..Bth::default()
        });
        headers.deth = Some(Default::default());
        let t = TransportPacket::new(headers, &[7; 12]);
        let mut out = Vec::new();
        // Native IB: LID-routed (LNH 2), then global (LNH 3).
        let mut ib = Hca::new(HcaConfig::infiniband(5));
        let mut av = AhAttr::local(1, 9);
        av.sl = 3;
        assert!(ib.build_frame_to(1, &av, 0x11, &t, &mut out));
        let p = NativePacket::parse_verified(&out).unwrap();
        assert_eq!(
            (p.lrh.lnh, p.lrh.slid, p.lrh.dlid, p.lrh.sl),
            (Lnh::IbaLocal, 5, 9, 3)
        );
        out.clear();
        let dgid = Gid::new(Gid::LINK_LOCAL_PREFIX, 0x1234);
        assert!(ib.build_frame_to(1, &AhAttr::global(1, dgid, 0), 0x11, &t, &mut out));
        let p = NativePacket::parse_verified(&out).unwrap();
        assert_eq!(p.lrh.lnh, Lnh::IbaGlobal);
        // RoCE: the same packet in Ethernet / IPv6 / UDP.
        out.clear();
        let mut roce = Hca::new(HcaConfig::new(5));
        assert!(roce.build_frame_to(1, &AhAttr::global(1, dgid, 0), 0x11, &t, &mut out));
        let p = RocePacket::parse(&out).unwrap();
        assert!(p.icrc_ok());
        // A RoCE port cannot address by LID alone.
        out.clear();
        assert!(!roce.build_frame_to(1, &av, 0x11, &t, &mut out));
    }

    /// Frames built from a QP's cached headers are those the general path builds for the same
    /// packet, and follow every change of the address vector at once (no invalidation step:
    /// here the address vector is changed behind the verbs, as no modify path could miss).
    #[test]
    fn cached_headers_follow_the_address_vector() {
        use crate::setup::{connect, ConnectOptions, EndpointInfo};
        use crate::verbs::device::HcaConfig;
        use crate::verbs::qp::{QpCap, QpInitAttr};
        use crate::verbs::wr::{RemoteAddr, SendWr, WrOpcode};
        use softib_wire::{Psn, Qpn};
        for socket_port in [None, Some(0xd00d)] {
            let mut cfg = HcaConfig::new(5);
            cfg.udp_socket_port = socket_port;
            // RoCEv2 over IPv4 needs an IPv4-mapped local GID.
            cfg.ports[0].gids[0].gid = gid_of_ipv4([10, 0, 0, 1]);
            let mut hca = Hca::new(cfg);
            let pd = hca.alloc_pd().unwrap();
            let cq = hca.create_cq(63).unwrap();
            let cap = QpCap {
                max_send_wr: 16,
                max_recv_wr: 1,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 64,
            };
            let qpn = hca
                .create_qp(pd, &QpInitAttr::new(QpType::Rc, cq, cap))
                .unwrap();
            let q = qpn.value();
            let remote = EndpointInfo {
                qpn: Qpn::new(0x99),
                psn: Psn::new(7),
                gid: gid_of_ipv4([10, 0, 0, 2]),
                lid: 0,
            };
            connect(
                &mut hca,
                qpn,
                Psn::new(100),
                &remote,
                &ConnectOptions::default(),
            )
            .unwrap();
            let send = |hca: &mut Hca, out: &mut Vec<u8>, len: usize| {
                // RDMA WRITEs: no end-to-end credit needed, so none waits for an ACK.
                let remote = RemoteAddr {
                    addr: 0x1000,
                    rkey: 5,
                };
                let mut wr = SendWr::new(1, WrOpcode::RdmaWrite { remote });
                wr.inline_data = Some(vec![0xab; len]);
                hca.post_send(qpn, &[wr]).unwrap();
                hca.poll_transmit(Instant::ZERO, out)
            };
            // The frame against the general path's for the packet it carries.
            let check = |hca: &Hca, frame: &[u8]| -> IpHeader {
                let p = RocePacket::parse_verified(frame).unwrap();
                let ident = match p.ip {
                    IpHeader::V4(v4) => v4.ident,
                    IpHeader::V6(_) => 0,
                };
                let av = hca.qps.get(&q).unwrap().attr.ah_attr;
                let mut want = vec![0x55; 7];
                assert!(hca.frame_into(1, &av, ident, q, &p.transport, &mut want));
                assert_eq!(frame, &want[..]);
                p.ip
            };
            fn grh_of(hca: &mut Hca, q: u32) -> &mut crate::verbs::ah::GlobalRoute {
                let qp = hca.qps.get_mut(&q).unwrap();
                qp.attr.ah_attr.grh.as_mut().unwrap()
            }
            // The buffer is reused: longer and shorter frames than the last one.
            let mut out = Vec::new();
            for len in [40, 4, 60, 0, 40, 40] {
                assert!(send(&mut hca, &mut out, len));
                let IpHeader::V4(ip) = check(&hca, &out) else {
                    panic!("IPv4 expected");
                };
                assert_eq!(ip.dst, [10, 0, 0, 2]);
            }
            assert!(hca.qps.get(&q).unwrap().transport.tx_headers.is_some());
            grh_of(&mut hca, q).dgid = gid_of_ipv4([10, 0, 0, 3]);
            assert!(send(&mut hca, &mut out, 40));
            let IpHeader::V4(ip) = check(&hca, &out) else {
                panic!("IPv4 expected");
            };
            assert_eq!(ip.dst, [10, 0, 0, 3]);
            (
                grh_of(&mut hca, q).traffic_class,
                grh_of(&mut hca, q).hop_limit,
            ) = (0x20, 3);
            assert!(send(&mut hca, &mut out, 40));
            let IpHeader::V4(ip) = check(&hca, &out) else {
                panic!("IPv4 expected");
            };
            assert_eq!((ip.dscp_ecn, ip.ttl), (0x20, 3));
            let v6 = Gid::new(Gid::LINK_LOCAL_PREFIX, 0x1234);
            grh_of(&mut hca, q).dgid = v6;
            grh_of(&mut hca, q).flow_label = 0x12345;
            assert!(send(&mut hca, &mut out, 40));
            let IpHeader::V6(ip) = check(&hca, &out) else {
                panic!("IPv6 expected");
            };
            assert_eq!((Gid(ip.dgid), ip.flow_label), (v6, 0x12345));
            // An SGID index past the table: no frame, as on the general path.
            grh_of(&mut hca, q).sgid_index = 9;
            assert!(!send(&mut hca, &mut out, 40));
            assert!(out.is_empty());
            grh_of(&mut hca, q).sgid_index = 0;
            grh_of(&mut hca, q).dgid = gid_of_ipv4([10, 0, 0, 2]);
            assert!(send(&mut hca, &mut out, 40));
            let IpHeader::V4(ip) = check(&hca, &out) else {
                panic!("IPv4 expected");
            };
            assert_eq!(ip.dst, [10, 0, 0, 2]);
            // The GID table changes behind the QP: its local GID is the source address.
            hca.ports[0].gids[0].gid = gid_of_ipv4([10, 0, 0, 9]);
            assert!(send(&mut hca, &mut out, 40));
            let IpHeader::V4(ip) = check(&hca, &out) else {
                panic!("IPv4 expected");
            };
            assert_eq!(ip.src, [10, 0, 0, 9]);
            let local_v6 = Gid::new(Gid::LINK_LOCAL_PREFIX, 0x5678);
            hca.ports[0].gids[0].gid = local_v6;
            assert!(send(&mut hca, &mut out, 40));
            let IpHeader::V6(ip) = check(&hca, &out) else {
                panic!("IPv6 expected");
            };
            assert_eq!(Gid(ip.sgid), local_v6);
        }
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
