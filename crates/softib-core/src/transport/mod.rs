//! Transport state kept per QP by the data path, and the counters the HCA keeps for every
//! packet it drops, retries or rejects.
//!
//! The data path itself lives in `hca/` (`datapath.rs` frames packets and schedules
//! transmission and timers; `requester.rs`, `completer.rs` and `responder.rs` implement the
//! three roles of IBA 9.7 for RC). It runs on the `Hca` because every role touches memory
//! regions, queues and completion queues that the HCA owns.

pub mod rc;

/// Counters of the data path, named after the Linux rxe hardware counters where one exists.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Packets sent (requests and responses).
    pub sent_pkts: u64,
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
    /// Native IB: packets dropped because the VCRC did not match.
    pub vcrc_err: u64,
    /// Native IB: packets dropped because LRH:PktLen disagrees with the packet's length.
    pub bad_pkt_len: u64,
    /// Native IB: packets whose DLID is not one of the port's LIDs (outside base LID ..
    /// base LID + 2^LMC, a multicast LID, or reserved LID 0).
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
}

impl Counters {
    /// Every counter by name, in declaration order.
    pub fn named(&self) -> [(&'static str, u64); 29] {
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
            ("vcrc_err", self.vcrc_err),
            ("bad_pkt_len", self.bad_pkt_len),
            ("wrong_dlid", self.wrong_dlid),
            ("raw_iba_next_header", self.raw_iba_next_header),
            ("raw_bad_length", self.raw_bad_length),
            ("raw_no_qp", self.raw_no_qp),
            ("raw_no_wqe", self.raw_no_wqe),
            ("raw_delivered", self.raw_delivered),
        ]
    }
}
