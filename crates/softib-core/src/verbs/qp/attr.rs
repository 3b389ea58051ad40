//! QP creation and modification attributes (`struct ibv_qp_init_attr`, `struct ibv_qp_attr`,
//! `enum ibv_qp_attr_mask`).

use crate::verbs::ah::AhAttr;
use crate::verbs::types::{AccessFlags, Mtu, PathMigState, QpState, QpType};
use crate::verbs::{CqHandle, SrqHandle};
use bitflags::bitflags;
use core::fmt;
use softib_wire::Psn;

/// Work queue sizes of a QP (`struct ibv_qp_cap`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct QpCap {
    /// Maximum outstanding send WRs.
    pub max_send_wr: u32,
    /// Maximum outstanding receive WRs (0 with an SRQ).
    pub max_recv_wr: u32,
    /// Maximum SGEs per send WR.
    pub max_send_sge: u32,
    /// Maximum SGEs per receive WR (0 with an SRQ).
    pub max_recv_sge: u32,
    /// Maximum inline payload per send WR, bytes.
    pub max_inline_data: u32,
}

/// QP creation attributes (`struct ibv_qp_init_attr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QpInitAttr {
    /// CQ for send completions.
    pub send_cq: CqHandle,
    /// CQ for receive completions.
    pub recv_cq: CqHandle,
    /// Shared receive queue; when set the QP has no receive queue of its own.
    pub srq: Option<SrqHandle>,
    /// Queue sizes.
    pub cap: QpCap,
    /// Transport service.
    pub qp_type: QpType,
    /// Every send WR generates a completion, whatever its `SIGNALED` flag.
    pub sq_sig_all: bool,
}

impl QpInitAttr {
    /// Attributes with the same CQ for both queues, no SRQ and `sq_sig_all` off.
    pub fn new(qp_type: QpType, cq: CqHandle, cap: QpCap) -> QpInitAttr {
        QpInitAttr {
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            cap,
            qp_type,
            sq_sig_all: false,
        }
    }
}

bitflags! {
    /// Which fields of a [`QpAttr`] `modify_qp` applies (`enum ibv_qp_attr_mask`).
    #[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct QpAttrMask: u32 {
        /// `qp_state`: the state to move to.
        const STATE = 1;
        /// `cur_qp_state`: the state the caller believes the QP is in.
        const CUR_STATE = 1 << 1;
        /// `en_sqd_async_notify`.
        const EN_SQD_ASYNC_NOTIFY = 1 << 2;
        /// `qp_access_flags`.
        const ACCESS_FLAGS = 1 << 3;
        /// `pkey_index`.
        const PKEY_INDEX = 1 << 4;
        /// `port_num`.
        const PORT = 1 << 5;
        /// `qkey`.
        const QKEY = 1 << 6;
        /// `ah_attr` (primary address vector).
        const AV = 1 << 7;
        /// `path_mtu`.
        const PATH_MTU = 1 << 8;
        /// `timeout` (local ACK timeout exponent).
        const TIMEOUT = 1 << 9;
        /// `retry_cnt`.
        const RETRY_CNT = 1 << 10;
        /// `rnr_retry`.
        const RNR_RETRY = 1 << 11;
        /// `rq_psn`.
        const RQ_PSN = 1 << 12;
        /// `max_rd_atomic` (initiator depth).
        const MAX_QP_RD_ATOMIC = 1 << 13;
        /// `alt_ah_attr`, `alt_pkey_index`, `alt_port_num`, `alt_timeout`.
        const ALT_PATH = 1 << 14;
        /// `min_rnr_timer`.
        const MIN_RNR_TIMER = 1 << 15;
        /// `sq_psn`.
        const SQ_PSN = 1 << 16;
        /// `max_dest_rd_atomic` (responder resources).
        const MAX_DEST_RD_ATOMIC = 1 << 17;
        /// `path_mig_state`.
        const PATH_MIG_STATE = 1 << 18;
        /// `cap` (never modifiable by softib, as in Linux).
        const CAP = 1 << 19;
        /// `dest_qp_num`.
        const DEST_QPN = 1 << 20;
        /// `rate_limit` (raw QPs).
        const RATE_LIMIT = 1 << 25;
    }
}

impl QpAttrMask {
    /// The libibverbs constant name of a single-bit mask, e.g. "IBV_QP_PKEY_INDEX".
    pub fn ibv_name(self) -> Option<&'static str> {
        let name = match self {
            QpAttrMask::STATE => "IBV_QP_STATE",
            QpAttrMask::CUR_STATE => "IBV_QP_CUR_STATE",
            QpAttrMask::EN_SQD_ASYNC_NOTIFY => "IBV_QP_EN_SQD_ASYNC_NOTIFY",
            QpAttrMask::ACCESS_FLAGS => "IBV_QP_ACCESS_FLAGS",
            QpAttrMask::PKEY_INDEX => "IBV_QP_PKEY_INDEX",
            QpAttrMask::PORT => "IBV_QP_PORT",
            QpAttrMask::QKEY => "IBV_QP_QKEY",
            QpAttrMask::AV => "IBV_QP_AV",
            QpAttrMask::PATH_MTU => "IBV_QP_PATH_MTU",
            QpAttrMask::TIMEOUT => "IBV_QP_TIMEOUT",
            QpAttrMask::RETRY_CNT => "IBV_QP_RETRY_CNT",
            QpAttrMask::RNR_RETRY => "IBV_QP_RNR_RETRY",
            QpAttrMask::RQ_PSN => "IBV_QP_RQ_PSN",
            QpAttrMask::MAX_QP_RD_ATOMIC => "IBV_QP_MAX_QP_RD_ATOMIC",
            QpAttrMask::ALT_PATH => "IBV_QP_ALT_PATH",
            QpAttrMask::MIN_RNR_TIMER => "IBV_QP_MIN_RNR_TIMER",
            QpAttrMask::SQ_PSN => "IBV_QP_SQ_PSN",
            QpAttrMask::MAX_DEST_RD_ATOMIC => "IBV_QP_MAX_DEST_RD_ATOMIC",
            QpAttrMask::PATH_MIG_STATE => "IBV_QP_PATH_MIG_STATE",
            QpAttrMask::CAP => "IBV_QP_CAP",
            QpAttrMask::DEST_QPN => "IBV_QP_DEST_QPN",
            QpAttrMask::RATE_LIMIT => "IBV_QP_RATE_LIMIT",
            _ => return None,
        };
        Some(name)
    }
}

impl fmt::Debug for QpAttrMask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for QpAttrMask {
    /// Flag names joined with " | " (e.g. "PKEY_INDEX | PORT"), "(empty)" for no flags, unknown
    /// bits in hex.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("(empty)");
        }
        let mut first = true;
        for (name, _) in self.iter_names() {
            if !first {
                f.write_str(" | ")?;
            }
            first = false;
            f.write_str(name)?;
        }
        let unknown = self.bits() & !QpAttrMask::all().bits();
        if unknown != 0 {
            if !first {
                f.write_str(" | ")?;
            }
            write!(f, "{unknown:#x}")?;
        }
        Ok(())
    }
}

/// QP attributes (`struct ibv_qp_attr`). `modify_qp` reads the fields its mask names;
/// `query_qp` fills every field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QpAttr {
    /// State to move to / current state.
    pub qp_state: QpState,
    /// State the caller believes the QP is in (with [`QpAttrMask::CUR_STATE`]).
    pub cur_qp_state: QpState,
    /// Path MTU (connected QPs).
    pub path_mtu: Mtu,
    /// Path migration state.
    pub path_mig_state: PathMigState,
    /// Q_Key (UD).
    pub qkey: u32,
    /// Expected PSN of the receive queue.
    pub rq_psn: Psn,
    /// PSN of the next request packet.
    pub sq_psn: Psn,
    /// Remote QP (connected QPs); 24 bits.
    pub dest_qp_num: u32,
    /// Remote access the QP allows as a responder (REMOTE_WRITE / REMOTE_READ / REMOTE_ATOMIC).
    pub qp_access_flags: AccessFlags,
    /// Queue sizes (read-only).
    pub cap: QpCap,
    /// Primary address vector.
    pub ah_attr: AhAttr,
    /// Alternate address vector.
    pub alt_ah_attr: AhAttr,
    /// P_Key index.
    pub pkey_index: u16,
    /// Alternate P_Key index.
    pub alt_pkey_index: u16,
    /// Request an `SqDrained` async event when the SQ has drained in SQD.
    pub en_sqd_async_notify: bool,
    /// In SQD: true while send WRs are still in flight (read-only).
    pub sq_draining: bool,
    /// Outstanding RDMA READ / atomic requests as initiator, 0..=device `max_qp_init_rd_atom`.
    pub max_rd_atomic: u8,
    /// Outstanding RDMA READ / atomic requests as responder, 0..=device `max_qp_rd_atom`.
    pub max_dest_rd_atomic: u8,
    /// Minimum RNR NAK timer code, 0..=31.
    pub min_rnr_timer: u8,
    /// Port, 1-based.
    pub port_num: u8,
    /// Local ACK timeout exponent, 0..=31 (0 = infinite).
    pub timeout: u8,
    /// Transport retry count, 0..=7.
    pub retry_cnt: u8,
    /// RNR retry count, 0..=7 (7 = infinite).
    pub rnr_retry: u8,
    /// Alternate port.
    pub alt_port_num: u8,
    /// Alternate local ACK timeout exponent.
    pub alt_timeout: u8,
    /// Rate limit in kbit/s (raw QPs).
    pub rate_limit: u32,
}

impl Default for QpAttr {
    fn default() -> Self {
        QpAttr {
            qp_state: QpState::Reset,
            cur_qp_state: QpState::Reset,
            path_mtu: Mtu::Mtu256,
            path_mig_state: PathMigState::Migrated,
            qkey: 0,
            rq_psn: Psn::new(0),
            sq_psn: Psn::new(0),
            dest_qp_num: 0,
            qp_access_flags: AccessFlags::empty(),
            cap: QpCap::default(),
            ah_attr: AhAttr::default(),
            alt_ah_attr: AhAttr::default(),
            pkey_index: 0,
            alt_pkey_index: 0,
            en_sqd_async_notify: false,
            sq_draining: false,
            max_rd_atomic: 0,
            max_dest_rd_atomic: 0,
            min_rnr_timer: 0,
            port_num: 1,
            timeout: 0,
            retry_cnt: 0,
            rnr_retry: 0,
            alt_port_num: 1,
            alt_timeout: 0,
            rate_limit: 0,
        }
    }
}

impl QpAttr {
    /// Attributes that only request a move to `state`.
    pub fn to_state(state: QpState) -> QpAttr {
        QpAttr {
            qp_state: state,
            ..QpAttr::default()
        }
    }

    /// Copies the fields named by `mask` from `src` (the apply step of `modify_qp`; read-only
    /// fields and `CUR_STATE` are not copied).
    pub(crate) fn apply(&mut self, src: &QpAttr, mask: QpAttrMask) {
        let m = |f: QpAttrMask| mask.contains(f);
        if m(QpAttrMask::STATE) {
            self.qp_state = src.qp_state;
        }
        if m(QpAttrMask::EN_SQD_ASYNC_NOTIFY) {
            self.en_sqd_async_notify = src.en_sqd_async_notify;
        }
        if m(QpAttrMask::ACCESS_FLAGS) {
            self.qp_access_flags = src.qp_access_flags;
        }
        if m(QpAttrMask::PKEY_INDEX) {
            self.pkey_index = src.pkey_index;
        }
        if m(QpAttrMask::PORT) {
            self.port_num = src.port_num;
        }
        if m(QpAttrMask::QKEY) {
            self.qkey = src.qkey;
        }
        if m(QpAttrMask::AV) {
            self.ah_attr = src.ah_attr;
        }
        if m(QpAttrMask::PATH_MTU) {
            self.path_mtu = src.path_mtu;
        }
        if m(QpAttrMask::TIMEOUT) {
            self.timeout = src.timeout;
        }
        if m(QpAttrMask::RETRY_CNT) {
            self.retry_cnt = src.retry_cnt;
        }
        if m(QpAttrMask::RNR_RETRY) {
            self.rnr_retry = src.rnr_retry;
        }
        if m(QpAttrMask::RQ_PSN) {
            self.rq_psn = src.rq_psn;
        }
        if m(QpAttrMask::MAX_QP_RD_ATOMIC) {
            self.max_rd_atomic = src.max_rd_atomic;
        }
        if m(QpAttrMask::ALT_PATH) {
            self.alt_ah_attr = src.alt_ah_attr;
            self.alt_pkey_index = src.alt_pkey_index;
            self.alt_port_num = src.alt_port_num;
            self.alt_timeout = src.alt_timeout;
        }
        if m(QpAttrMask::MIN_RNR_TIMER) {
            self.min_rnr_timer = src.min_rnr_timer;
        }
        if m(QpAttrMask::SQ_PSN) {
            self.sq_psn = src.sq_psn;
        }
        if m(QpAttrMask::MAX_DEST_RD_ATOMIC) {
            self.max_dest_rd_atomic = src.max_dest_rd_atomic;
        }
        if m(QpAttrMask::PATH_MIG_STATE) {
            self.path_mig_state = src.path_mig_state;
        }
        if m(QpAttrMask::DEST_QPN) {
            self.dest_qp_num = src.dest_qp_num;
        }
        if m(QpAttrMask::RATE_LIMIT) {
            self.rate_limit = src.rate_limit;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mask_values_match_libibverbs() {
        assert_eq!(QpAttrMask::STATE.bits(), 1);
        assert_eq!(QpAttrMask::ACCESS_FLAGS.bits(), 8);
        assert_eq!(QpAttrMask::AV.bits(), 0x80);
        assert_eq!(QpAttrMask::RQ_PSN.bits(), 0x1000);
        assert_eq!(QpAttrMask::SQ_PSN.bits(), 0x1_0000);
        assert_eq!(QpAttrMask::DEST_QPN.bits(), 0x10_0000);
        assert_eq!(QpAttrMask::RATE_LIMIT.bits(), 0x200_0000);
        for (name, flag) in QpAttrMask::all().iter_names() {
            assert_eq!(flag.ibv_name(), Some(&*format!("IBV_QP_{name}")));
        }
        assert_eq!((QpAttrMask::PORT | QpAttrMask::QKEY).ibv_name(), None);
    }

    #[test]
    fn mask_display() {
        assert_eq!(
            (QpAttrMask::PKEY_INDEX | QpAttrMask::PORT).to_string(),
            "PKEY_INDEX | PORT"
        );
        assert_eq!(QpAttrMask::empty().to_string(), "(empty)");
        assert_eq!(
            QpAttrMask::from_bits_retain(1 | (1 << 30)).to_string(),
            "STATE | 0x40000000"
        );
        assert_eq!(format!("{:?}", QpAttrMask::QKEY), "QKEY");
    }

    #[test]
    fn apply_copies_only_masked_fields() {
        let mut cur = QpAttr::default();
        let src = QpAttr {
            qp_state: QpState::Init,
            qkey: 0x1111,
            pkey_index: 3,
            port_num: 2,
            timeout: 14,
            alt_timeout: 9,
            alt_port_num: 2,
            sq_draining: true,
            ..QpAttr::default()
        };
        cur.apply(&src, QpAttrMask::STATE | QpAttrMask::QKEY);
        assert_eq!(cur.qp_state, QpState::Init);
        assert_eq!(cur.qkey, 0x1111);
        assert_eq!(cur.pkey_index, 0);
        assert_eq!(cur.port_num, 1);
        assert!(!cur.sq_draining);
        cur.apply(&src, QpAttrMask::ALT_PATH);
        assert_eq!(cur.alt_timeout, 9);
        assert_eq!(cur.alt_port_num, 2);
        assert_eq!(cur.timeout, 0);
    }
}
