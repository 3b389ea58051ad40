//! Automatic path migration (APM) of connected QPs.
//!
//! A QP has a primary path (`ah_attr`, `port_num`, `pkey_index`, `timeout`) and may have an
//! alternate one (`alt_ah_attr`, `alt_port_num`, `alt_pkey_index`, `alt_timeout`, loaded with
//! `IBV_QP_ALT_PATH`). Its migration state (`path_mig_state`) is one of:
//!
//! * **Migrated** — the start state, and the state after a migration: no alternate path is
//!   armed. Every packet the QP sends carries BTH:MigReq = 1.
//! * **Rearm** — software loaded an alternate path and asked for re-arming. softib arms at once
//!   (there is no peer handshake to wait for in software), so `query_qp` reads **Armed**.
//! * **Armed** — an alternate path is ready. Packets carry BTH:MigReq = 0.
//!
//! An armed QP migrates — swaps primary and alternate path, enters Migrated and reports
//! `IBV_EVENT_PATH_MIG` — when:
//!
//! * its requester exhausts its retry counter, by NAK-PSN sequence errors (o9-82) or by
//!   transport timer expiries (o9-86); the counter is then reloaded and the retries start
//!   again on the new path. If they run out there too, the requester declares the usual
//!   locally detected error (`IBV_WC_RETRY_EXC_ERR`, QP to ERR);
//! * a packet for it arrives on its alternate path (source and destination GIDs of the
//!   alternate address vector) with BTH:MigReq = 1: the peer has migrated, and this side follows
//!   (the responder half of APM);
//! * software sets `path_mig_state` to Migrated (`IBV_QP_PATH_MIG_STATE`): a migration on
//!   request, without an event.
//!
//! After a migration the old primary path is the alternate one; it is used again only after
//! software re-arms the QP.
//!
//! An RD EE context, which holds the path of its RD QPs' messages, migrates the same way and
//! reports `AsyncEvent::EecPathMigrated` (the event names the EE context, not a QP).
//!
//! Linux rxe implements no APM and always sends MigReq = 0; softib follows IBA (MigReq = 1
//! in the Migrated state), which rxe ignores on receipt (docs/deviations.md).

use super::Hca;
use crate::verbs::event::AsyncEvent;
use crate::verbs::qp::{Qp, QpAttr};
use crate::verbs::types::{Gid, PathMigState};
use softib_wire::Qpn;

/// Swaps the QP's primary and alternate paths and enters Migrated.
fn migrate(qp: &mut Qp) {
    let a = &mut qp.attr;
    std::mem::swap(&mut a.ah_attr, &mut a.alt_ah_attr);
    std::mem::swap(&mut a.port_num, &mut a.alt_port_num);
    std::mem::swap(&mut a.pkey_index, &mut a.alt_pkey_index);
    std::mem::swap(&mut a.timeout, &mut a.alt_timeout);
    a.path_mig_state = PathMigState::Migrated;
}

/// BTH:MigReq of the packets a QP sends: 1 in the Migrated state, 0 while armed.
#[inline]
pub(crate) fn mig_req(attr: &QpAttr) -> bool {
    attr.path_mig_state == PathMigState::Migrated
}

impl Hca {
    /// The retry counter of `qpn` ran out. With an armed alternate path the QP migrates, its
    /// counter is reloaded by the caller and `true` comes back; otherwise `false` (the caller
    /// declares the locally detected error).
    pub(crate) fn migrate_on_retry_exhaustion(&mut self, qpn: u32) -> bool {
        let Some(qp) = self.qps.get_mut(&qpn) else {
            return false;
        };
        if qp.attr.path_mig_state != PathMigState::Armed {
            return false;
        }
        qp.transport.req.retries = 0;
        self.migrate_with_event(qpn);
        true
    }

    /// Migrates `qpn` and reports `IBV_EVENT_PATH_MIG`.
    fn migrate_with_event(&mut self, qpn: u32) {
        if let Some(qp) = self.qps.get_mut(&qpn) {
            migrate(qp);
        }
        self.express_from = None;
        self.counters.path_migrations += 1;
        // An EE context's event names the EE context, not a QP.
        let event = match super::rd::eecn_of_key(qpn) {
            Some(eecn) => AsyncEvent::EecPathMigrated { eecn },
            None => AsyncEvent::PathMigrated { qpn: Qpn::new(qpn) },
        };
        self.async_events.push_back(event);
    }

    /// A packet for `qpn` from `src` to `dst` did not come on the QP's primary path. If the QP
    /// is armed, the packet came on its alternate path and asks for migration (MigReq = 1),
    /// the QP migrates and `true` comes back: the packet is now on the QP's path.
    pub(crate) fn migrate_on_request(
        &mut self,
        qpn: u32,
        src: Gid,
        dst: Gid,
        mig_req: bool,
    ) -> bool {
        let Some(qp) = self.qps.get(&qpn) else {
            return false;
        };
        if !mig_req || qp.attr.path_mig_state != PathMigState::Armed {
            return false;
        }
        let alt = &qp.attr.alt_ah_attr;
        let on_alternate = alt.grh.is_some_and(|g| {
            g.dgid == src
                && self
                    .port(qp.attr.alt_port_num.max(1))
                    .and_then(|p| p.gids.get(usize::from(g.sgid_index)))
                    .is_some_and(|e| e.gid == dst)
        });
        if on_alternate {
            self.migrate_with_event(qpn);
        }
        on_alternate
    }

    /// `modify_qp` set `path_mig_state` (already checked): Rearm arms at once; Migrated on an
    /// armed QP migrates now, without an event.
    pub(crate) fn apply_path_mig_state(
        &mut self,
        qpn: u32,
        requested: PathMigState,
        was: PathMigState,
    ) {
        let Some(qp) = self.qps.get_mut(&qpn) else {
            return;
        };
        match requested {
            PathMigState::Rearm | PathMigState::Armed => {
                qp.attr.path_mig_state = PathMigState::Armed;
            }
            PathMigState::Migrated if was == PathMigState::Armed => {
                // `apply` already wrote Migrated; the paths swap now.
                qp.attr.path_mig_state = PathMigState::Armed;
                migrate(qp);
                self.express_from = None;
                self.counters.path_migrations += 1;
            }
            PathMigState::Migrated => {}
        }
    }
}
