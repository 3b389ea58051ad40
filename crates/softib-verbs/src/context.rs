//! A process's engine of a device: the HCA share and UDP socket behind a mutex, shared by
//! every context the process opens on the device (as the contexts of a real HCA share the
//! hardware), its progress thread, and the completion-channel / async-event plumbing.
//!
//! Who drives the engine:
//! - the application's threads, inside `ibv_post_send` (the new packets leave at once) and
//!   `ibv_poll_cq` (one non-blocking I/O round when the CQ is empty), so a polling
//!   application pays no thread wake-up;
//! - the progress thread, whenever the application is not polling: it sleeps in poll(2) on the
//!   socket, a wake-up eventfd and the HCA's next deadline, and runs I/O rounds. That is how
//!   the passive side of RDMA WRITE/READ/atomics, ACKs, retransmissions and completion events
//!   happen while the application sleeps. While the application polls (its `ibv_poll_cq`
//!   counter moves), the thread leaves the socket alone and only checks back every
//!   millisecond, so the two never fight over packets. After it served packets for a passive
//!   application (one that made no call for a millisecond), it looks for the next packet for
//!   a while before it sleeps: a server's next request usually comes sooner than a wake-up.

use std::collections::{HashMap, VecDeque};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use softib_core::verbs::cq::WorkCompletion;
use softib_core::verbs::event::AsyncEvent;
use softib_core::verbs::wr::{RecvWr, SendWr, WrOpcode};
use softib_core::verbs::{CqHandle, SrqHandle, XrcdHandle};
use softib_udp::Device;

use crate::cq::{SoftChannel, SoftCq};
use crate::fault;
use crate::qp::{SoftQp, SoftSrq};
use crate::util;
use crate::verbs_h::*;

/// Shortest and longest pause of the progress thread while the application polls (the
/// pause doubles while the application keeps polling, and drops to the shortest once it
/// stops).
const PARK_MIN: Duration = Duration::from_micros(20);
const PARK_MAX: Duration = Duration::from_millis(2);
/// How long the progress thread watches the application's poll counter before it decides
/// the application is not polling.
const APP_POLL_WINDOW: Duration = Duration::from_micros(5);
/// How long the progress thread keeps looking for packets after it served some, before it
/// sleeps, when the application is passive (a server of RDMA WRITEs or READs): the peer's
/// next packet usually comes sooner than a thread wake-up would take.
const LINGER: Duration = Duration::from_micros(50);
/// The first part of [`LINGER`], spent as a real-time thread where it is one.
const LINGER_RT: Duration = Duration::from_micros(10);
/// Longest run of real-time lingers before an ordinary one ([`LINGER_RT`]).
const RT_RUN_MAX: Duration = Duration::from_millis(1);
/// An application whose `ibv_poll_cq` ran an I/O round this recently is taken as about to run
/// the next: the progress thread pauses beside it rather than sleeping announced.
const ACTIVE_RECENT: Duration = Duration::from_micros(200);
/// The application is passive when it made no call for this long.
const PASSIVE_AFTER: Duration = Duration::from_millis(1);
/// Longest sleep of an idle progress thread (it also wakes on packets, deadlines and close).
const IDLE_SLEEP: Duration = Duration::from_millis(100);
/// Empty polls in a row after which an empty poll yields the CPU, at first, and the least and
/// most it adapts to ([`Shared::polled`]).
pub const YIELD_AFTER: u32 = 32;
pub const YIELD_AFTER_MIN: u32 = 2;
pub const YIELD_AFTER_MAX: u32 = 1024;
/// A `sched_yield` that took this long gave the CPU to another thread.
const YIELD_SWITCHED: Duration = Duration::from_micros(3);
/// I/O rounds one progress turn runs at most before it lets the application in.
const ROUNDS_PER_TURN: usize = 64;

/// The engine and the C objects it reports events about.
pub struct Engine {
    /// The soft RoCEv2 NIC.
    pub dev: Device,
    /// CQs by handle (completion events, CQ errors).
    pub cqs: HashMap<CqHandle, *mut SoftCq>,
    /// QPs by number (async events): every `ibv_qp` of the number, as an XRC target QP has one
    /// per `ibv_create_qp_ex` / `ibv_open_qp` that holds it (each gets the QP's events).
    pub qps: HashMap<u32, Vec<*mut SoftQp>>,
    /// SRQs by handle (async events).
    pub srqs: HashMap<SrqHandle, *mut SoftSrq>,
    /// Send WRs posted since the last flush and not yet handed to the socket.
    pub deferred: u32,
    /// The WR buffers a post converts into (reused: no allocation per WR).
    pub scratch_send: SendWr,
    /// The receive WR buffer a post converts into.
    pub scratch_recv: RecvWr,
    /// The connection manager on QP1, once an rdma_cm id uses this context.
    pub cm: Option<Box<crate::cma::kern::CmKern>>,
    /// XRC domains opened through a file (`ibv_open_xrcd` with an fd), by the file's
    /// (st_dev, st_ino): the domain and how many `ibv_xrcd` handles hold it.
    pub xrcd_files: HashMap<(u64, u64), (XrcdHandle, u32)>,
}

/// Most send WRs a post leaves for the application's next poll: beyond it they leave at once,
/// so that the peer works on the first ones while the application posts the rest.
pub const DEFER_MAX: u32 = 32;

// SAFETY: the raw pointers name objects this library allocated; they are only dereferenced
// with the engine lock held, and removed from the maps before the objects are freed.
unsafe impl Send for Engine {}

/// What the contexts of one device in this process, and their threads, share.
pub struct Shared {
    /// The engine.
    pub engine: Mutex<Engine>,
    /// Incremented by every data-path call of the application (`ibv_poll_cq`, the posts):
    /// while it moves quickly the application drives the engine itself and the progress
    /// thread stays off the socket.
    pub app_polls: AtomicU64,
    /// The CPU the application's last `ibv_poll_cq` ran on (`u32::MAX`: none yet).
    pub app_cpu: AtomicU32,
    /// I/O rounds the application's `ibv_poll_cq` ran (it found its CQ empty): while this
    /// moves, the application moves the packets itself. Its other calls (posts, polls that
    /// find completions) move `app_polls` but no packet.
    pub app_io: AtomicU64,
    /// Polls of the application in a row that found no completion, and after how many an
    /// empty poll yields the CPU ([`Shared::polled`]).
    pub empty_polls: AtomicU32,
    pub yield_after: AtomicU32,
    /// Threads blocked in `ibv_get_cq_event` on a channel of this context: while one waits,
    /// the progress thread drives the engine even if `app_polls` moved.
    pub cq_waiters: AtomicU32,
    /// Set while the progress thread leaves the socket to a polling application; a thread
    /// about to block for a completion event then wakes it.
    pub parked: AtomicBool,
    /// Sends were posted and not yet handed to the socket (the application's next
    /// `ibv_poll_cq`, or the progress thread, sends them).
    pub tx_pending: AtomicBool,
    /// Tells the progress thread to exit.
    pub stop: AtomicBool,
    /// Wakes the progress thread (close).
    pub wake_fd: RawFd,
    /// The socket, for the progress thread's poll(2).
    pub sock_fd: RawFd,
    /// Readable when a doorbell (a same-host sender rang) or a multicast datagram waits
    /// (`Device::aux_fd`).
    pub aux_fd: RawFd,
    /// The device's bound address.
    pub local: std::net::SocketAddr,
    /// Contexts open on the engine: the last to close stops the progress thread.
    pub contexts: std::sync::atomic::AtomicUsize,
    /// The progress thread.
    pub thread: Mutex<Option<JoinHandle<()>>>,
    /// The device's shared-memory inbox flag, set while this thread sleeps for it.
    pub shm_waker: Option<softib_udp::shm::Waker>,
    /// What the progress thread did (`SOFTIB_STATS`).
    pub progress: ProgressStats,
    /// This engine's entry in the table of engine lock holders (`fault`).
    pub fault_slot: fault::EngineSlot,
}

/// Counts of the progress thread's steps, written by it alone, printed with `SOFTIB_STATS`.
#[derive(Debug, Default)]
pub struct ProgressStats {
    /// Pauses while the application polled (it moved the packets itself).
    pub parks: AtomicU64,
    /// Turns that drove the engine.
    pub turns: AtomicU64,
    /// Of those, turns that found packets or sends to move.
    pub busy_turns: AtomicU64,
    /// Sleeps on the socket, announced in the inbox (same-host peers ring for them).
    pub sleeps: AtomicU64,
    /// Of those, sleeps that ended at their deadline (the engine's next timer or the idle
    /// bound) or on a signal, rather than on a datagram or a wake-up.
    pub timeouts: AtomicU64,
    /// Lingers after serving a passive application.
    pub lingers: AtomicU64,
}

impl ProgressStats {
    fn bump(c: &AtomicU64) {
        c.store(c.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    }
}

/// An async event waiting for `ibv_get_async_event`.
#[derive(Clone, Copy)]
pub struct AsyncItem(pub ibv_async_event);
// SAFETY: the pointers in the event name library objects; the application owns their use.
unsafe impl Send for AsyncItem {}

impl Shared {
    /// Called by a thread about to block for a completion event: the progress thread must
    /// drive the engine now (the application is no longer polling).
    pub fn begin_cq_wait(&self) {
        if self.tx_pending.load(Ordering::Acquire) {
            self.lock().flush(self);
        }
        self.cq_waiters.fetch_add(1, Ordering::AcqRel);
        if self.parked.load(Ordering::Acquire) {
            util::signal(self.wake_fd);
        }
    }

    /// An application's poll begins: counts the call, locks the engine and sends what its
    /// posts left pending.
    pub fn app_poll(&self) -> EngineGuard<'_> {
        self.app_polls.fetch_add(1, Ordering::Relaxed);
        let cpu = this_cpu();
        if self.app_cpu.load(Ordering::Relaxed) != cpu {
            self.app_cpu.store(cpu, Ordering::Relaxed);
        }
        let mut eng = self.lock();
        if self.tx_pending.load(Ordering::Acquire) {
            eng.flush(self);
        }
        eng
    }

    /// An application's poll ended with `got` completions, the engine unlocked. After a run
    /// of empty polls, each empty poll yields the CPU: a process that spins in `ibv_poll_cq`
    /// then lets a peer that shares its CPU run (more processes than CPUs, as MPI jobs on
    /// small machines have). Without it, every hop of a ping-pong waited for the spinner's
    /// time slice to end (milliseconds).
    ///
    /// How long the run is adapts to what the yields find: a yield that gave the CPU away
    /// (it took more than [`YIELD_SWITCHED`]: another thread ran) halves the run, down to
    /// [`YIELD_AFTER_MIN`], so that two processes on one CPU hand it to each other within a
    /// few polls; one that came straight back (nobody else wanted the CPU: the peer is on
    /// another one) doubles it, up to [`YIELD_AFTER_MAX`], so that a poller with a CPU of its
    /// own makes a system call only now and then.
    pub fn polled(&self, got: usize) {
        if got > 0 {
            if self.empty_polls.load(Ordering::Relaxed) != 0 {
                self.empty_polls.store(0, Ordering::Relaxed);
            }
            return;
        }
        let n = self.empty_polls.load(Ordering::Relaxed).saturating_add(1);
        self.empty_polls.store(n, Ordering::Relaxed);
        let after = self.yield_after.load(Ordering::Relaxed);
        if n < after {
            return;
        }
        let t0 = std::time::Instant::now();
        // SAFETY: no arguments.
        unsafe {
            libc::sched_yield();
        }
        let next = if t0.elapsed() >= YIELD_SWITCHED {
            (after / 2).max(YIELD_AFTER_MIN)
        } else {
            after.saturating_mul(2).min(YIELD_AFTER_MAX)
        };
        if next != after {
            self.yield_after.store(next, Ordering::Relaxed);
        }
        // The run starts again: the next yield comes after `next` more empty polls.
        self.empty_polls.store(0, Ordering::Relaxed);
    }

    /// The blocked thread woke up.
    pub fn end_cq_wait(&self) {
        self.cq_waiters.fetch_sub(1, Ordering::AcqRel);
    }

    /// Locks the engine (a panic inside never leaves it poisoned for the C caller).
    pub fn lock(&self) -> EngineGuard<'_> {
        self.guard(self.engine.lock().unwrap_or_else(|e| e.into_inner()))
    }

    fn guard<'a>(&'a self, lock: MutexGuard<'a, Engine>) -> EngineGuard<'a> {
        EngineGuard {
            _inside: fault::InEngine::enter(&self.fault_slot),
            lock,
        }
    }
}

/// The locked engine. While it is held, the thread counts as inside the engine for a fault
/// in registered memory the application unmapped (`fault`); that mark goes before the lock
/// (fields drop in order).
pub struct EngineGuard<'a> {
    _inside: fault::InEngine,
    lock: MutexGuard<'a, Engine>,
}

impl std::ops::Deref for EngineGuard<'_> {
    type Target = Engine;
    fn deref(&self) -> &Engine {
        &self.lock
    }
}

impl std::ops::DerefMut for EngineGuard<'_> {
    fn deref_mut(&mut self) -> &mut Engine {
        &mut self.lock
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        util::close(self.wake_fd);
    }
}

/// A context's own event queue: `context->async_fd` (one count per queued async event) and
/// the events, for the objects made through the context.
pub struct AsyncEvents {
    /// `context->async_fd`.
    pub fd: RawFd,
    /// Queued async events.
    pub queue: Mutex<VecDeque<AsyncItem>>,
}

impl AsyncEvents {
    /// A new, empty queue.
    pub fn new() -> std::io::Result<AsyncEvents> {
        Ok(AsyncEvents {
            fd: util::semaphore_eventfd()?,
            queue: Mutex::new(VecDeque::new()),
        })
    }

    /// Queues `item` and counts it on the descriptor.
    pub fn push(&self, item: AsyncItem) {
        self.queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push_back(item);
        util::signal(self.fd);
    }

    /// The next event for `ibv_get_async_event`, one count of the descriptor already taken:
    /// `Some(None)` for an event of a destroyed QP (its count is spent, the caller waits for
    /// the next), `None` when the queue is empty. A QP event handed out is counted on its QP
    /// (under the queue's lock, so that [`AsyncEvents::forget_qp`] sees it).
    pub fn pop(&self) -> Option<Option<ibv_async_event>> {
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        let AsyncItem(e) = q.pop_front()?;
        if e.event_type == DROPPED_EVENT {
            return Some(None);
        }
        if is_qp_event(e.event_type) {
            // SAFETY: a queued QP event names a live QP: ibv_destroy_qp marks its QP's
            // events dropped, under this lock, before it frees it.
            let q = unsafe { &*e.element.qp.cast::<crate::qp::SoftQp>() };
            q.events_reported.fetch_add(1, Ordering::AcqRel);
        }
        Some(Some(e))
    }

    /// A QP being destroyed: its queued events are dropped (each keeps its count on the
    /// descriptor, spent by the `ibv_get_async_event` that meets it). Returns how many of its
    /// events were handed out, for the destroy to wait for their acks.
    pub fn forget_qp(&self, qp: *mut ibv_qp) -> u32 {
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        for AsyncItem(e) in q.iter_mut() {
            // SAFETY: reading the union's pointer member, written for QP events.
            if is_qp_event(e.event_type) && unsafe { e.element.qp } == qp {
                e.event_type = DROPPED_EVENT;
                e.element.qp = std::ptr::null_mut();
            }
        }
        // SAFETY: `qp` is a live QP of this library until its destroy frees it, after this.
        let q = unsafe { &*qp.cast::<crate::qp::SoftQp>() };
        q.events_reported.load(Ordering::Acquire)
    }
}

/// The event type of a queued event whose QP was destroyed (no ibv_event_type has it).
const DROPPED_EVENT: ibv_event_type = ibv_event_type::MAX;

/// True for the async events about a QP (`element.qp`).
pub fn is_qp_event(t: ibv_event_type) -> bool {
    matches!(
        t,
        IBV_EVENT_QP_FATAL
            | IBV_EVENT_QP_REQ_ERR
            | IBV_EVENT_QP_ACCESS_ERR
            | IBV_EVENT_COMM_EST
            | IBV_EVENT_SQ_DRAINED
            | IBV_EVENT_PATH_MIG
            | IBV_EVENT_PATH_MIG_ERR
            | IBV_EVENT_QP_LAST_WQE_REACHED
    )
}

impl Drop for AsyncEvents {
    fn drop(&mut self) {
        util::close(self.fd);
    }
}

impl Engine {
    /// One non-blocking I/O round, then the events it raised. Returns true if anything moved.
    pub fn io(&mut self, shared: &Shared) -> bool {
        shared.tx_pending.store(false, Ordering::Relaxed);
        self.deferred = 0;
        let busy = self.dev.poll_io().unwrap_or(false);
        if busy {
            // The ACKs and READ responses of what was just received leave now, as a NIC
            // sends them, not at the next round: the application may never come back (a
            // program that exits after its last receive still acknowledges it).
            let now = self.dev.now();
            let _ = self.dev.flush(now);
        }
        if self.cm.is_some() {
            crate::cma::kern::poll(self);
        }
        self.dispatch_events(shared);
        busy
    }

    /// Takes up to `out.len()` completions of `cq`; when there are none, runs one I/O round
    /// first (an application that polls drives the engine itself).
    pub fn take_completions(
        &mut self,
        shared: &Shared,
        cq: CqHandle,
        out: &mut [WorkCompletion],
    ) -> Result<usize, softib_core::error::CqError> {
        match self.dev.hca_mut().poll_cq_into(cq, out) {
            Ok(0) if !out.is_empty() => {
                shared.app_io.fetch_add(1, Ordering::Relaxed);
                self.io(shared);
                self.dev.hca_mut().poll_cq_into(cq, out)
            }
            r => r,
        }
    }

    /// A post (`ibv_post_send`, `ibv_wr_complete`) queued sends. While the application polls
    /// its CQ they wait for its next `ibv_poll_cq`, which sends them together with whatever it
    /// posts until then (one system call for a batch; the progress thread sends them if the
    /// application stops polling); otherwise, or beyond `DEFER_MAX` posts, they leave now.
    pub fn posted(&mut self, shared: &Shared) {
        self.deferred = self.deferred.saturating_add(1);
        if shared.parked.load(Ordering::Acquire) && self.deferred < DEFER_MAX {
            shared.tx_pending.store(true, Ordering::Release);
        } else {
            self.flush(shared);
        }
    }

    /// Sends what the HCA has queued (after a post), then the events.
    ///
    /// A request a same-host peer sent meanwhile is taken first (`Device::receive_inbox`):
    /// its acknowledgement leaves ahead of the new requests. A program that answers a WRITE
    /// it spins on (perftest's latency tests) waits for that ACK before its next step, and no
    /// longer also for the copy of its own WRITE into the peer.
    pub fn flush(&mut self, shared: &Shared) {
        shared.tx_pending.store(false, Ordering::Relaxed);
        self.deferred = 0;
        let _ = self.dev.receive_inbox();
        let now = self.dev.now();
        let _ = self.dev.flush(now);
        self.dispatch_events(shared);
    }

    /// Hands completion events to their channels and async events to the queue of the
    /// context each object was made through.
    pub fn dispatch_events(&mut self, _shared: &Shared) {
        while let Some(h) = self.dev.hca_mut().poll_completion_event() {
            let Some(&cq) = self.cqs.get(&h) else {
                continue;
            };
            // SAFETY: CQs stay in the map until destroyed, with the engine lock held.
            unsafe { SoftChannel::deliver(cq) };
        }
        while let Some(ev) = self.dev.hca_mut().poll_async_event() {
            let Some(item) = self.async_item(ev) else {
                continue;
            };
            // A QP event goes to every `ibv_qp` of the QP (the holders of a shared XRC
            // target QP each get it, as from the kernel).
            let holders: &[*mut SoftQp] = match Self::event_qpn(ev) {
                Some(qpn) => self.qps.get(&qpn).map_or(&[], |v| v.as_slice()),
                None => &[std::ptr::null_mut()],
            };
            for &h in holders {
                let mut one = item;
                if !h.is_null() {
                    one.element.qp = h.cast::<ibv_qp>();
                }
                // SAFETY: the element is a live object of this library (the maps hold only
                // those); its first field is its context.
                let ctx = unsafe { event_context(&one) };
                if let Some(sc) = crate::device::SoftContext::from_ctx(ctx) {
                    sc.events.push(AsyncItem(one));
                }
            }
        }
    }

    /// The QP number an async event is about, if it is a QP event.
    fn event_qpn(ev: AsyncEvent) -> Option<u32> {
        match ev {
            AsyncEvent::QpFatal { qpn }
            | AsyncEvent::QpRequestError { qpn }
            | AsyncEvent::QpAccessError { qpn }
            | AsyncEvent::CommEstablished { qpn }
            | AsyncEvent::SqDrained { qpn }
            | AsyncEvent::PathMigrated { qpn }
            | AsyncEvent::PathMigrationError { qpn }
            | AsyncEvent::QpLastWqeReached { qpn } => Some(qpn.value()),
            #[allow(unreachable_patterns)]
            _ => None,
        }
    }

    fn async_item(&self, ev: AsyncEvent) -> Option<ibv_async_event> {
        let mut e: ibv_async_event = util::zeroed();
        let qp = |qpn: softib_wire::Qpn| -> Option<*mut ibv_qp> {
            self.qps
                .get(&qpn.value())
                .and_then(|v| v.first())
                .map(|&q| q.cast::<ibv_qp>())
        };
        match ev {
            AsyncEvent::CqError { cq } => {
                e.element.cq = (*self.cqs.get(&cq)?).cast();
                e.event_type = IBV_EVENT_CQ_ERR;
            }
            AsyncEvent::QpFatal { qpn } => {
                e.element.qp = qp(qpn)?;
                e.event_type = IBV_EVENT_QP_FATAL;
            }
            AsyncEvent::QpRequestError { qpn } => {
                e.element.qp = qp(qpn)?;
                e.event_type = IBV_EVENT_QP_REQ_ERR;
            }
            AsyncEvent::QpAccessError { qpn } => {
                e.element.qp = qp(qpn)?;
                e.event_type = IBV_EVENT_QP_ACCESS_ERR;
            }
            AsyncEvent::CommEstablished { qpn } => {
                e.element.qp = qp(qpn)?;
                e.event_type = IBV_EVENT_COMM_EST;
            }
            AsyncEvent::SqDrained { qpn } => {
                e.element.qp = qp(qpn)?;
                e.event_type = IBV_EVENT_SQ_DRAINED;
            }
            AsyncEvent::PathMigrated { qpn } => {
                e.element.qp = qp(qpn)?;
                e.event_type = IBV_EVENT_PATH_MIG;
            }
            AsyncEvent::PathMigrationError { qpn } => {
                e.element.qp = qp(qpn)?;
                e.event_type = IBV_EVENT_PATH_MIG_ERR;
            }
            AsyncEvent::QpLastWqeReached { qpn } => {
                e.element.qp = qp(qpn)?;
                e.event_type = IBV_EVENT_QP_LAST_WQE_REACHED;
            }
            AsyncEvent::SrqError { srq } => {
                e.element.srq = (*self.srqs.get(&srq)?).cast();
                e.event_type = IBV_EVENT_SRQ_ERR;
            }
            AsyncEvent::SrqLimitReached { srq } => {
                e.element.srq = (*self.srqs.get(&srq)?).cast();
                e.event_type = IBV_EVENT_SRQ_LIMIT_REACHED;
            }
            #[allow(unreachable_patterns)]
            _ => return None,
        }
        Some(e)
    }
}

/// The context an async event's object was made through (every verbs object begins with
/// its `ibv_context` pointer).
///
/// # Safety
/// The element the event names must be a live object of this library.
unsafe fn event_context(e: &ibv_async_event) -> *mut ibv_context {
    // SAFETY: per the contract; the union member read is the one the event type names, and
    // each is a pointer to a struct whose first field is `struct ibv_context *context`.
    unsafe {
        let obj: *const *mut ibv_context = match e.event_type {
            IBV_EVENT_CQ_ERR => e.element.cq.cast(),
            IBV_EVENT_SRQ_ERR | IBV_EVENT_SRQ_LIMIT_REACHED => e.element.srq.cast(),
            _ => e.element.qp.cast(),
        };
        if obj.is_null() {
            std::ptr::null_mut()
        } else {
            *obj
        }
    }
}

/// Starts the progress thread of an engine.
pub fn spawn_progress(shared: Arc<Shared>) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("softib-progress".into())
        .spawn(move || progress_loop(&shared))
}

/// Asks the scheduler for short time slices for the calling thread (Linux 6.12+ EEVDF: a
/// SCHED_NORMAL thread's `sched_runtime` is its requested slice; no privilege needed). The
/// progress thread sleeps most of the time and must run at once when a packet arrives, even
/// while the application spins on another core or on this one (perftest's latency tests spin
/// on memory); a short slice gives it an early deadline, so its wake-up preempts the spinner.
/// Older kernels refuse or ignore the request; nothing else changes.
fn request_short_slices() {
    #[repr(C)]
    struct SchedAttr {
        size: u32,
        sched_policy: u32,
        sched_flags: u64,
        sched_nice: i32,
        sched_priority: u32,
        sched_runtime: u64,
        sched_deadline: u64,
        sched_period: u64,
    }
    let attr = SchedAttr {
        size: std::mem::size_of::<SchedAttr>() as u32,
        sched_policy: libc::SCHED_OTHER as u32,
        sched_flags: 0,
        sched_nice: 0,
        sched_priority: 0,
        sched_runtime: 100_000,
        sched_deadline: 0,
        sched_period: 0,
    };
    // SAFETY: sched_setattr(0 = this thread, attr, flags 0) reads `attr` only.
    unsafe {
        libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const SchedAttr, 0);
    }
}

/// The progress thread's scheduling: the lowest real-time priority (SCHED_FIFO 1) while it
/// serves packets, where the process may (root, CAP_SYS_NICE or an RLIMIT_RTPRIO), so that a
/// packet that arrives while the application spins on every core (perftest's latency tests
/// spin on memory) is served at once rather than at the next scheduler tick; the ordinary
/// policy while it steps aside for a polling application, so that it never preempts the
/// thread doing the work. It blocks in poll(2) whenever it has nothing to do, and the
/// kernel's real-time throttling bounds it regardless. Where real time is not allowed it asks
/// for short slices instead. `SOFTIB_PROGRESS_RT=0` turns real time off.
struct Scheduling {
    rt_allowed: bool,
    rt_now: bool,
}

impl Scheduling {
    fn new() -> Scheduling {
        let mut s = Scheduling {
            rt_allowed: !std::env::var("SOFTIB_PROGRESS_RT").is_ok_and(|v| v == "0"),
            rt_now: false,
        };
        if s.rt_allowed {
            s.rt_allowed = s.set(true);
        }
        if !s.rt_allowed {
            request_short_slices();
        }
        s
    }

    /// Real time on or off; returns whether the kernel agreed.
    fn set(&mut self, on: bool) -> bool {
        let (policy, prio) = if on {
            (libc::SCHED_FIFO, 1)
        } else {
            (libc::SCHED_OTHER, 0)
        };
        let p = libc::sched_param {
            sched_priority: prio,
        };
        // SAFETY: sets the calling thread's policy; reads `p` only.
        let ok = unsafe { libc::pthread_setschedparam(libc::pthread_self(), policy, &p) == 0 };
        if ok {
            self.rt_now = on;
        }
        ok
    }

    /// Serving packets: real time where allowed.
    fn serving(&mut self) {
        if self.rt_allowed && !self.rt_now {
            self.set(true);
        }
    }

    /// Stepping aside for the application: the ordinary policy.
    fn stepping_aside(&mut self) {
        if self.rt_now {
            self.set(false);
        }
    }
}

fn progress_loop(shared: &Shared) {
    let mut sched = Scheduling::new();
    // Microsecond sleeps mean microseconds (the default timer slack is 50 us).
    // SAFETY: prctl on the calling thread.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1000u64, 0u64, 0u64, 0u64);
    }
    let mut wait = Duration::ZERO;
    let mut seen_polls = shared.app_polls.load(Ordering::Relaxed);
    let mut park = PARK_MIN;
    // The application's call counter as last seen, and since when it has not moved.
    let mut idle_ref = seen_polls;
    let mut idle_since = None;
    // The application's I/O rounds, and when this thread last saw them move.
    let mut app_io = AppIo::new(shared);
    // The application's I/O rounds when this thread last drove the engine or paused.
    let mut seen_io = app_io.last;
    // The last turn served packets for a passive application: look for more before sleeping.
    let mut lingering = false;
    // Since when the thread has lingered real-time without stepping aside or sleeping.
    let mut rt_run: Option<std::time::Instant> = None;
    // The thread slept on the socket since it last drove the engine.
    let mut slept = false;
    // While it slept, the application took datagrams from the inbox, and none waits now.
    let mut taken_while_asleep = false;
    while !shared.stop.load(Ordering::Acquire) {
        if lingering && !wait.is_zero() {
            // A real-time thread that spins keeps ordinary threads off its CPU (its
            // sched_yield only lets other real-time threads run), so it lingers real-time
            // only for LINGER_RT: long enough for the next request of a latency loop (the
            // next READ or atomic), which is then served without two policy switches, two
            // system calls. Ordinary for the rest, real-time again to sleep (a woken
            // real-time thread runs at once). A run of real-time lingers that keeps finding
            // packets (a stream) ends after RT_RUN_MAX with an ordinary one, which lets the
            // other threads of its CPU in: without it, passive servers of streams could keep
            // every ordinary thread of a loaded machine off its CPUs (a CI run saw a process
            // not reach its listen in 10 s).
            ProgressStats::bump(&shared.progress.lingers);
            let d = wait.min(LINGER);
            let run = *rt_run.get_or_insert_with(std::time::Instant::now);
            let rt = if run.elapsed() < RT_RUN_MAX {
                d.min(LINGER_RT)
            } else {
                Duration::ZERO
            };
            let came = (!rt.is_zero() && linger(shared, rt)) || {
                rt_run = None;
                sched.stepping_aside();
                let came = linger(shared, d.saturating_sub(rt));
                sched.serving();
                came
            };
            if came {
                wait = Duration::ZERO;
            }
        }
        // An application whose polls ran I/O lately is most likely about to again (UCX
        // between its wire-up and its first messages, a poller between two bursts): this
        // thread pauses beside it as beside a polling one. An announced sleep would have every
        // datagram a same-host peer sends meanwhile ring a doorbell, an empty UDP send that
        // took that peer 12-20 us on a 2-CPU VM (it wakes a thread on another CPU): a UCX
        // ping-pong's first round trip carried two of them in a third of the runs.
        app_io.look(shared);
        let recent = !wait.is_zero()
            && app_io.moved_at.elapsed() < ACTIVE_RECENT
            && shared.cq_waiters.load(Ordering::Acquire) == 0;
        if !wait.is_zero() && !recent {
            rt_run = None;
            // Announced in the device's shared-memory inbox, so that same-host peers ring
            // the socket; a datagram already there cancels the sleep.
            let waker = shared.shm_waker.as_ref();
            let taken = waker.map(softib_udp::shm::Waker::taken);
            if waker.is_none_or(softib_udp::shm::Waker::sleep_begin) {
                ProgressStats::bump(&shared.progress.sleeps);
                if sleep_on(&sleep_fds(shared), wait) == 0 {
                    ProgressStats::bump(&shared.progress.timeouts);
                }
                slept = true;
                if let Some(w) = waker {
                    w.sleep_end();
                    taken_while_asleep = taken != Some(w.taken()) && !w.ready();
                }
            }
        }
        util::drain(shared.wake_fd);
        // Is the application polling right now? Then its own calls move the packets (no
        // thread hand-off): step aside for a while. Only an application that called while
        // this thread slept can be polling; it is polling if it took the datagrams that
        // woke this thread before this thread could look (`taken_while_asleep`), or if its
        // counter moves within APP_POLL_WINDOW. One that calls between other work
        // (perftest's latency tests spin on memory between polls) is not, and is served at
        // once.
        //
        // The first test is what tells a polling application that shares this thread's CPU:
        // woken real-time by the doorbell of a same-host peer, this thread has just
        // preempted it, and the watch's `sched_yield` lets no ordinary thread in. Without it
        // the thread took every datagram from a busy-polling application (UCX), froze it for
        // the watch each time and slept announced again, so that the peer rang with every
        // datagram: round trips of 20-170 us instead of 2. An application that spins on
        // memory leaves the datagram it waits for in the inbox.
        //
        // The second test is the same case where the application had not taken them yet:
        // an application that polled during the sleep, last on this very CPU, is the thread
        // this one preempted, and cannot move its counter while this one watches it. It is
        // taken as polling; this thread pauses (a real sleep, which lets it run) and looks
        // again after the pause. Without it, a UCX ping-pong whose progress threads woke on
        // the applications' CPUs went on for hundreds of round trips at 20-40 us, every
        // datagram ringing a doorbell, instead of 2.
        let polls = shared.app_polls.load(Ordering::Relaxed);
        if polls != idle_ref {
            idle_ref = polls;
            idle_since = None;
        }
        let io = app_io.look(shared);
        let took = std::mem::take(&mut taken_while_asleep);
        let preempted = || {
            let cpu = shared.app_cpu.load(Ordering::Relaxed);
            io != seen_io && cpu != u32::MAX && cpu == this_cpu()
        };
        let mut polling = recent
            || (polls != seen_polls
                && shared.cq_waiters.load(Ordering::Acquire) == 0
                && (took || preempted() || app_is_polling(shared)));
        // This thread drives the engine, unless the application holds it right now (it is
        // in a call that moves the packets itself): waiting for the lock would only trade
        // futex wake-ups with it.
        let eng = if polling {
            None
        } else {
            match shared.engine.try_lock() {
                Ok(g) => Some(shared.guard(g)),
                Err(std::sync::TryLockError::Poisoned(p)) => Some(shared.guard(p.into_inner())),
                Err(std::sync::TryLockError::WouldBlock) => {
                    polling = true;
                    None
                }
            }
        };
        let Some(mut eng) = eng else {
            debug_assert!(polling);
            sched.stepping_aside();
            rt_run = None;
            ProgressStats::bump(&shared.progress.parks);
            shared.parked.store(true, Ordering::Release);
            // A waiter that registered before `parked` was set signalled nobody: look again.
            if shared.cq_waiters.load(Ordering::Acquire) == 0 {
                sleep_on(&[shared.wake_fd], park);
            }
            shared.parked.store(false, Ordering::Release);
            // Still polling after the pause: pause longer next time (a bandwidth loop). It
            // stopped: come back sooner next time (a latency loop that polls between spins
            // on memory), and serve what waits now.
            park = if app_is_polling(shared) {
                (park * 2).min(PARK_MAX)
            } else {
                PARK_MIN
            };
            seen_polls = shared.app_polls.load(Ordering::Relaxed);
            seen_io = shared.app_io.load(Ordering::Relaxed);
            wait = Duration::ZERO;
            continue;
        };
        sched.serving();
        if std::mem::take(&mut slept) {
            eng.dev.woke();
        } else if lingering {
            // A doorbell a linger saw (it only woke the thread).
            eng.dev.drain_doorbells();
        }
        ProgressStats::bump(&shared.progress.turns);
        wait = {
            eng.flush(shared);
            let mut rounds = 0;
            while eng.io(shared) && rounds < ROUNDS_PER_TURN {
                rounds += 1;
            }
            if rounds > 0 {
                ProgressStats::bump(&shared.progress.busy_turns);
            }
            let now = eng.dev.now();
            let since = *idle_since.get_or_insert(now);
            lingering = rounds > 0 && now.duration_since(since) >= PASSIVE_AFTER;
            let cm = eng.cm.as_ref().and_then(|k| k.poll_timeout());
            let hca = eng.dev.hca().poll_timeout();
            let next = match (hca, cm) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            next.map(|t| t.duration_since(now))
                .unwrap_or(IDLE_SLEEP)
                .min(IDLE_SLEEP)
        };
        drop(eng);
        seen_polls = shared.app_polls.load(Ordering::Relaxed);
        seen_io = shared.app_io.load(Ordering::Relaxed);
    }
}

/// Looks for a packet for up to `d` ([`watch`]); true if one came, the thread was woken or
/// the application made a call (then the caller looks again whether it polls). The socket is
/// looked at with a zero-timeout poll(2), a same-host inbox by reading its head.
fn linger(shared: &Shared, d: Duration) -> bool {
    let polls = shared.app_polls.load(Ordering::Relaxed);
    watch(d, || {
        shared
            .shm_waker
            .as_ref()
            .is_some_and(softib_udp::shm::Waker::ready)
            || shared.app_polls.load(Ordering::Relaxed) != polls
            || readable(&sleep_fds(shared))
    })
}

/// What the progress thread sleeps on: the socket, the device's doorbell and multicast
/// sockets (behind one epoll descriptor), the wake-up eventfd.
fn sleep_fds(shared: &Shared) -> [RawFd; 3] {
    [shared.sock_fd, shared.aux_fd, shared.wake_fd]
}

/// The application's I/O rounds ([`Shared::app_io`]) as the progress thread last saw them, and
/// when it saw them move.
struct AppIo {
    last: u64,
    moved_at: std::time::Instant,
}

impl AppIo {
    fn new(shared: &Shared) -> AppIo {
        AppIo {
            last: shared.app_io.load(Ordering::Relaxed),
            moved_at: std::time::Instant::now(),
        }
    }

    /// Looks at the count again; returns it.
    fn look(&mut self, shared: &Shared) -> u64 {
        let io = shared.app_io.load(Ordering::Relaxed);
        if io != self.last {
            self.last = io;
            self.moved_at = std::time::Instant::now();
        }
        io
    }
}

/// The CPU the calling thread runs on (`u32::MAX` if unknown). glibc reads it from the
/// thread's rseq area: no system call.
fn this_cpu() -> u32 {
    // SAFETY: no arguments.
    let c = unsafe { libc::sched_getcpu() };
    u32::try_from(c).unwrap_or(u32::MAX)
}

/// True if the application's call counter moves within [`APP_POLL_WINDOW`] ([`watch`]: the
/// thread yields its CPU meanwhile, as the application may need this very CPU to move it).
/// It does not sleep: a timed sleep of a few microseconds takes tens here, and an
/// application that spins on memory (perftest's `ib_write_lat`) waits for this answer before
/// its packets are served.
fn app_is_polling(shared: &Shared) -> bool {
    let p0 = shared.app_polls.load(Ordering::Relaxed);
    watch(APP_POLL_WINDOW, || {
        shared.app_polls.load(Ordering::Relaxed) != p0
    })
}

/// Looks at `until` for up to `d`, yielding the CPU between looks (a runnable thread of
/// this CPU, such as the application, runs meanwhile); true as soon as it holds.
fn watch(d: Duration, mut until: impl FnMut() -> bool) -> bool {
    let start = std::time::Instant::now();
    loop {
        if until() {
            return true;
        }
        if start.elapsed() >= d {
            return false;
        }
        // SAFETY: no arguments.
        unsafe {
            libc::sched_yield();
        }
    }
}

/// True if one of `fds` is readable now.
fn readable(fds: &[RawFd]) -> bool {
    sleep_on(fds, Duration::ZERO) > 0
}

/// Sleeps until one of `fds` is readable or `d` passes (microsecond resolution); returns how
/// many are readable (0 on timeout or error).
fn sleep_on(fds: &[RawFd], d: Duration) -> i32 {
    // At most three descriptors: on the stack (this thread allocates nothing per turn).
    debug_assert!(fds.len() <= 3);
    let none = libc::pollfd {
        fd: -1,
        events: 0,
        revents: 0,
    };
    let mut p = [none; 3];
    for (slot, &fd) in p.iter_mut().zip(fds) {
        *slot = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
    }
    let p = &mut p[..fds.len().min(3)];
    let ts = libc::timespec {
        tv_sec: d.as_secs() as libc::time_t,
        tv_nsec: d.subsec_nanos() as libc::c_long,
    };
    // SAFETY: the pollfd array is a local of the given length; no signal mask.
    unsafe {
        libc::ppoll(
            p.as_mut_ptr(),
            p.len() as libc::nfds_t,
            &ts,
            std::ptr::null(),
        )
        .max(0)
    }
}

/// Builds the shared state of a new engine around an opened device.
pub fn new_shared(dev: Device) -> std::io::Result<Arc<Shared>> {
    let sock_fd = dev.socket_fd().as_raw_fd();
    let aux_fd = dev.aux_fd().as_raw_fd();
    let local = dev.local_addr();
    let shm_waker = dev.shm_waker();
    let wake_fd = util::wake_eventfd()?;
    Ok(Arc::new(Shared {
        engine: Mutex::new(Engine {
            dev,
            cqs: HashMap::new(),
            qps: HashMap::new(),
            srqs: HashMap::new(),
            deferred: 0,
            scratch_send: SendWr::new(0, WrOpcode::Send),
            scratch_recv: RecvWr::default(),
            cm: None,
            xrcd_files: HashMap::new(),
        }),
        app_polls: AtomicU64::new(0),
        empty_polls: AtomicU32::new(0),
        yield_after: AtomicU32::new(YIELD_AFTER),
        app_io: AtomicU64::new(0),
        app_cpu: AtomicU32::new(u32::MAX),
        cq_waiters: AtomicU32::new(0),
        parked: AtomicBool::new(false),
        tx_pending: AtomicBool::new(false),
        stop: AtomicBool::new(false),
        wake_fd,
        sock_fd,
        aux_fd,
        local,
        contexts: std::sync::atomic::AtomicUsize::new(0),
        thread: Mutex::new(None),
        shm_waker,
        progress: ProgressStats::default(),
        fault_slot: fault::EngineSlot::claim(),
    }))
}
