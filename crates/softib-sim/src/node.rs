//! A simulated host: one HCA plus the application that drives it, as one fabric endpoint.
//! The application runs right after the HCA makes progress (a busy-polling RDMA program), so
//! the pipeline of outstanding work requests never waits for the simulator's driver.

use softib_core::time::Instant;
use softib_core::verbs::cq::WorkCompletion;
use softib_core::verbs::mr::MrInfo;
use softib_core::verbs::types::{QpState, WcStatus};
use softib_core::verbs::wr::{RecvWr, RemoteAddr, SendWr, Sge, UdDest, WrOpcode};
use softib_core::verbs::{AhHandle, CqHandle, SrqHandle};
use softib_core::Hca;
use softib_fabric::Endpoint;
use softib_wire::Qpn;

use crate::config::OpKind;
use crate::pattern;

/// Bits of a `wr_id` holding the operation index; the QP index sits above.
const OP_BITS: u32 = 40;

pub(crate) fn wr_id(qp: usize, op: u64) -> u64 {
    ((qp as u64) << OP_BITS) | op
}

fn split(wr_id: u64) -> (usize, u64) {
    ((wr_id >> OP_BITS) as usize, wr_id & ((1 << OP_BITS) - 1))
}

/// State of one buffer slot of the requester.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Slot {
    Free,
    /// Operation `op` is using it.
    Busy(u64),
    /// A completed WRITE of operation `op` waits for the driver to check the responder's copy.
    Check(u64),
}

/// Per-QP state of the requesting application.
#[derive(Debug, Clone)]
pub(crate) struct ReqQp {
    pub(crate) qpn: Qpn,
    pub(crate) target: u64,
    pub(crate) posted: u64,
    pub(crate) completed: u64,
    pub(crate) errors: u64,
    pub(crate) slots: Vec<Slot>,
    /// Sum of the FAA addends completed so far (the value the next FAA must return).
    pub(crate) faa_sum: u64,
    pub(crate) stopped: bool,
}

/// Memory layout shared by both sides: per QP, `slots` slots of `slot_len` bytes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Layout {
    pub(crate) slots: usize,
    pub(crate) slot_len: u64,
}

impl Layout {
    pub(crate) fn offset(&self, qp: usize, slot: usize) -> u64 {
        (qp * self.slots + slot) as u64 * self.slot_len
    }
}

/// How the requester frames a raw datagram: the header its message starts with, the address
/// handle of node B.
#[derive(Debug, Clone)]
pub(crate) struct RawTx {
    pub(crate) header: Vec<u8>,
    pub(crate) ah: AhHandle,
}

/// What the responder of a raw service expects and has seen.
#[derive(Debug, Clone)]
pub(crate) struct RawRx {
    pub(crate) header_len: usize,
    /// Operations delivered so far (each at most once).
    pub(crate) seen: Vec<bool>,
    /// Datagrams delivered again (the fabric's duplication fault); discarded.
    pub(crate) duplicates: u64,
}

/// What the responder of XRC receives through, and what arrived where.
#[derive(Debug, Clone)]
pub(crate) struct XrcRx {
    /// The XRC SRQs of the domain, each with its own CQ.
    pub(crate) srqs: Vec<(SrqHandle, CqHandle)>,
    /// Receive buffers: one lane of slots per SRQ (its k-th receive WQE uses slot k mod
    /// slots of lane s).
    pub(crate) layout: Layout,
    /// Per target QP (as `RespApp::qpns`), per SRQ: messages received.
    pub(crate) received: Vec<Vec<u64>>,
}

impl XrcRx {
    /// Posts receive `k` of SRQ `s` (its wr_id names both) through the reused WR `rwr`, into
    /// `local`, `size` bytes.
    fn post_recv(
        &self,
        hca: &mut Hca,
        rwr: &mut [RecvWr; 1],
        local: &MrInfo,
        size: u32,
        s: usize,
        k: u64,
    ) {
        let slot = (k % self.layout.slots as u64) as usize;
        let wr = &mut rwr[0];
        wr.wr_id = wr_id(s, k);
        wr.sg_list.clear();
        wr.sg_list.push(Sge {
            addr: local.addr + self.layout.offset(s, slot),
            length: size.max(1),
            lkey: local.lkey,
        });
        let _ = hca.post_srq_recv(self.srqs[s].0, rwr);
    }
}

/// The first 8 payload bytes of raw datagram `op`: its operation index; the pattern follows.
pub(crate) const RAW_OP_BYTES: usize = 8;

/// The application of the requesting node.
pub(crate) struct ReqApp {
    pub(crate) op: OpKind,
    /// UC: every message carries its operation index as immediate data, a WQE completes when
    /// its last packet is on the wire, and the responder checks the data.
    pub(crate) uc: bool,
    pub(crate) size: u32,
    pub(crate) depth: u32,
    pub(crate) seed: u64,
    pub(crate) cq: CqHandle,
    pub(crate) layout: Layout,
    /// Local buffer (source of SEND / WRITE, destination of READ and atomic results).
    pub(crate) local: MrInfo,
    /// The responder's buffer (WRITE / READ target, atomic counters at the start of each QP's
    /// first slot).
    pub(crate) remote: RemoteAddr,
    pub(crate) qps: Vec<ReqQp>,
    /// WRITEs completed and awaiting the driver's check: (qp, slot, op).
    pub(crate) checks: Vec<(usize, usize, u64)>,
    pub(crate) verify_failures: u64,
    /// Completions per status (success first, then errors in the order first seen).
    pub(crate) status_counts: Vec<(WcStatus, u64)>,
    pub(crate) last_completion_ns: u64,
    pub(crate) bytes_completed: u64,
    /// UD: the destination of each QP's datagrams (empty for connected services).
    pub(crate) ud_dests: Vec<UdDest>,
    wcs: Vec<WorkCompletion>,
    wr: SendWr,
    /// Raw services: the datagram header and destination.
    pub(crate) raw: Option<RawTx>,
    /// XRC: the SRQ numbers of node B; operation k goes to SRQ k mod their count.
    pub(crate) xrc_srqns: Vec<u32>,
    /// RD: each QP's destination (EE context, remote QP, Q_Key).
    pub(crate) rd_dests: Vec<softib_core::verbs::wr::RdDest>,
}

/// The application of the responding node (posts and checks receive buffers for SEND).
pub(crate) struct RespApp {
    pub(crate) op: OpKind,
    /// UC: messages are identified by their immediate data and may be lost.
    pub(crate) uc: bool,
    pub(crate) size: u32,
    pub(crate) seed: u64,
    pub(crate) cq: CqHandle,
    pub(crate) layout: Layout,
    pub(crate) local: MrInfo,
    pub(crate) qpns: Vec<Qpn>,
    /// Messages received per QP (the k-th message of a QP is its operation k).
    pub(crate) received: Vec<u64>,
    pub(crate) verify_failures: u64,
    pub(crate) recv_errors: u64,
    /// UD: per QP, how many copies of each operation arrived (saturating); `None` for
    /// connected services, which deliver in order.
    pub(crate) ud_seen: Option<Vec<Vec<u8>>>,
    /// UC: per QP, a bit per operation index that arrived (one bit per message, 64 a word).
    pub(crate) delivered: Vec<Vec<u64>>,
    /// UC: distinct messages that arrived.
    pub(crate) unique: u64,
    /// UC: messages that arrived again (a duplicated whole message is accepted again, C9-184).
    pub(crate) duplicates: u64,
    /// UC: when the last new message arrived (goodput counts delivered messages).
    pub(crate) last_delivery_ns: u64,
    wcs: Vec<WorkCompletion>,
    rwr: [RecvWr; 1],
    /// Raw services: what arrived.
    pub(crate) raw: Option<RawRx>,
    /// XRC: the SRQs and what arrived in each.
    pub(crate) xrc: Option<XrcRx>,
}

pub(crate) enum App {
    Requester(Box<ReqApp>),
    Responder(Box<RespApp>),
}

/// One host on the fabric.
pub struct SimNode {
    pub(crate) hca: Hca,
    pub(crate) app: App,
    /// Print every frame sent and received to stderr (`SOFTIB_TRACE=1`).
    pub(crate) trace: bool,
    /// Run the application when the HCA has nothing more to send (raw services: sends complete
    /// when transmitted and no frame comes back to wake the requester).
    pub(crate) progress_on_idle_tx: bool,
}

impl SimNode {
    /// The HCA (for reports and inspection).
    pub fn hca(&self) -> &Hca {
        &self.hca
    }

    /// Prints one traced frame: opcode and PSN (RoCEv2 or native IB), or the raw datagram.
    fn trace_frame(&self, now_ns: u64, dir: &str, frame: &[u8]) {
        use softib_wire::native::{NativeBody, NativePacket};
        let node = self.hca.query_device().node_guid & 0xffff_ffff;
        let bth = match softib_wire::roce::RocePacket::parse(frame) {
            Ok(p) => Some(p.transport.headers.bth),
            Err(_) => match NativePacket::parse(frame) {
                Ok(NativePacket {
                    body: NativeBody::Iba { transport, .. },
                    ..
                }) => Some(transport.headers.bth),
                Ok(p) => {
                    eprintln!("{now_ns} {node:#010x} {dir} raw {:?}", p.lrh.lnh);
                    None
                }
                Err(_) => None,
            },
        };
        if let Some(b) = bth {
            eprintln!(
                "{now_ns} {node:#010x} {dir} {} {:#x}",
                b.opcode,
                b.psn.value()
            );
        }
    }

    /// Runs the application, then asks the HCA again for a frame.
    #[cold]
    fn progress_and_poll(&mut self, now_ns: u64, out: &mut Vec<u8>) -> bool {
        self.progress(now_ns);
        self.hca.poll_transmit(Instant::from_nanos(now_ns), out)
    }

    /// Lets the application poll completions and post work.
    pub(crate) fn progress(&mut self, now_ns: u64) {
        match &mut self.app {
            App::Requester(a) => a.progress(&mut self.hca, now_ns),
            App::Responder(a) => a.progress(&mut self.hca, now_ns),
        }
    }
}

impl Endpoint for SimNode {
    fn handle_frame(&mut self, now_ns: u64, frame: &[u8]) {
        if self.trace {
            self.trace_frame(now_ns, "rx", frame);
        }
        self.hca.handle_frame(Instant::from_nanos(now_ns), frame);
        self.progress(now_ns);
    }

    #[inline]
    fn poll_transmit(&mut self, now_ns: u64, out: &mut Vec<u8>) -> bool {
        let mut r = self.hca.poll_transmit(Instant::from_nanos(now_ns), out);
        // A UC send WQE completes when its last packet leaves (C9-180): the requesting
        // application reaps it and posts more right away.
        if r && matches!(&self.app, App::Requester(a) if a.uc) {
            self.progress(now_ns);
        }
        // UD and raw sends complete when they go out and no frame comes back to wake the
        // application: it polls (and posts more) once the HCA has nothing left to send.
        if !r && self.progress_on_idle_tx {
            r = self.progress_and_poll(now_ns, out);
        }
        if r && self.trace {
            self.trace_frame(now_ns, "tx", out);
        }
        r
    }

    fn poll_timeout(&self) -> Option<u64> {
        self.hca.poll_timeout().map(|t| t.as_nanos())
    }

    fn handle_timeout(&mut self, now_ns: u64) {
        self.hca.handle_timeout(Instant::from_nanos(now_ns));
        self.progress(now_ns);
    }
}

impl ReqApp {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        op: OpKind,
        uc: bool,
        size: u32,
        depth: u32,
        seed: u64,
        cq: CqHandle,
        layout: Layout,
        local: MrInfo,
        remote: RemoteAddr,
        qps: Vec<(Qpn, u64)>,
    ) -> ReqApp {
        let qps = qps
            .into_iter()
            .map(|(qpn, target)| ReqQp {
                qpn,
                target,
                posted: 0,
                completed: 0,
                errors: 0,
                slots: vec![Slot::Free; layout.slots],
                faa_sum: 0,
                stopped: false,
            })
            .collect();
        ReqApp {
            op,
            uc,
            size,
            depth,
            seed,
            cq,
            layout,
            local,
            remote,
            qps,
            checks: Vec::new(),
            verify_failures: 0,
            status_counts: Default::default(),
            last_completion_ns: 0,
            bytes_completed: 0,
            ud_dests: Vec::new(),
            wcs: Vec::with_capacity(64),
            wr: SendWr::new(0, WrOpcode::Send)
                .with_sge(Sge {
                    addr: 0,
                    length: 0,
                    lkey: 0,
                })
                .signaled(),
            raw: None,
            xrc_srqns: Vec::new(),
            rd_dests: Vec::new(),
        }
    }

    /// True when every QP has completed its share (or stopped on an error).
    pub(crate) fn done(&self) -> bool {
        self.qps
            .iter()
            .all(|q| q.completed >= q.target || (q.stopped && q.completed >= q.posted))
    }

    pub(crate) fn completed(&self) -> u64 {
        self.qps.iter().map(|q| q.completed).sum()
    }

    pub(crate) fn posted(&self) -> u64 {
        self.qps.iter().map(|q| q.posted).sum()
    }

    fn slot_of(&self, op: u64) -> usize {
        (op % self.layout.slots as u64) as usize
    }

    pub(crate) fn progress(&mut self, hca: &mut Hca, now_ns: u64) {
        let mut wcs = std::mem::take(&mut self.wcs);
        loop {
            wcs.resize(64, WorkCompletion::default());
            let n = hca.poll_cq_into(self.cq, &mut wcs).unwrap_or(0);
            if n == 0 {
                break;
            }
            for wc in &wcs[..n] {
                self.complete(hca, wc, now_ns);
            }
        }
        self.wcs = wcs;
        for q in 0..self.qps.len() {
            self.post_more(hca, q);
        }
    }

    fn complete(&mut self, hca: &mut Hca, wc: &WorkCompletion, now_ns: u64) {
        let (q, op) = split(wc.wr_id);
        let Some(qp) = self.qps.get_mut(q) else {
            return;
        };
        match self.status_counts.iter_mut().find(|(s, _)| *s == wc.status) {
            Some((_, n)) => *n += 1,
            None => self.status_counts.push((wc.status, 1)),
        }
        // RC and UC complete in posting order, each work request exactly once.
        if op != qp.completed {
            self.verify_failures += 1;
        }
        qp.completed += 1;
        self.last_completion_ns = now_ns;
        let slot = (op % self.layout.slots as u64) as usize;
        if wc.status != WcStatus::Success {
            qp.errors += 1;
            qp.stopped = true;
            qp.slots[slot] = Slot::Free;
            return;
        }
        let off = self.layout.offset(q, slot);
        let size = self.size as usize;
        let ok = match self.op {
            OpKind::Send => true,
            // UC: the WRITE completed when it left; the responder checks what arrives.
            OpKind::Write if self.uc => true,
            OpKind::Write => {
                qp.slots[slot] = Slot::Check(op);
                self.checks.push((q, slot, op));
                self.bytes_completed += u64::from(self.size);
                return;
            }
            OpKind::Read => {
                let mem = hca.mr_bytes(self.local.handle).unwrap_or(&[]);
                let got = mem.get(off as usize..off as usize + size).unwrap_or(&[]);
                pattern::check(got, pattern::read_source(self.seed, q, slot))
            }
            OpKind::Faa | OpKind::Cas => {
                let mut v = [0u8; 8];
                let _ = hca.mr_read(self.local.handle, off as usize, &mut v);
                let got = u64::from_le_bytes(v);
                match self.op {
                    OpKind::Faa => {
                        let ok = got == qp.faa_sum;
                        qp.faa_sum = qp.faa_sum.wrapping_add(op + 1);
                        ok
                    }
                    // CAS chain: operation k swaps k for k + 1, so it must find k.
                    _ => got == op,
                }
            }
        };
        if !ok {
            self.verify_failures += 1;
        }
        self.bytes_completed += match self.op {
            OpKind::Faa | OpKind::Cas => 8,
            _ => u64::from(self.size),
        };
        qp.slots[slot] = Slot::Free;
    }

    fn post_more(&mut self, hca: &mut Hca, q: usize) {
        if self.raw.is_some() {
            self.post_more_raw(hca, q);
            return;
        }
        loop {
            let qp = &self.qps[q];
            if qp.stopped
                || qp.posted >= qp.target
                || qp.posted - qp.completed >= u64::from(self.depth)
            {
                return;
            }
            let op = qp.posted;
            let slot = self.slot_of(op);
            if qp.slots[slot] != Slot::Free {
                return;
            }
            let qpn = qp.qpn;
            let off = self.layout.offset(q, slot);
            let len = match self.op {
                OpKind::Faa | OpKind::Cas => 8,
                _ => self.size,
            };
            let local = Sge {
                addr: self.local.addr + off,
                length: len,
                lkey: self.local.lkey,
            };
            let remote = RemoteAddr {
                addr: self.remote.addr + off,
                rkey: self.remote.rkey,
            };
            let counter = RemoteAddr {
                addr: self.remote.addr + self.layout.offset(q, 0),
                rkey: self.remote.rkey,
            };
            let opcode = match self.op {
                OpKind::Send | OpKind::Write => {
                    if let Ok(mem) = hca.mr_bytes_mut(self.local.handle) {
                        if let Some(buf) =
                            mem.get_mut(off as usize..(off + u64::from(len)) as usize)
                        {
                            pattern::fill(buf, pattern::op_data(self.seed, q, op));
                        }
                    }
                    match (self.op, self.uc) {
                        (OpKind::Send, false) => WrOpcode::Send,
                        (OpKind::Send, true) => WrOpcode::SendWithImm(op as u32),
                        (_, false) => WrOpcode::RdmaWrite { remote },
                        (_, true) => WrOpcode::RdmaWriteWithImm {
                            remote,
                            imm: op as u32,
                        },
                    }
                }
                OpKind::Read => {
                    if let Ok(mem) = hca.mr_bytes_mut(self.local.handle) {
                        if let Some(buf) =
                            mem.get_mut(off as usize..(off + u64::from(len)) as usize)
                        {
                            buf.fill(0);
                        }
                    }
                    WrOpcode::RdmaRead { remote }
                }
                OpKind::Faa => WrOpcode::AtomicFetchAdd {
                    remote_addr: counter.addr,
                    rkey: counter.rkey,
                    add: op + 1,
                },
                OpKind::Cas => WrOpcode::AtomicCmpSwp {
                    remote_addr: counter.addr,
                    rkey: counter.rkey,
                    compare: op,
                    swap: op + 1,
                },
            };
            // One work request object is reused: no allocation per operation.
            let wr = &mut self.wr;
            wr.wr_id = wr_id(q, op);
            wr.opcode = opcode;
            wr.sg_list.clear();
            wr.sg_list.push(local);
            wr.ud = self.ud_dests.get(q).copied();
            wr.rd = self.rd_dests.get(q).copied();
            if !self.xrc_srqns.is_empty() {
                wr.xrc_remote_srqn = self.xrc_srqns[(op % self.xrc_srqns.len() as u64) as usize];
            }
            if hca.post_send(qpn, std::slice::from_ref(wr)).is_err() {
                let qp = &mut self.qps[q];
                qp.stopped = true;
                return;
            }
            let qp = &mut self.qps[q];
            qp.slots[slot] = Slot::Busy(op);
            qp.posted += 1;
            if hca.qp(qpn).is_some_and(|qp| qp.state() == QpState::Err) {
                qp.stopped = true;
            }
        }
    }
}

impl ReqApp {
    /// [`ReqApp::post_more`] for a raw service: each datagram is the header, the operation
    /// index, then the operation's pattern, sent through node B's address handle.
    #[cold]
    fn post_more_raw(&mut self, hca: &mut Hca, q: usize) {
        let Some(raw) = self.raw.as_ref() else {
            return;
        };
        let (header, ah) = (raw.header.clone(), raw.ah);
        loop {
            let qp = &self.qps[q];
            if qp.stopped
                || qp.posted >= qp.target
                || qp.posted - qp.completed >= u64::from(self.depth)
            {
                return;
            }
            let op = qp.posted;
            let slot = self.slot_of(op);
            if qp.slots[slot] != Slot::Free {
                return;
            }
            let qpn = qp.qpn;
            let off = self.layout.offset(q, slot);
            let len = header.len() as u32 + self.size;
            if let Ok(mem) = hca.mr_bytes_mut(self.local.handle) {
                if let Some(buf) = mem.get_mut(off as usize..(off + u64::from(len)) as usize) {
                    let (h, rest) = buf.split_at_mut(header.len());
                    h.copy_from_slice(&header);
                    let (id, data) = rest.split_at_mut(RAW_OP_BYTES);
                    id.copy_from_slice(&op.to_le_bytes());
                    pattern::fill(data, pattern::op_data(self.seed, q, op));
                }
            }
            let wr = SendWr::new(wr_id(q, op), WrOpcode::Send)
                .with_sge(Sge {
                    addr: self.local.addr + off,
                    length: len,
                    lkey: self.local.lkey,
                })
                .with_ud(ah, Qpn::new(0), 0)
                .signaled();
            if hca.post_send(qpn, &[wr]).is_err() {
                self.qps[q].stopped = true;
                return;
            }
            let qp = &mut self.qps[q];
            qp.slots[slot] = Slot::Busy(op);
            qp.posted += 1;
        }
    }
}

impl RespApp {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        op: OpKind,
        uc: bool,
        size: u32,
        seed: u64,
        cq: CqHandle,
        layout: Layout,
        local: MrInfo,
        qpns: Vec<(Qpn, u64)>,
    ) -> RespApp {
        let n = qpns.len();
        let delivered = if uc {
            qpns.iter()
                .map(|&(_, target)| vec![0u64; target.div_ceil(64) as usize])
                .collect()
        } else {
            Vec::new()
        };
        let qpns = qpns.into_iter().map(|(q, _)| q).collect();
        RespApp {
            op,
            uc,
            size,
            seed,
            cq,
            layout,
            local,
            qpns,
            received: vec![0; n],
            verify_failures: 0,
            recv_errors: 0,
            ud_seen: None,
            delivered,
            unique: 0,
            duplicates: 0,
            last_delivery_ns: 0,
            wcs: Vec::with_capacity(64),
            rwr: [RecvWr::new(0, Vec::with_capacity(1))],
            raw: None,
            xrc: None,
        }
    }

    /// Posts the initial receive WQEs (one per slot) for SEND traffic and for UC WRITEs (with
    /// immediate, so each consumes one).
    pub(crate) fn post_initial(&mut self, hca: &mut Hca) {
        if self.op != OpKind::Send && !self.uc {
            return;
        }
        if let Some(x) = &self.xrc {
            for s in 0..x.srqs.len() {
                for k in 0..x.layout.slots as u64 {
                    x.post_recv(hca, &mut self.rwr, &self.local, self.size, s, k);
                }
            }
            return;
        }
        for q in 0..self.qpns.len() {
            for k in 0..self.layout.slots as u64 {
                self.post_recv(hca, q, k);
            }
        }
    }

    fn post_recv(&mut self, hca: &mut Hca, q: usize, k: u64) {
        let slot = (k % self.layout.slots as u64) as usize;
        let off = self.layout.offset(q, slot);
        let length = match &self.raw {
            // Header, payload and the pad of a raw EtherType datagram.
            Some(r) => (r.header_len as u32 + self.size).next_multiple_of(4),
            // A UD receive buffer also holds the 40-byte GRH area ahead of the payload.
            None if self.ud_seen.is_some() => self.size.max(1) + softib_core::GRH_AREA as u32,
            None => self.size.max(1),
        };
        let sge = Sge {
            addr: self.local.addr + off,
            length,
            lkey: self.local.lkey,
        };
        // One receive work request object is reused: no allocation per message.
        let wr = &mut self.rwr[0];
        wr.wr_id = wr_id(q, k);
        wr.sg_list.clear();
        wr.sg_list.push(sge);
        let _ = hca.post_recv(self.qpns[q], &self.rwr);
    }

    /// XRC: takes the completions of every SRQ's CQ. A message that arrived in SRQ `s` through
    /// target QP `q` is the next of that connection's messages for `s`: operation
    /// `s + srqs × (messages of q already in s)`; its bytes are checked in the buffer of the
    /// receive WQE it used, which is then posted again.
    fn xrc_progress(&mut self, hca: &mut Hca) {
        let Some(x) = self.xrc.as_mut() else {
            return;
        };
        let nsrq = x.srqs.len() as u64;
        let slots = x.layout.slots as u64;
        let size = self.size as usize;
        for i in 0..x.srqs.len() {
            let cq = x.srqs[i].1;
            loop {
                self.wcs.resize(64, WorkCompletion::default());
                let n = hca.poll_cq_into(cq, &mut self.wcs).unwrap_or(0);
                if n == 0 {
                    break;
                }
                for wc in &self.wcs[..n] {
                    let (s, k) = split(wc.wr_id);
                    let q = self.qpns.iter().position(|&t| t == wc.qp_num);
                    let (Some(q), true, true) =
                        (q, s < x.srqs.len(), wc.status == WcStatus::Success)
                    else {
                        self.recv_errors += 1;
                        continue;
                    };
                    let op = s as u64 + nsrq * x.received[q][s];
                    x.received[q][s] += 1;
                    self.received[q] += 1;
                    let off = x.layout.offset(s, (k % slots) as usize) as usize;
                    let ok = wc.byte_len == self.size
                        && hca
                            .mr_bytes(self.local.handle)
                            .ok()
                            .and_then(|m| m.get(off..off + size))
                            .is_some_and(|got| {
                                pattern::check(got, pattern::op_data(self.seed, q, op))
                            });
                    if !ok {
                        self.verify_failures += 1;
                    }
                    x.post_recv(hca, &mut self.rwr, &self.local, self.size, s, k + slots);
                }
            }
        }
    }

    pub(crate) fn progress(&mut self, hca: &mut Hca, now_ns: u64) {
        if self.xrc.is_some() {
            self.xrc_progress(hca);
            return;
        }
        let mut wcs = std::mem::take(&mut self.wcs);
        loop {
            wcs.resize(64, WorkCompletion::default());
            let n = hca.poll_cq_into(self.cq, &mut wcs).unwrap_or(0);
            if n == 0 {
                break;
            }
            for wc in &wcs[..n] {
                let (q, k) = split(wc.wr_id);
                if q >= self.qpns.len() {
                    continue;
                }
                if wc.status != WcStatus::Success {
                    self.recv_errors += 1;
                    continue;
                }
                if self.ud_seen.is_some() {
                    self.ud_received(hca, q, k, wc);
                    self.post_recv(hca, q, k + self.layout.slots as u64);
                    continue;
                }
                if self.uc {
                    self.uc_received(hca, wc, q, k, now_ns);
                    continue;
                }
                if self.raw.is_some() {
                    self.raw_received(hca, q, k, wc);
                    self.post_recv(hca, q, k + self.layout.slots as u64);
                    continue;
                }
                // RC delivers in order: the k-th message received is operation k.
                let op = self.received[q];
                self.received[q] += 1;
                let slot = (k % self.layout.slots as u64) as usize;
                let off = self.layout.offset(q, slot) as usize;
                let size = self.size as usize;
                let ok = wc.byte_len == self.size
                    && hca
                        .mr_bytes(self.local.handle)
                        .ok()
                        .and_then(|m| m.get(off..off + size))
                        .is_some_and(|got| pattern::check(got, pattern::op_data(self.seed, q, op)));
                if !ok {
                    self.verify_failures += 1;
                }
                self.post_recv(hca, q, k + self.layout.slots as u64);
            }
        }
        self.wcs = wcs;
    }

    /// A UC message arrived on QP `q` in receive WQE `k`: its immediate names the operation;
    /// the SEND's receive buffer or the WRITE's target slot must hold exactly its data (UC
    /// checks it as soon as it completes: the slot may be written again later).
    fn uc_received(&mut self, hca: &mut Hca, wc: &WorkCompletion, q: usize, k: u64, now_ns: u64) {
        let slots = self.layout.slots as u64;
        let op = wc.imm_data.map(u64::from);
        let size = self.size as usize;
        let ok = op.is_some_and(|op| {
            let slot = match self.op {
                OpKind::Send => k % slots,
                _ => op % slots,
            } as usize;
            let off = self.layout.offset(q, slot) as usize;
            wc.byte_len == self.size
                && hca
                    .mr_bytes(self.local.handle)
                    .ok()
                    .and_then(|m| m.get(off..off + size))
                    .is_some_and(|got| pattern::check(got, pattern::op_data(self.seed, q, op)))
        });
        match op.filter(|_| ok) {
            Some(op) => {
                let bits = &mut self.delivered[q];
                match bits.get_mut((op / 64) as usize) {
                    Some(w) if *w & (1 << (op % 64)) != 0 => self.duplicates += 1,
                    Some(w) => {
                        *w |= 1 << (op % 64);
                        self.unique += 1;
                        self.last_delivery_ns = now_ns;
                    }
                    None => self.verify_failures += 1,
                }
            }
            None => self.verify_failures += 1,
        }
        self.post_recv(hca, q, k + slots);
    }

    /// Checks a datagram received into WQE `k` of QP `q`: its first 8 bytes name the
    /// operation (the first word of that operation's pattern), the rest must match it. UD
    /// delivers in any order, may lose datagrams and delivers a duplicated one twice.
    fn ud_received(&mut self, hca: &Hca, q: usize, k: u64, wc: &WorkCompletion) {
        let slot = (k % self.layout.slots as u64) as usize;
        let off = self.layout.offset(q, slot) as usize + softib_core::GRH_AREA;
        let size = self.size as usize;
        let got = hca
            .mr_bytes(self.local.handle)
            .ok()
            .and_then(|m| m.get(off..off + size));
        let Some(got) = got.filter(|_| wc.byte_len as usize == size + softib_core::GRH_AREA) else {
            self.verify_failures += 1;
            return;
        };
        let mut first = [0u8; 8];
        first.copy_from_slice(&got[..8]);
        let op = unmix(u64::from_le_bytes(first)) ^ self.seed ^ ((q as u64) << 48);
        let Some(seen) = self
            .ud_seen
            .as_mut()
            .and_then(|s| s.get_mut(q))
            .and_then(|s| s.get_mut(op as usize))
            .filter(|_| pattern::check(got, pattern::op_data(self.seed, q, op)))
        else {
            self.verify_failures += 1;
            return;
        };
        *seen = seen.saturating_add(1);
        self.received[q] += 1;
    }

    /// Checks a raw datagram received into slot `k` of QP `q`: the header, the operation
    /// index, the pattern, the length; a datagram seen before is counted and discarded.
    fn raw_received(&mut self, hca: &Hca, q: usize, k: u64, wc: &WorkCompletion) {
        let Some(raw) = self.raw.as_mut() else {
            return;
        };
        let slot = (k % self.layout.slots as u64) as usize;
        let off = self.layout.offset(q, slot) as usize;
        let size = self.size as usize;
        let hl = raw.header_len;
        let want_len = if hl == 4 {
            // Raw EtherType: the receiver sees the pad (the RWH has no length).
            (hl + size).next_multiple_of(4)
        } else {
            hl + size
        };
        let got = hca
            .mr_bytes(self.local.handle)
            .ok()
            .and_then(|m| m.get(off..off + hl + size));
        let Some(got) = got.filter(|_| wc.byte_len as usize == want_len) else {
            self.verify_failures += 1;
            return;
        };
        let mut id = [0u8; RAW_OP_BYTES];
        id.copy_from_slice(&got[hl..hl + RAW_OP_BYTES]);
        let op = u64::from_le_bytes(id);
        let Some(seen) = raw.seen.get_mut(op as usize) else {
            self.verify_failures += 1;
            return;
        };
        if !pattern::check(
            &got[hl + RAW_OP_BYTES..],
            pattern::op_data(self.seed, q, op),
        ) {
            self.verify_failures += 1;
            return;
        }
        if *seen {
            raw.duplicates += 1;
            return;
        }
        *seen = true;
        self.received[q] += 1;
    }
}

/// The inverse of the pattern's 64-bit mixer (`pattern::op_data` without the XOR).
fn unmix(mut z: u64) -> u64 {
    fn inverse(a: u64) -> u64 {
        // Newton's iteration for the inverse of an odd number modulo 2^64.
        let mut x = a;
        for _ in 0..6 {
            x = x.wrapping_mul(2u64.wrapping_sub(a.wrapping_mul(x)));
        }
        x
    }
    z ^= (z >> 31) ^ (z >> 62);
    z = z.wrapping_mul(inverse(0x94D0_49BB_1331_11EB));
    z ^= (z >> 27) ^ (z >> 54);
    z = z.wrapping_mul(inverse(0xBF58_476D_1CE4_E5B9));
    z ^ (z >> 30) ^ (z >> 60)
}

#[cfg(test)]
mod tests {
    #[test]
    fn unmix_inverts_the_pattern_mixer() {
        for op in [0u64, 1, 77, 1 << 39, u64::MAX] {
            for (seed, qp) in [(1u64, 0usize), (0xdead_beef, 3)] {
                let id = crate::pattern::op_data(seed, qp, op);
                assert_eq!(super::unmix(id) ^ seed ^ ((qp as u64) << 48), op);
            }
        }
    }
}
