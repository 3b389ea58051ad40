//! Raw datagram QPs (IBA 9.8.4): raw IPv6 (LRH:LNH 0b01) and raw EtherType (LRH:LNH 0b00)
//! datagrams on native InfiniBand ports. Raw packets carry no BTH, no DestQP and no ICRC:
//! LRH, then the IPv6 header or the RWH, then the payload padded to whole words, then the VCRC.
//!
//! # Message format
//!
//! A raw QP's message is the datagram that follows the LRH, header included:
//!
//! * raw IPv6: the 40-byte IPv6 header, then the IPv6 payload. The HCA sets the header's
//!   version to 6 and its PayLen to the message length - 40 (the length before padding, so the
//!   receiver can strip the pad); every other header field goes out as posted. A Next Header of
//!   0x1B (IBA transport) is refused (C9-208): by `post_send` with
//!   [`PostSendError::RawIpv6IbaNextHeader`] when the header bytes are readable at post time,
//!   and otherwise (or if the memory changed since) when the WR executes, which completes it
//!   with `IBV_WC_LOC_QP_OP_ERR` without sending anything.
//! * raw EtherType: the 4-byte RWH (reserved 16 bits, sent as 0, then the EtherType), then the
//!   payload.
//!
//! The destination comes from the WR's UD fields: the address handle gives DLID, SL and source
//! path bits (its GRH, remote QPN and Q_Key are not used: raw packets have no BTH, and a raw
//! IPv6 datagram's addresses are in the posted header). SLID = port LID | path bits, VL 0.
//!
//! The payload is padded with zeros to a multiple of 4 bytes (o9-145). A raw EtherType
//! receiver cannot tell pad from data (the RWH has no length), so its completion counts the
//! padded length; a raw IPv6 receiver uses PayLen and gets the datagram without the pad.
//!
//! # Size limit
//!
//! The seeds disagree: IBA o9-148 lets a raw payload exceed the MTU (raw packets carry no
//! transport headers, and the largest packet is MTU + 124 bytes), while the book chapter
//! (seed 002) says a raw message is at most one PMTU. softib follows the specification: the
//! bytes LRH:PktLen counts (LRH + datagram + pad) may be at most the port's active MTU + 124,
//! so a raw message (header included) may be up to active MTU + 116 bytes. Longer WRs fail
//! `post_send` with [`PostSendError::RawDatagramTooLong`]. On receipt any length the parser
//! accepts is delivered if it fits the receive WQE.
//!
//! # Which QP consumes a raw packet (o9-146, o9-147)
//!
//! Every raw QP of the packet's type (raw IPv6 for LNH 0b01, raw EtherType for LNH 0b00) bound
//! to the receiving port and in RTR, RTS, SQD or SQE receives its own copy, in QPN order, into
//! its oldest posted receive WQE. A QP without a posted WQE drops its copy (counted in
//! `raw_no_wqe`); a packet no such QP exists for is counted in `raw_no_qp`. A copy longer than
//! the WQE's buffer completes the WQE with `IBV_WC_LOC_LEN_ERR`, a protection failure with
//! `IBV_WC_LOC_PROT_ERR`; the QP keeps running. A successful receive completion carries the
//! byte count, LRH:SLID, LRH:SL and the DLID path bits; `src_qp` is 0 (raw packets name no
//! source QP).
//!
//! [`PostSendError::RawIpv6IbaNextHeader`]: crate::error::PostSendError::RawIpv6IbaNextHeader
//! [`PostSendError::RawDatagramTooLong`]: crate::error::PostSendError::RawDatagramTooLong

use softib_wire::grh::{self, Grh};
use softib_wire::lrh::{self, Lnh, Lrh};
use softib_wire::native::{NativeBody, VCRC_LEN};
use softib_wire::rwh::{self, Rwh};
use softib_wire::Qpn;

use super::datapath::{lmc_mask, lrh_for};
use super::Hca;
use crate::error::PostSendError;
use crate::verbs::cq::WorkCompletion;
use crate::verbs::device::PortConfig;
use crate::verbs::qp::Qp;
use crate::verbs::types::{QpState, QpType, WcOpcode, WcStatus};
use crate::verbs::wr::{SendWqe, SendWr, WqePayload};

/// Bytes a packet may have beyond the MTU (IBA 7.7.8: the largest packet is MTU + 124 bytes).
pub(crate) const MAX_PACKET_OVERHEAD: u32 = 124;

/// The IPv6 Next Header value of an IBA transport header (BTH follows; C9-208).
pub(crate) const NEXT_HEADER_IBA: u8 = grh::NXT_HDR_IBA;

/// Offset of the Next Header byte in an IPv6 header.
const NEXT_HEADER_AT: usize = 6;

/// Length of the header a raw message starts with.
pub const fn raw_header_len(qp_type: QpType) -> u32 {
    match qp_type {
        QpType::RawIpv6 => grh::LEN as u32,
        _ => rwh::LEN as u32,
    }
}

/// Largest raw message (header included, before padding) on `port`: LRH + message + pad may
/// be at most the active MTU + 124 bytes (o9-148; see the module docs for the PMTU
/// contradiction of the seeds).
pub fn raw_max_message(port: &PortConfig) -> u32 {
    port.active_mtu.bytes() + MAX_PACKET_OVERHEAD - lrh::LEN as u32
}

impl Hca {
    /// Post-time checks of raw send WR `wr` (message of `len` bytes).
    #[cold]
    #[inline(never)]
    pub(crate) fn validate_raw_send(
        &self,
        qp: &Qp,
        index: usize,
        len: u64,
        wr: &SendWr,
    ) -> Result<(), PostSendError> {
        let header = raw_header_len(qp.qp_type);
        if len < u64::from(header) {
            return Err(PostSendError::RawDatagramTooShort { index, len, header });
        }
        if let Some(port) = self.port(qp.attr.port_num.max(1)) {
            let max = raw_max_message(port);
            if len > u64::from(max) {
                return Err(PostSendError::RawDatagramTooLong { index, len, max });
            }
        }
        if qp.qp_type == QpType::RawIpv6 {
            // The header is in memory the WR names: read it now if the keys allow (the data
            // path checks the keys again, and the header, when the WR executes).
            let payload = match &wr.inline_data {
                Some(d) => WqePayload::Inline(d.clone()),
                None => WqePayload::Sges(wr.sg_list.clone()),
            };
            let mut h = Vec::with_capacity(grh::LEN);
            if self.gather(qp.pd, &payload, 0, grh::LEN as u32, &mut h)
                && h[NEXT_HEADER_AT] == NEXT_HEADER_IBA
            {
                return Err(PostSendError::RawIpv6IbaNextHeader {
                    index,
                    next_header: NEXT_HEADER_IBA,
                });
            }
        }
        Ok(())
    }

    /// True when a raw QP has a send WQE to execute.
    pub(crate) fn raw_has_tx_work(&self, qpn: u32) -> bool {
        self.qps
            .get(&qpn)
            .is_some_and(|qp| qp.attr.qp_state == QpState::Rts && !qp.sq.is_empty())
    }

    /// Executes the oldest send WQE of raw QP `qpn`: builds its packet into `out` (empty on
    /// entry) and completes the WQE. False when nothing was sent (no work, or the WQE failed).
    pub(crate) fn raw_next_packet(&mut self, qpn: u32, out: &mut Vec<u8>) -> bool {
        let Some(qp) = self.qps.get_mut(&qpn) else {
            return false;
        };
        if qp.attr.qp_state != QpState::Rts {
            return false;
        }
        let Some(wqe) = qp.sq.pop_front() else {
            return false;
        };
        let (pd, qp_type, port_num, send_cq) = (qp.pd, qp.qp_type, qp.attr.port_num, qp.send_cq);
        let qpn_w = Qpn::new(qpn);
        let mut data = std::mem::take(&mut self.scratch);
        data.clear();
        let status = if !self.gather(pd, &wqe.payload, 0, wqe.length, &mut data) {
            Some(WcStatus::LocProtErr)
        } else {
            self.build_raw(port_num.max(1), qp_type, &wqe, &mut data, out)
                .err()
        };
        self.scratch = data;
        let (wr_id, signaled, length) = (wqe.wr_id, wqe.signaled, wqe.length);
        self.spare.recycle(wqe.payload);
        match status {
            None => {
                if signaled {
                    let wc = WorkCompletion::new(wr_id, WcStatus::Success, WcOpcode::Send, qpn_w)
                        .with_byte_len(length);
                    let _ = self.complete_or_error(qpn_w, send_cq, wc, false);
                }
                self.check_sq_drained(qpn_w);
                true
            }
            Some(s) => {
                out.clear();
                let wc = WorkCompletion::new(wr_id, s, WcOpcode::Send, qpn_w);
                let _ = self.push_completion(send_cq, wc, false);
                // A datagram QP's send error moves it to SQE; receives go on.
                let _ = self.set_sq_error(qpn_w);
                false
            }
        }
    }

    /// Frames the raw message `data` (header first) of `wqe` into `out`.
    fn build_raw(
        &self,
        port_num: u8,
        qp_type: QpType,
        wqe: &SendWqe,
        data: &mut Vec<u8>,
        out: &mut Vec<u8>,
    ) -> Result<(), WcStatus> {
        let port = self.port(port_num).ok_or(WcStatus::LocQpOpErr)?;
        let av = wqe.ud.map(|d| d.av).ok_or(WcStatus::LocQpOpErr)?;
        let len = data.len();
        let mut l = lrh_for(port, &av);
        match qp_type {
            QpType::RawIpv6 => {
                let mut g = Grh::parse(data).map_err(|_| WcStatus::LocLenErr)?;
                if g.nxt_hdr == NEXT_HEADER_IBA {
                    // C9-208: never sent.
                    return Err(WcStatus::LocQpOpErr);
                }
                g.ip_ver = 6;
                g.pay_len = u16::try_from(len - grh::LEN).map_err(|_| WcStatus::LocLenErr)?;
                g.emit(data).map_err(|_| WcStatus::LocLenErr)?;
                l.lnh = Lnh::Ipv6;
            }
            _ => {
                let mut r = Rwh::parse(data).map_err(|_| WcStatus::LocLenErr)?;
                r.resv16 = 0;
                r.emit(data).map_err(|_| WcStatus::LocLenErr)?;
                l.lnh = Lnh::Raw;
            }
        }
        // o9-145: the payload is padded to whole words.
        data.resize(len.next_multiple_of(4), 0);
        let covered = lrh::LEN + data.len();
        if covered > port.active_mtu.bytes() as usize + MAX_PACKET_OVERHEAD as usize {
            return Err(WcStatus::LocLenErr);
        }
        l.pkt_len = (covered / 4) as u16;
        out.resize(covered + VCRC_LEN, 0);
        l.emit(out).map_err(|_| WcStatus::LocLenErr)?;
        out[lrh::LEN..covered].copy_from_slice(data);
        let v = softib_wire::vcrc::compute(&out[..covered]);
        softib_wire::vcrc::put(&mut out[covered..], v).map_err(|_| WcStatus::LocLenErr)?;
        Ok(())
    }

    /// A raw datagram received on `port_num` (framing and VCRC already checked): one copy to
    /// every raw QP of its type on the port (see the module docs).
    pub(crate) fn raw_receive(&mut self, port_num: u8, lrh: &Lrh, body: &NativeBody<'_>) {
        let mut header = [0u8; grh::LEN];
        let (qp_type, hlen, payload) = match body {
            NativeBody::RawIpv6 { ipv6, payload } => {
                let pay_len = usize::from(ipv6.pay_len);
                // The parser checked PayLen <= what follows; more than a pad beyond it is not
                // a datagram softib (or any CA padding per o9-145) would send.
                if payload.len() - pay_len >= 4 {
                    self.counters.raw_bad_length += 1;
                    return;
                }
                if ipv6.emit(&mut header).is_err() {
                    self.counters.malformed += 1;
                    return;
                }
                (QpType::RawIpv6, grh::LEN, &payload[..pay_len])
            }
            NativeBody::RawEthertype { rwh, payload } => {
                if rwh.emit(&mut header).is_err() {
                    self.counters.malformed += 1;
                    return;
                }
                (QpType::RawEthertype, rwh::LEN, *payload)
            }
            NativeBody::Iba { .. } => return,
        };
        let header = &header[..hlen];
        let path_bits = self.port(port_num).map_or(0, |p| lrh.dlid & lmc_mask(p)) as u8;
        let total = (hlen + payload.len()) as u64;
        let mut consumers = 0u32;
        for i in 0..self.qps.len() {
            let qp = &self.qps.qps[i];
            let ready = matches!(
                qp.attr.qp_state,
                QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
            );
            if qp.qp_type != qp_type || qp.attr.port_num.max(1) != port_num || !ready {
                continue;
            }
            consumers += 1;
            let (qpn, pd, cq) = (qp.qpn, qp.pd, qp.recv_cq);
            let Some(mut wqe) = self.take_recv_wqe(qpn) else {
                self.counters.raw_no_wqe += 1;
                continue;
            };
            let status = if total > wqe.length {
                WcStatus::LocLenErr
            } else {
                let sges = std::mem::take(&mut wqe.sg_list);
                let ok = self.scatter(pd, &sges, 0, header)
                    && self.scatter(pd, &sges, hlen as u64, payload);
                wqe.sg_list = sges;
                if ok {
                    WcStatus::Success
                } else {
                    WcStatus::LocProtErr
                }
            };
            let mut wc = WorkCompletion::new(wqe.wr_id, status, WcOpcode::Recv, qpn);
            self.spare.recycle_recv(std::mem::take(&mut wqe.sg_list));
            if status == WcStatus::Success {
                self.counters.raw_delivered += 1;
                wc.byte_len = total as u32;
                wc.slid = lrh.slid;
                wc.sl = lrh.sl;
                wc.dlid_path_bits = path_bits;
            }
            let _ = self.complete_or_error(qpn, cq, wc, false);
        }
        if consumers == 0 {
            self.counters.raw_no_qp += 1;
        } else {
            self.counters.rcvd_pkts += 1;
        }
    }
}
