//! Placement by the sender: what this HCA lets a same-host sender write into its memory
//! itself.
//!
//! A program that spins on memory for an RDMA WRITE (perftest's `ib_write_lat`, every
//! "poll the last byte" loop) is served by a thread of its own process, which has to wake up
//! for each WRITE. Linux rxe places such a WRITE in the sender's own system call. softib's
//! same-host path can do the same: the driver publishes the regions that take RDMA WRITEs
//! and the RC QPs whose responders take them (this module's [`PlacementUpdate`]s, reported to
//! the driver's [`PlacementSink`]), and a same-host sender whose WRITE is an RC RDMA WRITE
//! Only, the only request of its QP not yet acknowledged, copies the payload into place
//! before it queues the packet, marked as placed. The responder then handles the packet as
//! always (PSN, R_Key, bounds, access, ACK), only without copying the payload again
//! ([`Hca::set_placed_by_sender`]).
//!
//! Withdrawals are synchronous: the sink returns only when no placement into the region or
//! QP is in progress, so once a region is deregistered or invalidated, or a QP has left the
//! responder's states, nothing more is placed for it.

use crate::verbs::types::{AccessFlags, QpState, QpType};

use super::Hca;

/// An update of what same-host senders may place themselves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlacementUpdate {
    /// A region that takes RDMA WRITEs: its R_Key and PD, its I/O virtual address range
    /// `[iova, iova + len)`, and the address of its first byte in this process.
    Region {
        /// R_Key.
        rkey: u32,
        /// The PD (its handle's index and generation).
        pd: u64,
        /// First I/O virtual address.
        iova: u64,
        /// Length in bytes.
        len: u64,
        /// Where its bytes are in this process.
        addr: u64,
    },
    /// The region of this R_Key takes no more placements (deregistered or invalidated).
    RegionGone {
        /// R_Key.
        rkey: u32,
    },
    /// An RC QP whose responder takes RDMA WRITEs (RTR, RTS, SQD or SQE, with remote write
    /// access), and its PD's handle.
    Qp {
        /// QP number.
        qpn: u32,
        /// The PD (its handle's index and generation).
        pd: u64,
    },
    /// The QP takes no more placements.
    QpGone {
        /// QP number.
        qpn: u32,
    },
}

/// Where an HCA reports its [`PlacementUpdate`]s: the driver's shared-memory inbox. A
/// withdrawal (`RegionGone`, `QpGone`) must return only when no placement into the region or
/// QP is in progress.
pub trait PlacementSink: std::fmt::Debug + Send {
    /// Applies one update.
    fn update(&mut self, u: PlacementUpdate);
}

/// The HCA's sink, if a driver set one (a cloned HCA has none: its memory is not shared).
#[derive(Debug, Default)]
pub(crate) struct SinkSlot(Option<Box<dyn PlacementSink>>);

impl Clone for SinkSlot {
    fn clone(&self) -> SinkSlot {
        SinkSlot(None)
    }
}

impl Hca {
    /// Reports placement updates to `sink` from now on (the UDP driver's inbox does it; see
    /// the module documentation). Regions registered before are not reported.
    pub fn set_placement_sink(&mut self, sink: Box<dyn PlacementSink>) {
        self.placement.0 = Some(sink);
    }

    /// True when the last packet [`Hca::poll_transmit`] wrote may be placed by its sender:
    /// an RC RDMA WRITE Only, the first transmission of the QP's only unacknowledged request.
    #[inline]
    pub fn tx_placeable(&self) -> bool {
        self.tx_placeable
    }

    /// The frames handed to the HCA from now on were placed by their sender (true) or not:
    /// the responder checks an RDMA WRITE as always but leaves its payload where the sender
    /// put it. Only the driver's same-host path sets it, for a packet its sender marked.
    #[inline]
    pub fn set_placed_by_sender(&mut self, placed: bool) {
        self.placed_by_sender = placed;
    }

    pub(crate) fn placement_update(&mut self, u: PlacementUpdate) {
        if let Some(s) = self.placement.0.as_mut() {
            s.update(u);
        }
    }

    /// A region was registered: published if it takes RDMA WRITEs and lives at `addr` in
    /// this process.
    pub(crate) fn placement_region(&mut self, info: &crate::verbs::mr::MrInfo, addr: Option<u64>) {
        if let Some(addr) = addr.filter(|_| info.access.contains(AccessFlags::REMOTE_WRITE)) {
            self.placement_update(PlacementUpdate::Region {
                rkey: info.rkey,
                pd: pd_id(info.pd),
                iova: info.addr,
                len: info.length,
                addr,
            });
        }
    }

    /// The QP's state or access changed: published while its responder takes RDMA WRITEs,
    /// withdrawn otherwise.
    pub(crate) fn placement_qp(&mut self, qpn: u32) {
        if self.placement.0.is_none() {
            return;
        }
        let takes = self.qps.get(&qpn).map(|qp| {
            let on = qp.qp_type == QpType::Rc
                && matches!(
                    qp.attr.qp_state,
                    QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
                )
                && qp.attr.qp_access_flags.contains(AccessFlags::REMOTE_WRITE);
            (on, pd_id(qp.pd))
        });
        match takes {
            Some((true, pd)) => self.placement_update(PlacementUpdate::Qp { qpn, pd }),
            _ => self.placement_update(PlacementUpdate::QpGone { qpn }),
        }
    }
}

/// A PD's identity in a [`PlacementUpdate`]: its handle's generation and index.
fn pd_id(pd: crate::verbs::PdHandle) -> u64 {
    (u64::from(pd.0.generation) << 32) | u64::from(pd.0.index)
}
