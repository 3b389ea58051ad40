//! Registered memory the application unmapped while softib still reaches it.
//!
//! A hardware HCA pins a region's pages when it is registered: if the application unmaps them
//! while the region is still registered, the HCA keeps reading and writing the pinned pages,
//! now out of the application's sight, until deregistration. Middleware relies on that. UCX
//! frees a UD interface's receive buffers before it destroys the QP they are posted to, and
//! behind its registration cache it deregisters a region only after the memory is unmapped; a
//! datagram that arrives in between is placed into the freed buffer. softib places it with
//! the CPU, at the application's address: without this module the process died of SIGSEGV at
//! UCX's teardown (in the progress thread, one run in 25 of a UCX ping-pong).
//!
//! So softib keeps what pinning gives: a fault of a thread inside softib's engine (it holds an
//! engine lock, [`InEngine`]) at an unmapped address inside a registered region ([`Region`])
//! maps a private zero page there and lets the access run again; the data lands in pages the
//! application no longer uses, as on hardware. Those pages stay mapped (the application may
//! have mapped something of its own beside them since; unmapping them later could take that
//! away): one page per page written. Any other fault goes to the handler installed before
//! softib's (or the default action), so the application's own faults, also on its registered
//! memory, crash as they would anyway. What pinning gives and this cannot: memory the
//! application unmapped and mapped again for something else before softib reaches it
//! receives softib's writes.
//!
//! The handler is installed when the first region is registered; it only reads fixed tables
//! of atomics, and calls `mmap` and `pthread_self`, which are async-signal-safe.

use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Once, OnceLock};

/// Registered regions whose range a fault is looked up in; regions beyond it are registered
/// as usual, without this protection.
const MAX_REGIONS: usize = 4096;
/// Engine locks (contexts) whose holder a fault is looked up in.
const MAX_ENGINES: usize = 256;

/// Start and end of each registered range; `start == 0` marks a free slot, [`CLAIMED`] one
/// being filled.
static RANGES: [(AtomicUsize, AtomicUsize); MAX_REGIONS] =
    [const { (AtomicUsize::new(0), AtomicUsize::new(0)) }; MAX_REGIONS];
/// Where the search for a free range slot starts.
static RANGE_HINT: AtomicUsize = AtomicUsize::new(0);
/// The thread (`pthread_self`) holding each engine's lock, 0 when none; [`ENGINE_FREE`] for a
/// slot no engine owns.
static HOLDERS: [AtomicUsize; MAX_ENGINES] = [const { AtomicUsize::new(ENGINE_FREE) }; MAX_ENGINES];
const ENGINE_FREE: usize = usize::MAX;
/// The start of a range slot taken and not filled yet (matches no address).
const CLAIMED: usize = usize::MAX;
/// Pages mapped by the handler.
static PAGES_MAPPED: AtomicU64 = AtomicU64::new(0);
static PAGE_SIZE: AtomicUsize = AtomicUsize::new(4096);

/// `si_code` of a SIGSEGV at an address nothing is mapped at (`<asm-generic/siginfo.h>`).
const SEGV_MAPERR: libc::c_int = 1;

/// The action in place before softib's, which every fault softib does not take goes to.
struct OldAction(libc::sigaction);
// SAFETY: plain data (a handler address, flags and a mask), written once before it is read.
unsafe impl Sync for OldAction {}
unsafe impl Send for OldAction {}
static OLD_SEGV: OnceLock<OldAction> = OnceLock::new();
static INSTALL: Once = Once::new();

/// Pages mapped into unmapped registered memory so far (`SOFTIB_STATS`).
pub fn pages_mapped() -> u64 {
    PAGES_MAPPED.load(Ordering::Relaxed)
}

/// A registered range, protected while this lives (an `ibv_mr`'s memory, and each copy the
/// engine makes of it).
#[derive(Debug)]
pub struct Region {
    slot: Option<usize>,
}

impl Region {
    /// Protects `[start, start + len)`; installs the handler the first time.
    pub fn new(start: usize, len: usize) -> Region {
        install();
        let Some(end) = start.checked_add(len).filter(|_| start != 0 && len != 0) else {
            return Region { slot: None };
        };
        let first = RANGE_HINT.load(Ordering::Relaxed);
        for k in 0..MAX_REGIONS {
            let i = (first + k) % MAX_REGIONS;
            let (s, e) = &RANGES[i];
            // Taken first, then filled: a slot being filled matches nothing.
            if s.load(Ordering::Relaxed) == 0
                && s.compare_exchange(0, CLAIMED, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                e.store(end, Ordering::Relaxed);
                s.store(start, Ordering::Release);
                RANGE_HINT.store((i + 1) % MAX_REGIONS, Ordering::Relaxed);
                return Region { slot: Some(i) };
            }
        }
        Region { slot: None }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        if let Some(i) = self.slot {
            RANGES[i].0.store(0, Ordering::Release);
        }
    }
}

/// True if `addr` lies in a registered range.
fn registered(addr: usize) -> bool {
    RANGES.iter().any(|(s, e)| {
        let start = s.load(Ordering::Acquire);
        start != 0 && start != CLAIMED && start <= addr && addr < e.load(Ordering::Relaxed)
    })
}

/// An engine's slot in the holders' table, owned by its context.
#[derive(Debug)]
pub struct EngineSlot(Option<usize>);

impl EngineSlot {
    /// Claims a slot (none past [`MAX_ENGINES`] engines: those go unprotected).
    pub fn claim() -> EngineSlot {
        EngineSlot(HOLDERS.iter().position(|h| {
            h.compare_exchange(ENGINE_FREE, 0, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        }))
    }
}

impl Drop for EngineSlot {
    fn drop(&mut self) {
        if let Some(i) = self.0 {
            HOLDERS[i].store(ENGINE_FREE, Ordering::Release);
        }
    }
}

/// Marks the calling thread as inside an engine while it lives: made just after the engine's
/// lock is taken, dropped just before it is released.
#[derive(Debug)]
pub struct InEngine(Option<usize>);

impl InEngine {
    /// The calling thread holds the lock of the engine owning `slot`.
    #[inline]
    pub fn enter(slot: &EngineSlot) -> InEngine {
        if let Some(i) = slot.0 {
            // SAFETY: no arguments.
            let me = unsafe { libc::pthread_self() } as usize;
            HOLDERS[i].store(me, Ordering::Relaxed);
        }
        InEngine(slot.0)
    }
}

impl Drop for InEngine {
    #[inline]
    fn drop(&mut self) {
        if let Some(i) = self.0 {
            HOLDERS[i].store(0, Ordering::Relaxed);
        }
    }
}

/// True if the calling thread holds an engine lock.
fn in_engine() -> bool {
    // SAFETY: no arguments; async-signal-safe (reads the thread pointer).
    let me = unsafe { libc::pthread_self() } as usize;
    HOLDERS.iter().any(|h| h.load(Ordering::Relaxed) == me)
}

fn install() {
    INSTALL.call_once(|| {
        // SAFETY: sysconf has no preconditions; sigaction reads `act` and writes `old`.
        unsafe {
            let page = libc::sysconf(libc::_SC_PAGESIZE);
            if page > 0 {
                PAGE_SIZE.store(page as usize, Ordering::Relaxed);
            }
            let mut act: libc::sigaction = std::mem::zeroed();
            act.sa_sigaction = on_segv as *const () as usize;
            act.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_RESTART;
            libc::sigemptyset(&mut act.sa_mask);
            let mut old: libc::sigaction = std::mem::zeroed();
            // The previous action is kept before softib's takes over, so that a fault
            // between the two finds it.
            if libc::sigaction(libc::SIGSEGV, std::ptr::null(), &mut old) != 0 {
                return;
            }
            let _ = OLD_SEGV.set(OldAction(old));
            libc::sigaction(libc::SIGSEGV, &act, std::ptr::null_mut());
        }
    });
}

extern "C" fn on_segv(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    // SAFETY: the kernel's siginfo for a SIGSEGV.
    let (code, addr) = unsafe { ((*info).si_code, (*info).si_addr() as usize) };
    if code == SEGV_MAPERR && registered(addr) && in_engine() {
        let page = PAGE_SIZE.load(Ordering::Relaxed);
        let at = addr & !(page - 1);
        // SAFETY: maps a fresh private page where nothing is mapped (NOREPLACE).
        let p = unsafe {
            libc::mmap(
                at as *mut c_void,
                page,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
                -1,
                0,
            )
        };
        if p as usize == at {
            PAGES_MAPPED.fetch_add(1, Ordering::Relaxed);
            return;
        }
        // SAFETY (errno below): the calling thread's.
        if p != libc::MAP_FAILED {
            // A kernel without MAP_FIXED_NOREPLACE took the address as a hint.
            // SAFETY: unmaps the page just mapped elsewhere.
            unsafe { libc::munmap(p, page) };
        } else if unsafe { *libc::__errno_location() } == libc::EEXIST {
            // Something was mapped there meanwhile: the access runs again.
            return;
        }
    }
    // SAFETY: the signal's own arguments, passed on.
    unsafe { chain(sig, info, ctx) };
}

/// Hands a fault softib does not take to the action before softib's; for the default action
/// (or none recorded), restores it and returns: the faulting access runs again and the kernel
/// applies it.
unsafe fn chain(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    let old = OLD_SEGV.get().map(|o| o.0);
    match old {
        Some(o) if o.sa_sigaction != libc::SIG_DFL && o.sa_sigaction != libc::SIG_IGN => {
            if o.sa_flags & libc::SA_SIGINFO != 0 {
                // SAFETY: a three-argument handler, as SA_SIGINFO says.
                let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut c_void) =
                    unsafe { std::mem::transmute(o.sa_sigaction) };
                f(sig, info, ctx);
            } else {
                // SAFETY: a one-argument handler.
                let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(o.sa_sigaction) };
                f(sig);
            }
        }
        _ => {
            // SAFETY: resets the signal's action to the default.
            unsafe {
                let mut dfl: libc::sigaction = std::mem::zeroed();
                dfl.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(sig, &dfl, std::ptr::null_mut());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_found_while_registered() {
        let base = 0x7000_1000_0000usize;
        let r = Region::new(base, 8192);
        assert!(registered(base) && registered(base + 8191));
        assert!(!registered(base + 8192) && !registered(base - 1));
        let copy = Region::new(base, 8192);
        drop(r);
        assert!(registered(base + 100), "a copy keeps the range");
        drop(copy);
        assert!(!registered(base + 100));
        assert!(Region::new(0, 10).slot.is_none());
        assert!(Region::new(base, 0).slot.is_none());
        assert!(Region::new(usize::MAX - 4, 10).slot.is_none());
    }

    #[test]
    fn holders_mark_the_thread_inside() {
        let slot = EngineSlot::claim();
        assert!(slot.0.is_some());
        assert!(!in_engine());
        {
            let _in = InEngine::enter(&slot);
            assert!(in_engine());
            let other = std::thread::spawn(in_engine).join().unwrap();
            assert!(!other, "only the holder is inside");
        }
        assert!(!in_engine());
    }
}
