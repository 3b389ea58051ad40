//! The Communication Manager agent (IBA chapter 12): connects, rejects and disconnects RC and
//! UC queue pairs, and resolves Service IDs to UD queue pairs (SIDR), by exchanging CM MADs
//! ([`softib_wire::cm`]) with the peer's agent on QP1.
//!
//! Sans-IO like the rest of the core: the agent takes calls from its consumer (`connect`,
//! `listen`, `accept`, `reject`, `establish`, `disconnect`, SIDR), received MADs
//! ([`CmAgent::on_mad`]) and time ([`CmAgent::handle_timeout`]); it gives MADs to send
//! ([`CmAgent::poll_transmit`], each with the peer's GID: the driver sends it as a UD SEND to
//! the peer's QP1 with the GSI Q_Key), events for the consumer ([`CmAgent::poll_event`]) and
//! its next deadline ([`CmAgent::poll_timeout`]). It never touches a QP: moving the QP
//! through its states with the values a REQ/REP carries is the consumer's (librdmacm's) part,
//! as with the kernel's CM.
//!
//! Connection establishment (IBA 12.6, 12.9):
//!
//! ```text
//!  active                         passive
//!  connect ──REQ──────────────▶  ConnectRequest event     (REQ retried on timeout)
//!          ◀───────────MRA──────  send_mra (more time)
//!          ◀───────────REP──────  accept                  (REP retried on timeout)
//!  ConnectReply event
//!  establish ──RTU─────────────▶ Established event
//!  (Established at once)
//!  disconnect ──DREQ───────────▶ DisconnectRequest event  (DREQ retried on timeout)
//!          ◀───────────DREP─────  disconnect
//!  Disconnected; both sides wait out TimeWait, then TimewaitExit.
//! ```
//!
//! Retries, duplicates and stale state (IBA 12.9.7, 12.9.8): a request is resent when its
//! response does not come within twice the packet lifetime plus the peer's CM response time,
//! up to `max_cm_retries` times; then the connection fails with a REJ (reason Timeout) to the
//! peer and an [`CmEvent::Unreachable`] to the consumer. A repeated REQ finds the connection
//! it already made (by the sender's Communication ID and CA GUID) and brings back the MRA or
//! REP sent for it; a repeated REP brings back the RTU; a repeated DREQ the DREP. A REQ from a
//! peer QP that is still connected here is refused as a stale connection.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::Duration;

use softib_wire::cm::{self, msg_code, rej_reason, service_type, sidr_status, CmMad, CmMessage};
use softib_wire::mad;
use softib_wire::{Psn, Qpn};

use crate::time::Instant;

mod port;
pub use port::{CmPort, CmPortError};

#[cfg(test)]
mod tests;

pub use crate::verbs::types::Gid;

/// One connection (or SIDR exchange) of this agent: its Local Communication ID (or SIDR
/// Request ID) on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CmId(pub u32);

/// A listener: a Service ID this agent answers for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ListenId(pub u32);

/// The agent's settings.
#[derive(Debug, Clone)]
pub struct CmConfig {
    /// This port's GID (the REQ's primary local GID; the peer answers to it).
    pub local_gid: Gid,
    /// This CA's GUID (REQ/REP Local CA GUID; with the Communication ID it names a connection).
    pub ca_guid: u64,
    /// First Communication ID handed out (the driver picks it at random, so that a restarted
    /// process is not taken for its predecessor).
    pub first_comm_id: u32,
    /// The high byte every Communication ID (and SIDR Request ID) of this agent carries, when
    /// several agents share one port (one per process of a host-wide device): a MAD that
    /// names the ID reaches its agent by it. `None`: IDs over the whole 32-bit space.
    pub comm_id_prefix: Option<u8>,
    /// This agent's CM response timeout, the exponent t of 4.096 us * 2^t (sent in the REQ
    /// as Remote CM Response Timeout and used as the peer's when waiting). rdma_cm uses 20.
    pub cm_response_timeout: u8,
    /// How often a request is resent before the connection fails. rdma_cm uses 15.
    pub max_cm_retries: u8,
    /// Packet lifetime of the path (the wait for a response adds it twice).
    pub packet_lifetime: Duration,
    /// How long a closed connection keeps its identity (IBA 12.9.8.4).
    pub timewait: Duration,
    /// How long a REQ or SIDR_REQ for a Service ID nobody listens on waits for a listener
    /// before it is refused (REJ Invalid Service ID, SIDR_REP "not supported"). Zero refuses
    /// at once, as the Linux CM does; a short wait lets a connect that races the peer's
    /// listen through (the answer may take up to the response timeout anyway).
    pub unlistened_grace: Duration,
}

impl CmConfig {
    /// The defaults rdma_cm uses (response timeout 20, 15 retries), 1 ms packet lifetime,
    /// 1 s of TimeWait.
    pub fn new(local_gid: Gid, ca_guid: u64, first_comm_id: u32) -> CmConfig {
        CmConfig {
            local_gid,
            ca_guid,
            first_comm_id,
            comm_id_prefix: None,
            cm_response_timeout: 20,
            max_cm_retries: 15,
            packet_lifetime: Duration::from_millis(1),
            timewait: Duration::from_secs(1),
            unlistened_grace: Duration::ZERO,
        }
    }
}

/// `n` with its high byte replaced by `prefix`, if there is one ([`CmConfig::comm_id_prefix`]).
fn with_prefix(prefix: Option<u8>, n: u32) -> u32 {
    match prefix {
        Some(p) => (u32::from(p) << 24) | (n & 0x00FF_FFFF),
        None => n,
    }
}

/// The Service ID a parked request asks for.
fn parked_service(m: &CmMessage) -> Option<u64> {
    match m {
        CmMessage::Req(r) => Some(r.service_id),
        CmMessage::SidrReq(r) => Some(r.service_id),
        _ => None,
    }
}

/// 4.096 us * 2^t: the IBA's encoding of timeouts (t is 5 bits; larger values saturate).
pub fn timeout_duration(t: u8) -> Duration {
    Duration::from_nanos(4096u64 << t.min(31))
}

/// The transport service a connection carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmService {
    /// Reliable Connection.
    Rc,
    /// Unreliable Connection.
    Uc,
}

/// What the active side asks for (`connect`): the REQ's fields.
#[derive(Debug, Clone)]
pub struct ConnectParams {
    /// The service the peer listens on.
    pub service_id: u64,
    /// The peer port's GID.
    pub peer: Gid,
    /// RC or UC.
    pub service: CmService,
    /// The local QP that is to be connected.
    pub qpn: Qpn,
    /// The REQ's Starting PSN: the first PSN the passive side sends, so the local receive
    /// queue's first expected PSN (the Linux CM's reading: its passive side takes the REQ's
    /// Starting PSN as its send queue's, `cm_req_handler`).
    pub starting_psn: Psn,
    /// RDMA READ / atomic requests this side accepts at once.
    pub responder_resources: u8,
    /// RDMA READ / atomic requests this side issues at once.
    pub initiator_depth: u8,
    /// Transport retry count (3 bits).
    pub retry_count: u8,
    /// RNR retry count (3 bits; 7 is infinite).
    pub rnr_retry_count: u8,
    /// Path MTU (1: 256 ... 5: 4096).
    pub path_mtu: u8,
    /// Partition key.
    pub pkey: u16,
    /// The local QP receives from an SRQ.
    pub srq: bool,
    /// Local ACK timeout of the path (5 bits).
    pub local_ack_timeout: u8,
    /// Traffic class of the path.
    pub traffic_class: u8,
    /// Hop limit of the path.
    pub hop_limit: u8,
    /// Flow label of the path (20 bits).
    pub flow_label: u32,
    /// Service level of the path (4 bits).
    pub sl: u8,
    /// Private data for the peer (at most 92 bytes).
    pub private_data: Vec<u8>,
}

impl ConnectParams {
    /// An RC connection of `qpn` (first PSN `starting_psn`) to `service_id` at `peer`, with the
    /// values rdma_cm uses when the application leaves them alone: one RDMA READ / atomic each
    /// way, retry and RNR retry counts 7, path MTU 1024, the default P_Key, local ACK timeout
    /// 14, hop limit 64, no private data. Callers change fields with struct update syntax.
    pub fn rc(service_id: u64, peer: Gid, qpn: Qpn, starting_psn: Psn) -> ConnectParams {
        ConnectParams {
            service_id,
            peer,
            service: CmService::Rc,
            qpn,
            starting_psn,
            responder_resources: 1,
            initiator_depth: 1,
            retry_count: 7,
            rnr_retry_count: 7,
            path_mtu: 3,
            pkey: 0xffff,
            srq: false,
            local_ack_timeout: 14,
            traffic_class: 0,
            hop_limit: 64,
            flow_label: 0,
            sl: 0,
            private_data: Vec::new(),
        }
    }
}

/// What the passive side answers (`accept`): the REP's fields.
#[derive(Debug, Clone, Default)]
pub struct AcceptParams {
    /// The local QP that is connected.
    pub qpn: Qpn,
    /// The REP's Starting PSN: the first PSN the active side sends, so the local receive
    /// queue's first expected PSN (as the Linux CM reads it).
    pub starting_psn: Psn,
    /// RDMA READ / atomic requests this side accepts at once.
    pub responder_resources: u8,
    /// RDMA READ / atomic requests this side issues at once.
    pub initiator_depth: u8,
    /// Target ACK delay (5 bits).
    pub target_ack_delay: u8,
    /// RNR retry count (3 bits).
    pub rnr_retry_count: u8,
    /// The local QP receives from an SRQ.
    pub srq: bool,
    /// Private data for the peer (at most 196 bytes).
    pub private_data: Vec<u8>,
}

/// What happened, for the consumer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CmEvent {
    /// A REQ for a listened Service ID: `accept`, `reject` or `send_mra` it.
    ConnectRequest {
        /// The new connection.
        id: CmId,
        /// The listener it came to.
        listener: ListenId,
        /// The peer port's GID (the REQ's primary local GID).
        peer: Gid,
        /// The REQ as received.
        req: Box<cm::Req>,
    },
    /// The REP to our REQ: move the QP to RTR/RTS with its values, then `establish` (or
    /// `reject`).
    ConnectReply {
        /// The connection.
        id: CmId,
        /// The REP as received.
        rep: Box<cm::Rep>,
    },
    /// The connection is established (passive: the RTU came; active: `establish` sent it).
    Established {
        /// The connection.
        id: CmId,
    },
    /// The peer refused (or a request of ours reached no one who knows it).
    Rejected {
        /// The connection.
        id: CmId,
        /// The REJ as received.
        rej: Box<cm::Rej>,
    },
    /// Our REQ or REP went unanswered through every retry (or the peer's agent vanished).
    Unreachable {
        /// The connection.
        id: CmId,
    },
    /// The peer asked to disconnect: `disconnect` answers with a DREP.
    DisconnectRequest {
        /// The connection.
        id: CmId,
        /// The DREQ's private data.
        private_data: Box<[u8; 220]>,
    },
    /// The connection is closed (DREP received, or our DREQ went unanswered); TimeWait runs.
    Disconnected {
        /// The connection.
        id: CmId,
    },
    /// TimeWait is over: the connection is forgotten and its QP may be reused.
    TimewaitExit {
        /// The connection.
        id: CmId,
    },
    /// A SIDR_REQ for a listened Service ID: `sidr_reply` answers it.
    SidrRequest {
        /// The exchange.
        id: CmId,
        /// The listener it came to.
        listener: ListenId,
        /// The requester's GID.
        peer: Gid,
        /// The SIDR_REQ as received.
        req: Box<cm::SidrReq>,
    },
    /// The SIDR_REP to our SIDR_REQ (or `Unreachable` if none came).
    SidrReply {
        /// The exchange.
        id: CmId,
        /// The SIDR_REP as received.
        rep: Box<cm::SidrRep>,
    },
}

/// A MAD to send: the driver sends it to QP1 of the port with GID `peer`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutMad {
    /// The destination port.
    pub peer: Gid,
    /// The 256-byte MAD.
    pub mad: [u8; mad::MAD_LEN],
}

/// Why a consumer call was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CmError {
    /// No such connection (or it is gone).
    #[error("no CM connection {0:?}")]
    UnknownId(CmId),
    /// The call does not fit the connection's state.
    #[error("CM connection {id:?} is {state:?}, not ready for {call}")]
    BadState {
        /// The connection.
        id: CmId,
        /// Its state.
        state: State,
        /// The call.
        call: &'static str,
    },
    /// More private data than the message carries.
    #[error("{len} bytes of private data; the {msg} carries {max}")]
    PrivateDataTooLong {
        /// Bytes given.
        len: usize,
        /// Bytes the message has room for.
        max: usize,
        /// The message.
        msg: &'static str,
    },
    /// Another listener has the Service ID.
    #[error("service ID {0:#x} is already listened on")]
    ServiceIdInUse(u64),
    /// No such listener.
    #[error("no listener {0:?}")]
    UnknownListener(ListenId),
}

/// A connection's state (IBA 12.9.6, the names Linux's CM uses).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Active: REQ sent, waiting for REP (or MRA/REJ).
    ReqSent,
    /// Active: the peer sent an MRA for our REQ: waiting longer, without resending.
    MraReqRcvd,
    /// Passive: REQ received, the consumer decides.
    ReqRcvd,
    /// Passive: MRA sent for the REQ, the consumer still decides.
    MraReqSent,
    /// Passive: REP sent, waiting for RTU.
    RepSent,
    /// Passive: the peer sent an MRA for our REP.
    MraRepRcvd,
    /// Active: REP received, the consumer readies the QP.
    RepRcvd,
    /// Connected.
    Established,
    /// DREQ sent, waiting for DREP.
    DreqSent,
    /// DREQ received, the consumer answers.
    DreqRcvd,
    /// Closed; the identity is kept until TimeWait ends.
    TimeWait,
    /// SIDR_REQ sent, waiting for SIDR_REP.
    SidrReqSent,
    /// SIDR_REQ received, the consumer answers.
    SidrReqRcvd,
}

struct Conn {
    state: State,
    peer: Gid,
    remote_comm_id: u32,
    remote_ca_guid: u64,
    /// The Service ID (SIDR: what the answer names).
    service_id: u64,
    local_qpn: Qpn,
    remote_qpn: Qpn,
    /// TransactionID of the exchange in progress.
    tid: u64,
    /// The last message sent, for retries and for answering duplicates.
    last_sent: Option<[u8; mad::MAD_LEN]>,
    retries_left: u8,
    deadline: Option<Instant>,
    /// How long a response to our requests may take.
    response_wait: Duration,
}

impl Conn {
    /// A connection (or SIDR exchange) with `peer` in `state`, nothing sent yet; the other
    /// fields are filled as messages come.
    fn new(
        state: State,
        peer: Gid,
        service_id: u64,
        tid: u64,
        retries: u8,
        wait: Duration,
    ) -> Conn {
        Conn {
            state,
            peer,
            remote_comm_id: 0,
            remote_ca_guid: 0,
            service_id,
            local_qpn: Qpn::new(0),
            remote_qpn: Qpn::new(0),
            tid,
            last_sent: None,
            retries_left: retries,
            deadline: None,
            response_wait: wait,
        }
    }
}

/// The Communication Manager agent of one port.
pub struct CmAgent {
    cfg: CmConfig,
    next_comm_id: u32,
    next_tid: u64,
    next_listen: u32,
    conns: BTreeMap<CmId, Conn>,
    listeners: BTreeMap<u64, ListenId>,
    /// Connections by the peer's (Communication ID, CA GUID): duplicate REQs.
    by_remote: HashMap<(u32, u64), CmId>,
    /// Connected peer QPs (peer GID, QPN): stale REQs.
    by_remote_qp: HashMap<(Gid, u32), CmId>,
    out: VecDeque<OutMad>,
    events: VecDeque<CmEvent>,
    /// Requests for Service IDs nobody listens on yet, until `unlistened_grace` passes.
    parked: Vec<Parked>,
}

/// A request waiting for a listener.
struct Parked {
    until: Instant,
    from: Gid,
    tid: u64,
    msg: CmMessage,
}

/// Most requests kept waiting for a listener at once (more are refused at once).
const MAX_PARKED: usize = 64;

impl CmAgent {
    /// An agent with nothing listened on and no connection.
    pub fn new(cfg: CmConfig) -> CmAgent {
        CmAgent {
            next_comm_id: cfg.first_comm_id.max(1),
            next_tid: u64::from(cfg.first_comm_id) << 32,
            next_listen: 1,
            cfg,
            conns: BTreeMap::new(),
            listeners: BTreeMap::new(),
            by_remote: HashMap::new(),
            by_remote_qp: HashMap::new(),
            out: VecDeque::new(),
            events: VecDeque::new(),
            parked: Vec::new(),
        }
    }

    /// The agent's settings.
    pub fn config(&self) -> &CmConfig {
        &self.cfg
    }

    /// The state of a connection, if the agent still knows it.
    pub fn state(&self, id: CmId) -> Option<State> {
        self.conns.get(&id).map(|c| c.state)
    }

    /// The next MAD to send.
    pub fn poll_transmit(&mut self) -> Option<OutMad> {
        self.out.pop_front()
    }

    /// The next event for the consumer.
    pub fn poll_event(&mut self) -> Option<CmEvent> {
        self.events.pop_front()
    }

    /// When [`CmAgent::handle_timeout`] is next due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let parked = self.parked.iter().map(|p| p.until);
        self.conns
            .values()
            .filter_map(|c| c.deadline)
            .chain(parked)
            .min()
    }

    /// Answers REQs and SIDR_REQs for `service_id`.
    pub fn listen(&mut self, service_id: u64) -> Result<ListenId, CmError> {
        if self.listeners.contains_key(&service_id) {
            return Err(CmError::ServiceIdInUse(service_id));
        }
        let l = ListenId(self.next_listen);
        self.next_listen += 1;
        self.listeners.insert(service_id, l);
        // Requests that came before the listener.
        let (now_listened, rest): (Vec<Parked>, Vec<Parked>) = std::mem::take(&mut self.parked)
            .into_iter()
            .partition(|p| parked_service(&p.msg) == Some(service_id));
        self.parked = rest;
        for p in now_listened {
            match p.msg {
                CmMessage::Req(req) => self.on_req(p.until, p.from, p.tid, req),
                CmMessage::SidrReq(req) => self.on_sidr_req(p.until, p.from, p.tid, req),
                _ => {}
            }
        }
        Ok(l)
    }

    /// Keeps a request for an unlistened Service ID for `unlistened_grace`; false if it is to
    /// be refused now.
    fn park(&mut self, now: Instant, from: Gid, tid: u64, msg: &CmMessage) -> bool {
        if self.cfg.unlistened_grace.is_zero() {
            return false;
        }
        let same = |p: &Parked| match (&p.msg, msg) {
            (CmMessage::Req(a), CmMessage::Req(b)) => {
                a.local_comm_id == b.local_comm_id && a.local_ca_guid == b.local_ca_guid
            }
            (CmMessage::SidrReq(a), CmMessage::SidrReq(b)) => {
                a.request_id == b.request_id && p.from == from
            }
            _ => false,
        };
        if let Some(p) = self.parked.iter_mut().find(|p| same(p)) {
            // A repeat: keep the first deadline.
            p.tid = tid;
            return true;
        }
        if self.parked.len() >= MAX_PARKED {
            return false;
        }
        self.parked.push(Parked {
            until: now.saturating_add(self.cfg.unlistened_grace),
            from,
            tid,
            msg: msg.clone(),
        });
        true
    }

    /// Stops answering for a listener's Service ID (connections it made stay).
    pub fn unlisten(&mut self, l: ListenId) -> Result<(), CmError> {
        let before = self.listeners.len();
        self.listeners.retain(|_, v| *v != l);
        if self.listeners.len() == before {
            return Err(CmError::UnknownListener(l));
        }
        Ok(())
    }

    /// Sends a REQ: the active side of a connection.
    pub fn connect(&mut self, now: Instant, p: &ConnectParams) -> Result<CmId, CmError> {
        let mut req = cm::Req {
            service_id: p.service_id,
            local_ca_guid: self.cfg.ca_guid,
            local_qpn: p.qpn,
            responder_resources: p.responder_resources,
            initiator_depth: p.initiator_depth,
            remote_cm_response_timeout: self.cfg.cm_response_timeout,
            transport_service_type: match p.service {
                CmService::Rc => service_type::RC,
                CmService::Uc => service_type::UC,
            },
            starting_psn: p.starting_psn,
            local_cm_response_timeout: self.cfg.cm_response_timeout,
            retry_count: p.retry_count,
            partition_key: p.pkey,
            path_mtu: p.path_mtu,
            rnr_retry_count: p.rnr_retry_count,
            max_cm_retries: self.cfg.max_cm_retries.min(15),
            srq: p.srq,
            primary_local_lid: 0xffff,
            primary_remote_lid: 0xffff,
            primary_local_gid: self.cfg.local_gid.0,
            primary_remote_gid: p.peer.0,
            primary_flow_label: p.flow_label,
            primary_traffic_class: p.traffic_class,
            primary_hop_limit: p.hop_limit,
            primary_sl: p.sl,
            primary_subnet_local: true,
            primary_local_ack_timeout: p.local_ack_timeout,
            ..cm::Req::default()
        };
        copy_private(&mut req.private_data, &p.private_data, "REQ")?;
        let id = self.new_id();
        req.local_comm_id = id.0;
        let tid = self.new_tid();
        let wait = self.response_wait(self.cfg.cm_response_timeout);
        let retries = self.cfg.max_cm_retries;
        self.conns.insert(
            id,
            Conn {
                local_qpn: p.qpn,
                ..Conn::new(State::ReqSent, p.peer, p.service_id, tid, retries, wait)
            },
        );
        self.send_request(now, id, CmMessage::Req(req));
        Ok(id)
    }

    /// Answers a REQ with a REP (the passive side accepts).
    pub fn accept(&mut self, now: Instant, id: CmId, p: &AcceptParams) -> Result<(), CmError> {
        let c = self.conn(id, "accept", &[State::ReqRcvd, State::MraReqSent])?;
        let mut rep = cm::Rep {
            local_comm_id: id.0,
            remote_comm_id: c.remote_comm_id,
            local_qpn: p.qpn,
            starting_psn: p.starting_psn,
            responder_resources: p.responder_resources,
            initiator_depth: p.initiator_depth,
            target_ack_delay: p.target_ack_delay,
            rnr_retry_count: p.rnr_retry_count,
            srq: p.srq,
            local_ca_guid: self.cfg.ca_guid,
            ..cm::Rep::default()
        };
        copy_private(&mut rep.private_data, &p.private_data, "REP")?;
        let c = self.conns.get_mut(&id).expect("checked");
        c.local_qpn = p.qpn;
        c.state = State::RepSent;
        self.send_request(now, id, CmMessage::Rep(rep));
        Ok(())
    }

    /// Asks the peer for more time to answer its REQ (an MRA with `service_timeout`, the
    /// exponent of 4.096 us * 2^t).
    pub fn send_mra(&mut self, id: CmId, service_timeout: u8) -> Result<(), CmError> {
        let c = self.conn(id, "send_mra", &[State::ReqRcvd, State::MraReqSent])?;
        let mra = cm::Mra {
            local_comm_id: id.0,
            remote_comm_id: c.remote_comm_id,
            message_mraed: msg_code::REQ,
            service_timeout,
            ..cm::Mra::default()
        };
        let tid = c.tid;
        self.conns.get_mut(&id).expect("checked").state = State::MraReqSent;
        self.send_reply(id, tid, CmMessage::Mra(mra));
        Ok(())
    }

    /// Refuses a REQ (passive) or a REP (active) with `reason` ([`rej_reason`]; rdma_reject
    /// uses Consumer Defined).
    pub fn reject(
        &mut self,
        now: Instant,
        id: CmId,
        reason: u16,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        let c = self.conn(
            id,
            "reject",
            &[State::ReqRcvd, State::MraReqSent, State::RepRcvd],
        )?;
        let mut rej = cm::Rej {
            local_comm_id: id.0,
            remote_comm_id: c.remote_comm_id,
            message_rejected: if c.state == State::RepRcvd {
                msg_code::REP
            } else {
                msg_code::REQ
            },
            reason,
            ..cm::Rej::default()
        };
        copy_private(&mut rej.private_data, private_data, "REJ")?;
        let (peer, tid) = (c.peer, c.tid);
        self.emit(peer, tid, &CmMessage::Rej(rej));
        self.enter_timewait(now, id);
        Ok(())
    }

    /// The active side's QP is ready: sends the RTU; the connection is established.
    pub fn establish(&mut self, id: CmId, private_data: &[u8]) -> Result<(), CmError> {
        let c = self.conn(id, "establish", &[State::RepRcvd])?;
        let mut rtu = cm::Rtu {
            local_comm_id: id.0,
            remote_comm_id: c.remote_comm_id,
            ..cm::Rtu::default()
        };
        copy_private(&mut rtu.private_data, private_data, "RTU")?;
        let tid = c.tid;
        self.send_reply(id, tid, CmMessage::Rtu(rtu));
        self.set_established(id);
        self.events.push_back(CmEvent::Established { id });
        Ok(())
    }

    /// The consumer saw traffic on the passive side's QP before the RTU came
    /// (IBV_EVENT_COMM_EST, `rdma_notify`): the connection is established as if it had come
    /// (IBA 12.6.6, a lost RTU); the REP is no longer resent.
    pub fn notify_established(&mut self, id: CmId) -> Result<(), CmError> {
        self.conn(
            id,
            "notify_established",
            &[State::RepSent, State::MraRepRcvd],
        )?;
        self.set_established(id);
        self.events.push_back(CmEvent::Established { id });
        Ok(())
    }

    /// Sends a DREQ (established) or answers the peer's with a DREP (DREQ received).
    pub fn disconnect(
        &mut self,
        now: Instant,
        id: CmId,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        let c = self.conn(
            id,
            "disconnect",
            &[
                State::Established,
                State::DreqRcvd,
                State::RepSent,
                State::MraRepRcvd,
            ],
        )?;
        if c.state == State::DreqRcvd {
            let mut drep = cm::Drep {
                local_comm_id: id.0,
                remote_comm_id: c.remote_comm_id,
                ..cm::Drep::default()
            };
            copy_private(&mut drep.private_data, private_data, "DREP")?;
            let tid = c.tid;
            self.send_reply(id, tid, CmMessage::Drep(drep));
            self.enter_timewait(now, id);
            return Ok(());
        }
        let mut dreq = cm::Dreq {
            local_comm_id: id.0,
            remote_comm_id: c.remote_comm_id,
            remote_qpn_eecn: c.remote_qpn,
            ..cm::Dreq::default()
        };
        copy_private(&mut dreq.private_data, private_data, "DREQ")?;
        let tid = self.new_tid();
        let c = self.conns.get_mut(&id).expect("checked");
        c.tid = tid;
        c.state = State::DreqSent;
        c.retries_left = self.cfg.max_cm_retries;
        self.forget_remote_qp(id);
        self.send_request(now, id, CmMessage::Dreq(dreq));
        Ok(())
    }

    /// Asks the peer's agent which UD QP serves `service_id`.
    pub fn sidr_request(
        &mut self,
        now: Instant,
        peer: Gid,
        service_id: u64,
        pkey: u16,
        private_data: &[u8],
    ) -> Result<CmId, CmError> {
        let mut req = cm::SidrReq {
            partition_key: pkey,
            service_id,
            ..cm::SidrReq::default()
        };
        copy_private(&mut req.private_data, private_data, "SIDR_REQ")?;
        let id = self.new_id();
        req.request_id = id.0;
        let tid = self.new_tid();
        let wait = self.response_wait(self.cfg.cm_response_timeout);
        let retries = self.cfg.max_cm_retries;
        self.conns.insert(
            id,
            Conn::new(State::SidrReqSent, peer, service_id, tid, retries, wait),
        );
        self.send_request(now, id, CmMessage::SidrReq(req));
        Ok(id)
    }

    /// Answers a SIDR_REQ: `status` ([`sidr_status`]), and on success the QP and its Q_Key.
    pub fn sidr_reply(
        &mut self,
        id: CmId,
        status: u8,
        qpn: Qpn,
        qkey: u32,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        let c = self.conn(id, "sidr_reply", &[State::SidrReqRcvd])?;
        let mut rep = cm::SidrRep {
            request_id: c.remote_comm_id,
            status,
            qpn,
            service_id: c.service_id,
            qkey,
            ..cm::SidrRep::default()
        };
        copy_private(&mut rep.private_data, private_data, "SIDR_REP")?;
        let (peer, tid) = (c.peer, c.tid);
        self.emit(peer, tid, &CmMessage::SidrRep(rep));
        self.drop_conn(id);
        Ok(())
    }

    /// Forgets a connection at once (the consumer destroyed its id): no more messages or
    /// events for it.
    pub fn destroy(&mut self, id: CmId) {
        self.drop_conn(id);
    }

    /// Takes a received MAD (the UD payload of a packet to QP1) from the port with GID `from`
    /// (the packet's source). MADs that are not CM messages, or that match no connection,
    /// are dropped or answered as the IBA says; never a panic.
    pub fn on_mad(&mut self, now: Instant, from: Gid, bytes: &[u8]) {
        let Ok(m) = CmMad::parse(bytes) else {
            return;
        };
        let tid = m.hdr.transaction_id;
        match m.msg {
            CmMessage::Req(req) => self.on_req(now, from, tid, req),
            CmMessage::Mra(mra) => self.on_mra(now, mra),
            CmMessage::Rej(rej) => self.on_rej(now, rej),
            CmMessage::Rep(rep) => self.on_rep(rep),
            CmMessage::Rtu(rtu) => self.on_rtu(rtu),
            CmMessage::Dreq(dreq) => self.on_dreq(now, tid, dreq),
            CmMessage::Drep(drep) => self.on_drep(now, drep),
            CmMessage::SidrReq(req) => self.on_sidr_req(now, from, tid, req),
            CmMessage::SidrRep(rep) => self.on_sidr_rep(rep),
            // Alternate paths (LAP/APR) are not supported: a LAP is answered by nothing,
            // and the peer's LAP times out into its own error path.
            CmMessage::Lap(_) | CmMessage::Apr(_) => {}
        }
    }

    /// Runs the timers due at `now`: resends, failures, TimeWait ends.
    pub fn handle_timeout(&mut self, now: Instant) {
        // Requests no listener came for: refused as they would have been at once (the
        // listener check fails again).
        let (expired, waiting): (Vec<Parked>, Vec<Parked>) = std::mem::take(&mut self.parked)
            .into_iter()
            .partition(|p| p.until <= now);
        self.parked = waiting;
        let grace = std::mem::replace(&mut self.cfg.unlistened_grace, Duration::ZERO);
        for p in expired {
            match p.msg {
                CmMessage::Req(req) => self.on_req(now, p.from, p.tid, req),
                CmMessage::SidrReq(req) => self.on_sidr_req(now, p.from, p.tid, req),
                _ => {}
            }
        }
        self.cfg.unlistened_grace = grace;
        let due: Vec<CmId> = self
            .conns
            .iter()
            .filter(|(_, c)| c.deadline.is_some_and(|d| d <= now))
            .map(|(&id, _)| id)
            .collect();
        for id in due {
            let Some(c) = self.conns.get_mut(&id) else {
                continue;
            };
            c.deadline = None;
            match c.state {
                State::TimeWait => {
                    self.drop_conn(id);
                    self.events.push_back(CmEvent::TimewaitExit { id });
                }
                State::ReqSent | State::RepSent | State::DreqSent | State::SidrReqSent
                    if c.retries_left > 0 =>
                {
                    c.retries_left -= 1;
                    c.deadline = Some(now.saturating_add(c.response_wait));
                    if let Some(mad) = c.last_sent {
                        let peer = c.peer;
                        self.out.push_back(OutMad { peer, mad });
                    }
                }
                State::ReqSent | State::MraReqRcvd | State::RepSent | State::MraRepRcvd => {
                    // IBA 12.9.7: a connection whose request went unanswered is rejected with
                    // reason Timeout, so that a peer that did see it lets go too.
                    let rej = cm::Rej {
                        local_comm_id: id.0,
                        remote_comm_id: c.remote_comm_id,
                        message_rejected: if matches!(c.state, State::RepSent | State::MraRepRcvd) {
                            msg_code::REP
                        } else {
                            msg_code::REQ
                        },
                        reason: rej_reason::TIMEOUT,
                        ..cm::Rej::default()
                    };
                    let (peer, tid) = (c.peer, c.tid);
                    self.emit(peer, tid, &CmMessage::Rej(rej));
                    self.enter_timewait(now, id);
                    self.events.push_back(CmEvent::Unreachable { id });
                }
                State::DreqSent => {
                    self.enter_timewait(now, id);
                    self.events.push_back(CmEvent::Disconnected { id });
                }
                State::SidrReqSent => {
                    self.drop_conn(id);
                    self.events.push_back(CmEvent::Unreachable { id });
                }
                _ => {}
            }
        }
    }

    fn on_req(&mut self, now: Instant, from: Gid, tid: u64, req: cm::Req) {
        let key = (req.local_comm_id, req.local_ca_guid);
        if let Some(&id) = self.by_remote.get(&key) {
            // A repeated REQ: bring back what was sent for it (MRA or REP); anything else
            // (still deciding, established) needs no answer.
            if let Some(c) = self.conns.get(&id) {
                if matches!(
                    c.state,
                    State::MraReqSent | State::RepSent | State::MraRepRcvd
                ) {
                    if let Some(mad) = c.last_sent {
                        self.out.push_back(OutMad { peer: c.peer, mad });
                    }
                }
            }
            return;
        }
        let peer = if req.primary_local_gid != [0; 16] {
            Gid(req.primary_local_gid)
        } else {
            from
        };
        let reject = |agent: &mut CmAgent, reason: u16| {
            let rej = cm::Rej {
                local_comm_id: 0,
                remote_comm_id: req.local_comm_id,
                message_rejected: msg_code::REQ,
                reason,
                ..cm::Rej::default()
            };
            agent.emit(peer, tid, &CmMessage::Rej(rej));
        };
        let Some(&listener) = self.listeners.get(&req.service_id) else {
            if self.park(now, from, tid, &CmMessage::Req(req.clone())) {
                return;
            }
            return reject(self, rej_reason::INVALID_SERVICE_ID);
        };
        if !matches!(
            req.transport_service_type,
            service_type::RC | service_type::UC
        ) {
            return reject(self, rej_reason::INVALID_TRANSPORT_TYPE);
        }
        if self
            .by_remote_qp
            .contains_key(&(peer, req.local_qpn.value()))
        {
            // IBA 12.9.8.3.1: the peer's QP is still connected here: a stale connection.
            return reject(self, rej_reason::STALE_CONN);
        }
        let id = self.new_id();
        let retries = self.cfg.max_cm_retries.min(req.max_cm_retries);
        let wait = self.response_wait(req.remote_cm_response_timeout);
        self.conns.insert(
            id,
            Conn {
                remote_comm_id: req.local_comm_id,
                remote_ca_guid: req.local_ca_guid,
                remote_qpn: req.local_qpn,
                ..Conn::new(State::ReqRcvd, peer, req.service_id, tid, retries, wait)
            },
        );
        self.by_remote.insert(key, id);
        self.events.push_back(CmEvent::ConnectRequest {
            id,
            listener,
            peer,
            req: Box::new(req),
        });
    }

    fn on_mra(&mut self, now: Instant, mra: cm::Mra) {
        let id = CmId(mra.remote_comm_id);
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        let next = match (c.state, mra.message_mraed) {
            (State::ReqSent, msg_code::REQ) => State::MraReqRcvd,
            (State::RepSent, msg_code::REP) => State::MraRepRcvd,
            _ => return,
        };
        c.state = next;
        // The peer answers within its service timeout: wait that long, without resending.
        c.deadline =
            Some(now.saturating_add(
                timeout_duration(mra.service_timeout) + self.cfg.packet_lifetime * 2,
            ));
    }

    fn on_rej(&mut self, now: Instant, rej: cm::Rej) {
        let id = CmId(rej.remote_comm_id);
        let Some(c) = self.conns.get(&id) else {
            return;
        };
        let ok = match rej.message_rejected {
            msg_code::REQ => matches!(c.state, State::ReqSent | State::MraReqRcvd),
            msg_code::REP => matches!(c.state, State::RepSent | State::MraRepRcvd),
            _ => false,
        } || (rej.reason == rej_reason::TIMEOUT
            && matches!(c.state, State::RepRcvd | State::Established));
        if !ok {
            return;
        }
        self.enter_timewait(now, id);
        self.events.push_back(CmEvent::Rejected {
            id,
            rej: Box::new(rej),
        });
    }

    fn on_rep(&mut self, rep: cm::Rep) {
        let id = CmId(rep.remote_comm_id);
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        match c.state {
            State::ReqSent | State::MraReqRcvd => {
                c.state = State::RepRcvd;
                c.deadline = None;
                c.remote_comm_id = rep.local_comm_id;
                c.remote_ca_guid = rep.local_ca_guid;
                c.remote_qpn = rep.local_qpn;
                self.by_remote
                    .insert((rep.local_comm_id, rep.local_ca_guid), id);
                self.events.push_back(CmEvent::ConnectReply {
                    id,
                    rep: Box::new(rep),
                });
            }
            // A repeated REP: our RTU was lost; send it again.
            State::Established if c.remote_comm_id == rep.local_comm_id => {
                if let Some(mad) = c.last_sent {
                    self.out.push_back(OutMad { peer: c.peer, mad });
                }
            }
            _ => {}
        }
    }

    fn on_rtu(&mut self, rtu: cm::Rtu) {
        let id = CmId(rtu.remote_comm_id);
        let Some(c) = self.conns.get(&id) else {
            return;
        };
        if matches!(c.state, State::RepSent | State::MraRepRcvd)
            && c.remote_comm_id == rtu.local_comm_id
        {
            self.set_established(id);
            self.events.push_back(CmEvent::Established { id });
        }
    }

    fn on_dreq(&mut self, now: Instant, tid: u64, dreq: cm::Dreq) {
        let id = CmId(dreq.remote_comm_id);
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        if c.remote_comm_id != dreq.local_comm_id || c.local_qpn != dreq.remote_qpn_eecn {
            return;
        }
        match c.state {
            // The RTU may have been lost: a DREQ also says the peer was connected.
            State::Established | State::RepSent | State::MraRepRcvd | State::DreqSent => {
                let crossed = c.state == State::DreqSent;
                c.state = State::DreqRcvd;
                c.tid = tid;
                c.deadline = None;
                self.forget_remote_qp(id);
                if crossed {
                    // Both sides asked at once (IBA 12.9.6.1: DREQ collision): answer, and
                    // this side is disconnected too.
                    let drep = cm::Drep {
                        local_comm_id: id.0,
                        remote_comm_id: dreq.local_comm_id,
                        ..cm::Drep::default()
                    };
                    self.send_reply(id, tid, CmMessage::Drep(drep));
                    self.enter_timewait(now, id);
                    self.events.push_back(CmEvent::Disconnected { id });
                } else {
                    self.events.push_back(CmEvent::DisconnectRequest {
                        id,
                        private_data: Box::new(dreq.private_data),
                    });
                }
            }
            // A repeated DREQ: our DREP was lost; send it again.
            State::TimeWait => {
                if let Some(mad) = c.last_sent {
                    self.out.push_back(OutMad { peer: c.peer, mad });
                }
            }
            _ => {}
        }
    }

    fn on_drep(&mut self, now: Instant, drep: cm::Drep) {
        let id = CmId(drep.remote_comm_id);
        let Some(c) = self.conns.get(&id) else {
            return;
        };
        if c.state == State::DreqSent && c.remote_comm_id == drep.local_comm_id {
            self.enter_timewait(now, id);
            self.events.push_back(CmEvent::Disconnected { id });
        }
    }

    fn on_sidr_req(&mut self, now: Instant, from: Gid, tid: u64, req: cm::SidrReq) {
        let Some(&listener) = self.listeners.get(&req.service_id) else {
            if self.park(now, from, tid, &CmMessage::SidrReq(req.clone())) {
                return;
            }
            let rep = cm::SidrRep {
                request_id: req.request_id,
                status: sidr_status::UNSUPPORTED,
                service_id: req.service_id,
                ..cm::SidrRep::default()
            };
            self.emit(from, tid, &CmMessage::SidrRep(rep));
            return;
        };
        let id = self.new_id();
        self.conns.insert(
            id,
            Conn {
                remote_comm_id: req.request_id,
                ..Conn::new(
                    State::SidrReqRcvd,
                    from,
                    req.service_id,
                    tid,
                    0,
                    Duration::ZERO,
                )
            },
        );
        self.events.push_back(CmEvent::SidrRequest {
            id,
            listener,
            peer: from,
            req: Box::new(req),
        });
    }

    fn on_sidr_rep(&mut self, rep: cm::SidrRep) {
        let id = CmId(rep.request_id);
        if self.state(id) != Some(State::SidrReqSent) {
            return;
        }
        self.drop_conn(id);
        self.events.push_back(CmEvent::SidrReply {
            id,
            rep: Box::new(rep),
        });
    }

    fn conn(&self, id: CmId, call: &'static str, ok: &[State]) -> Result<&Conn, CmError> {
        let c = self.conns.get(&id).ok_or(CmError::UnknownId(id))?;
        if !ok.contains(&c.state) {
            return Err(CmError::BadState {
                id,
                state: c.state,
                call,
            });
        }
        Ok(c)
    }

    fn new_id(&mut self) -> CmId {
        loop {
            let id = CmId(with_prefix(self.cfg.comm_id_prefix, self.next_comm_id));
            self.next_comm_id = self.next_comm_id.wrapping_add(1).max(1);
            if id.0 != 0 && !self.conns.contains_key(&id) {
                return id;
            }
        }
    }

    fn new_tid(&mut self) -> u64 {
        self.next_tid = self.next_tid.wrapping_add(1);
        self.next_tid
    }

    /// 2 * packet lifetime + the peer's CM response time (exponent `t`).
    fn response_wait(&self, t: u8) -> Duration {
        self.cfg.packet_lifetime * 2 + timeout_duration(t)
    }

    /// Sends a request of `id` (REQ, REP, DREQ, SIDR_REQ): kept for resending, with the
    /// response deadline armed.
    fn send_request(&mut self, now: Instant, id: CmId, msg: CmMessage) {
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        let mad = encode(c.tid, &msg);
        c.last_sent = Some(mad);
        c.deadline = Some(now.saturating_add(c.response_wait));
        self.out.push_back(OutMad { peer: c.peer, mad });
    }

    /// Sends a reply of `id` (MRA, RTU, DREP): kept for answering a repeated request.
    fn send_reply(&mut self, id: CmId, tid: u64, msg: CmMessage) {
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        let mad = encode(tid, &msg);
        c.last_sent = Some(mad);
        self.out.push_back(OutMad { peer: c.peer, mad });
    }

    /// Sends a message no state keeps (REJ, SIDR_REP).
    fn emit(&mut self, peer: Gid, tid: u64, msg: &CmMessage) {
        self.out.push_back(OutMad {
            peer,
            mad: encode(tid, msg),
        });
    }

    fn set_established(&mut self, id: CmId) {
        if let Some(c) = self.conns.get_mut(&id) {
            c.state = State::Established;
            c.deadline = None;
            let key = (c.peer, c.remote_qpn.value());
            self.by_remote_qp.insert(key, id);
        }
    }

    fn enter_timewait(&mut self, now: Instant, id: CmId) {
        self.forget_remote_qp(id);
        if let Some(c) = self.conns.get_mut(&id) {
            c.state = State::TimeWait;
            c.deadline = Some(now.saturating_add(self.cfg.timewait));
        }
    }

    fn forget_remote_qp(&mut self, id: CmId) {
        self.by_remote_qp.retain(|_, v| *v != id);
    }

    fn drop_conn(&mut self, id: CmId) {
        if self.conns.remove(&id).is_some() {
            self.by_remote.retain(|_, v| *v != id);
            self.forget_remote_qp(id);
        }
    }
}

fn encode(tid: u64, msg: &CmMessage) -> [u8; mad::MAD_LEN] {
    let mut out = [0u8; mad::MAD_LEN];
    CmMad::new(msg.clone(), tid)
        .emit(&mut out)
        .expect("a 256-byte buffer holds a MAD");
    out
}

fn copy_private<const N: usize>(
    dst: &mut [u8; N],
    src: &[u8],
    msg: &'static str,
) -> Result<(), CmError> {
    if src.len() > N {
        return Err(CmError::PrivateDataTooLong {
            len: src.len(),
            max: N,
            msg,
        });
    }
    dst[..src.len()].copy_from_slice(src);
    Ok(())
}
