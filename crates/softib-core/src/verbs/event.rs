//! Asynchronous events (`struct ibv_async_event`).

use super::{CqHandle, SrqHandle};
use softib_wire::{Eecn, Qpn};

/// An affiliated or unaffiliated asynchronous event, with the object it concerns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AsyncEvent {
    /// The CQ overran (`IBV_EVENT_CQ_ERR`); it is now in error.
    CqError {
        /// The CQ.
        cq: CqHandle,
    },
    /// A QP error that is not attributable to a WR moved the QP to Error (`IBV_EVENT_QP_FATAL`).
    QpFatal {
        /// The QP.
        qpn: Qpn,
    },
    /// Invalid request local work queue error: the responder detected a transport error class C
    /// violation and moved the QP to Error (`IBV_EVENT_QP_REQ_ERR`).
    QpRequestError {
        /// The QP.
        qpn: Qpn,
    },
    /// Local access violation: the responder detected a protection error and moved the QP to
    /// Error (`IBV_EVENT_QP_ACCESS_ERR`).
    QpAccessError {
        /// The QP.
        qpn: Qpn,
    },
    /// The first packet arrived on a QP in RTR (`IBV_EVENT_COMM_EST`).
    CommEstablished {
        /// The QP.
        qpn: Qpn,
    },
    /// A QP in SQD has no more send WRs in flight (`IBV_EVENT_SQ_DRAINED`); only when the
    /// transition to SQD asked for it (`en_sqd_async_notify`).
    SqDrained {
        /// The QP.
        qpn: Qpn,
    },
    /// The QP migrated to its alternate path (`IBV_EVENT_PATH_MIG`).
    PathMigrated {
        /// The QP.
        qpn: Qpn,
    },
    /// An RD EE context migrated to its alternate path (IBA 11.6.3's EE-context-affiliated
    /// Path Migrated event; libibverbs has no EE contexts and reports it as
    /// `IBV_EVENT_PATH_MIG`).
    EecPathMigrated {
        /// The EE context.
        eecn: Eecn,
    },
    /// Path migration failed (`IBV_EVENT_PATH_MIG_ERR`).
    PathMigrationError {
        /// The QP.
        qpn: Qpn,
    },
    /// A QP attached to an SRQ entered Error and will consume no more WQEs
    /// (`IBV_EVENT_QP_LAST_WQE_REACHED`).
    QpLastWqeReached {
        /// The QP.
        qpn: Qpn,
    },
    /// The SRQ hit an error (`IBV_EVENT_SRQ_ERR`).
    SrqError {
        /// The SRQ.
        srq: SrqHandle,
    },
    /// The armed SRQ's WQE count dropped below its limit (`IBV_EVENT_SRQ_LIMIT_REACHED`); the
    /// limit is disarmed.
    SrqLimitReached {
        /// The SRQ.
        srq: SrqHandle,
    },
    /// The HCA failed (`IBV_EVENT_DEVICE_FATAL`).
    DeviceFatal,
    /// The port became active (`IBV_EVENT_PORT_ACTIVE`).
    PortActive {
        /// Port number.
        port: u8,
    },
    /// The port left the active state (`IBV_EVENT_PORT_ERR`).
    PortError {
        /// Port number.
        port: u8,
    },
}

impl AsyncEvent {
    /// libibverbs `enum ibv_event_type` value.
    pub const fn raw(&self) -> u32 {
        match self {
            AsyncEvent::CqError { .. } => 0,
            AsyncEvent::QpFatal { .. } => 1,
            AsyncEvent::QpRequestError { .. } => 2,
            AsyncEvent::QpAccessError { .. } => 3,
            AsyncEvent::CommEstablished { .. } => 4,
            AsyncEvent::SqDrained { .. } => 5,
            AsyncEvent::PathMigrated { .. } | AsyncEvent::EecPathMigrated { .. } => 6,
            AsyncEvent::PathMigrationError { .. } => 7,
            AsyncEvent::DeviceFatal => 8,
            AsyncEvent::PortActive { .. } => 9,
            AsyncEvent::PortError { .. } => 10,
            AsyncEvent::SrqError { .. } => 14,
            AsyncEvent::SrqLimitReached { .. } => 15,
            AsyncEvent::QpLastWqeReached { .. } => 16,
        }
    }

    /// libibverbs name, e.g. "IBV_EVENT_QP_FATAL".
    pub const fn name(&self) -> &'static str {
        match self {
            AsyncEvent::CqError { .. } => "IBV_EVENT_CQ_ERR",
            AsyncEvent::QpFatal { .. } => "IBV_EVENT_QP_FATAL",
            AsyncEvent::QpRequestError { .. } => "IBV_EVENT_QP_REQ_ERR",
            AsyncEvent::QpAccessError { .. } => "IBV_EVENT_QP_ACCESS_ERR",
            AsyncEvent::CommEstablished { .. } => "IBV_EVENT_COMM_EST",
            AsyncEvent::SqDrained { .. } => "IBV_EVENT_SQ_DRAINED",
            AsyncEvent::PathMigrated { .. } | AsyncEvent::EecPathMigrated { .. } => {
                "IBV_EVENT_PATH_MIG"
            }
            AsyncEvent::PathMigrationError { .. } => "IBV_EVENT_PATH_MIG_ERR",
            AsyncEvent::DeviceFatal => "IBV_EVENT_DEVICE_FATAL",
            AsyncEvent::PortActive { .. } => "IBV_EVENT_PORT_ACTIVE",
            AsyncEvent::PortError { .. } => "IBV_EVENT_PORT_ERR",
            AsyncEvent::SrqError { .. } => "IBV_EVENT_SRQ_ERR",
            AsyncEvent::SrqLimitReached { .. } => "IBV_EVENT_SRQ_LIMIT_REACHED",
            AsyncEvent::QpLastWqeReached { .. } => "IBV_EVENT_QP_LAST_WQE_REACHED",
        }
    }

    /// The QP the event concerns, if it is QP-affiliated.
    pub const fn qpn(&self) -> Option<Qpn> {
        match self {
            AsyncEvent::QpFatal { qpn }
            | AsyncEvent::QpRequestError { qpn }
            | AsyncEvent::QpAccessError { qpn }
            | AsyncEvent::CommEstablished { qpn }
            | AsyncEvent::SqDrained { qpn }
            | AsyncEvent::PathMigrated { qpn }
            | AsyncEvent::PathMigrationError { qpn }
            | AsyncEvent::QpLastWqeReached { qpn } => Some(*qpn),
            _ => None,
        }
    }
}

/// Why the transport engine moves a QP to Error; selects the async event reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QpErrorCause {
    /// A local or transport error not tied to a request: `IBV_EVENT_QP_FATAL`.
    Fatal,
    /// The responder received an invalid request (class C): `IBV_EVENT_QP_REQ_ERR`.
    InvalidRequest,
    /// The responder detected an access violation: `IBV_EVENT_QP_ACCESS_ERR`.
    AccessViolation,
    /// A WR completed in error (e.g. retries exhausted); the error is reported through the CQ,
    /// so no async event is queued.
    CompletionError,
}

impl QpErrorCause {
    /// The async event this cause queues for `qpn`, if any.
    pub const fn event(self, qpn: Qpn) -> Option<AsyncEvent> {
        match self {
            QpErrorCause::Fatal => Some(AsyncEvent::QpFatal { qpn }),
            QpErrorCause::InvalidRequest => Some(AsyncEvent::QpRequestError { qpn }),
            QpErrorCause::AccessViolation => Some(AsyncEvent::QpAccessError { qpn }),
            QpErrorCause::CompletionError => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_and_names() {
        let q = Qpn::new(0x11);
        assert_eq!(AsyncEvent::QpFatal { qpn: q }.raw(), 1);
        assert_eq!(AsyncEvent::SqDrained { qpn: q }.raw(), 5);
        assert_eq!(AsyncEvent::QpLastWqeReached { qpn: q }.raw(), 16);
        assert_eq!(
            AsyncEvent::QpLastWqeReached { qpn: q }.name(),
            "IBV_EVENT_QP_LAST_WQE_REACHED"
        );
        assert_eq!(AsyncEvent::QpAccessError { qpn: q }.qpn(), Some(q));
        assert_eq!(AsyncEvent::DeviceFatal.qpn(), None);
        assert_eq!(
            QpErrorCause::InvalidRequest.event(q),
            Some(AsyncEvent::QpRequestError { qpn: q })
        );
        assert_eq!(QpErrorCause::CompletionError.event(q), None);
    }
}
