//! The objects this library handed out, so that a control verb given NULL, a pointer it never
//! returned, or an object already destroyed fails with the documented errno instead of reading
//! freed memory. The data-path calls reached through `context->ops` (post, poll) are as
//! unchecked as rdma-core's; they only see objects that passed through here at creation.

use std::collections::HashMap;
use std::sync::Mutex;

/// Kinds of objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// `struct ibv_context`.
    Context,
    /// `struct ibv_pd`.
    Pd,
    /// `struct ibv_mr`.
    Mr,
    /// `struct ibv_cq` / `ibv_cq_ex`.
    Cq,
    /// `struct ibv_qp` / `ibv_qp_ex`.
    Qp,
    /// `struct ibv_srq`.
    Srq,
    /// `struct ibv_ah`.
    Ah,
    /// `struct ibv_comp_channel`.
    Channel,
    /// `struct ibv_xrcd`.
    Xrcd,
    /// `struct softib_rdd` (`<softib/rd.h>`).
    Rdd,
    /// `struct softib_eec` (`<softib/rd.h>`).
    Eec,
    /// `struct rdma_event_channel` (softib's librdmacm).
    CmChannel,
    /// `struct rdma_cm_id`.
    CmId,
    /// `struct rdma_cm_event` handed to the application and not yet acknowledged.
    CmEvent,
}

static LIVE: Mutex<Option<HashMap<usize, Kind>>> = Mutex::new(None);

/// Records a new object.
pub fn add<T>(p: *const T, kind: Kind) {
    let mut g = LIVE.lock().unwrap_or_else(|e| e.into_inner());
    g.get_or_insert_with(HashMap::new).insert(p as usize, kind);
}

/// Forgets an object; false if it was not live (double free).
pub fn remove<T>(p: *const T, kind: Kind) -> bool {
    let mut g = LIVE.lock().unwrap_or_else(|e| e.into_inner());
    let m = g.get_or_insert_with(HashMap::new);
    if m.get(&(p as usize)) == Some(&kind) {
        m.remove(&(p as usize));
        true
    } else {
        false
    }
}

/// True if `p` is a live object of `kind`.
pub fn is_live<T>(p: *const T, kind: Kind) -> bool {
    if p.is_null() {
        return false;
    }
    let g = LIVE.lock().unwrap_or_else(|e| e.into_inner());
    g.as_ref()
        .is_some_and(|m| m.get(&(p as usize)) == Some(&kind))
}

/// Every live object, with its kind.
pub fn snapshot() -> Vec<(usize, Kind)> {
    let g = LIVE.lock().unwrap_or_else(|e| e.into_inner());
    g.as_ref()
        .map(|m| m.iter().map(|(&p, &k)| (p, k)).collect())
        .unwrap_or_default()
}

/// Forgets every object (the child after `fork()` owns none of its parent's).
pub fn clear() {
    let mut g = LIVE.lock().unwrap_or_else(|e| e.into_inner());
    *g = None;
}
