//! Unreliable Datagram service (IBA 9.8.3): the UD requester, the UD responder and multicast.
//!
//! # Requester
//!
//! Every send WQE becomes one SEND Only (or SEND Only with Immediate) packet; `post_send`
//! already refused messages larger than the port's active MTU (C9-200), so nothing is ever
//! split. The BTH carries the WR's destination QP and the next PSN of the send queue (+1 mod
//! 2^24 per message from `sq_psn`, C9-204; QP1 increments too, which the IBA allows), the DETH
//! the Q_Key and the source QP. Q_Key: a WR Q_Key with the high-order bit set selects the QP's
//! own Q_Key (controlled Q_Key, IBA 10.2.5); QP1 always sends the GSI Q_Key 0x80010000.
//! Addressing comes from the address vector copied into the WQE at post time: IPv4 when both
//! GIDs are IPv4-mapped, IPv6 otherwise, hop limit, traffic class and flow label from its GRH.
//! The WQE completes as soon as its frame is handed out by `poll_transmit` (9.8.3.1.2: the
//! packet is on the wire). A gather error completes the WQE with `IBV_WC_LOC_PROT_ERR` and
//! moves the QP to SQE.
//!
//! # Responder
//!
//! Checks in order (Figure 117 is not in the seeds; this is the order of 9.8.1 / C9-165..169):
//! opcode class (another service: `wrong_service`), QP state (RTR, RTS, SQD, SQE receive), P_Key
//! (the QP's own P_Key index; QP1 any entry of the port's table), Q_Key (`qkey_violation`),
//! opcode (SEND Only [with Immediate] only, C9-206), payload ≤ path MTU (C9-205), a receive WQE
//! (C9-207: `ud_no_recv_wqe`, never an RNR NAK), and payload + 40-byte GRH area ≤ the WQE's
//! buffer (C9-205). Every failed check drops the packet silently, counts it and leaves the
//! receive WQE queued. The PSN is ignored (o9-144). Nothing is ever sent back.
//!
//! A delivered message consumes the receive WQE: the first 40 bytes of its buffer hold the
//! network header as rxe and libibverbs applications expect it (RoCEv2 has no GRH; the IP
//! header plays its part): for IPv6 the 40-byte IPv6 header as received, for IPv4 20 zero bytes
//! followed by the 20-byte IPv4 header (rxe `union rdma_network_hdr`); on a native IB port the
//! GRH as received, or nothing when the packet has none (LNH 0b10: the area is left untouched
//! and `IBV_WC_GRH` is clear; native completions also carry LRH:SLID, LRH:SL and the DLID's path
//! bits). The payload follows at byte 40. The work completion has `byte_len` = 40 + payload,
//! `IBV_WC_GRH` (RoCEv2 always), the immediate data, `src_qp` from the DETH, the P_Key index
//! that matched and the SL (RoCEv2: the 802.1Q priority of a tagged frame, otherwise 0). The sender's GID is in the GRH area (IPv6
//! source address, or the IPv4 source address at bytes 32..36).
//!
//! # Multicast
//!
//! [`Hca::attach_mcast`] / [`Hca::detach_mcast`] keep, per group GID, the group's MLID (native
//! IB) and the local UD QPs attached. A packet to DQPN 0xFFFFFF and a multicast destination GID
//! (native IB: the MGID in the GRH and the MLID in LRH:DLID) is handed to every attached QP,
//! each checking it as above. A UD QP sending to a multicast group reaches the other nodes
//! through the fabric and the QPs of its own HCA attached to the group (the sending QP included
//! only when it is itself attached) by local delivery: the seeds are silent on the sender's copy,
//! and the IBA delivers a multicast packet to every member QP but never loops it back to a QP
//! that is not a member.

use softib_wire::bth::Bth;
use softib_wire::deth::Deth;
use softib_wire::immdt::ImmDt;
use softib_wire::opcode::Opcode;
use softib_wire::roce::IpHeader;
use softib_wire::transport::{TransportHeaders, TransportPacket};
use softib_wire::{Operation, Position, Qpn, Service};

use super::datapath::{
    dlid_is_port, ip_gids, lmc_mask, reserved_opcode_frame, reserved_opcode_native, PacketSource,
    MULTICAST_LID_BASE, PERMISSIVE_LID,
};
use super::requester::{PayloadPlan, DEFAULT_PKEY};
use super::Hca;
use crate::error::McastError;
use crate::time::Instant;
use crate::verbs::cq::{NetworkHdr, WorkCompletion};
use crate::verbs::event::QpErrorCause;
use crate::verbs::qp::Qp;
use crate::verbs::types::{
    Gid, LinkLayer, QpState, QpType, SendFlags, WcFlags, WcOpcode, WcStatus,
};
use crate::verbs::wr::WrOpcode;

/// The destination QPN of every multicast packet (IBA 9.8.3: DQPN 0xFFFFFF).
pub const MCAST_QPN: u32 = 0x00FF_FFFF;
/// QPN of the general services QP.
pub const GSI_QPN: u32 = 1;
/// The well-known Q_Key of QP1 (IBA 10.2.5, rxe `GSI_QKEY`).
pub const GSI_QKEY: u32 = 0x8001_0000;
/// Bytes of a UD receive buffer that hold the network header ahead of the payload.
pub const GRH_AREA: usize = 40;
/// Bit of a WR's Q_Key that selects the QP's own Q_Key (controlled Q_Key).
const QKEY_CONTROLLED: u32 = 0x8000_0000;

/// True for a multicast GID: IPv6 `ff00::/8`, or an IPv4-mapped address in `224.0.0.0/4`.
pub fn is_multicast_gid(gid: &Gid) -> bool {
    gid.0[0] == 0xff || super::ipv4_of(gid).is_some_and(|a| a[0] & 0xf0 == 0xe0)
}

/// True for a multicast LID (0xC000..=0xFFFE; 0xFFFF is the permissive LID).
pub(crate) fn is_multicast_lid(lid: u16) -> bool {
    (MULTICAST_LID_BASE..PERMISSIVE_LID).contains(&lid)
}

/// A multicast group with local members.
#[derive(Debug, Clone, Default)]
pub(crate) struct McastGroup {
    /// The group's MLID on an InfiniBand port (0 on a RoCE port, where the LID is ignored).
    pub(crate) mlid: u16,
    /// The QPs attached, in attach order.
    pub(crate) qpns: Vec<u32>,
}

/// Where a UD packet came from, as its link layer saw it.
#[derive(Clone, Copy)]
pub(crate) struct UdSource<'a> {
    /// The network headers.
    pub(crate) from: PacketSource<'a>,
    /// The service level: LRH:SL on native IB, the 802.1Q priority of a tagged RoCEv2 frame
    /// (0 untagged: RoCEv2 has no LRH).
    pub(crate) sl: u8,
}

impl UdSource<'_> {
    /// True when the packet is addressed to a multicast group: a multicast destination GID
    /// (RoCEv2 IP header, native GRH) or a multicast DLID.
    fn is_multicast(&self) -> bool {
        match self.from {
            PacketSource::Roce(ip) => is_multicast_gid(&ip_gids(ip).1),
            PacketSource::Native { lrh, grh } => {
                is_multicast_lid(lrh.dlid) || grh.is_some_and(|g| is_multicast_gid(&Gid(g.dgid)))
            }
        }
    }

    /// The 40 bytes for the GRH area of the receive buffer; `None` when the packet has no
    /// network header to place there (native IB without a GRH: the area is left untouched).
    fn grh_area(&self) -> Option<[u8; GRH_AREA]> {
        match self.from {
            PacketSource::Roce(ip) => Some(grh_area(ip)),
            PacketSource::Native { grh, .. } => grh.map(|g| {
                let mut area = [0u8; GRH_AREA];
                // The parsed GRH keeps every bit (reserved ones too): this is the GRH as received.
                let _ = g.emit(&mut area);
                area
            }),
        }
    }
}

/// The 40-byte GRH area of a UD receive buffer for a packet with network header `ip`.
fn grh_area(ip: &IpHeader) -> [u8; GRH_AREA] {
    let mut area = [0u8; GRH_AREA];
    match ip {
        IpHeader::V6(v6) => {
            let _ = v6.emit(&mut area);
        }
        IpHeader::V4(v4) => {
            let _ = v4.emit(&mut area[GRH_AREA - softib_wire::ipv4::LEN..]);
        }
    }
    area
}

/// What a UD receive's network header area says of the packet: the first [`GRH_AREA`] bytes
/// of its buffer hold an IPv6 header or GRH, or, for RoCEv2 over IPv4, 20 zero bytes and the
/// IPv4 header. What a reply's address vector is built from (`ibv_init_ah_from_wc`, the CM).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GrhAreaInfo {
    /// The sender's GID (IPv4-mapped for IPv4).
    pub sgid: Gid,
    /// The GID the packet was sent to.
    pub dgid: Gid,
    /// Traffic class (IPv4: the TOS byte).
    pub traffic_class: u8,
    /// Flow label (IPv4: 0).
    pub flow_label: u32,
}

/// Reads a UD receive's network header area ([`GrhAreaInfo`]).
pub fn read_grh_area(area: &[u8; GRH_AREA]) -> GrhAreaInfo {
    let v4 = GRH_AREA - softib_wire::ipv4::LEN;
    if area[..v4].iter().all(|&b| b == 0) && area[v4] >> 4 == 4 {
        let mapped = |a: &[u8]| {
            let mut g = [0u8; 16];
            g[10] = 0xff;
            g[11] = 0xff;
            g[12..].copy_from_slice(a);
            Gid(g)
        };
        GrhAreaInfo {
            sgid: mapped(&area[v4 + 12..v4 + 16]),
            dgid: mapped(&area[v4 + 16..v4 + 20]),
            traffic_class: area[v4 + 1],
            flow_label: 0,
        }
    } else {
        let mut s = [0u8; 16];
        let mut d = [0u8; 16];
        s.copy_from_slice(&area[8..24]);
        d.copy_from_slice(&area[24..40]);
        let flow = u32::from_be_bytes([area[0], area[1], area[2], area[3]]);
        GrhAreaInfo {
            sgid: Gid(s),
            dgid: Gid(d),
            traffic_class: (flow >> 20) as u8,
            flow_label: flow & 0xF_FFFF,
        }
    }
}

impl Hca {
    // ----- requester ----------------------------------------------------------------------

    /// True when the UD QP has a send WQE to transmit.
    pub(crate) fn ud_has_tx_work(&self, qpn: u32) -> bool {
        self.qps
            .get(&qpn)
            .is_some_and(|qp| qp.attr.qp_state == QpState::Rts && !qp.sq.is_empty())
    }

    /// Sends the oldest send WQE of a UD QP as one packet into `out` and completes it; false
    /// when nothing was sent (nothing queued, not in RTS, or the WQE failed locally).
    pub(crate) fn ud_next_packet(&mut self, now: Instant, qpn: u32, out: &mut Vec<u8>) -> bool {
        let Some(qp) = self.qps.get(&qpn) else {
            return false;
        };
        if qp.attr.qp_state != QpState::Rts {
            return false;
        }
        let Some(w) = qp.sq.front() else {
            return false;
        };
        let Some(dest) = w.ud else {
            // post_send refuses UD WRs without a destination; nothing to address.
            self.ud_send_error(qpn, WcStatus::LocQpOpErr);
            return false;
        };
        let qkey = if qpn == GSI_QPN {
            GSI_QKEY
        } else if dest.remote_qkey & QKEY_CONTROLLED != 0 {
            qp.attr.qkey
        } else {
            dest.remote_qkey
        };
        let port = self.port(dest.av.port_num);
        let pkey = port
            .and_then(|p| p.pkeys.get(usize::from(qp.attr.pkey_index)))
            .copied()
            .unwrap_or(DEFAULT_PKEY);
        let local = dest.av.grh.and_then(|g| {
            port.and_then(|p| p.gids.get(usize::from(g.sgid_index)))
                .map(|e| e.gid)
        });
        let native = port.is_some_and(|p| p.link_layer == LinkLayer::InfiniBand);
        if local.is_none() && (dest.av.grh.is_some() || !native) {
            // A RoCE address vector always has a GRH, and every GRH a valid SGID index
            // (create_ah); a native one may be LID-routed (no GRH).
            self.ud_send_error(qpn, WcStatus::LocQpOpErr);
            return false;
        }
        // Whether the HCA holds members of the destination group, which get a local copy.
        let local_members = match dest.av.grh {
            _ if native && is_multicast_lid(dest.av.dlid) => {
                self.mcast.values().any(|g| g.mlid == dest.av.dlid)
            }
            Some(grh) if !native && is_multicast_gid(&grh.dgid) => {
                self.mcast.contains_key(&grh.dgid)
            }
            _ => false,
        };
        let psn = qp.transport.next_psn;
        let (opcode, imm) = match w.opcode {
            WrOpcode::SendWithImm(imm) => (Opcode::UD_SEND_ONLY_WITH_IMMEDIATE, Some(imm)),
            _ => (Opcode::UD_SEND_ONLY, None),
        };
        let mut headers = TransportHeaders::new(Bth {
            opcode,
            solicited: w.flags.contains(SendFlags::SOLICITED),
            pkey,
            dest_qp: dest.remote_qpn,
            psn,
            ..Bth::default()
        });
        headers.deth = Some(Deth {
            qkey,
            resv8: 0,
            src_qp: Qpn::new(qpn),
        });
        headers.immdt = imm.map(|imm| ImmDt { imm });
        let (length, signaled, wr_id) = (w.length, w.signaled, w.wr_id);
        let plan = PayloadPlan::Message {
            offset: 0,
            len: length,
        };
        let to = Some((dest.av.port_num, dest.av));
        match self.build_request(qpn, 0, plan, headers, to, out) {
            Ok(true) => {}
            Ok(false) => {
                self.ud_send_error(qpn, WcStatus::LocQpOpErr);
                return false;
            }
            Err(status) => {
                self.ud_send_error(qpn, status);
                return false;
            }
        }
        // On the wire: the PSN is used and the WQE is complete (9.8.3.1.2).
        let Some(qp) = self.qps.get_mut(&qpn) else {
            return false;
        };
        qp.transport.next_psn = psn.next();
        if let Some(w) = qp.sq.pop_front() {
            self.spare.recycle(w.payload);
        }
        let send_cq = qp.send_cq;
        if signaled {
            let wc = WorkCompletion::new(wr_id, WcStatus::Success, WcOpcode::Send, Qpn::new(qpn))
                .with_byte_len(length);
            let _ = self.complete_or_error(Qpn::new(qpn), send_cq, wc, false);
        }
        self.check_sq_drained(Qpn::new(qpn));
        if local_members {
            // The local members of the group get their copy here; the fabric never sends a
            // frame back to the port it came from.
            let frame = out.clone();
            self.handle_frame(now, &frame);
        }
        true
    }

    /// Completes the oldest send WQE of a UD QP with `status` and moves the QP to SQE, which
    /// flushes the rest of its send queue (receives continue).
    fn ud_send_error(&mut self, qpn: u32, status: WcStatus) {
        let Some(qp) = self.qps.get_mut(&qpn) else {
            return;
        };
        let Some(w) = qp.sq.pop_front() else {
            return;
        };
        let cq = qp.send_cq;
        let wc = WorkCompletion::new(w.wr_id, status, w.opcode.wc_opcode(), Qpn::new(qpn));
        let _ = self.push_completion(cq, wc, false);
        let _ = self.set_sq_error(Qpn::new(qpn));
    }

    // ----- responder ----------------------------------------------------------------------

    /// A transport packet with good CRCs for UD QP `qpn`.
    pub(crate) fn ud_handle_packet(
        &mut self,
        qpn: u32,
        t: &TransportPacket<'_>,
        src: UdSource<'_>,
    ) {
        if src.is_multicast() {
            // A multicast GID or LID needs DQPN 0xFFFFFF (handled by ud_handle_mcast).
            self.counters.mcast_bad_dest += 1;
            return;
        }
        self.ud_receive(qpn, t, src);
    }

    /// A transport packet with good CRCs for DQPN 0xFFFFFF: one copy for every QP attached to
    /// the destination group. RoCEv2 names the group by the destination GID; native IB by the
    /// MGID in the GRH and the MLID in LRH:DLID, both required (a multicast address is an MGID
    /// and its MLID, IBA 10.5).
    pub(crate) fn ud_handle_mcast(&mut self, t: &TransportPacket<'_>, src: UdSource<'_>) {
        let group = match src.from {
            PacketSource::Roce(ip) => {
                let (_, dst) = ip_gids(ip);
                if !is_multicast_gid(&dst) {
                    self.counters.mcast_bad_dest += 1;
                    return;
                }
                self.mcast.get(&dst)
            }
            PacketSource::Native { lrh, grh } => {
                let mgid = grh.map(|g| Gid(g.dgid)).filter(is_multicast_gid);
                let Some(mgid) = mgid.filter(|_| is_multicast_lid(lrh.dlid)) else {
                    self.counters.mcast_bad_dest += 1;
                    return;
                };
                self.mcast.get(&mgid).filter(|g| g.mlid == lrh.dlid)
            }
        };
        let Some(group) = group else {
            self.counters.mcast_no_member += 1;
            return;
        };
        // The list is short (max_mcast_qp_attach); delivery may detach nothing, but the QPs are
        // looked up one by one so that a QP destroyed meanwhile is simply skipped.
        let members = group.qpns.clone();
        for qpn in members {
            self.ud_receive(qpn, t, src);
        }
    }

    /// A frame with a reserved opcode of the UD class (0x66..=0x7F): dropped (C9-206). Frames
    /// that fail an earlier check (framing, CRCs, DLID, QP, service) count under that check.
    pub(crate) fn handle_reserved_ud_opcode(&mut self, frame: &[u8]) {
        let bth = if self.native_link() {
            match reserved_opcode_native(frame) {
                Some((_, lrh, _, _)) if !self.dlid_accepted(lrh.dlid) => {
                    self.counters.wrong_dlid += 1;
                    return;
                }
                found => found.map(|(bth, _, _, _)| bth),
            }
        } else {
            reserved_opcode_frame(frame).map(|(bth, _, _)| bth)
        };
        let Some(bth) = bth else {
            self.counters.malformed += 1;
            return;
        };
        let qpn = bth.dest_qp.value();
        match self.qps.get(&qpn) {
            _ if qpn == MCAST_QPN => self.counters.ud_bad_opcode += 1,
            None => self.counters.no_such_qp += 1,
            Some(qp) if qp.qp_type != QpType::Ud => self.counters.wrong_service += 1,
            Some(_) => self.counters.ud_bad_opcode += 1,
        }
    }

    /// True when a native IB port takes a packet for `dlid`: one of its LIDs, the permissive
    /// LID, or the MLID of a group with local members.
    pub(crate) fn dlid_accepted(&self, dlid: u16) -> bool {
        self.port(1).is_some_and(|port| dlid_is_port(port, dlid))
            || (is_multicast_lid(dlid) && self.mcast.values().any(|g| g.mlid == dlid))
    }

    /// The index of the P_Key table entry that admits `pkey` for a UD QP: the QP's own entry,
    /// or for QP1 any entry (IBA 10.9: a P_Key matches when the low 15 bits agree, neither is
    /// the invalid key, and at least one is a full member).
    fn ud_pkey_index(&self, qp: &Qp, pkey: u16) -> Option<u16> {
        let port = self.port(qp.attr.port_num.max(1))?;
        let matches =
            |e: u16| e & 0x7fff == pkey & 0x7fff && e & 0x7fff != 0 && (e | pkey) & 0x8000 != 0;
        if qp.qpn.value() == GSI_QPN {
            let i = port.pkeys.iter().position(|&e| matches(e))?;
            return u16::try_from(i).ok();
        }
        let i = qp.attr.pkey_index;
        port.pkeys
            .get(usize::from(i))
            .is_some_and(|&e| matches(e))
            .then_some(i)
    }

    /// Validates one UD packet for QP `qpn` and delivers it into a receive WQE.
    fn ud_receive(&mut self, qpn: u32, t: &TransportPacket<'_>, src: UdSource<'_>) {
        let Some(qp) = self.qps.get(&qpn) else {
            self.counters.no_such_qp += 1;
            return;
        };
        let h = &t.headers;
        let Ok(info) = t.info() else {
            self.counters.malformed += 1;
            return;
        };
        if info.service != Service::Ud || qp.qp_type != QpType::Ud {
            self.counters.wrong_service += 1;
            return;
        }
        if !matches!(
            qp.attr.qp_state,
            QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
        ) {
            self.counters.bad_state += 1;
            return;
        }
        let Some(pkey_index) = self.ud_pkey_index(qp, h.bth.pkey) else {
            self.counters.bad_pkey += 1;
            return;
        };
        let Some(deth) = h.deth else {
            self.counters.malformed += 1;
            return;
        };
        let qkey = if qpn == GSI_QPN {
            GSI_QKEY
        } else {
            qp.attr.qkey
        };
        if deth.qkey != qkey {
            self.counters.qkey_violation += 1;
            return;
        }
        if info.operation != Operation::Send || info.position != Position::Only {
            self.counters.ud_bad_opcode += 1;
            return;
        }
        let port = self.port(qp.attr.port_num.max(1));
        let mtu = port.map_or(4096, |port| port.active_mtu.bytes() as usize);
        // The DLID's path bits when it is one of the port's LIDs (not for multicast or the
        // permissive LID).
        let dlid_path_bits = match (src.from, port) {
            (PacketSource::Native { lrh, .. }, Some(port))
                if lrh.dlid != PERMISSIVE_LID && dlid_is_port(port, lrh.dlid) =>
            {
                (lrh.dlid & lmc_mask(port)) as u8
            }
            _ => 0,
        };
        let len = t.payload.len();
        if len > mtu {
            self.counters.ud_bad_length += 1;
            return;
        }
        let wqe_len = match qp.srq {
            Some(srq) => self
                .srqs
                .get(srq.0)
                .and_then(|s| s.queue.front())
                .map(|w| w.length),
            None => qp.rq.front().map(|w| w.length),
        };
        let Some(wqe_len) = wqe_len else {
            self.counters.ud_no_recv_wqe += 1;
            return;
        };
        let need = (GRH_AREA + len) as u64;
        if need > wqe_len {
            self.counters.ud_bad_length += 1;
            return;
        }
        let (pd, recv_cq) = (qp.pd, qp.recv_cq);
        let qpn_w = Qpn::new(qpn);
        let Some(wqe) = self.take_recv_wqe(qpn_w) else {
            self.counters.ud_no_recv_wqe += 1;
            return;
        };
        self.counters.rcvd_pkts += 1;
        let area = src.grh_area();
        let ok = area.is_none_or(|area| self.scatter(pd, &wqe.sg_list, 0, &area))
            && self.scatter(pd, &wqe.sg_list, GRH_AREA as u64, t.payload);
        if !ok {
            // A local error of the responder: the WQE completes in error and the QP enters ERR
            // (9.9.3; the seeds allow the receive queue to go to the error state).
            let wc = WorkCompletion::new(wqe.wr_id, WcStatus::LocProtErr, WcOpcode::Recv, qpn_w);
            let _ = self.push_completion(recv_cq, wc, false);
            let _ = self.set_qp_error(qpn_w, QpErrorCause::CompletionError);
            return;
        }
        let mut wc = WorkCompletion::new(wqe.wr_id, WcStatus::Success, WcOpcode::Recv, qpn_w)
            .with_byte_len(need as u32);
        self.spare.recycle_recv(wqe.sg_list);
        if let Some(imm) = h.immdt {
            wc = wc.with_imm(imm.imm);
        }
        if area.is_some() {
            wc.wc_flags |= WcFlags::GRH;
        }
        wc.src_qp = deth.src_qp;
        wc.pkey_index = pkey_index;
        wc.sl = src.sl;
        match src.from {
            PacketSource::Native { lrh, .. } => {
                wc.slid = lrh.slid;
                wc.dlid_path_bits = dlid_path_bits;
            }
            PacketSource::Roce(ip) => {
                wc.network_hdr = Some(match ip {
                    IpHeader::V4(_) => NetworkHdr::Ipv4,
                    IpHeader::V6(_) => NetworkHdr::Ipv6,
                });
            }
        }
        let _ = self.complete_or_error(qpn_w, recv_cq, wc, h.bth.solicited);
    }

    // ----- multicast ----------------------------------------------------------------------

    /// Attaches UD QP `qpn` to the multicast group `gid` (`ibv_attach_mcast`). `lid` is the
    /// group's multicast LID (MLID) on an InfiniBand port, recorded with the group: the port
    /// then accepts packets for that DLID. It is ignored on a RoCE port. One MGID has one MLID
    /// (the SA assigns it), so attaching to a group with local members under another MLID
    /// fails. Attaching a QP that is already attached succeeds and changes nothing (as rxe).
    pub fn attach_mcast(&mut self, qpn: Qpn, gid: Gid, lid: u16) -> Result<(), McastError> {
        let qp = self
            .qps
            .get(&qpn.value())
            .ok_or(McastError::NoSuchQp(qpn))?;
        let mlid = self.check_mcast_args(qp, gid, lid)?;
        let (max_grp, max_attach) = (self.device.max_mcast_grp, self.device.max_mcast_qp_attach);
        match self.mcast.get_mut(&gid) {
            Some(group) if group.mlid != mlid => Err(McastError::MlidMismatch {
                gid,
                mlid: group.mlid,
                lid,
            }),
            Some(group) if group.qpns.contains(&qpn.value()) => Ok(()),
            Some(McastGroup { qpns: members, .. }) => {
                if members.len() >= max_attach as usize {
                    return Err(McastError::GroupFull {
                        gid,
                        max: max_attach,
                    });
                }
                members.push(qpn.value());
                Ok(())
            }
            None => {
                if self.mcast.len() >= max_grp as usize {
                    return Err(McastError::TooManyGroups { max: max_grp });
                }
                if max_attach == 0 {
                    return Err(McastError::GroupFull {
                        gid,
                        max: max_attach,
                    });
                }
                let group = McastGroup {
                    mlid,
                    qpns: vec![qpn.value()],
                };
                self.mcast.insert(gid, group);
                Ok(())
            }
        }
    }

    /// Detaches UD QP `qpn` from the multicast group `gid` (`ibv_detach_mcast`); on an
    /// InfiniBand port `lid` must be the group's MLID.
    pub fn detach_mcast(&mut self, qpn: Qpn, gid: Gid, lid: u16) -> Result<(), McastError> {
        let qp = self
            .qps
            .get(&qpn.value())
            .ok_or(McastError::NoSuchQp(qpn))?;
        let mlid = self.check_mcast_args(qp, gid, lid)?;
        let group = self
            .mcast
            .get_mut(&gid)
            .filter(|g| g.qpns.contains(&qpn.value()))
            .ok_or(McastError::NotAttached { qpn, gid })?;
        if group.mlid != mlid {
            return Err(McastError::MlidMismatch {
                gid,
                mlid: group.mlid,
                lid,
            });
        }
        let members = &mut group.qpns;
        members.retain(|&q| q != qpn.value());
        if members.is_empty() {
            self.mcast.remove(&gid);
        }
        Ok(())
    }

    /// The multicast groups a QP of this HCA is attached to (a driver joins them on its
    /// network: RoCEv2 over UDP receives a group's datagrams only where it joined it).
    pub fn mcast_groups(&self) -> impl Iterator<Item = Gid> + '_ {
        self.mcast.keys().copied()
    }

    /// The QPs attached to multicast group `gid`, in attach order.
    pub fn mcast_members(&self, gid: Gid) -> Vec<Qpn> {
        self.mcast
            .get(&gid)
            .map(|g| g.qpns.iter().map(|&q| Qpn::new(q)).collect())
            .unwrap_or_default()
    }

    /// Checks the arguments of `attach_mcast` / `detach_mcast`; returns the MLID to record
    /// (`lid` on an InfiniBand port, 0 on a RoCE port).
    fn check_mcast_args(&self, qp: &Qp, gid: Gid, lid: u16) -> Result<u16, McastError> {
        if qp.qp_type != QpType::Ud {
            return Err(McastError::NotUd {
                qpn: qp.qpn,
                qp_type: qp.qp_type,
            });
        }
        if !is_multicast_gid(&gid) {
            return Err(McastError::NotMulticastGid(gid));
        }
        let ib = self
            .port(qp.attr.port_num.max(1))
            .is_some_and(|p| p.link_layer == LinkLayer::InfiniBand);
        if ib && !is_multicast_lid(lid) {
            return Err(McastError::NotMulticastLid(lid));
        }
        Ok(if ib { lid } else { 0 })
    }

    /// Removes `qpn` from every group (the QP is being destroyed).
    pub(crate) fn mcast_detach_all(&mut self, qpn: u32) {
        self.mcast.retain(|_, group| {
            group.qpns.retain(|&q| q != qpn);
            !group.qpns.is_empty()
        });
    }
}

#[cfg(test)]
mod grh_area_tests {
    use super::*;
    use softib_wire::grh::Grh;
    use softib_wire::ipv4::Ipv4;

    #[test]
    fn read_an_ipv4_and_an_ipv6_header() {
        let v4 = IpHeader::V4(Ipv4 {
            version: 4,
            ihl: 5,
            dscp_ecn: 0x28,
            ttl: 64,
            src: [10, 0, 0, 1],
            dst: [10, 0, 0, 2],
            ..Ipv4::default()
        });
        let i = read_grh_area(&grh_area(&v4));
        assert_eq!(i.sgid, crate::gid_of_ipv4([10, 0, 0, 1]));
        assert_eq!(i.dgid, crate::gid_of_ipv4([10, 0, 0, 2]));
        assert_eq!((i.traffic_class, i.flow_label), (0x28, 0));
        let mut sgid = [0u8; 16];
        sgid[0] = 0xfe;
        sgid[1] = 0x80;
        sgid[15] = 1;
        let mut dgid = sgid;
        dgid[15] = 2;
        let v6 = IpHeader::V6(Grh {
            ip_ver: 6,
            tclass: 0x12,
            flow_label: 0xabcde,
            hop_lmt: 64,
            sgid,
            dgid,
            ..Grh::default()
        });
        assert_eq!(
            read_grh_area(&grh_area(&v6)),
            GrhAreaInfo {
                sgid: Gid(sgid),
                dgid: Gid(dgid),
                traffic_class: 0x12,
                flow_label: 0xabcde
            }
        );
    }
}
