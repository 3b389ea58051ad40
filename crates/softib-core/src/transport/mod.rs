//! Transport state kept per QP by the data path, and the counters the HCA keeps for every
//! packet it drops, retries or rejects.
//!
//! The data path itself lives in `hca/` (`datapath.rs` frames packets and schedules
//! transmission and timers; `requester.rs`, `completer.rs` and `responder.rs` implement the
//! three roles of IBA 9.7 for RC; `uc.rs` the requester and responder of IBA 9.8.2 for UC;
//! `ud.rs` the unreliable datagram service of IBA 9.8.3). It runs on the `Hca` because every
//! role touches memory regions, queues and completion queues that the HCA owns.

pub mod rc;

/// Counters of the data path, named after the Linux rxe hardware counters where one exists.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Packets sent (requests and responses).
    pub sent_pkts: u64,
    /// Requests built by the requester's express path or taken by the responder's
    /// ([`crate::Hca::set_express_path`]).
    pub express_requests: u64,
    /// Packets received and handed to a QP.
    pub rcvd_pkts: u64,
    /// Frames dropped because they did not parse.
    pub malformed: u64,
    /// Frames dropped because the ICRC did not match.
    pub icrc_err: u64,
    /// Packets for a QP that does not exist.
    pub no_such_qp: u64,
    /// Packets whose opcode's service does not match the QP type.
    pub wrong_service: u64,
    /// Packets with a P_Key not in the port's table.
    pub bad_pkey: u64,
    /// Packets whose addresses do not match the QP's connection.
    pub bad_address: u64,
    /// Packets dropped because the QP's state does not accept them.
    pub bad_state: u64,
    /// Responder: packets ahead of the expected PSN (sequence error).
    pub rcvd_seq_err: u64,
    /// Responder: duplicate requests.
    pub duplicate_request: u64,
    /// Responder: packets silently dropped while a sequence NAK is outstanding.
    pub out_of_seq_dropped: u64,
    /// Responder: RNR NAKs sent.
    pub rnr_nak_sent: u64,
    /// Responder: other NAKs sent.
    pub nak_sent: u64,
    /// Requester: packets retransmitted (all causes).
    pub retransmitted_pkts: u64,
    /// Requester: retries started by a transport timer expiry.
    pub retry_timeouts: u64,
    /// Requester: retries started by a NAK-PSN sequence error or an implied NAK.
    pub retry_naks: u64,
    /// Requester: RNR NAKs received.
    pub rcvd_rnr_nak: u64,
    /// Requester: responses ignored (stale, duplicate, unexpected).
    pub ignored_responses: u64,
    /// Requester: retry counter exhausted.
    pub retry_exceeded: u64,
    /// Requester: RNR retry counter exhausted.
    pub rnr_retry_exceeded: u64,
    /// Migrations to the alternate path (retry exhaustion, a peer's migration request, or
    /// software's request).
    pub path_migrations: u64,
    /// UD: packets whose DETH:Q_Key differs from the receiving QP's Q_Key (rxe
    /// `qkey_viol_cntr`; QP1 expects the GSI Q_Key 0x80010000).
    pub qkey_violation: u64,
    /// UD: packets with an opcode of the UD class other than SEND Only / SEND Only with
    /// Immediate, reserved codes included (C9-206).
    pub ud_bad_opcode: u64,
    /// UD: payloads longer than the path MTU, or that do not fit the receive WQE together
    /// with the 40-byte GRH area (C9-205). The receive WQE is not consumed.
    pub ud_bad_length: u64,
    /// UD: SENDs that found no receive WQE (C9-207: silently dropped, never an RNR NAK).
    pub ud_no_recv_wqe: u64,
    /// UD: multicast packets (DQPN 0xFFFFFF) for a group no local QP is attached to.
    pub mcast_no_member: u64,
    /// UD: packets whose destination QP and address disagree about multicast (DQPN 0xFFFFFF
    /// to a unicast GID or LID, a multicast GID or LID with another DQPN, or on native IB a
    /// multicast packet without its MGID in a GRH).
    pub mcast_bad_dest: u64,
    /// UC responder: MIDDLE / LAST packets dropped because their PSN was not the ePSN
    /// (C9-183, C9-186).
    pub uc_out_of_order: u64,
    /// UC responder: MIDDLE / LAST packets dropped for an invalid opcode sequence: no message
    /// in progress, or one of another operation (C9-187, C9-188).
    pub uc_opcode_seq_err: u64,
    /// UC responder: RDMA WRITE packets dropped because the QP does not allow remote writes
    /// (C9-168, C9-190).
    pub uc_op_not_supported: u64,
    /// UC responder: packets dropped for an invalid payload length or PadCnt (C9-195..C9-199),
    /// or RDMA WRITE packets that end outside or short of their RETH:DMALen.
    pub uc_length_err: u64,
    /// UC responder: SEND packets dropped because the message outgrew its receive buffer
    /// (C9-194).
    pub uc_recv_overflow: u64,
    /// UC responder: SEND or RDMA WRITE with immediate packets dropped for want of a receive
    /// WQE (C9-169; UC has no RNR NAK).
    pub uc_no_recv_wqe: u64,
    /// UC responder: RDMA WRITE packets dropped for an R_Key violation (C9-192.2.1).
    pub uc_rkey_violation: u64,
    /// UC responder: packets dropped on a local error placing their payload (a receive WQE
    /// whose buffer does not pass its L_Key check).
    pub uc_local_err: u64,
    /// UC responder: messages dropped after the responder had accepted some of their packets,
    /// or whose FIRST / ONLY packet it dropped. Messages lost without a trace (every packet
    /// lost) are not counted here; `uc_psn_gaps` shows them.
    pub uc_msgs_dropped: u64,
    /// UC responder: request packets whose PSN was not the ePSN (o9-131): each is a sign that
    /// one or more packets, and so messages, were lost (or arrived out of order).
    pub uc_psn_gaps: u64,
    /// Native IB: packets dropped because the VCRC did not match.
    pub vcrc_err: u64,
    /// Native IB: packets dropped because LRH:PktLen disagrees with the packet's length.
    pub bad_pkt_len: u64,
    /// Native IB: packets whose DLID is not one of the port's LIDs (outside base LID ..
    /// base LID + 2^LMC, a multicast LID no local QP is attached under, or reserved LID 0).
    pub wrong_dlid: u64,
    /// Raw IPv6 packets whose IPv6 Next Header names an IBA transport header (C9-208).
    pub raw_iba_next_header: u64,
    /// Raw IPv6 packets whose IPv6 PayLen disagrees with the packet (more than the pad).
    pub raw_bad_length: u64,
    /// Raw packets no raw QP of their type on the port was ready to consume.
    pub raw_no_qp: u64,
    /// Raw packets a raw QP dropped because it had no posted receive WQE (one count per QP).
    pub raw_no_wqe: u64,
    /// Raw datagrams placed into a raw QP's receive WQE (one count per QP that took a copy).
    pub raw_delivered: u64,
    /// XRC target: requests whose XRCETH names no XRC SRQ of the target's XRC domain (an
    /// unknown SRQ number, an SRQ that is not an XRC SRQ, one of another domain, or within a
    /// message one other than the message's). New requests are answered with NAK-Invalid RD
    /// Request; duplicates are dropped silently.
    pub xrc_bad_srq: u64,
    /// XRC target: delegations emitted, one per request packet (and per message given up)
    /// whose XRCETH names an XRC SRQ another HCA publishes in the target's shared domain
    /// ([`crate::Hca::poll_delegation`]).
    pub xrc_delegated: u64,
    /// XRC SRQ owner: delegations taken ([`crate::Hca::handle_delegation`]).
    pub xrc_delegations_in: u64,
    /// XRC SRQ owner: delegations dropped: malformed, for no published XRC SRQ of this HCA
    /// (destroyed meanwhile), or a packet of no message under way.
    pub xrc_delegations_dropped: u64,
    /// RD EE context: requests for a QP that is not an RD QP able to receive, is of another
    /// RDD than the EE context, or holds another Q_Key (NAK-Invalid RD Request, C9-127, o9-38).
    pub rd_bad_dest: u64,
    /// RD EE context: packets ignored because their QPNs are not those they must name: new
    /// MIDDLE / LAST packets not naming the QPs of the latest FIRST, duplicates not naming
    /// those of the latest new request (o9-38.a1), responses not addressed to the QP whose
    /// message the EE context is sending (o9-79.a1).
    pub rd_qpn_mismatch: u64,
}

impl Counters {
    /// Every counter by name, in declaration order.
    pub fn named(&self) -> [(&'static str, u64); 52] {
        [
            ("sent_pkts", self.sent_pkts),
            ("rcvd_pkts", self.rcvd_pkts),
            ("malformed", self.malformed),
            ("icrc_err", self.icrc_err),
            ("no_such_qp", self.no_such_qp),
            ("wrong_service", self.wrong_service),
            ("bad_pkey", self.bad_pkey),
            ("bad_address", self.bad_address),
            ("bad_state", self.bad_state),
            ("rcvd_seq_err", self.rcvd_seq_err),
            ("duplicate_request", self.duplicate_request),
            ("out_of_seq_dropped", self.out_of_seq_dropped),
            ("rnr_nak_sent", self.rnr_nak_sent),
            ("nak_sent", self.nak_sent),
            ("retransmitted_pkts", self.retransmitted_pkts),
            ("retry_timeouts", self.retry_timeouts),
            ("retry_naks", self.retry_naks),
            ("rcvd_rnr_nak", self.rcvd_rnr_nak),
            ("ignored_responses", self.ignored_responses),
            ("retry_exceeded", self.retry_exceeded),
            ("rnr_retry_exceeded", self.rnr_retry_exceeded),
            ("path_migrations", self.path_migrations),
            ("qkey_violation", self.qkey_violation),
            ("ud_bad_opcode", self.ud_bad_opcode),
            ("ud_bad_length", self.ud_bad_length),
            ("ud_no_recv_wqe", self.ud_no_recv_wqe),
            ("mcast_no_member", self.mcast_no_member),
            ("mcast_bad_dest", self.mcast_bad_dest),
            ("uc_out_of_order", self.uc_out_of_order),
            ("uc_opcode_seq_err", self.uc_opcode_seq_err),
            ("uc_op_not_supported", self.uc_op_not_supported),
            ("uc_length_err", self.uc_length_err),
            ("uc_recv_overflow", self.uc_recv_overflow),
            ("uc_no_recv_wqe", self.uc_no_recv_wqe),
            ("uc_rkey_violation", self.uc_rkey_violation),
            ("uc_local_err", self.uc_local_err),
            ("uc_msgs_dropped", self.uc_msgs_dropped),
            ("uc_psn_gaps", self.uc_psn_gaps),
            ("vcrc_err", self.vcrc_err),
            ("bad_pkt_len", self.bad_pkt_len),
            ("wrong_dlid", self.wrong_dlid),
            ("raw_iba_next_header", self.raw_iba_next_header),
            ("raw_bad_length", self.raw_bad_length),
            ("raw_no_qp", self.raw_no_qp),
            ("raw_no_wqe", self.raw_no_wqe),
            ("raw_delivered", self.raw_delivered),
            ("xrc_bad_srq", self.xrc_bad_srq),
            ("xrc_delegated", self.xrc_delegated),
            ("xrc_delegations_in", self.xrc_delegations_in),
            ("xrc_delegations_dropped", self.xrc_delegations_dropped),
            ("rd_bad_dest", self.rd_bad_dest),
            ("rd_qpn_mismatch", self.rd_qpn_mismatch),
        ]
    }
}
