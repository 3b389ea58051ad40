//! XRC (IBA annex A14, eXtended Reliable Connected): XRC domains, XRC SRQs and XRC target
//! QPs, and the responder's choice of receive queue for an XRC request.
//!
//! An XRC connection has two halves. The initiator (`XRC_SEND`) is an RC requester whose
//! request packets carry an XRCETH naming the XRC SRQ of the remote node that is to receive
//! each message; it has no receive queue. The target (`XRC_RECV`) is an RC responder with no
//! queues of its own: it belongs to an XRC domain and places each request into the XRC SRQ
//! of that domain which the XRCETH names. That SRQ supplies the receive WQE, its CQ takes the
//! completion, and its protection domain is the one the request's R_Key is checked in. So one
//! initiator per remote node reaches every process there that has an SRQ in the domain.
//!
//! Everything else — PSNs, acknowledgements, NAKs, retries, RNR, READ and ATOMIC resources,
//! duplicates — is RC's (`requester.rs`, `completer.rs`, `responder.rs`), with the opcodes of
//! the XRC class (0xA0 | operation). A request whose XRCETH names no SRQ, an SRQ that is not
//! an XRC SRQ, or one of another domain is an XRCETH violation: NAK-Invalid RD Request (IBA
//! 9.7.5.2.8), after which the target QP enters ERR as for RC's fatal NAKs. An XRC packet that
//! reaches a QP of another type is dropped by the header checks (`wrong_service`).

use super::Hca;
use crate::error::{CreateQpError, CreateSrqError, XrcdError};
use crate::table::Key;
use crate::verbs::qp::{Qp, QpCap, QpInitAttr};
use crate::verbs::srq::{Srq, SrqInitAttr, XrcSrq};
use crate::verbs::types::QpType;
use crate::verbs::{CqHandle, PdHandle, SrqHandle, XrcdHandle};
use softib_wire::Qpn;

/// Largest number of XRC domains an HCA holds at once.
pub const MAX_XRCD: u32 = 1 << 16;

/// An XRC domain: a count of the XRC SRQs and target QPs in it, and the host-wide domain it
/// is this HCA's share of, if it is shared with other HCAs (`xrc_shared.rs`).
#[derive(Debug, Clone, Default)]
pub(crate) struct Xrcd {
    pub(crate) users: usize,
    pub(crate) share: Option<u32>,
}

/// Where the receive side of an XRC request lands: the SRQ its XRCETH names, that SRQ's
/// protection domain and CQ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct XrcTarget {
    pub(crate) srq: SrqHandle,
    pub(crate) pd: PdHandle,
    pub(crate) cq: CqHandle,
}

impl Hca {
    /// Allocates an XRC domain (`ibv_open_xrcd` creating a new one).
    pub fn alloc_xrcd(&mut self) -> Result<XrcdHandle, XrcdError> {
        if self.xrcds.len() >= MAX_XRCD as usize {
            return Err(XrcdError::TooManyXrcds { max: MAX_XRCD });
        }
        Ok(XrcdHandle(self.xrcds.insert(Xrcd::default())))
    }

    /// Frees an XRC domain (`ibv_close_xrcd` by its last user); fails while XRC SRQs or XRC
    /// target QPs belong to it.
    pub fn dealloc_xrcd(&mut self, xrcd: XrcdHandle) -> Result<(), XrcdError> {
        let d = self.xrcds.get(xrcd.0).ok_or(XrcdError::NoSuchXrcd(xrcd))?;
        if d.users > 0 {
            return Err(XrcdError::Busy {
                xrcd,
                users: d.users,
            });
        }
        self.xrcds.remove(xrcd.0);
        Ok(())
    }

    /// Creates an XRC SRQ (`ibv_create_srq_ex` with `IBV_SRQT_XRC`): receive buffers of `pd`,
    /// completions on `cq`, reachable through the XRC target QPs of `xrcd` by its SRQ number
    /// ([`Hca::srq_num`]).
    pub fn create_xrc_srq(
        &mut self,
        pd: PdHandle,
        xrcd: XrcdHandle,
        cq: CqHandle,
        init: &SrqInitAttr,
    ) -> Result<SrqHandle, CreateSrqError> {
        self.check_srq_init(pd, init)?;
        if self.xrcds.get(xrcd.0).is_none() {
            return Err(CreateSrqError::NoSuchXrcd(xrcd));
        }
        let Some(c) = self.cqs.get_mut(cq.0) else {
            return Err(CreateSrqError::NoSuchCq(cq));
        };
        c.users += 1;
        if let Some(d) = self.xrcds.get_mut(xrcd.0) {
            d.users += 1;
        }
        let mut srq = Srq::new(pd, init.max_wr, init.max_sge);
        srq.xrc = Some(XrcSrq {
            xrcd,
            cq,
            published: None,
        });
        let h = self.insert_srq(srq);
        if let Some(id) = self.xrcds.get(xrcd.0).and_then(|d| d.share) {
            self.xrc_publish(h, id);
        }
        Ok(h)
    }

    /// Creates an XRC target QP in RESET (`ibv_create_qp_ex` with `IBV_QPT_XRC_RECV`). It has
    /// no PD, CQ or queue: its requests land in the XRC SRQs of `xrcd`. Its creator holds it
    /// like an opener ([`Hca::open_xrc_tgt_qp`]) and releases it with [`Hca::destroy_qp`].
    pub fn create_xrc_tgt_qp(&mut self, xrcd: XrcdHandle) -> Result<Qpn, CreateQpError> {
        if self.xrcds.get(xrcd.0).is_none() {
            return Err(CreateQpError::NoSuchXrcd(xrcd));
        }
        let max = self.device.max_qp;
        if self.qps.len() >= max as usize {
            return Err(CreateQpError::TooManyQps { max });
        }
        let qpn = self.alloc_qpn();
        let none = CqHandle(Key::NONE);
        let init = QpInitAttr {
            send_cq: none,
            recv_cq: none,
            srq: None,
            cap: QpCap::default(),
            qp_type: QpType::XrcRecv,
            sq_sig_all: false,
        };
        let mut qp = Qp::new(qpn, PdHandle(Key::NONE), &init);
        qp.xrcd = Some(xrcd);
        self.qps.insert(qpn.value(), qp);
        if let Some(d) = self.xrcds.get_mut(xrcd.0) {
            d.users += 1;
        }
        Ok(qpn)
    }

    /// Takes one more hold on the XRC target QP `qpn` of `xrcd` (`ibv_open_qp`): another
    /// process or object of the domain may modify, query and destroy it, and it lives until
    /// every holder has destroyed it.
    pub fn open_xrc_tgt_qp(&mut self, xrcd: XrcdHandle, qpn: Qpn) -> Result<(), XrcdError> {
        if self.xrcds.get(xrcd.0).is_none() {
            return Err(XrcdError::NoSuchXrcd(xrcd));
        }
        match self.qps.get_mut(&qpn.value()) {
            Some(qp) if qp.qp_type == QpType::XrcRecv && qp.xrcd == Some(xrcd) => {
                qp.opens += 1;
                Ok(())
            }
            _ => Err(XrcdError::NoSuchTgtQp { xrcd, qpn }),
        }
    }

    /// The XRC SRQ numbered `srqn` if it belongs to the XRC domain of target QP `qp`: the
    /// receive side of a request the target received with that XRCETH. `None` is an XRCETH
    /// violation.
    pub(crate) fn xrc_target(&self, qp: &Qp, srqn: u32) -> Option<XrcTarget> {
        let xrcd = qp.xrcd?;
        let &srq = self.srqs_by_num.get(&srqn)?;
        let s = self.srqs.get(srq.0)?;
        let x = s.xrc.filter(|x| x.xrcd == xrcd)?;
        Some(XrcTarget {
            srq,
            pd: s.pd,
            cq: x.cq,
        })
    }
}
