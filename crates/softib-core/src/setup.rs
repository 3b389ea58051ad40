//! Connection set-up helpers: the `modify_qp` sequence RESET → INIT → RTR → RTS that every
//! RDMA program writes by hand (as `ibv_rc_pingpong` does after exchanging LID:QPN:PSN:GID).

use softib_wire::{Eecn, Psn, Qpn};

use crate::error::ModifyQpError;
use crate::verbs::ah::AhAttr;
use crate::verbs::qp::{QpAttr, QpAttrMask};
use crate::verbs::types::{AccessFlags, Gid, Mtu, QpState, QpType};
use crate::Hca;

/// What one side tells the other out of band.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndpointInfo {
    pub qpn: Qpn,
    /// First PSN this side's requester will use.
    pub psn: Psn,
    pub gid: Gid,
    pub lid: u16,
}

/// Connection parameters of an RC / UC QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectOptions {
    pub port_num: u8,
    pub sgid_index: u8,
    pub path_mtu: Mtu,
    /// Transport timer exponent (Ttr = 4.096 µs × 2^timeout; 0 = infinite).
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    /// RNR NAK timer code this responder sends.
    pub min_rnr_timer: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub access: AccessFlags,
}

impl Default for ConnectOptions {
    /// The values `ibv_rc_pingpong` uses: timeout 14, retry 7, RNR retry 7, min RNR timer 12,
    /// one outstanding READ/ATOMIC, path MTU 1024, local write + remote read/write/atomic.
    fn default() -> Self {
        ConnectOptions {
            port_num: 1,
            sgid_index: 0,
            path_mtu: Mtu::Mtu1024,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 12,
            max_rd_atomic: 1,
            max_dest_rd_atomic: 1,
            access: AccessFlags::LOCAL_WRITE
                | AccessFlags::REMOTE_WRITE
                | AccessFlags::REMOTE_READ
                | AccessFlags::REMOTE_ATOMIC,
        }
    }
}

/// Moves a connected (RC, UC, XRC initiator or XRC target) QP from RESET to RTS towards `remote`; `local_psn` is the
/// first PSN of this side's requester. The address vector is global (GRH) unless `remote.gid`
/// is all zeros, in which case it routes by `remote.lid` only (native IB within a subnet).
pub fn connect(
    hca: &mut Hca,
    qpn: Qpn,
    local_psn: Psn,
    remote: &EndpointInfo,
    o: &ConnectOptions,
) -> Result<(), ModifyQpError> {
    let init = QpAttr {
        qp_state: QpState::Init,
        port_num: o.port_num,
        pkey_index: 0,
        qp_access_flags: o.access,
        ..QpAttr::default()
    };
    hca.modify_qp(
        qpn,
        &init,
        QpAttrMask::STATE | QpAttrMask::PORT | QpAttrMask::PKEY_INDEX | QpAttrMask::ACCESS_FLAGS,
    )?;
    connect_from_init(hca, qpn, local_psn, remote, o)
}

/// The second half of [`connect`]: moves a connected (RC or UC) QP already in INIT (where
/// receives may have been posted) through RTR to RTS towards `remote`.
pub fn connect_from_init(
    hca: &mut Hca,
    qpn: Qpn,
    local_psn: Psn,
    remote: &EndpointInfo,
    o: &ConnectOptions,
) -> Result<(), ModifyQpError> {
    // UC has no acknowledgements: no READ/ATOMIC resources, RNR timer or retry counts. An
    // XRC initiator has no receive side (no responder resources or RNR timer), an XRC target
    // no send side (no retry counts or READ/ATOMIC initiator depth), as Linux's table says.
    let sides = match hca.qp(qpn).map(|q| q.qp_type()) {
        Some(QpType::Uc) => (false, false),
        Some(QpType::XrcSend) => (false, true),
        Some(QpType::XrcRecv) => (true, false),
        _ => (true, true),
    };
    to_rts(
        &mut |attr, mask| hca.modify_qp(qpn, attr, mask),
        sides,
        local_psn,
        remote,
        o,
    )
}

/// Moves an RD QP from RESET through INIT (port 1, P_Key index 0, `qkey`, `access`) and RTR to
/// RTS. An RD QP has no path and no PSNs: those are its EE contexts' ([`connect_eec`]).
pub fn ready_rd_qp(
    hca: &mut Hca,
    qpn: Qpn,
    qkey: u32,
    access: AccessFlags,
) -> Result<(), ModifyQpError> {
    let init = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        qkey,
        qp_access_flags: access,
        ..QpAttr::default()
    };
    let m = QpAttrMask::STATE | QpAttrMask::PORT | QpAttrMask::QKEY | QpAttrMask::ACCESS_FLAGS;
    hca.modify_qp(qpn, &init, m)?;
    hca.modify_qp(qpn, &QpAttr::to_state(QpState::Rtr), QpAttrMask::STATE)?;
    hca.modify_qp(qpn, &QpAttr::to_state(QpState::Rts), QpAttrMask::STATE)
}

/// Moves EE context `eecn` from RESET to RTS towards the remote EE context `remote.qpn` (its
/// EECN), as [`connect`] moves an RC QP: the same path, PSN, timer and retry attributes, no
/// access flags (they are the RD QPs').
pub fn connect_eec(
    hca: &mut Hca,
    eecn: Eecn,
    local_psn: Psn,
    remote: &EndpointInfo,
    o: &ConnectOptions,
) -> Result<(), ModifyQpError> {
    let init = QpAttr {
        qp_state: QpState::Init,
        port_num: o.port_num,
        pkey_index: 0,
        ..QpAttr::default()
    };
    hca.modify_eec(
        eecn,
        &init,
        QpAttrMask::STATE | QpAttrMask::PORT | QpAttrMask::PKEY_INDEX,
    )?;
    to_rts(
        &mut |attr, mask| hca.modify_eec(eecn, attr, mask),
        (true, true),
        local_psn,
        remote,
        o,
    )
}

/// INIT → RTR → RTS through `modify`, for a context that responds and / or requests
/// (`sides`), with the attributes each needs.
fn to_rts(
    modify: &mut dyn FnMut(&QpAttr, QpAttrMask) -> Result<(), ModifyQpError>,
    (responds, requests): (bool, bool),
    local_psn: Psn,
    remote: &EndpointInfo,
    o: &ConnectOptions,
) -> Result<(), ModifyQpError> {
    // A remote that gave no GID (all zeros) is reached by LID alone: a LID-routed address
    // vector, so native IB packets carry no GRH (LRH:LNH = IBA local).
    let mut av = if remote.gid == Gid::default() {
        AhAttr::local(o.port_num, remote.lid)
    } else {
        AhAttr::global(o.port_num, remote.gid, o.sgid_index)
    };
    av.dlid = remote.lid;
    let rtr = QpAttr {
        qp_state: QpState::Rtr,
        ah_attr: av,
        path_mtu: o.path_mtu,
        dest_qp_num: remote.qpn.value(),
        rq_psn: remote.psn,
        max_dest_rd_atomic: o.max_dest_rd_atomic,
        min_rnr_timer: o.min_rnr_timer,
        ..QpAttr::default()
    };
    let rtr_mask = QpAttrMask::STATE
        | QpAttrMask::AV
        | QpAttrMask::PATH_MTU
        | QpAttrMask::DEST_QPN
        | QpAttrMask::RQ_PSN;
    let rtr_mask = if responds {
        rtr_mask | QpAttrMask::MAX_DEST_RD_ATOMIC | QpAttrMask::MIN_RNR_TIMER
    } else {
        rtr_mask
    };
    modify(&rtr, rtr_mask)?;
    let rts = QpAttr {
        qp_state: QpState::Rts,
        sq_psn: local_psn,
        timeout: o.timeout,
        retry_cnt: o.retry_cnt,
        rnr_retry: o.rnr_retry,
        max_rd_atomic: o.max_rd_atomic,
        ..QpAttr::default()
    };
    let rts_mask = match (responds, requests) {
        (_, true) => {
            QpAttrMask::STATE
                | QpAttrMask::SQ_PSN
                | QpAttrMask::TIMEOUT
                | QpAttrMask::RETRY_CNT
                | QpAttrMask::RNR_RETRY
                | QpAttrMask::MAX_QP_RD_ATOMIC
        }
        (true, false) => QpAttrMask::STATE | QpAttrMask::SQ_PSN | QpAttrMask::TIMEOUT,
        (false, false) => QpAttrMask::STATE | QpAttrMask::SQ_PSN,
    };
    modify(&rts, rts_mask)
}
