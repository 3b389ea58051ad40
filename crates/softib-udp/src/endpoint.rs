//! The resources of a typical verbs program on one [`Device`]: a PD, one CQ, one registered
//! buffer and one QP, plus the waits every tool needs (poll the CQ while driving the
//! progress engine).

use std::io;
use std::time::{Duration, Instant as WallInstant};

use softib_core::setup::{ConnectOptions, EndpointInfo};
use softib_core::verbs::cq::WorkCompletion;
use softib_core::verbs::mr::MrInfo;
use softib_core::verbs::qp::{QpAttr, QpAttrMask, QpCap, QpInitAttr};
use softib_core::verbs::types::{AccessFlags, QpState, QpType};
use softib_core::verbs::{CqHandle, PdHandle};
use softib_wire::{Psn, Qpn};

use crate::{Device, PollMode};

/// Boxed error of the endpoint helpers.
pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// Sizes of an [`Endpoint`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndpointConfig {
    /// Service of the QP.
    pub qp_type: QpType,
    /// Bytes of the registered buffer.
    pub buf_len: usize,
    /// Send queue depth.
    pub send_depth: u32,
    /// Receive queue depth.
    pub recv_depth: u32,
    /// Inline data limit of the QP.
    pub max_inline: u32,
}

/// A PD, a CQ shared by both queues, a buffer registered with every access right, and a QP.
#[derive(Debug)]
pub struct Endpoint {
    /// The device (its HCA owns every object here).
    pub dev: Device,
    /// Protection domain.
    pub pd: PdHandle,
    /// Completion queue of both queues.
    pub cq: CqHandle,
    /// The QP.
    pub qpn: Qpn,
    /// The registered buffer.
    pub mr: MrInfo,
    /// First PSN of this side's requester.
    pub psn: Psn,
    /// Service of the QP.
    pub qp_type: QpType,
    /// RD: the QP's reliable datagram domain and the EE context it sends through.
    pub rd: Option<(softib_core::verbs::RddHandle, softib_wire::Eecn)>,
    wcs: Vec<WorkCompletion>,
}

/// Q_Key of the UD pingpong tools (`ibv_ud_pingpong`).
pub const UD_QKEY: u32 = 0x1111_1111;

impl Endpoint {
    /// Creates the objects on `dev` and moves the QP to INIT ([`Endpoint::init`]); `psn` is
    /// this side's first requester PSN.
    pub fn new(mut dev: Device, cfg: &EndpointConfig, psn: Psn) -> Result<Endpoint, Error> {
        let hca = dev.hca_mut();
        let pd = hca.alloc_pd()?;
        let cqe = (cfg.send_depth + cfg.recv_depth + 1).min(hca.query_device().max_cqe);
        let cq = hca.create_cq(cqe)?;
        let access = AccessFlags::LOCAL_WRITE
            | AccessFlags::REMOTE_WRITE
            | AccessFlags::REMOTE_READ
            | AccessFlags::REMOTE_ATOMIC;
        let mr = hca.reg_mr(pd, vec![0u8; cfg.buf_len], access, None)?;
        let cap = QpCap {
            max_send_wr: cfg.send_depth,
            max_recv_wr: cfg.recv_depth,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: cfg.max_inline,
        };
        let init = QpInitAttr::new(cfg.qp_type, cq, cap);
        // An RD QP belongs to a reliable datagram domain, and sends through an EE context.
        let (qpn, rd) = if cfg.qp_type == QpType::Rd {
            let rdd = hca.alloc_rdd()?;
            let qpn = hca.create_rd_qp(pd, rdd, &init)?;
            (qpn, Some((rdd, hca.create_eec(rdd)?)))
        } else {
            (hca.create_qp(pd, &init)?, None)
        };
        let mut ep = Endpoint {
            dev,
            pd,
            cq,
            qpn,
            mr,
            psn,
            qp_type: cfg.qp_type,
            rd,
            wcs: vec![WorkCompletion::default(); 64],
        };
        ep.init()?;
        Ok(ep)
    }

    /// What this side tells its peer out of band.
    pub fn info(&self) -> EndpointInfo {
        EndpointInfo {
            qpn: self.qpn,
            psn: self.psn,
            gid: self.dev.gid(),
            lid: 0,
        }
    }

    /// Moves the QP from RESET to INIT on port 1 (P_Key index 0): RC with local write and
    /// every remote right, UC with local and remote write, UD with Q_Key [`UD_QKEY`].
    /// Receives may be posted from INIT on, as the rdma-core examples do before connecting.
    pub fn init(&mut self) -> Result<(), Error> {
        let mut attr = QpAttr {
            qp_state: QpState::Init,
            port_num: 1,
            pkey_index: 0,
            ..QpAttr::default()
        };
        let mut mask = QpAttrMask::STATE | QpAttrMask::PORT | QpAttrMask::PKEY_INDEX;
        match self.qp_type {
            QpType::Ud => {
                attr.qkey = UD_QKEY;
                mask |= QpAttrMask::QKEY;
            }
            // An RD QP: its Q_Key and rights; the P_Key is its EE context's.
            QpType::Rd => {
                attr.qkey = UD_QKEY;
                attr.qp_access_flags = ConnectOptions::default().access;
                mask = QpAttrMask::STATE
                    | QpAttrMask::PORT
                    | QpAttrMask::QKEY
                    | QpAttrMask::ACCESS_FLAGS;
            }
            QpType::Uc => {
                attr.qp_access_flags = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
                mask |= QpAttrMask::ACCESS_FLAGS;
            }
            _ => {
                attr.qp_access_flags = ConnectOptions::default().access;
                mask |= QpAttrMask::ACCESS_FLAGS;
            }
        }
        let qpn = self.qpn;
        self.dev.hca_mut().modify_qp(qpn, &attr, mask)?;
        Ok(())
    }

    /// Moves the QP from INIT to RTS towards `remote`: RC and UC as
    /// [`softib_core::setup::connect_from_init`] does (RC: the attributes of `ibv_rc_pingpong`,
    /// from `o`; UC without the READ/atomic and RNR attributes); UD: state and SQ PSN only.
    pub fn connect(&mut self, remote: &EndpointInfo, o: &ConnectOptions) -> Result<(), Error> {
        let (qpn, psn) = (self.qpn, self.psn);
        let hca = self.dev.hca_mut();
        match self.qp_type {
            QpType::Rc | QpType::Uc | QpType::XrcSend => {
                softib_core::setup::connect_from_init(hca, qpn, psn, remote, o)?;
            }
            QpType::Ud => {
                hca.modify_qp(qpn, &QpAttr::to_state(QpState::Rtr), QpAttrMask::STATE)?;
                let rts = QpAttr {
                    qp_state: QpState::Rts,
                    sq_psn: psn,
                    ..QpAttr::default()
                };
                hca.modify_qp(qpn, &rts, QpAttrMask::STATE | QpAttrMask::SQ_PSN)?;
            }
            // An RD QP needs only its state; its EE context is connected by `connect_eec`.
            QpType::Rd => {
                hca.modify_qp(qpn, &QpAttr::to_state(QpState::Rtr), QpAttrMask::STATE)?;
                hca.modify_qp(qpn, &QpAttr::to_state(QpState::Rts), QpAttrMask::STATE)?;
            }
            other => return Err(format!("unsupported QP type {other:?}").into()),
        }
        Ok(())
    }

    /// RD: moves the endpoint's EE context from RESET to RTS towards the remote EE context
    /// numbered `remote_eecn` at `remote` (its GID; `remote.psn` is the remote EE context's
    /// first PSN), with this endpoint's PSN.
    pub fn connect_eec(
        &mut self,
        remote_eecn: softib_wire::Eecn,
        remote: &EndpointInfo,
        o: &ConnectOptions,
    ) -> Result<(), Error> {
        let Some((_, eecn)) = self.rd else {
            return Err("not an RD endpoint".into());
        };
        let to = EndpointInfo {
            qpn: Qpn::new(remote_eecn.value()),
            ..*remote
        };
        let psn = self.psn;
        softib_core::setup::connect_eec(self.dev.hca_mut(), eecn, psn, &to, o)?;
        Ok(())
    }

    /// Drives the device until at least one completion is available or `deadline` passes;
    /// returns the completions taken from the CQ (empty on timeout).
    pub fn wait_completions(
        &mut self,
        mode: PollMode,
        deadline: WallInstant,
    ) -> Result<&[WorkCompletion], Error> {
        loop {
            let n = self.dev.hca_mut().poll_cq_into(self.cq, &mut self.wcs)?;
            if n > 0 {
                return Ok(&self.wcs[..n]);
            }
            let now = WallInstant::now();
            if now >= deadline {
                return Ok(&[]);
            }
            self.dev
                .progress(
                    mode,
                    deadline.duration_since(now).min(Duration::from_millis(50)),
                )
                .map_err(io_err)?;
        }
    }
}

fn io_err(e: io::Error) -> Error {
    Box::new(e)
}
