//! [`CmPort`]: a [`CmAgent`] driven on QP1 of an [`Hca`] — the GSI QP created and brought to
//! RTS, receive buffers kept posted, received MADs handed to the agent with the sender's GID
//! (from the network header the HCA places before each UD payload), and the agent's MADs sent
//! as UD SENDs to the peer's QP1 with the GSI Q_Key. Sans-IO still: the owner calls
//! [`CmPort::poll`] with the time whenever the HCA may have completed something or the
//! agent's deadline ([`CmPort::poll_timeout`]) has passed.

use std::collections::{HashMap, VecDeque};

use softib_wire::mad::MAD_LEN;
use softib_wire::{Psn, Qpn};

use super::{CmAgent, CmConfig, Gid, OutMad};
use crate::time::Instant;
use crate::verbs::ah::AhAttr;
use crate::verbs::cq::WorkCompletion;
use crate::verbs::mr::MrInfo;
use crate::verbs::qp::{QpAttr, QpAttrMask, QpCap, QpInitAttr};
use crate::verbs::types::{AccessFlags, QpState, QpType, WcStatus};
use crate::verbs::wr::{RecvWr, SendWr, Sge, WrOpcode};
use crate::verbs::{AhHandle, CqHandle, PdHandle};
use crate::{Hca, GRH_AREA, GSI_QKEY, GSI_QPN};

/// Receive buffers kept posted on QP1.
const RECV_SLOTS: usize = 64;
/// MADs in flight to the HCA at once (more wait in the port).
const SEND_SLOTS: usize = 64;
/// A slot: the network header area and one MAD.
const SLOT: usize = GRH_AREA + MAD_LEN;
/// Marks a send WR's id.
const SEND_TAG: u64 = 1 << 63;

/// Why a [`CmPort`] could not be set up.
#[derive(Debug, thiserror::Error)]
#[error("CM port setup: {what}: {why}")]
pub struct CmPortError {
    /// The step that failed.
    pub what: &'static str,
    /// The HCA's reason.
    pub why: String,
}

fn setup<T, E: std::fmt::Display>(r: Result<T, E>, what: &'static str) -> Result<T, CmPortError> {
    r.map_err(|e| CmPortError {
        what,
        why: e.to_string(),
    })
}

/// The CM agent of one port, on that port's QP1.
pub struct CmPort {
    agent: CmAgent,
    qpn: Qpn,
    cq: CqHandle,
    pd: PdHandle,
    mr: MrInfo,
    port_num: u8,
    sgid_index: u8,
    ahs: HashMap<Gid, AhHandle>,
    free_send: Vec<usize>,
    waiting: VecDeque<OutMad>,
    /// MADs that could not be sent (no route to the peer's GID) or received short.
    pub dropped: u64,
}

impl CmPort {
    /// Creates QP1 on `port_num` of `hca` (in `pd`, with its own CQ and buffers), brings it
    /// to RTS, posts the receives, and runs `cfg`'s agent on it. `sgid_index` names the
    /// port's GID the agent sends from (`cfg.local_gid` should be that GID).
    pub fn new(
        hca: &mut Hca,
        pd: PdHandle,
        port_num: u8,
        sgid_index: u8,
        cfg: CmConfig,
    ) -> Result<CmPort, CmPortError> {
        let cq = setup(
            hca.create_cq((RECV_SLOTS + SEND_SLOTS) as u32),
            "create the CQ",
        )?;
        let cap = QpCap {
            max_send_wr: SEND_SLOTS as u32,
            max_recv_wr: RECV_SLOTS as u32,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let qpn = setup(
            hca.create_gsi_qp(pd, &QpInitAttr::new(QpType::Ud, cq, cap)),
            "create QP1",
        )?;
        let init = QpAttr {
            qp_state: QpState::Init,
            port_num,
            pkey_index: 0,
            qkey: GSI_QKEY,
            ..QpAttr::default()
        };
        setup(
            hca.modify_qp(
                qpn,
                &init,
                QpAttrMask::STATE | QpAttrMask::PORT | QpAttrMask::PKEY_INDEX | QpAttrMask::QKEY,
            ),
            "QP1 to INIT",
        )?;
        setup(
            hca.modify_qp(qpn, &QpAttr::to_state(QpState::Rtr), QpAttrMask::STATE),
            "QP1 to RTR",
        )?;
        let rts = QpAttr {
            qp_state: QpState::Rts,
            sq_psn: Psn::new(0),
            ..QpAttr::default()
        };
        setup(
            hca.modify_qp(qpn, &rts, QpAttrMask::STATE | QpAttrMask::SQ_PSN),
            "QP1 to RTS",
        )?;
        let mr = setup(
            hca.reg_mr(
                pd,
                vec![0u8; SLOT * (RECV_SLOTS + SEND_SLOTS)],
                AccessFlags::LOCAL_WRITE,
                None,
            ),
            "register the buffers",
        )?;
        let mut port = CmPort {
            agent: CmAgent::new(cfg),
            qpn,
            cq,
            pd,
            mr,
            port_num,
            sgid_index,
            ahs: HashMap::new(),
            free_send: (0..SEND_SLOTS).rev().collect(),
            waiting: VecDeque::new(),
            dropped: 0,
        };
        for i in 0..RECV_SLOTS {
            setup(port.post_recv(hca, i), "post the receives")?;
        }
        Ok(port)
    }

    /// The agent: connect, listen, accept, events.
    pub fn agent(&mut self) -> &mut CmAgent {
        &mut self.agent
    }

    /// When [`CmPort::poll`] must run next even if the HCA completes nothing.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.agent.poll_timeout()
    }

    /// Moves MADs between QP1 and the agent and runs the agent's due timers.
    pub fn poll(&mut self, hca: &mut Hca, now: Instant) {
        let mut wcs = [WorkCompletion::default(); 16];
        loop {
            let n = hca.poll_cq_into(self.cq, &mut wcs).unwrap_or(0);
            for wc in &wcs[..n] {
                self.completed(hca, now, wc);
            }
            if n < wcs.len() {
                break;
            }
        }
        if self.agent.poll_timeout().is_some_and(|t| t <= now) {
            self.agent.handle_timeout(now);
        }
        while let Some(m) = self.agent.poll_transmit() {
            self.waiting.push_back(m);
        }
        while !self.free_send.is_empty() {
            let Some(m) = self.waiting.pop_front() else {
                break;
            };
            self.send(hca, &m);
        }
    }

    fn completed(&mut self, hca: &mut Hca, now: Instant, wc: &WorkCompletion) {
        if wc.wr_id & SEND_TAG != 0 {
            self.free_send.push((wc.wr_id & !SEND_TAG) as usize);
            return;
        }
        let slot = wc.wr_id as usize;
        if wc.status == WcStatus::Success && wc.byte_len as usize >= SLOT {
            let mut buf = [0u8; SLOT];
            if hca.mr_read(self.mr.handle, slot * SLOT, &mut buf).is_ok() {
                let mut area = [0u8; GRH_AREA];
                area.copy_from_slice(&buf[..GRH_AREA]);
                let from = crate::read_grh_area(&area).sgid;
                self.agent.on_mad(now, from, &buf[GRH_AREA..]);
            }
        } else if wc.status == WcStatus::Success {
            self.dropped += 1;
        }
        if wc.status != WcStatus::WrFlushErr {
            let _ = self.post_recv(hca, slot);
        }
    }

    fn post_recv(&mut self, hca: &mut Hca, slot: usize) -> Result<(), impl std::fmt::Display> {
        let sge = Sge::new(
            self.mr.addr + (slot * SLOT) as u64,
            SLOT as u32,
            self.mr.lkey,
        );
        hca.post_recv(self.qpn, &[RecvWr::new(slot as u64, vec![sge])])
    }

    fn send(&mut self, hca: &mut Hca, m: &OutMad) {
        let Some(ah) = self.ah(hca, m.peer) else {
            self.dropped += 1;
            return;
        };
        let Some(slot) = self.free_send.pop() else {
            return;
        };
        let at = (RECV_SLOTS + slot) * SLOT;
        if hca.mr_write(self.mr.handle, at, &m.mad).is_err() {
            self.free_send.push(slot);
            self.dropped += 1;
            return;
        }
        let sge = Sge::new(self.mr.addr + at as u64, MAD_LEN as u32, self.mr.lkey);
        let wr = SendWr::new(SEND_TAG | slot as u64, WrOpcode::Send)
            .with_sge(sge)
            .signaled()
            .with_ud(ah, Qpn::new(GSI_QPN), GSI_QKEY);
        if hca.post_send(self.qpn, &[wr]).is_err() {
            self.free_send.push(slot);
            self.dropped += 1;
        }
    }

    fn ah(&mut self, hca: &mut Hca, gid: Gid) -> Option<AhHandle> {
        if let Some(&ah) = self.ahs.get(&gid) {
            return Some(ah);
        }
        let attr = AhAttr::global(self.port_num, gid, self.sgid_index);
        let ah = hca.create_ah(self.pd, &attr).ok()?;
        self.ahs.insert(gid, ah);
        Some(ah)
    }
}
