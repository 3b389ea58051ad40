//! softib-core: the sans-IO InfiniBand transport engine.
//!
//! This crate holds the verbs object model ([`verbs`]) and the endpoint that owns it
//! ([`Hca`]): protection domains, memory regions, completion queues, shared receive queues,
//! address handles and queue pairs with their table-driven state machine. It performs no I/O:
//! no sockets, no threads, no clocks. Time enters as [`time::Instant`] values supplied by the
//! driver.
//!
//! # Quick start
//!
//! ```
//! use softib_core::verbs::qp::{QpAttr, QpAttrMask, QpCap, QpInitAttr};
//! use softib_core::verbs::types::{AccessFlags, QpState, QpType};
//! use softib_core::{Hca, HcaConfig};
//!
//! let mut hca = Hca::new(HcaConfig::new(1));
//! let pd = hca.alloc_pd().unwrap();
//! let cq = hca.create_cq(16).unwrap();
//! let cap = QpCap { max_send_wr: 8, max_recv_wr: 8, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
//! let qpn = hca.create_qp(pd, &QpInitAttr::new(QpType::Rc, cq, cap)).unwrap();
//!
//! let attr = QpAttr { qp_state: QpState::Init, port_num: 1, qp_access_flags: AccessFlags::REMOTE_WRITE, ..QpAttr::default() };
//! hca.modify_qp(qpn, &attr, QpAttrMask::STATE | QpAttrMask::PORT | QpAttrMask::PKEY_INDEX | QpAttrMask::ACCESS_FLAGS).unwrap();
//! assert_eq!(hca.query_qp(qpn).unwrap().qp_state, QpState::Init);
//!
//! // Leaving out a required attribute is an error that names it.
//! let err = hca.modify_qp(qpn, &QpAttr::to_state(QpState::Rtr), QpAttrMask::STATE).unwrap_err();
//! assert!(err.to_string().contains("needs attributes AV"));
//! ```

#![forbid(unsafe_code)]

pub mod cm;
pub mod error;
mod hca;
pub mod setup;
mod table;
pub mod time;
pub mod transport;
pub mod verbs;

pub use hca::{delegation_srqn, MemoryXrcShare, Reservation, XrcSrqShare, DELEGATION_HEADER};
pub use hca::{gid_of_ipv4, ipv4_of, mac_for_gid, udp_source_port, Hca, MAX_FRAME};
pub use hca::{
    is_multicast_gid, read_grh_area, GrhAreaInfo, GRH_AREA, GSI_QKEY, GSI_QPN, MCAST_QPN,
};
pub use hca::{raw_header_len, raw_max_message, MULTICAST_LID_BASE, PERMISSIVE_LID};
pub use hca::{PlacementSink, PlacementUpdate, Transmitted};
pub use verbs::device::{HcaConfig, NumberRange};
