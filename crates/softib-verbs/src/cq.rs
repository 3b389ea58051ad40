//! Completion queues (plain and extended), completion channels and completion events.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use softib_core::verbs::cq::WorkCompletion;
use softib_core::verbs::CqHandle;

use crate::context::Shared;
use crate::convert;
use crate::device::SoftContext;
use crate::registry::{self, Kind};
use crate::util::{self, minus_one, null_errno, ret_errno};
use crate::verbs_h::*;

/// A CQ: `struct ibv_cq_ex` (whose prefix is `struct ibv_cq`) and softib's state.
#[repr(C)]
pub struct SoftCq {
    /// Must be first.
    pub ex: ibv_cq_ex,
    /// The context's engine.
    pub shared: Arc<Shared>,
    /// The HCA's CQ.
    pub handle: CqHandle,
    /// Completion channel (NULL for none).
    pub channel: *mut SoftChannel,
    /// Extended polling: the completion `start_poll`/`next_poll` made current.
    pub cur: WorkCompletion,
    /// `wc_flags` asked for at `ibv_create_cq_ex`.
    pub wc_flags: u64,
}

/// `struct ibv_comp_channel` and its event queue.
#[repr(C)]
pub struct SoftChannel {
    /// Must be first.
    pub ch: ibv_comp_channel,
    /// CQs whose event fired, in order; `fd` holds one count per entry.
    pub events: Mutex<VecDeque<usize>>,
}

impl SoftChannel {
    /// Queues the completion event of `cq` on its channel.
    ///
    /// # Safety
    /// `cq` must be a live CQ.
    pub unsafe fn deliver(cq: *mut SoftCq) {
        let ch = (*cq).channel;
        if ch.is_null() {
            return;
        }
        (*ch)
            .events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push_back(cq as usize);
        util::signal((*ch).ch.fd);
    }
}

/// Fills the CQ entries of `context->ops`.
pub fn fill_ops(ops: &mut ibv_context_ops) {
    ops.poll_cq = Some(poll_cq);
    ops.req_notify_cq = Some(req_notify_cq);
}

/// Creates a CQ of at least `cqe` entries whose completion events go to vector
/// `comp_vector`; `wc_flags` are the fields an extended CQ's poller may read.
///
/// As the kernel (`ib_uverbs` create CQ, rxe's CQ checks) and rdma-core's man pages say:
/// EINVAL for `cqe` outside `1..=max_cqe` and for a `comp_vector` that is not below the
/// context's `num_comp_vectors` (it is unsigned there: a negative `int` from `ibv_create_cq`
/// is a huge vector).
pub unsafe fn create(
    ctx: *mut ibv_context,
    cqe: i32,
    cq_context: *mut libc::c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: u32,
    wc_flags: u64,
) -> Result<*mut SoftCq, i32> {
    let sc = SoftContext::from_ctx(ctx).ok_or(libc::EINVAL)?;
    if cqe <= 0 {
        return Err(libc::EINVAL);
    }
    let vectors = u32::try_from((*ctx).num_comp_vectors).unwrap_or(0);
    if comp_vector >= vectors {
        return Err(libc::EINVAL);
    }
    if !channel.is_null() && !registry::is_live(channel, Kind::Channel) {
        return Err(libc::EINVAL);
    }
    let mut eng = sc.shared.lock();
    let h = eng
        .dev
        .hca_mut()
        .create_cq(cqe as u32)
        .map_err(|_| libc::EINVAL)?;
    let cap = eng
        .dev
        .hca()
        .query_cq(h)
        .map(|a| a.cqe)
        .unwrap_or(cqe as u32);
    let mut ex: ibv_cq_ex = util::zeroed();
    ex.context = ctx;
    ex.channel = channel;
    ex.cq_context = cq_context;
    ex.cqe = cap as i32;
    crate::ex::fill_cq_ex(&mut ex);
    let p = Box::into_raw(Box::new(SoftCq {
        ex,
        shared: sc.shared.clone(),
        handle: h,
        channel: channel.cast(),
        cur: WorkCompletion::default(),
        wc_flags,
    }));
    (*p).ex.handle = p as usize as u32;
    eng.cqs.insert(h, p);
    if !channel.is_null() {
        (*channel).refcnt += 1;
    }
    registry::add(p.cast::<ibv_cq>(), Kind::Cq);
    Ok(p)
}

symver!(ibv_create_cq);
#[export_name = "softib_ibv_create_cq"]
pub unsafe extern "C" fn ibv_create_cq(
    ctx: *mut ibv_context,
    cqe: i32,
    cq_context: *mut libc::c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: i32,
) -> *mut ibv_cq {
    match create(ctx, cqe, cq_context, channel, comp_vector as u32, 0) {
        Ok(p) => p.cast(),
        Err(e) => null_errno(e),
    }
}

symver!(ibv_destroy_cq);
#[export_name = "softib_ibv_destroy_cq"]
pub unsafe extern "C" fn ibv_destroy_cq(cq: *mut ibv_cq) -> i32 {
    if !registry::is_live(cq, Kind::Cq) {
        return ret_errno(libc::EINVAL);
    }
    let p = cq.cast::<SoftCq>();
    {
        let shared = (*p).shared.clone();
        let mut eng = shared.lock();
        if eng.dev.hca_mut().destroy_cq((*p).handle).is_err() {
            return ret_errno(libc::EBUSY);
        }
        eng.cqs.remove(&(*p).handle);
        let ch = (*p).channel;
        if !ch.is_null() {
            // Events of this CQ not yet read stay counted in the fd; drop their entries.
            let mut q = (*ch).events.lock().unwrap_or_else(|e| e.into_inner());
            let before = q.len();
            q.retain(|&c| c != p as usize);
            for _ in q.len()..before {
                util::wait_one_nonblocking((*ch).ch.fd);
            }
            (*ch).ch.refcnt -= 1;
        }
    }
    registry::remove(cq, Kind::Cq);
    drop(Box::from_raw(p));
    0
}

symver!(ibv_resize_cq);
#[export_name = "softib_ibv_resize_cq"]
pub unsafe extern "C" fn ibv_resize_cq(cq: *mut ibv_cq, cqe: i32) -> i32 {
    if !registry::is_live(cq, Kind::Cq) || cqe <= 0 {
        return ret_errno(libc::EINVAL);
    }
    let p = cq.cast::<SoftCq>();
    let shared = (*p).shared.clone();
    let mut eng = shared.lock();
    // Sends the application posted and softib deferred (to batch them with its next poll)
    // go first, as a HCA would have processed them by now: their completions count against
    // the new size.
    if shared.tx_pending.load(std::sync::atomic::Ordering::Acquire) {
        eng.flush(&shared);
    }
    match eng.dev.hca_mut().resize_cq((*p).handle, cqe as u32) {
        Ok(cap) => {
            (*p).ex.cqe = cap as i32;
            0
        }
        Err(_) => ret_errno(libc::EINVAL),
    }
}

/// `ops.poll_cq`.
pub unsafe extern "C" fn poll_cq(cq: *mut ibv_cq, num_entries: i32, wc: *mut ibv_wc) -> i32 {
    if cq.is_null() || num_entries < 0 || (wc.is_null() && num_entries > 0) {
        return -libc::EINVAL;
    }
    let p = cq.cast::<SoftCq>();
    let shared = &*(*p).shared;
    let mut eng = shared.app_poll();
    let want = num_entries as usize;
    let mut done = 0usize;
    let mut buf = [WorkCompletion::default(); 16];
    while done < want {
        let n = (want - done).min(buf.len());
        // Only the first look may drive the engine; later ones take what is there.
        let got = if done == 0 {
            eng.take_completions(shared, (*p).handle, &mut buf[..n])
        } else {
            eng.dev.hca_mut().poll_cq_into((*p).handle, &mut buf[..n])
        };
        match got {
            Ok(got) => {
                for (i, w) in buf[..got].iter().enumerate() {
                    wc.add(done + i).write(convert::wc_to_c(w));
                }
                done += got;
                if got < n {
                    break;
                }
            }
            Err(_) => {
                if done == 0 {
                    return -libc::EIO;
                }
                break;
            }
        }
    }
    if done > 0 {
        // A DISCONNECTED event waiting for these completions to be polled goes out.
        crate::cma::kern::release_held(&mut eng);
    }
    drop(eng);
    shared.polled(done);
    done as i32
}

/// `ops.req_notify_cq`.
pub unsafe extern "C" fn req_notify_cq(cq: *mut ibv_cq, solicited_only: i32) -> i32 {
    if cq.is_null() {
        return libc::EINVAL;
    }
    let p = cq.cast::<SoftCq>();
    let shared = &*(*p).shared;
    let mut eng = shared.lock();
    match eng
        .dev
        .hca_mut()
        .req_notify_cq((*p).handle, solicited_only != 0)
    {
        Ok(()) => 0,
        Err(_) => libc::EINVAL,
    }
}

// ----- completion channels --------------------------------------------------------------

symver!(ibv_create_comp_channel);
#[export_name = "softib_ibv_create_comp_channel"]
pub unsafe extern "C" fn ibv_create_comp_channel(ctx: *mut ibv_context) -> *mut ibv_comp_channel {
    if SoftContext::from_ctx(ctx).is_none() {
        return null_errno(libc::EINVAL);
    }
    let fd = match util::semaphore_eventfd() {
        Ok(fd) => fd,
        Err(e) => return null_errno(e.raw_os_error().unwrap_or(libc::EMFILE)),
    };
    let p = Box::into_raw(Box::new(SoftChannel {
        ch: ibv_comp_channel {
            context: ctx,
            fd,
            refcnt: 0,
        },
        events: Mutex::new(VecDeque::new()),
    }));
    registry::add(p.cast::<ibv_comp_channel>(), Kind::Channel);
    p.cast()
}

symver!(ibv_destroy_comp_channel);
#[export_name = "softib_ibv_destroy_comp_channel"]
pub unsafe extern "C" fn ibv_destroy_comp_channel(channel: *mut ibv_comp_channel) -> i32 {
    if !registry::is_live(channel, Kind::Channel) {
        return ret_errno(libc::EINVAL);
    }
    if (*channel).refcnt > 0 {
        return ret_errno(libc::EBUSY);
    }
    registry::remove(channel, Kind::Channel);
    let p = Box::from_raw(channel.cast::<SoftChannel>());
    util::close(p.ch.fd);
    0
}

symver!(ibv_get_cq_event);
#[export_name = "softib_ibv_get_cq_event"]
pub unsafe extern "C" fn ibv_get_cq_event(
    channel: *mut ibv_comp_channel,
    cq: *mut *mut ibv_cq,
    cq_context: *mut *mut libc::c_void,
) -> i32 {
    if !registry::is_live(channel, Kind::Channel) || cq.is_null() || cq_context.is_null() {
        return minus_one(libc::EINVAL);
    }
    let ch = channel.cast::<SoftChannel>();
    let shared = SoftContext::from_ctx((*ch).ch.context).map(|sc| sc.shared.clone());
    if let Some(s) = &shared {
        s.begin_cq_wait();
    }
    let rc = util::wait_one((*ch).ch.fd);
    if let Some(s) = &shared {
        s.end_cq_wait();
    }
    if rc != 0 {
        return -1;
    }
    let ev = (*ch)
        .events
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .pop_front();
    match ev {
        Some(c) => {
            let c = c as *mut SoftCq;
            *cq = c.cast();
            *cq_context = (*c).ex.cq_context;
            0
        }
        None => minus_one(libc::EAGAIN),
    }
}

symver!(ibv_ack_cq_events);
#[export_name = "softib_ibv_ack_cq_events"]
pub unsafe extern "C" fn ibv_ack_cq_events(cq: *mut ibv_cq, nevents: u32) {
    if registry::is_live(cq, Kind::Cq) {
        (*cq).comp_events_completed = (*cq).comp_events_completed.wrapping_add(nevents);
    }
}
