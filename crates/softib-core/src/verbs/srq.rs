//! Shared receive queues.
//!
//! An SRQ holds receive WQEs that any QP attached to it consumes. Its limit (`srq_limit`) is
//! armed by `modify_srq` with a non-zero value; when taking a WQE leaves fewer WQEs than the
//! limit, the HCA queues `IBV_EVENT_SRQ_LIMIT_REACHED` and disarms the limit (it reads back 0).
//!
//! An XRC SRQ (`IBV_SRQT_XRC`) belongs to an XRC domain and has its own CQ: no QP is attached
//! to it. Requests reach it through any XRC target QP of the same domain, whose packets name
//! it by its SRQ number in the XRCETH; its receive completions go to its CQ, and memory of
//! RDMA and atomic requests through it is checked in its protection domain.

use super::wr::RecvWqe;
use super::{CqHandle, PdHandle, XrcdHandle};
use bitflags::bitflags;
use std::collections::VecDeque;

/// SRQ creation attributes (`struct ibv_srq_init_attr`). `srq_limit` is ignored at creation,
/// as in libibverbs; arm it with `modify_srq`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SrqInitAttr {
    /// Maximum outstanding receive WRs.
    pub max_wr: u32,
    /// Maximum SGEs per receive WR.
    pub max_sge: u32,
    /// Limit (ignored at creation).
    pub srq_limit: u32,
}

/// SRQ attributes (`struct ibv_srq_attr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SrqAttr {
    /// Maximum outstanding receive WRs.
    pub max_wr: u32,
    /// Maximum SGEs per receive WR (read-only).
    pub max_sge: u32,
    /// Limit; 0 when disarmed.
    pub srq_limit: u32,
}

bitflags! {
    /// Which attributes `modify_srq` changes (`enum ibv_srq_attr_mask`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct SrqAttrMask: u32 {
        /// Resize to `max_wr`.
        const MAX_WR = 1;
        /// Arm (non-zero) or disarm (zero) the limit.
        const LIMIT = 1 << 1;
    }
}

/// What makes an SRQ an XRC SRQ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct XrcSrq {
    /// The XRC domain whose target QPs may deliver into it.
    pub(crate) xrcd: XrcdHandle,
    /// The CQ of its receive completions.
    pub(crate) cq: CqHandle,
    /// The host-wide domain it is published in, when its domain is shared with other HCAs:
    /// its WQEs are then reserved before they are taken (`hca/xrc_shared.rs`).
    pub(crate) published: Option<u32>,
}

#[derive(Debug, Clone)]
pub(crate) struct Srq {
    pub(crate) pd: PdHandle,
    /// SRQ number (`ibv_get_srq_num`), unique among the HCA's live SRQs.
    pub(crate) srqn: u32,
    /// Set for an XRC SRQ.
    pub(crate) xrc: Option<XrcSrq>,
    pub(crate) max_wr: u32,
    pub(crate) max_sge: u32,
    /// Armed limit, 0 when disarmed.
    pub(crate) limit: u32,
    pub(crate) queue: VecDeque<RecvWqe>,
    /// QPs attached.
    pub(crate) users: usize,
}

impl Srq {
    pub(crate) fn new(pd: PdHandle, max_wr: u32, max_sge: u32) -> Srq {
        Srq {
            pd,
            srqn: 0,
            xrc: None,
            max_wr,
            max_sge,
            limit: 0,
            queue: VecDeque::new(),
            users: 0,
        }
    }

    pub(crate) fn attr(&self) -> SrqAttr {
        SrqAttr {
            max_wr: self.max_wr,
            max_sge: self.max_sge,
            srq_limit: self.limit,
        }
    }

    /// Takes the oldest WQE. The flag is true when this crossed the armed limit (the caller
    /// queues `SrqLimitReached`); the limit is then disarmed.
    pub(crate) fn pop(&mut self) -> (Option<RecvWqe>, bool) {
        let wqe = self.queue.pop_front();
        let fire =
            wqe.is_some() && self.limit != 0 && (self.queue.len() as u64) < u64::from(self.limit);
        if fire {
            self.limit = 0;
        }
        (wqe, fire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::Key;

    fn wqe(id: u64) -> RecvWqe {
        RecvWqe {
            wr_id: id,
            sg_list: Default::default(),
            length: 0,
        }
    }

    #[test]
    fn limit_fires_once_when_count_drops_below() {
        let mut s = Srq::new(
            PdHandle(Key {
                index: 0,
                generation: 0,
            }),
            8,
            1,
        );
        for i in 0..4 {
            s.queue.push_back(wqe(i));
        }
        // Disarmed: no event.
        assert_eq!(s.pop(), (Some(wqe(0)), false));
        s.limit = 2;
        // 3 -> 2 left: not below 2.
        assert_eq!(s.pop(), (Some(wqe(1)), false));
        // 2 -> 1 left: below 2, fires and disarms.
        assert_eq!(s.pop(), (Some(wqe(2)), true));
        assert_eq!(s.attr().srq_limit, 0);
        assert_eq!(s.pop(), (Some(wqe(3)), false));
        s.limit = 5;
        // Empty queue: nothing taken, nothing fired.
        assert_eq!(s.pop(), (None, false));
    }
}
