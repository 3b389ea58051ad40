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
//! followed by the 20-byte IPv4 header (rxe `union rdma_network_hdr`). The payload follows at
//! byte 40. The work completion has `byte_len` = 40 + payload, `IBV_WC_GRH`, the immediate
//! data, `src_qp` from the DETH, the P_Key index that matched and the SL (the 802.1Q priority of
//! a tagged frame, otherwise 0: RoCEv2 has no LRH). The sender's GID is in the GRH area (IPv6
//! source address, or the IPv4 source address at bytes 32..36).
//!
//! # Multicast
//!
//! [`Hca::attach_mcast`] / [`Hca::detach_mcast`] keep, per group GID, the local UD QPs attached.
//! A packet to DQPN 0xFFFFFF and a multicast destination GID is handed to every attached QP,
//! each checking it as above. A UD QP sending to a multicast group reaches the other nodes
//! through the fabric and the QPs of its own HCA attached to the group (the sending QP included
//! only when it is itself attached) by local delivery: the seeds are silent on the sender's copy,
//! and the IBA delivers a multicast packet to every member QP but never loops it back to a QP
//! that is not a member.

use softib_wire::bth::Bth;
use softib_wire::deth::Deth;
use softib_wire::immdt::ImmDt;
use softib_wire::opcode::Opcode;
use softib_wire::roce::{IpHeader, RocePacket};
use softib_wire::transport::{TransportHeaders, TransportPacket};
use softib_wire::{Operation, Position, Qpn, Service};

use super::datapath::{ip_gids, reserved_opcode_frame};
use super::requester::DEFAULT_PKEY;
use super::Hca;
use crate::error::McastError;
use crate::time::Instant;
use crate::verbs::cq::WorkCompletion;
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

/// Pad bytes of outgoing packets.
static ZERO_PAD: [u8; 3] = [0; 3];

/// True for a multicast GID: IPv6 `ff00::/8`, or an IPv4-mapped address in `224.0.0.0/4`.
pub fn is_multicast_gid(gid: &Gid) -> bool {
    gid.0[0] == 0xff || super::ipv4_of(gid).is_some_and(|a| a[0] & 0xf0 == 0xe0)
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
        let (Some(grh), Some(_)) = (dest.av.grh, local) else {
            // A RoCE address vector always has a GRH and a valid SGID index (create_ah).
            self.ud_send_error(qpn, WcStatus::LocQpOpErr);
            return false;
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
        let (pd, length, signaled, wr_id) = (qp.pd, w.length, w.signaled, w.wr_id);
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        let gathered = {
            let w = &self.qps[&qpn].sq[0];
            self.gather(pd, &w.payload, 0, length, &mut scratch)
        };
        if !gathered {
            self.scratch = scratch;
            self.ud_send_error(qpn, WcStatus::LocProtErr);
            return false;
        }
        let pad = softib_wire::transport::pad_for(scratch.len());
        headers.bth.pad_cnt = pad as u8;
        let t = TransportPacket {
            headers,
            payload: &scratch,
            pad: &ZERO_PAD[..pad],
        };
        let built = self.build_frame_to(dest.av.port_num, &dest.av, qpn, &t, out);
        self.scratch = scratch;
        if !built {
            self.ud_send_error(qpn, WcStatus::LocQpOpErr);
            return false;
        }
        // On the wire: the PSN is used and the WQE is complete (9.8.3.1.2).
        let Some(qp) = self.qps.get_mut(&qpn) else {
            return false;
        };
        qp.transport.next_psn = psn.next();
        qp.sq.pop_front();
        let send_cq = qp.send_cq;
        if signaled {
            let wc = WorkCompletion::new(wr_id, WcStatus::Success, WcOpcode::Send, Qpn::new(qpn))
                .with_byte_len(length);
            let _ = self.complete_or_error(Qpn::new(qpn), send_cq, wc, false);
        }
        self.check_sq_drained(Qpn::new(qpn));
        if is_multicast_gid(&grh.dgid) && self.mcast.contains_key(&grh.dgid) {
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

    /// A parsed packet with a good ICRC for UD QP `qpn`.
    pub(crate) fn ud_handle_packet(&mut self, _now: Instant, qpn: u32, p: &RocePacket<'_>) {
        let (_, dst) = ip_gids(&p.ip);
        if is_multicast_gid(&dst) {
            // A multicast GID needs DQPN 0xFFFFFF (handled by ud_handle_mcast).
            self.counters.mcast_bad_dest += 1;
            return;
        }
        self.ud_receive(qpn, p);
    }

    /// A parsed packet with a good ICRC for DQPN 0xFFFFFF: one copy for every QP attached to
    /// the destination group.
    pub(crate) fn ud_handle_mcast(&mut self, _now: Instant, p: &RocePacket<'_>) {
        let (_, dst) = ip_gids(&p.ip);
        if !is_multicast_gid(&dst) {
            self.counters.mcast_bad_dest += 1;
            return;
        }
        let Some(members) = self.mcast.get(&dst) else {
            self.counters.mcast_no_member += 1;
            return;
        };
        // The list is short (max_mcast_qp_attach); delivery may detach nothing, but the QPs are
        // looked up one by one so that a QP destroyed meanwhile is simply skipped.
        let members = members.clone();
        for qpn in members {
            self.ud_receive(qpn, p);
        }
    }

    /// A frame with a reserved opcode of the UD class (0x66..=0x7F): dropped (C9-206). Frames
    /// that fail an earlier check (framing, ICRC, QP, service) count under that check.
    pub(crate) fn handle_reserved_ud_opcode(&mut self, frame: &[u8]) {
        let Some((bth, _)) = reserved_opcode_frame(frame) else {
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
    fn ud_receive(&mut self, qpn: u32, p: &RocePacket<'_>) {
        let Some(qp) = self.qps.get(&qpn) else {
            self.counters.no_such_qp += 1;
            return;
        };
        let t = &p.transport;
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
        let mtu = self
            .port(qp.attr.port_num.max(1))
            .map_or(4096, |port| port.active_mtu.bytes() as usize);
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
        let area = grh_area(&p.ip);
        let ok = self.scatter(pd, &wqe.sg_list, 0, &area)
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
        if let Some(imm) = h.immdt {
            wc = wc.with_imm(imm.imm);
        }
        wc.wc_flags |= WcFlags::GRH;
        wc.src_qp = deth.src_qp;
        wc.pkey_index = pkey_index;
        wc.sl = p.eth.vlan.map_or(0, |v| v.pcp);
        let _ = self.complete_or_error(qpn_w, recv_cq, wc, h.bth.solicited);
    }

    // ----- multicast ----------------------------------------------------------------------

    /// Attaches UD QP `qpn` to the multicast group `gid` (`ibv_attach_mcast`). `lid` is the
    /// group's multicast LID on an InfiniBand port and ignored on a RoCE port. Attaching a QP
    /// that is already attached succeeds and changes nothing (as rxe).
    pub fn attach_mcast(&mut self, qpn: Qpn, gid: Gid, lid: u16) -> Result<(), McastError> {
        let qp = self
            .qps
            .get(&qpn.value())
            .ok_or(McastError::NoSuchQp(qpn))?;
        self.check_mcast_args(qp, gid, lid)?;
        let (max_grp, max_attach) = (self.device.max_mcast_grp, self.device.max_mcast_qp_attach);
        match self.mcast.get_mut(&gid) {
            Some(members) if members.contains(&qpn.value()) => Ok(()),
            Some(members) => {
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
                self.mcast.insert(gid, vec![qpn.value()]);
                Ok(())
            }
        }
    }

    /// Detaches UD QP `qpn` from the multicast group `gid` (`ibv_detach_mcast`).
    pub fn detach_mcast(&mut self, qpn: Qpn, gid: Gid, lid: u16) -> Result<(), McastError> {
        let qp = self
            .qps
            .get(&qpn.value())
            .ok_or(McastError::NoSuchQp(qpn))?;
        self.check_mcast_args(qp, gid, lid)?;
        let members = self
            .mcast
            .get_mut(&gid)
            .filter(|m| m.contains(&qpn.value()))
            .ok_or(McastError::NotAttached { qpn, gid })?;
        members.retain(|&q| q != qpn.value());
        if members.is_empty() {
            self.mcast.remove(&gid);
        }
        Ok(())
    }

    /// The QPs attached to multicast group `gid`, in attach order.
    pub fn mcast_members(&self, gid: Gid) -> Vec<Qpn> {
        self.mcast
            .get(&gid)
            .map(|m| m.iter().map(|&q| Qpn::new(q)).collect())
            .unwrap_or_default()
    }

    fn check_mcast_args(&self, qp: &Qp, gid: Gid, lid: u16) -> Result<(), McastError> {
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
        if ib && !(0xC000..=0xFFFE).contains(&lid) {
            return Err(McastError::NotMulticastLid(lid));
        }
        Ok(())
    }

    /// Removes `qpn` from every group (the QP is being destroyed).
    pub(crate) fn mcast_detach_all(&mut self, qpn: u32) {
        self.mcast.retain(|_, members| {
            members.retain(|&q| q != qpn);
            !members.is_empty()
        });
    }
}
