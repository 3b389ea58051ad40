//! Transport state kept per QP by the data path, and the counters the HCA keeps for every
//! packet it drops, retries or rejects.
//!
//! The data path itself lives in `hca/` (`datapath.rs` frames packets and schedules
//! transmission and timers; `requester.rs`, `completer.rs` and `responder.rs` implement the
//! three roles of IBA 9.7 for RC; `ud.rs` the unreliable datagram service of IBA 9.8.3). It
//! runs on the `Hca` because every role touches memory
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
    /// UD: packets whose destination QP and GID disagree about multicast (DQPN 0xFFFFFF to
    /// a unicast GID, or a multicast GID with another DQPN).
    pub mcast_bad_dest: u64,
}
