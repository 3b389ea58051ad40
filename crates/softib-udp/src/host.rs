//! Host-wide devices: every process that opens a softib device bound to one address shares it,
//! as every process of a host shares its RDMA NIC.
//!
//! A device bound to `IP:PORT` is one HCA for the whole host (its network namespace): one GID,
//! one UDP port, QP numbers unique across every process that opens it. Each such process is a
//! *member* of the device and gets a *slot* (1 ..= 254); the slot is the high byte of every
//! QPN, SRQ number and EE context number the member hands out ([`Member::numbers`]) and of its
//! connection manager's Communication IDs, so a packet names the process it is for.
//!
//! How a datagram reaches its process, with no daemon:
//! - Every member binds its own UDP socket to `IP:PORT` with `SO_REUSEPORT`. The kernel hands
//!   each datagram to one socket of the group, chosen by a classic BPF program that the
//!   members attach to the group (`SO_ATTACH_REUSEPORT_CBPF`, no privilege needed): it reads
//!   the destination QPN's high byte (BTH byte 5) from the UDP payload and returns the index
//!   of that slot's socket in the group ([`steering_program`]).
//! - The kernel numbers the sockets of a group in the order they joined and, when one leaves,
//!   moves the last into its place; a socket cannot be asked its number. The members learn
//!   them by probes: after every change of membership, the member that made it sends one
//!   short datagram per socket of the group (the program steers a datagram shorter than a BTH
//!   by its byte 1, the index), and each member writes the index its probe carried into its
//!   slot of the host table. Once every member answered (or 50 ms passed), one of them
//!   attaches the program built from the answers.
//! - A datagram that still reaches the wrong member (a stale program after a member died,
//!   a GRO buffer of several processes' packets, a QP1 MAD) is handed to the right member's
//!   shared-memory inbox by the member that got it ([`Route`]): correctness never depends on
//!   the program, which only saves that hop.
//!
//! The host table is a file in `/dev/shm` (`softib-<netns>-<ip>-<port>.host`, mode 0600, the
//! owner's user only: a reuse-port group admits one user's sockets anyway). Membership changes
//! happen under an open-file-description lock on the file (released by the kernel if its
//! holder dies); every member holds a lock on its slot's byte for its life, which is how the
//! others learn that it died, even after `kill -9` ([`Member::maintain`]: each member watches
//! the live slot below its own once a second, so a death is noticed within about a second).
//! A slot that was left is *quiet* for [`QUIET`] before another process may take it, and a new
//! member starts numbering its QPs 0x1000 further into the slot's range than the one before it
//! (the first at 0x11, as rxe numbers its QPs): a peer's retransmissions to
//! a dead process's QPs (RC retries last at most `retry_cnt + 1` transport timeouts, 8 × 4.3 s
//! at rdma_cm's largest common timeout, 20) find no QP rather than a new one of the same
//! number.

// Shared memory, byte-range locks and a socket option need raw pointers and libc calls; they
// are all in this file, each behind a bounds-checked or documented helper.
#![allow(unsafe_code)]

use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rustix::fs::{Mode, OFlags};
use softib_core::NumberRange;

/// First member slot.
pub const FIRST_SLOT: u8 = 1;
/// Last member slot (255 would make QPN 0xFFFFFF, the multicast QPN, one of its numbers).
pub const LAST_SLOT: u8 = 254;
/// How long a slot that was left stays unused before another process may take it.
pub const QUIET: Duration = Duration::from_secs(10);
/// How long the members have to answer a round of probes before the program is built from
/// the answers that came.
const PROBE_WAIT: Duration = Duration::from_millis(50);
/// How often a member looks whether the member below it still lives.
const WATCH_EVERY: Duration = Duration::from_secs(1);
/// How often a member looks whether the answers of a round of probes are all in.
const FINISH_EVERY: Duration = Duration::from_micros(100);
/// How often a member writes its counters into the host table.
const PUBLISH_EVERY: Duration = Duration::from_millis(100);

/// "SOFTIBH2": the host table's format.
const MAGIC: u64 = u64::from_be_bytes(*b"SOFTIBH2");
/// The first byte of a probe (a datagram of [`PROBE_LEN`] bytes; no BTH is that short).
pub const PROBE_MARK: u8 = 0xFE;
/// Length of a probe: mark, index, two zero bytes, the generation (u32, little-endian).
pub const PROBE_LEN: usize = 8;
/// Datagrams shorter than this (a BTH and an ICRC) are steered by their byte 1.
const SHORT: u32 = 16;

// Header offsets.
const OFF_MAGIC: usize = 0;
/// The generation of the program in force.
const OFF_GEN: usize = 16;
/// The generation being probed (0: none).
const OFF_PENDING: usize = 24;
/// When the probes' answers stop being waited for (CLOCK_BOOTTIME ns).
const OFF_DEADLINE: usize = 32;
/// The slot a new member looks at first (slots are taken in turn).
const OFF_CURSOR: usize = 40;
/// The slot the program sends what names no live member to (QP1, stray numbers).
const OFF_FALLBACK: usize = 44;
/// The id the next shared XRC domain gets (0 is none).
const OFF_XRCD_NEXT: usize = 48;

/// Slot entries: 256 of [`SLOT_ENTRY`] bytes (0 and 255 unused).
const OFF_SLOTS: usize = 4096;
const SLOT_ENTRY: usize = 256;
// Slot entry offsets.
const S_STATE: usize = 0;
const S_PID: usize = 4;
const S_PID_NS: usize = 8;
/// Since when the slot is in its state (CLOCK_BOOTTIME ns).
const S_SINCE: usize = 16;
/// The member socket's index in the group ([`NO_INDEX`]: unknown).
const S_INDEX: usize = 24;
/// The generation the index answers.
const S_INDEX_GEN: usize = 32;
/// How many members took the slot.
const S_EPOCH: usize = 40;
/// The member's process name (16 bytes, as /proc/PID/comm).
const S_COMM: usize = 48;
/// The member's counters ([`COUNTERS`]), u64 each.
const S_COUNTERS: usize = 64;

/// Entries of the port and listener table: [`PORT_ENTRIES`] of 16 bytes: key (u64), slot
/// (u32), kind (u32, [`PortKind`]; 0 free).
const OFF_PORTS: usize = OFF_SLOTS + 256 * SLOT_ENTRY;
const PORT_ENTRIES: usize = 1024;
const PORT_ENTRY: usize = 16;

/// XRC domains shared by the members ([`Member::open_xrcd`]): [`XRCD_ENTRIES`] of
/// [`XRCD_ENTRY`] bytes: the file's st_dev (u64) and st_ino (u64), the domain's id (u32; 0:
/// a free entry), 4 bytes unused, and the members holding it (256 bits, one per slot).
const OFF_XRCDS: usize = OFF_PORTS + PORT_ENTRIES * PORT_ENTRY;
const XRCD_ENTRIES: usize = 256;
const XRCD_ENTRY: usize = 64;
const X_DEV: usize = 0;
const X_INO: usize = 8;
const X_ID: usize = 16;
const X_HOLDERS: usize = 24;

/// The XRC SRQs each member publishes in shared domains ([`XrcShare`]): per slot
/// [`SRQ_ENTRIES`] of 16 bytes: `domain << 32 | srqn` (0: a free entry), then
/// `srqn << 32 | credits` (the receive WQEs posted and not reserved; reservations take one
/// by compare-and-swap, which fails once the entry is withdrawn or reused).
const OFF_SRQS: usize = OFF_XRCDS + XRCD_ENTRIES * XRCD_ENTRY;
const SRQ_ENTRIES: usize = 64;
const SRQ_ENTRY: usize = 16;
const FILE_LEN: usize = OFF_SRQS + 256 * SRQ_ENTRIES * SRQ_ENTRY;

/// Where the byte-range locks are (beyond the data: locks need no bytes behind them).
const LOCK_MUTEX: i64 = 1 << 20;
const LOCK_SLOTS: i64 = LOCK_MUTEX + 1;

const FREE: u32 = 0;
const LIVE: u32 = 1;
const QUIET_STATE: u32 = 2;
/// An index not known.
const NO_INDEX: u32 = u32::MAX;

/// The counters every member publishes in its slot (`softib status`), in this order.
pub const COUNTERS: [&str; 13] = [
    "qps",
    "rx_datagrams",
    "tx_datagrams",
    "rx_shm",
    "tx_shm",
    "forwarded",
    "forwarded_in",
    "unowned",
    "probes",
    "reindexes",
    "xrc_delegated",
    "xrc_delegated_in",
    "xrc_delegations_dropped",
];

/// What a port-table entry holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum PortKind {
    /// A port an application bound (rdma_cm's port spaces): no other member may take it.
    Bound = 1,
    /// A Service ID a member listens on: connection requests for it go to that member.
    Listening = 2,
}

/// Where a received datagram goes ([`Member::route`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// To this member.
    Mine,
    /// To another live member, through its inbox.
    Member(u8),
    /// To nobody: its number names no live member (dropped and counted).
    Nobody,
}

/// The number a datagram (BTH first) is for, whose high byte names its member: the
/// destination EE context of a reliable datagram (RDETH, after the BTH: the EE context holds
/// the connection, in the process that made it), else the destination QPN. `None` when the
/// datagram is too short to say.
#[inline]
pub fn destination(datagram: &[u8]) -> Option<u32> {
    let at = if datagram.first()? & 0xE0 == RD_CLASS {
        13
    } else {
        5
    };
    let n = datagram.get(at..at + 3)?;
    Some(u32::from_be_bytes([0, n[0], n[1], n[2]]))
}

/// Whether a datagram (BTH first) is surely the member of slot `slot`'s, on one look: a
/// RoCEv2 datagram (longer than a probe) that is no reliable datagram and whose destination
/// QPN's high byte is the slot (QP1's is 0, no slot). `false` says nothing: [`destination`]
/// and the CM rules decide.
#[inline]
pub fn surely_mine(datagram: &[u8], slot: u8) -> bool {
    datagram.len() > PROBE_LEN && datagram[0] & 0xE0 != RD_CLASS && datagram[5] == slot
}

/// The opcode class of reliable datagrams (the top three bits of the BTH opcode).
const RD_CLASS: u8 = 0x40;

/// The host table file of the device bound to `addr`, in this network namespace.
pub fn host_path(addr: SocketAddr) -> PathBuf {
    let mut p = crate::shm::inbox_path(addr).into_os_string();
    p.push(".host");
    PathBuf::from(p)
}

/// CLOCK_BOOTTIME in nanoseconds: one clock for every process of the host, running through
/// suspend.
fn boot_ns() -> u64 {
    // Through the C library, as the device's clock (`clock.rs`): rustix finds the vDSO
    // through /proc/self/auxv, which under valgrind describes valgrind's own process, and
    // faulted reading a vDSO the program does not have.
    crate::clock::boot_ns()
}

/// The mapped host table.
struct Table {
    map: crate::shmem::SharedMap,
}

impl Table {
    /// Maps the table file open at `fd` (the caller made it [`FILE_LEN`] long).
    fn map(fd: &OwnedFd) -> io::Result<Table> {
        Ok(Table {
            map: crate::shmem::SharedMap::map(fd, FILE_LEN)?,
        })
    }

    fn u64_at(&self, off: usize) -> &AtomicU64 {
        self.map.u64_at(off)
    }

    fn u32_at(&self, off: usize) -> &AtomicU32 {
        self.map.u32_at(off)
    }

    fn slot(&self, s: u8, field: usize) -> usize {
        OFF_SLOTS + usize::from(s) * SLOT_ENTRY + field
    }

    fn state(&self, s: u8) -> u32 {
        self.u32_at(self.slot(s, S_STATE)).load(Ordering::Acquire)
    }

    fn live_slots(&self) -> impl Iterator<Item = u8> + '_ {
        (FIRST_SLOT..=LAST_SLOT).filter(|&s| self.state(s) == LIVE)
    }

    fn comm(&self, s: u8) -> String {
        let mut b = [0u8; 16];
        for (i, c) in b.chunks_mut(4).enumerate() {
            let w = self
                .u32_at(self.slot(s, S_COMM + 4 * i))
                .load(Ordering::Relaxed);
            c.copy_from_slice(&w.to_ne_bytes());
        }
        let end = b.iter().position(|&c| c == 0).unwrap_or(16);
        String::from_utf8_lossy(&b[..end]).into_owned()
    }

    fn set_comm(&self, s: u8, name: &[u8]) {
        let mut b = [0u8; 16];
        let n = name.len().min(15);
        b[..n].copy_from_slice(&name[..n]);
        for (i, c) in b.chunks(4).enumerate() {
            self.u32_at(self.slot(s, S_COMM + 4 * i)).store(
                u32::from_ne_bytes([c[0], c[1], c[2], c[3]]),
                Ordering::Relaxed,
            );
        }
    }

    fn port_entry(i: usize) -> usize {
        OFF_PORTS + i * PORT_ENTRY
    }

    fn xrcd_entry(i: usize) -> usize {
        OFF_XRCDS + i * XRCD_ENTRY
    }

    /// The word of the holder bits of slot `s` in the XRC domain entry at `at`, and its bit.
    fn holder(at: usize, s: u8) -> (usize, u64) {
        (at + X_HOLDERS + 8 * usize::from(s / 64), 1 << (s % 64))
    }

    /// The byte offset of entry `i` of slot `s`'s published XRC SRQs.
    fn srq_entry(s: u8, i: usize) -> usize {
        OFF_SRQS + (usize::from(s) * SRQ_ENTRIES + i) * SRQ_ENTRY
    }

    /// The entry of slot `srqn >> 16` that publishes SRQ `srqn`, if any (looked for from
    /// the entry its number suggests, where its owner put it unless that was taken).
    fn find_srq(&self, srqn: u32) -> Option<usize> {
        let s = (srqn >> 16) as u8;
        let start = srqn as usize % SRQ_ENTRIES;
        (0..SRQ_ENTRIES)
            .map(|k| Table::srq_entry(s, (start + k) % SRQ_ENTRIES))
            .find(|&at| self.u64_at(at).load(Ordering::Acquire) as u32 == srqn && srqn != 0)
    }

    /// Forgets what slot `s` shares of XRC (the mutex held, or the slot's own member while
    /// it is not live): its hold on every domain (a domain nobody holds goes) and the SRQs it
    /// published.
    fn clear_xrc(&self, s: u8) {
        for i in 0..XRCD_ENTRIES {
            let at = Table::xrcd_entry(i);
            if self.u32_at(at + X_ID).load(Ordering::Relaxed) == 0 {
                continue;
            }
            let (w, bit) = Table::holder(at, s);
            self.u64_at(w).fetch_and(!bit, Ordering::Relaxed);
            let held =
                (0..4).any(|k| self.u64_at(at + X_HOLDERS + 8 * k).load(Ordering::Relaxed) != 0);
            if !held {
                self.u32_at(at + X_ID).store(0, Ordering::Release);
            }
        }
        for i in 0..SRQ_ENTRIES {
            let at = Table::srq_entry(s, i);
            self.u64_at(at + 8).store(0, Ordering::Release);
            self.u64_at(at).store(0, Ordering::Release);
        }
    }
}

/// An open-file-description lock on one byte at `at` of `fd`'s file: taken (waiting for it
/// when `wait`), or released with `unlock`. Returns false when it is held by someone else and
/// not waited for.
fn ofd_lock(fd: BorrowedFd<'_>, at: i64, wait: bool, unlock: bool) -> io::Result<bool> {
    // SAFETY: a zeroed `flock` is valid; the fields are set below.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = if unlock { libc::F_UNLCK } else { libc::F_WRLCK } as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = at;
    fl.l_len = 1;
    let cmd = if wait {
        libc::F_OFD_SETLKW
    } else {
        libc::F_OFD_SETLK
    };
    loop {
        // SAFETY: fcntl on a valid descriptor with a pointer to a live `flock`.
        let r = unsafe { libc::fcntl(fd.as_raw_fd(), cmd, &mut fl as *mut libc::flock) };
        if r == 0 {
            return Ok(true);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EAGAIN) | Some(libc::EACCES) if !wait => return Ok(false),
            _ => return Err(e),
        }
    }
}

/// True when another open file description holds a lock on byte `at` (a live member's slot).
fn ofd_held(fd: BorrowedFd<'_>, at: i64) -> bool {
    // SAFETY: as in `ofd_lock`.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = libc::F_WRLCK as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = at;
    fl.l_len = 1;
    // SAFETY: as in `ofd_lock`.
    let r = unsafe {
        libc::fcntl(
            fd.as_raw_fd(),
            libc::F_OFD_GETLK,
            &mut fl as *mut libc::flock,
        )
    };
    // An error says nothing: taken as held (never declares a live member dead).
    r != 0 || fl.l_type != libc::F_UNLCK as libc::c_short
}

/// The mutex of a host table, held while alive. It names its file by descriptor number: the
/// descriptor outlives it (the guard of a join is dropped after the member that owns the
/// descriptor is made).
struct Locked {
    fd: std::os::fd::RawFd,
}

impl Drop for Locked {
    fn drop(&mut self) {
        // SAFETY: the descriptor is open for the guard's life (see above).
        let fd = unsafe { BorrowedFd::borrow_raw(self.fd) };
        let _ = ofd_lock(fd, LOCK_MUTEX, false, true);
    }
}

fn lock(fd: BorrowedFd<'_>) -> io::Result<Locked> {
    ofd_lock(fd, LOCK_MUTEX, true, false)?;
    Ok(Locked { fd: fd.as_raw_fd() })
}

fn try_lock(fd: BorrowedFd<'_>) -> Option<Locked> {
    ofd_lock(fd, LOCK_MUTEX, false, false)
        .ok()
        .filter(|&got| got)
        .map(|_| Locked { fd: fd.as_raw_fd() })
}

/// One process's membership of a host-wide device.
pub struct Member {
    seat: Arc<Seat>,
    /// The first QPN the member hands out.
    start: u32,
    /// When the member last looked at the member below it, and wrote its counters (boot ns).
    next_watch: u64,
    next_publish: u64,
    /// When this member next looks whether a round of probes can be finished (device ns).
    next_finish: u64,
    /// This member answered the probe of the round in force after it was finished without
    /// it: the program is to be rebuilt with its index.
    late: bool,
    counters: [u64; COUNTERS.len()],
}

/// What a member holds in the table: its slot (and the lock on it), the table, its doorbell
/// socket. Kept apart from the member so that a process that exits without dropping its
/// devices (a C program rarely closes its contexts) can leave at exit ([`leave_all`]).
struct Seat {
    fd: OwnedFd,
    table: Table,
    path: PathBuf,
    addr: SocketAddr,
    slot: u8,
    /// Where probes leave from and doorbells arrive (this member's own port, not the group's).
    bell: UdpSocket,
    /// The process that joined (a forked child inherits the seat but is not its member).
    pid: u32,
    /// The member left ([`Seat::leave`]).
    left: std::sync::atomic::AtomicBool,
}

/// Every seat this process holds, for [`leave_all`].
static SEATS: std::sync::Mutex<Vec<std::sync::Weak<Seat>>> = std::sync::Mutex::new(Vec::new());

/// Leaves every host-wide device this process is a member of: for a process that exits without
/// dropping its devices (from an `atexit` handler), so that its slots go quiet at once and the
/// last member removes the table. The devices go on working until the process ends, as
/// members no longer counted.
pub fn leave_all() {
    let me = std::process::id();
    let seats: Vec<Arc<Seat>> = match SEATS.lock() {
        Ok(s) => s.iter().filter_map(std::sync::Weak::upgrade).collect(),
        Err(p) => p
            .into_inner()
            .iter()
            .filter_map(std::sync::Weak::upgrade)
            .collect(),
    };
    for seat in seats.iter().filter(|s| s.pid == me) {
        seat.leave();
    }
}

impl std::fmt::Debug for Member {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Member")
            .field("addr", &self.seat.addr)
            .field("slot", &self.seat.slot)
            .finish_non_exhaustive()
    }
}

impl Member {
    /// Joins the host-wide device bound to `addr`: takes a slot, binds `socket` (a UDP socket
    /// of `addr`'s family, options set, not yet bound) to `addr` with `SO_REUSEPORT`, opens the
    /// member's doorbell socket and probes the group for its indices. Fails with the error of
    /// the bind when the address is held another way (another user's softib, a program that
    /// holds the port without reuse), with `ENOSPC` when every slot is live.
    pub fn join(addr: SocketAddr, socket: &socket2::Socket) -> io::Result<Member> {
        sweep_dead_tables(Duration::ZERO);
        let path = host_path(addr);
        loop {
            let fd = rustix::fs::open(
                &path,
                OFlags::CREATE | OFlags::RDWR | OFlags::CLOEXEC,
                Mode::RUSR | Mode::WUSR,
            )?;
            let st = rustix::fs::fstat(&fd)?;
            if st.st_uid != rustix::process::geteuid().as_raw() {
                return Err(io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    "the device at this address belongs to another user",
                ));
            }
            let guard = lock(fd.as_fd())?;
            // The last member may have removed the file between the open and the lock: then
            // this one is an orphan, and the next open makes a new one.
            let st = rustix::fs::fstat(&fd)?;
            if rustix::fs::stat(&path).map(|p| p.st_ino) != Ok(st.st_ino) {
                drop(guard);
                continue;
            }
            if st.st_size as usize != FILE_LEN {
                // A table of another format: one no member uses any more is made anew; one
                // whose members (of another softib build) live holds the address.
                let held = (FIRST_SLOT..=LAST_SLOT)
                    .any(|s| ofd_held(fd.as_fd(), LOCK_SLOTS + i64::from(s)));
                if held && st.st_size != 0 {
                    return Err(io::Error::new(
                        io::ErrorKind::AddrInUse,
                        "a softib build with another host table format uses this address",
                    ));
                }
                rustix::fs::ftruncate(&fd, 0)?;
                rustix::fs::ftruncate(&fd, FILE_LEN as u64)?;
            }
            let table = Table::map(&fd)?;
            if table.u64_at(OFF_MAGIC).load(Ordering::Acquire) != MAGIC {
                table
                    .u32_at(OFF_CURSOR)
                    .store(u32::from(FIRST_SLOT), Ordering::Relaxed);
                table.u64_at(OFF_MAGIC).store(MAGIC, Ordering::Release);
            }
            let now = boot_ns();
            sweep(&table, fd.as_fd(), addr, None, now);
            let slot = take_slot(&table, fd.as_fd(), now)?;
            let joined = (|| {
                rustix::net::sockopt::set_socket_reuseport(socket, true)?;
                socket.bind(&addr.into())?;
                UdpSocket::bind(SocketAddr::new(addr.ip(), 0))
            })();
            let bell = match joined {
                Ok(b) => b,
                Err(e) => {
                    let _ = ofd_lock(fd.as_fd(), LOCK_SLOTS + i64::from(slot), false, true);
                    // A table no member uses goes (the address is held another way).
                    if table.live_slots().next().is_none() {
                        unlink_if_same(&path, &fd);
                    }
                    return Err(e);
                }
            };
            bell.set_nonblocking(true)?;
            let t = &table;
            t.u32_at(t.slot(slot, S_PID))
                .store(std::process::id(), Ordering::Relaxed);
            t.u64_at(t.slot(slot, S_PID_NS))
                .store(crate::shm::pid_namespace(), Ordering::Relaxed);
            t.u64_at(t.slot(slot, S_SINCE))
                .store(now, Ordering::Relaxed);
            t.u32_at(t.slot(slot, S_INDEX))
                .store(NO_INDEX, Ordering::Relaxed);
            t.u64_at(t.slot(slot, S_INDEX_GEN))
                .store(0, Ordering::Relaxed);
            let epoch = t
                .u32_at(t.slot(slot, S_EPOCH))
                .fetch_add(1, Ordering::Relaxed)
                + 1;
            let comm = std::fs::read("/proc/self/comm").unwrap_or_default();
            t.set_comm(slot, comm.strip_suffix(b"\n").unwrap_or(&comm));
            for i in 0..COUNTERS.len() {
                t.u64_at(t.slot(slot, S_COUNTERS + 8 * i))
                    .store(0, Ordering::Relaxed);
            }
            // Nothing of a predecessor in the slot is this member's.
            t.clear_xrc(slot);
            t.u32_at(t.slot(slot, S_STATE))
                .store(LIVE, Ordering::Release);
            let seat = Arc::new(Seat {
                fd,
                table,
                path: path.clone(),
                addr,
                slot,
                bell,
                pid: std::process::id(),
                left: std::sync::atomic::AtomicBool::new(false),
            });
            if let Ok(mut seats) = SEATS.lock() {
                seats.retain(|w| w.strong_count() > 0);
                seats.push(Arc::downgrade(&seat));
            }
            let mut m = Member {
                seat,
                start: first_number(slot, epoch),
                next_watch: 0,
                next_publish: 0,
                next_finish: 0,
                late: false,
                counters: [0; COUNTERS.len()],
            };
            // The group's program steers the probes by their index: a group without one (this
            // member is its first, or the first since all left) gets one now.
            m.seat.start_reindex(now, Some(socket.as_fd()));
            m.counters[9] += 1;
            drop(guard);
            return Ok(m);
        }
    }

    /// The member's slot.
    pub fn slot(&self) -> u8 {
        self.seat.slot
    }

    /// The bound address of the device.
    pub fn addr(&self) -> SocketAddr {
        self.seat.addr
    }

    /// The numbers this member's HCA gives its QPs, SRQs and EE contexts: those whose high
    /// byte is the slot, from [`first_number`].
    pub fn numbers(&self) -> NumberRange {
        let first = u32::from(self.seat.slot) << 16;
        NumberRange {
            first,
            last: first | 0xFFFF,
            start: self.start,
        }
    }

    /// The member's doorbell socket (for a caller that sleeps on it: a doorbell wakes it).
    pub fn bell(&self) -> &UdpSocket {
        &self.seat.bell
    }

    /// The member's doorbell port.
    pub fn bell_port(&self) -> u16 {
        self.seat.bell.local_addr().map(|a| a.port()).unwrap_or(0)
    }

    /// Where a datagram whose destination number (QPN, EECN) has high byte `high` goes.
    #[inline]
    pub fn route_number(&self, high: u8) -> Route {
        if high == self.seat.slot {
            Route::Mine
        } else if (FIRST_SLOT..=LAST_SLOT).contains(&high) && self.seat.table.state(high) == LIVE {
            Route::Member(high)
        } else {
            Route::Nobody
        }
    }

    /// The member that listens on `service_id`, if any.
    pub fn listener(&self, service_id: u64) -> Option<u8> {
        self.find_port(service_id, PortKind::Listening)
            .map(|(_, s)| s)
    }

    fn find_port(&self, key: u64, kind: PortKind) -> Option<(usize, u8)> {
        let t = &self.seat.table;
        (0..PORT_ENTRIES).find_map(|i| {
            let at = Table::port_entry(i);
            let k = t.u32_at(at + 12).load(Ordering::Acquire);
            if k != kind as u32 || t.u64_at(at).load(Ordering::Relaxed) != key {
                return None;
            }
            let s = t.u32_at(at + 8).load(Ordering::Relaxed) as u8;
            (t.state(s) == LIVE).then_some((i, s))
        })
    }

    /// Takes `key` in the table as `kind` for this member: false if another live member holds
    /// it (a bound port: `EADDRINUSE`; a listened Service ID: another process listens).
    pub fn claim(&self, key: u64, kind: PortKind) -> io::Result<bool> {
        let _g = lock(self.seat.fd.as_fd())?;
        if let Some((_, s)) = self.find_port(key, kind) {
            return Ok(s == self.seat.slot);
        }
        let t = &self.seat.table;
        let free = (0..PORT_ENTRIES).find(|&i| {
            let at = Table::port_entry(i);
            let k = t.u32_at(at + 12).load(Ordering::Relaxed);
            let s = t.u32_at(at + 8).load(Ordering::Relaxed) as u8;
            k == 0 || t.state(s) != LIVE
        });
        let Some(i) = free else {
            return Err(io::Error::from_raw_os_error(libc::ENOSPC));
        };
        let at = Table::port_entry(i);
        t.u64_at(at).store(key, Ordering::Relaxed);
        t.u32_at(at + 8)
            .store(u32::from(self.seat.slot), Ordering::Relaxed);
        t.u32_at(at + 12).store(kind as u32, Ordering::Release);
        Ok(true)
    }

    /// Gives back what [`Member::claim`] took.
    pub fn release(&self, key: u64, kind: PortKind) {
        let Ok(_g) = lock(self.seat.fd.as_fd()) else {
            return;
        };
        if let Some((i, s)) = self.find_port(key, kind) {
            if s == self.seat.slot {
                self.seat
                    .table
                    .u32_at(Table::port_entry(i) + 12)
                    .store(0, Ordering::Release);
            }
        }
    }

    /// Opens for this member the host-wide XRC domain of the file whose (st_dev, st_ino) is
    /// `file` (`ibv_open_xrcd` with a file descriptor, as the kernel keys a device's domains
    /// by inode): the id of the domain every member that opens the file shares. As the
    /// kernel: no domain for the file and not `create`: `EAGAIN`; one exists and
    /// `exclusive`: `EINVAL`; no room in the table: `ENOSPC`. Each member holds a domain once
    /// (its process counts its own opens); [`Member::close_xrcd`] lets go.
    pub fn open_xrcd(&self, file: (u64, u64), create: bool, exclusive: bool) -> io::Result<u32> {
        let _g = lock(self.seat.fd.as_fd())?;
        let t = &self.seat.table;
        let me = self.seat.slot;
        let found = (0..XRCD_ENTRIES).map(Table::xrcd_entry).find(|&at| {
            t.u32_at(at + X_ID).load(Ordering::Relaxed) != 0
                && t.u64_at(at + X_DEV).load(Ordering::Relaxed) == file.0
                && t.u64_at(at + X_INO).load(Ordering::Relaxed) == file.1
        });
        let at = match found {
            Some(_) if exclusive => return Err(io::Error::from_raw_os_error(libc::EINVAL)),
            Some(at) => at,
            None if !create => return Err(io::Error::from_raw_os_error(libc::EAGAIN)),
            None => {
                let Some(at) = (0..XRCD_ENTRIES)
                    .map(Table::xrcd_entry)
                    .find(|&at| t.u32_at(at + X_ID).load(Ordering::Relaxed) == 0)
                else {
                    return Err(io::Error::from_raw_os_error(libc::ENOSPC));
                };
                // A new domain, never the id of one that went (its SRQs are not this one's).
                let next = t.u32_at(OFF_XRCD_NEXT);
                let id = match next.load(Ordering::Relaxed) {
                    0 | u32::MAX => 1,
                    n => n,
                };
                next.store(id + 1, Ordering::Relaxed);
                t.u64_at(at + X_DEV).store(file.0, Ordering::Relaxed);
                t.u64_at(at + X_INO).store(file.1, Ordering::Relaxed);
                for k in 0..4 {
                    t.u64_at(at + X_HOLDERS + 8 * k).store(0, Ordering::Relaxed);
                }
                t.u32_at(at + X_ID).store(id, Ordering::Release);
                at
            }
        };
        let (w, bit) = Table::holder(at, me);
        t.u64_at(w).fetch_or(bit, Ordering::Relaxed);
        Ok(t.u32_at(at + X_ID).load(Ordering::Relaxed))
    }

    /// Lets go of host-wide XRC domain `id` ([`Member::open_xrcd`]); the domain goes when no
    /// member holds it.
    pub fn close_xrcd(&self, id: u32) {
        let Ok(_g) = lock(self.seat.fd.as_fd()) else {
            return;
        };
        let t = &self.seat.table;
        for at in (0..XRCD_ENTRIES).map(Table::xrcd_entry) {
            if id == 0 || t.u32_at(at + X_ID).load(Ordering::Relaxed) != id {
                continue;
            }
            let (w, bit) = Table::holder(at, self.seat.slot);
            t.u64_at(w).fetch_and(!bit, Ordering::Relaxed);
            let held =
                (0..4).any(|k| t.u64_at(at + X_HOLDERS + 8 * k).load(Ordering::Relaxed) != 0);
            if !held {
                t.u32_at(at + X_ID).store(0, Ordering::Release);
            }
        }
    }

    /// The XRC SRQ share of this member's HCA: it publishes the member's XRC SRQs of shared
    /// domains in the table and reserves receive WQEs of every member's
    /// (`softib_core::XrcSrqShare`).
    pub fn xrc_share(&self) -> XrcShare {
        XrcShare {
            seat: Arc::clone(&self.seat),
        }
    }

    /// Takes a probe (a datagram of [`PROBE_LEN`] bytes that starts with [`PROBE_MARK`]):
    /// the index it carries is this member's socket's, for the generation being probed.
    /// Returns false for any other datagram.
    pub fn answer_probe(&mut self, datagram: &[u8]) -> bool {
        if datagram.len() != PROBE_LEN || datagram[0] != PROBE_MARK {
            return false;
        }
        self.counters[8] += 1;
        let generation = u32::from_le_bytes([datagram[4], datagram[5], datagram[6], datagram[7]]);
        let t = &self.seat.table;
        let pending = t.u64_at(OFF_PENDING).load(Ordering::Acquire);
        let in_force = t.u64_at(OFF_GEN).load(Ordering::Acquire);
        // The round under way; or the one in force, finished at its deadline without this
        // member's answer: the program is rebuilt with it ([`Member::maintain`]).
        let answers = [pending, in_force]
            .into_iter()
            .find(|&g| g != 0 && g as u32 == generation);
        if let Some(g) = answers {
            let gen_at = t.u64_at(t.slot(self.seat.slot, S_INDEX_GEN));
            if gen_at.load(Ordering::Relaxed) != g {
                t.u32_at(t.slot(self.seat.slot, S_INDEX))
                    .store(u32::from(datagram[1]), Ordering::Relaxed);
                gen_at.store(g, Ordering::Release);
                self.late = g == in_force && g != pending;
            }
        }
        true
    }

    /// Keeps the membership going; called by the device's rounds with its clock (`now_ns`,
    /// any monotonic nanoseconds). Finishes a round of probes (builds and attaches the
    /// program on `socket`, the member's group socket), looks whether the member below this
    /// one still lives (once a second) and writes the counters. Cheap when there is nothing to
    /// do: one read of the table.
    pub fn maintain(&mut self, socket: BorrowedFd<'_>, now_ns: u64) {
        if self.seat.left.load(Ordering::Relaxed) {
            return;
        }
        let pending = self.seat.table.u64_at(OFF_PENDING).load(Ordering::Acquire);
        if pending != 0 && now_ns >= self.next_finish {
            self.next_finish = now_ns + FINISH_EVERY.as_nanos() as u64;
            self.finish_reindex(socket, pending, boot_ns());
        } else if self.late {
            self.late = !self.rebuild_late(socket);
        }
        if now_ns >= self.next_watch {
            self.next_watch = now_ns + WATCH_EVERY.as_nanos() as u64;
            self.watch(boot_ns());
        }
        if now_ns >= self.next_publish {
            self.next_publish = now_ns + PUBLISH_EVERY.as_nanos() as u64;
            self.publish();
        }
    }

    /// True when the next [`Member::maintain`] at `now_ns` writes the counters into the table
    /// (the caller sets them first, [`Member::set_count`]).
    #[inline]
    pub fn publish_due(&self, now_ns: u64) -> bool {
        now_ns >= self.next_publish
    }

    /// Adds to one of this member's counters ([`COUNTERS`]).
    pub fn count(&mut self, counter: usize, n: u64) {
        if let Some(c) = self.counters.get_mut(counter) {
            *c += n;
        }
    }

    /// Sets one of this member's counters ([`COUNTERS`]).
    pub fn set_count(&mut self, counter: usize, v: u64) {
        if let Some(c) = self.counters.get_mut(counter) {
            *c = v;
        }
    }

    fn publish(&self) {
        let t = &self.seat.table;
        for (i, v) in self.counters.iter().enumerate() {
            t.u64_at(t.slot(self.seat.slot, S_COUNTERS + 8 * i))
                .store(*v, Ordering::Relaxed);
        }
    }

    /// Looks at the live member below this one (the highest one, for the lowest member): if
    /// its lock is gone, it died; the table is swept and the group probed again.
    fn watch(&mut self, now: u64) {
        // Allocates nothing: it runs in the data path's rounds.
        let t = &self.seat.table;
        let below = (FIRST_SLOT..self.seat.slot)
            .rev()
            .chain((self.seat.slot + 1..=LAST_SLOT).rev())
            .find(|&s| t.state(s) == LIVE);
        let Some(s) = below else {
            return;
        };
        if ofd_held(self.seat.fd.as_fd(), LOCK_SLOTS + i64::from(s)) {
            return;
        }
        // Not waited for: this runs in the data path, and a member stopped while it holds the
        // lock (a debugger) must not stop the others; the next look, a second later, tries
        // again (a join sweeps the table anyway).
        let Some(_g) = try_lock(self.seat.fd.as_fd()) else {
            return;
        };
        if sweep(
            &self.seat.table,
            self.seat.fd.as_fd(),
            self.seat.addr,
            Some(self.seat.slot),
            now,
        ) {
            self.seat.start_reindex(now, None);
            self.counters[9] += 1;
        }
    }

    /// Rebuilds the program in force with the answers that came after its round finished (a
    /// late member's); true when done (or no longer needed).
    fn rebuild_late(&mut self, socket: BorrowedFd<'_>) -> bool {
        let Some(_g) = try_lock(self.seat.fd.as_fd()) else {
            return false;
        };
        let t = &self.seat.table;
        let in_force = t.u64_at(OFF_GEN).load(Ordering::Acquire);
        if t.u64_at(OFF_PENDING).load(Ordering::Acquire) != 0 {
            return true;
        }
        let pairs = self.answers(in_force);
        let fallback = pairs.first().map_or(0, |(_, i)| i);
        let _ = attach_steering(socket, pairs, fallback);
        true
    }

    /// The (slot, index) answers of live members for `generation`, by slot.
    fn answers(&self, generation: u64) -> Pairs {
        let t = &self.seat.table;
        let mut p = Pairs::default();
        for s in t.live_slots() {
            if t.u64_at(t.slot(s, S_INDEX_GEN)).load(Ordering::Acquire) == generation {
                p.push((
                    s,
                    t.u32_at(t.slot(s, S_INDEX)).load(Ordering::Relaxed) as u8,
                ));
            }
        }
        p
    }

    /// Builds and attaches the program of generation `pending` once every live member
    /// answered or the deadline passed; whoever gets there first does it.
    fn finish_reindex(&mut self, socket: BorrowedFd<'_>, pending: u64, now: u64) {
        let t = &self.seat.table;
        let answered = |s: u8| t.u64_at(t.slot(s, S_INDEX_GEN)).load(Ordering::Acquire) == pending;
        let all = t.live_slots().all(answered);
        let late = now >= t.u64_at(OFF_DEADLINE).load(Ordering::Relaxed);
        if !all && !late {
            return;
        }
        let Some(_g) = try_lock(self.seat.fd.as_fd()) else {
            return;
        };
        if t.u64_at(OFF_PENDING).load(Ordering::Acquire) != pending {
            return;
        }
        for s in t.live_slots() {
            if !answered(s) {
                t.u32_at(t.slot(s, S_INDEX))
                    .store(NO_INDEX, Ordering::Relaxed);
            }
        }
        let pairs = self.answers(pending);
        // What names no live member goes to the lowest that answered (it hands QP1's MADs
        // on by their contents, and drops the rest).
        let fallback = pairs.first();
        if attach_steering(socket, pairs, fallback.map_or(0, |(_, i)| i)).is_ok() {
            t.u32_at(OFF_FALLBACK)
                .store(fallback.map_or(0, |(s, _)| u32::from(s)), Ordering::Relaxed);
            t.u64_at(OFF_GEN).store(pending, Ordering::Relaxed);
            t.u64_at(OFF_PENDING).store(0, Ordering::Release);
        }
    }
}

/// A member's view of the XRC SRQs the members publish in the host table (see
/// `softib_core::XrcSrqShare`): it writes its own slot's entries, and takes credits from
/// any live member's by compare-and-swap. Nothing here takes the table's mutex.
pub struct XrcShare {
    seat: Arc<Seat>,
}

impl std::fmt::Debug for XrcShare {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XrcShare")
            .field("slot", &self.seat.slot)
            .finish_non_exhaustive()
    }
}

impl XrcShare {
    /// The live entry publishing SRQ `srqn` in `domain`, if any.
    fn entry(&self, srqn: u32, domain: u32) -> Option<usize> {
        let t = &self.seat.table;
        let s = (srqn >> 16) as u8;
        if !(FIRST_SLOT..=LAST_SLOT).contains(&s) || t.state(s) != LIVE {
            return None;
        }
        let at = t.find_srq(srqn)?;
        let key = (u64::from(domain) << 32) | u64::from(srqn);
        (t.u64_at(at).load(Ordering::Acquire) == key).then_some(at)
    }

    /// This member's entry of its SRQ `srqn`.
    fn own(&self, srqn: u32) -> Option<usize> {
        ((srqn >> 16) as u8 == self.seat.slot)
            .then(|| self.seat.table.find_srq(srqn))
            .flatten()
    }
}

impl softib_core::XrcSrqShare for XrcShare {
    fn publish(&mut self, srqn: u32, domain: u32, credits: u32) -> bool {
        let t = &self.seat.table;
        let s = self.seat.slot;
        if (srqn >> 16) as u8 != s || srqn == 0 || self.seat.left.load(Ordering::Relaxed) {
            return false;
        }
        let start = srqn as usize % SRQ_ENTRIES;
        let free = (0..SRQ_ENTRIES)
            .map(|k| Table::srq_entry(s, (start + k) % SRQ_ENTRIES))
            .find(|&at| t.u64_at(at).load(Ordering::Acquire) == 0);
        let Some(at) = free else {
            return false;
        };
        // The credits first: an entry is live once its key is.
        t.u64_at(at + 8).store(
            (u64::from(srqn) << 32) | u64::from(credits),
            Ordering::Release,
        );
        t.u64_at(at).store(
            (u64::from(domain) << 32) | u64::from(srqn),
            Ordering::Release,
        );
        true
    }

    fn withdraw(&mut self, srqn: u32) {
        if let Some(at) = self.own(srqn) {
            let t = &self.seat.table;
            // The credits first: a reservation under way fails its compare-and-swap.
            t.u64_at(at + 8).store(0, Ordering::Release);
            t.u64_at(at).store(0, Ordering::Release);
        }
    }

    fn add_credits(&mut self, srqn: u32, n: u32) {
        if let Some(at) = self.own(srqn) {
            self.seat
                .table
                .u64_at(at + 8)
                .fetch_add(u64::from(n), Ordering::AcqRel);
        }
    }

    fn published(&self, srqn: u32, domain: u32) -> bool {
        self.entry(srqn, domain).is_some()
    }

    fn reserve(&mut self, srqn: u32, domain: u32) -> softib_core::Reservation {
        use softib_core::Reservation;
        let Some(at) = self.entry(srqn, domain) else {
            return Reservation::Unknown;
        };
        let c = self.seat.table.u64_at(at + 8);
        let mut w = c.load(Ordering::Acquire);
        loop {
            if (w >> 32) as u32 != srqn {
                return Reservation::Unknown;
            }
            if w as u32 == 0 {
                return Reservation::Empty;
            }
            match c.compare_exchange_weak(w, w - 1, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Reservation::Reserved,
                Err(now) => w = now,
            }
        }
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        self.seat.leave();
    }
}

impl Seat {
    /// Leaves (once): the slot goes quiet, and the group is probed again (the device's
    /// socket, closed before this runs when the device is dropped, has left the group); the
    /// last member removes the table.
    fn leave(&self) {
        if self.left.swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(g) = lock(self.fd.as_fd()) else {
            return;
        };
        let t = &self.table;
        let now = boot_ns();
        t.u64_at(t.slot(self.slot, S_SINCE))
            .store(now, Ordering::Relaxed);
        t.u32_at(t.slot(self.slot, S_STATE))
            .store(QUIET_STATE, Ordering::Release);
        // Its XRC SRQs and domain holds go with it.
        t.clear_xrc(self.slot);
        let _ = ofd_lock(
            self.fd.as_fd(),
            LOCK_SLOTS + i64::from(self.slot),
            false,
            true,
        );
        if t.live_slots().next().is_none() {
            unlink_if_same(&self.path, &self.fd);
        } else {
            self.start_reindex(now, None);
        }
        drop(g);
    }

    /// Starts a round of probes (the mutex held): a new generation, one probe per socket of
    /// the group. Each member answers in its rounds ([`Member::answer_probe`]); the program
    /// is attached when all have, or at the deadline ([`Member::finish_reindex`]). With
    /// `socket` (a socket of the group), the program of the indices known now is attached
    /// first, so that the group has one that steers the probes.
    fn start_reindex(&self, now: u64, socket: Option<BorrowedFd<'_>>) {
        let t = &self.table;
        if let Some(sock) = socket {
            let mut known = Pairs::default();
            for s in t.live_slots() {
                let i = t.u32_at(t.slot(s, S_INDEX)).load(Ordering::Relaxed);
                if i != NO_INDEX {
                    known.push((s, i as u8));
                }
            }
            let fallback = known.first().map_or(0, |(_, i)| i);
            let _ = attach_steering(sock, known, fallback);
        }
        let generation = t
            .u64_at(OFF_GEN)
            .load(Ordering::Relaxed)
            .max(t.u64_at(OFF_PENDING).load(Ordering::Relaxed))
            + 1;
        t.u64_at(OFF_DEADLINE)
            .store(now + PROBE_WAIT.as_nanos() as u64, Ordering::Relaxed);
        t.u64_at(OFF_PENDING).store(generation, Ordering::Release);
        let n = group_size(self.addr).clamp(1, 256);
        for i in 0..n {
            let mut p = [0u8; PROBE_LEN];
            p[0] = PROBE_MARK;
            p[1] = i as u8;
            p[4..8].copy_from_slice(&(generation as u32).to_le_bytes());
            let _ = self.bell.send_to(&p, self.addr);
        }
    }
}

/// Removes the table file at `path` if it is still the file open at `fd` (the mutex held).
fn unlink_if_same(path: &std::path::Path, fd: &OwnedFd) {
    if rustix::fs::stat(path)
        .is_ok_and(|p| rustix::fs::fstat(fd).is_ok_and(|s| s.st_ino == p.st_ino))
    {
        let _ = rustix::fs::unlink(path);
    }
}

/// Removes what processes of this user that died without leaving left in `/dev/shm`: the
/// inboxes whose owner is gone and the host tables of this network namespace none of whose
/// members lives. A device that joins does it first; so does every process of a `softib run`
/// when it exits (the preload library), so that a launcher that outlives its ranks (mpirun,
/// whose ranks were killed by a signal: no exit handler of theirs ran, and no member of the
/// host was left to notice) leaves nothing behind.
pub fn sweep_dead_files() {
    crate::shm::sweep_dead_inboxes();
    sweep_dead_tables(EXIT_WAIT);
}

/// How long [`sweep_dead_files`] waits for members that are exiting to release their slots.
const EXIT_WAIT: Duration = Duration::from_secs(2);

/// Removes the host tables of this user and network namespace whose members all died (their
/// last member was killed, so nobody left removed the table), with their members' inboxes: a
/// table is taken only while its mutex is free, and removed only if no slot's lock is held.
/// While every slot still held is a member that is exiting, it waits for them, up to `wait`:
/// a killed member holds its slot's lock until the kernel has torn down its memory and closes
/// its files, which takes milliseconds, and a launcher exits right after it killed its ranks.
fn sweep_dead_tables(wait: Duration) {
    let Ok(dir) = std::fs::read_dir("/dev/shm") else {
        return;
    };
    let me = rustix::process::geteuid().as_raw();
    for e in dir.flatten() {
        let name = e.file_name();
        let Some(stem) = name.to_str().and_then(|n| n.strip_suffix(".host")) else {
            continue;
        };
        let Some(addr) = crate::shm::address_of_inbox_name(stem) else {
            continue;
        };
        let path = e.path();
        let Ok(fd) = rustix::fs::open(&path, OFlags::RDWR | OFlags::CLOEXEC, Mode::empty()) else {
            continue;
        };
        let Ok(st) = rustix::fs::fstat(&fd) else {
            continue;
        };
        if st.st_uid != me {
            continue;
        }
        let Some(_g) = try_lock(fd.as_fd()) else {
            continue;
        };
        let table = (st.st_size as usize == FILE_LEN)
            .then(|| Table::map(&fd).ok())
            .flatten()
            .filter(|t| t.u64_at(OFF_MAGIC).load(Ordering::Acquire) == MAGIC);
        let held = |s: &u8| ofd_held(fd.as_fd(), LOCK_SLOTS + i64::from(*s));
        let deadline = std::time::Instant::now() + wait;
        while (FIRST_SLOT..=LAST_SLOT).any(|s| held(&s)) {
            let exiting = |s: &u8| {
                table.as_ref().is_some_and(|t| {
                    t.u64_at(t.slot(*s, S_PID_NS)).load(Ordering::Relaxed)
                        == crate::shm::pid_namespace()
                        && exiting(t.u32_at(t.slot(*s, S_PID)).load(Ordering::Relaxed))
                })
            };
            if std::time::Instant::now() >= deadline
                || !(FIRST_SLOT..=LAST_SLOT).filter(held).all(|s| exiting(&s))
            {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        if !(FIRST_SLOT..=LAST_SLOT).any(|s| held(&s)) {
            // The members' inboxes go with the table. A killed member's slot lock is free
            // once its files are closed, before it is reaped: the inboxes' own sweep still
            // takes such an owner for alive (a launcher that killed its ranks may exit, and
            // sweep, before it waits for them).
            if let Some(t) = &table {
                sweep(t, fd.as_fd(), addr, None, boot_ns());
            }
            unlink_if_same(&path, &fd);
        }
    }
}

/// True when process `pid` (of this PID namespace) is exiting or has exited: gone, a zombie,
/// its main thread in the kernel's exit path (`PF_EXITING` in the flags of
/// `/proc/PID/stat`, set as it starts to exit, before its memory and files go), or a SIGKILL
/// pending that it has not taken yet (`SigPnd`/`ShdPnd` of `/proc/PID/status`: a launcher
/// that kills its ranks exits before they are even scheduled).
fn exiting(pid: u32) -> bool {
    const PF_EXITING: u64 = 0x4;
    let Ok(stat) = std::fs::read(format!("/proc/{pid}/stat")) else {
        return true;
    };
    // The fields after the command name, which is in parentheses and may hold anything.
    let Some(rest) = stat
        .iter()
        .rposition(|&b| b == b')')
        .and_then(|i| stat.get(i + 1..))
    else {
        return false;
    };
    let rest = String::from_utf8_lossy(rest);
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next().unwrap_or("");
    // state ppid pgrp session tty_nr tpgid flags
    let flags = fields
        .nth(5)
        .and_then(|f| f.parse::<u64>().ok())
        .unwrap_or(0);
    if matches!(state, "Z" | "X" | "x") || flags & PF_EXITING != 0 {
        return true;
    }
    let kill = 1u64 << (libc::SIGKILL - 1);
    std::fs::read_to_string(format!("/proc/{pid}/status")).is_ok_and(|status| {
        status.lines().any(|l| {
            l.strip_prefix("SigPnd:")
                .or_else(|| l.strip_prefix("ShdPnd:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
                .is_some_and(|m| m & kill != 0)
        })
    })
}

/// Sweeps the table (the mutex held): live slots whose lock is gone (their member died) go
/// quiet, quiet slots older than [`QUIET`] free. Returns true when a member was found dead.
fn sweep(t: &Table, fd: BorrowedFd<'_>, addr: SocketAddr, me: Option<u8>, now: u64) -> bool {
    let mut died = false;
    for s in FIRST_SLOT..=LAST_SLOT {
        match t.state(s) {
            LIVE if Some(s) != me && !ofd_held(fd, LOCK_SLOTS + i64::from(s)) => {
                t.u64_at(t.slot(s, S_SINCE)).store(now, Ordering::Relaxed);
                t.u32_at(t.slot(s, S_STATE))
                    .store(QUIET_STATE, Ordering::Release);
                // Its XRC SRQs and domain holds go with it: a reservation of its SRQs finds
                // none (NAK-Invalid RD Request at the target).
                t.clear_xrc(s);
                // Its inbox is gone with it (it could not remove it itself).
                let _ = std::fs::remove_file(crate::shm::member_inbox_path(addr, s));
                died = true;
            }
            QUIET_STATE
                if now.saturating_sub(t.u64_at(t.slot(s, S_SINCE)).load(Ordering::Relaxed))
                    >= QUIET.as_nanos() as u64 =>
            {
                t.u32_at(t.slot(s, S_STATE)).store(FREE, Ordering::Release);
            }
            _ => {}
        }
    }
    died
}

/// Takes a free slot (the mutex held), the one after the last taken first; when none is free,
/// the one quiet the longest. Its lock is taken for the member's life.
fn take_slot(t: &Table, fd: BorrowedFd<'_>, now: u64) -> io::Result<u8> {
    let span = usize::from(LAST_SLOT - FIRST_SLOT) + 1;
    let cursor = t.u32_at(OFF_CURSOR).load(Ordering::Relaxed) as usize;
    let order = (0..span).map(|k| FIRST_SLOT + ((cursor.saturating_sub(1) + k) % span) as u8);
    let free: Vec<u8> = order.clone().filter(|&s| t.state(s) == FREE).collect();
    let mut quiet: Vec<u8> = order.filter(|&s| t.state(s) == QUIET_STATE).collect();
    quiet.sort_by_key(|&s| t.u64_at(t.slot(s, S_SINCE)).load(Ordering::Relaxed));
    for s in free.into_iter().chain(quiet) {
        // A slot whose lock is still held (a forked child keeps a dead member's lock) is
        // skipped.
        if ofd_lock(fd, LOCK_SLOTS + i64::from(s), false, false)? {
            let next = if s >= LAST_SLOT { FIRST_SLOT } else { s + 1 };
            t.u32_at(OFF_CURSOR)
                .store(u32::from(next), Ordering::Relaxed);
            t.u64_at(t.slot(s, S_SINCE)).store(now, Ordering::Relaxed);
            return Ok(s);
        }
    }
    Err(io::Error::from_raw_os_error(libc::ENOSPC))
}

/// The first number the `epoch`-th member of a slot hands out: 0x11 into the slot's range
/// (rxe's first QPN) for the first, 0x1000 further for each later one, so that a member's
/// numbers do not repeat its predecessors' first ones.
fn first_number(slot: u8, epoch: u32) -> u32 {
    let offset = 0x11 + epoch.saturating_sub(1).wrapping_mul(0x1000);
    (u32::from(slot) << 16) | (offset & 0xFFFF)
}

/// How many sockets are bound to `addr` (the reuse-port group), from `/proc/net/udp[6]`.
pub fn group_size(addr: SocketAddr) -> usize {
    let (file, want) = match crate::frame::canonical_ip(addr.ip()) {
        IpAddr::V4(a) => (
            "/proc/net/udp",
            format!("{:08X}:{:04X}", u32::from_ne_bytes(a.octets()), addr.port()),
        ),
        IpAddr::V6(a) => {
            let o = a.octets();
            let words: String = o
                .chunks(4)
                .map(|c| format!("{:08X}", u32::from_ne_bytes([c[0], c[1], c[2], c[3]])))
                .collect();
            ("/proc/net/udp6", format!("{words}:{:04X}", addr.port()))
        }
    };
    std::fs::read_to_string(file)
        .map(|text| {
            text.lines()
                .skip(1)
                .filter(|l| l.split_whitespace().nth(1) == Some(want.as_str()))
                .count()
        })
        .unwrap_or(0)
}

// Classic BPF instruction classes and fields (linux/filter.h).
const BPF_LD: u16 = 0x00;
const BPF_JMP: u16 = 0x05;
const BPF_RET: u16 = 0x06;
const BPF_ALU: u16 = 0x04;
const BPF_AND: u16 = 0x50;
const BPF_W: u16 = 0x00;
const BPF_H: u16 = 0x08;
const BPF_B: u16 = 0x10;
const BPF_ABS: u16 = 0x20;
const BPF_LEN: u16 = 0x80;
const BPF_JA: u16 = 0x00;
const BPF_JEQ: u16 = 0x10;
const BPF_JGT: u16 = 0x20;
const BPF_JGE: u16 = 0x30;
const BPF_K: u16 = 0x00;
const BPF_A: u16 = 0x10;

/// One classic BPF instruction (`struct sock_filter`, whose layout it has).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(C)]
pub struct Insn {
    pub code: u16,
    pub jt: u8,
    pub jf: u8,
    pub k: u32,
}

const fn insn(code: u16, jt: u8, jf: u8, k: u32) -> Insn {
    Insn { code, jt, jf, k }
}

/// The reuse-port program: a datagram shorter than [`SHORT`] (a probe) goes to the index in
/// its byte 1; any other to the index of the slot named by the high byte of its
/// [`destination`] (byte 13, the RDETH's EE context, for reliable datagrams; byte 5, the
/// BTH's destination QP, for the others), found by a binary search over `pairs` (slot, index;
/// sorted by slot); a slot not there to `fallback`. An index the group does not have makes
/// the kernel choose by its hash, as does a datagram too short to read.
pub fn steering_program(pairs: &[(u8, u8)], fallback: u8) -> Vec<Insn> {
    let mut sorted = Pairs::default();
    for &p in pairs {
        sorted.push(p);
    }
    let mut out = [Insn::default(); PROGRAM_MAX];
    let n = write_program(sorted.sorted(), fallback, &mut out);
    out[..n].to_vec()
}

/// Most (slot, index) pairs: one per slot.
const PAIRS_MAX: usize = LAST_SLOT as usize;
/// The longest program: the head, then 5 instructions per pair and a leaf.
const PROGRAM_MAX: usize = PROGRAM_HEAD + 5 * PAIRS_MAX + 1;
const PROGRAM_HEAD: usize = 22;

/// (slot, index) pairs in a fixed array: the program is rebuilt in the data path's rounds,
/// which allocate nothing.
#[derive(Clone, Copy)]
struct Pairs {
    pairs: [(u8, u8); PAIRS_MAX],
    len: usize,
}

impl Default for Pairs {
    fn default() -> Pairs {
        Pairs {
            pairs: [(0, 0); PAIRS_MAX],
            len: 0,
        }
    }
}

impl Pairs {
    fn push(&mut self, p: (u8, u8)) {
        if self.len < PAIRS_MAX {
            self.pairs[self.len] = p;
            self.len += 1;
        }
    }

    fn first(&self) -> Option<(u8, u8)> {
        self.pairs[..self.len].first().copied()
    }

    /// The pairs sorted by slot, one per slot.
    fn sorted(&mut self) -> &[(u8, u8)] {
        let v = &mut self.pairs[..self.len];
        v.sort_unstable();
        let mut n = 0;
        for i in 0..v.len() {
            if n == 0 || v[i].0 != v[n - 1].0 {
                v[n] = v[i];
                n += 1;
            }
        }
        &self.pairs[..n]
    }
}

/// Writes the program of [`steering_program`] for `pairs` (sorted, one per slot) into `out`;
/// returns its length.
fn write_program(pairs: &[(u8, u8)], fallback: u8, out: &mut [Insn; PROGRAM_MAX]) -> usize {
    // Offsets in a MAD to QP1: the MAD after the BTH and DETH, its attribute, the Remote
    // Communication ID (REP, RTU, REJ, MRA, DREQ, DREP, LAP, APR) and the Request ID (SIDR_REP)
    // after the MAD header ([`softib_wire::cm::addressee`]).
    const MAD: u32 = 12 + 8;
    const ATTR: u32 = MAD + 16;
    const REMOTE_ID: u32 = MAD + 24 + 4;
    const REQUEST_ID: u32 = MAD + 24;
    let head = [
        // 0: a probe, by its byte 1.
        insn(BPF_LD | BPF_W | BPF_LEN, 0, 0, 0),
        insn(BPF_JMP | BPF_JGE | BPF_K, 2, 0, SHORT),
        insn(BPF_LD | BPF_B | BPF_ABS, 0, 0, 1),
        insn(BPF_RET | BPF_A, 0, 0, 0),
        // 4: a MAD to QP1: a request to the fallback member (which hands it to the one that
        // listens), any other CM message by the high byte of the ID it names.
        insn(BPF_LD | BPF_W | BPF_ABS, 0, 0, 4),
        insn(BPF_ALU | BPF_AND | BPF_K, 0, 0, 0x00FF_FFFF),
        insn(BPF_JMP | BPF_JEQ | BPF_K, 0, 9, 1),
        insn(BPF_LD | BPF_H | BPF_ABS, 0, 0, ATTR),
        insn(BPF_JMP | BPF_JEQ | BPF_K, 6, 0, 0x0010),
        insn(BPF_JMP | BPF_JEQ | BPF_K, 5, 0, 0x0017),
        insn(BPF_JMP | BPF_JEQ | BPF_K, 2, 0, 0x0018),
        insn(BPF_LD | BPF_B | BPF_ABS, 0, 0, REMOTE_ID),
        insn(BPF_JMP | BPF_JA, 0, 0, 9),
        insn(BPF_LD | BPF_B | BPF_ABS, 0, 0, REQUEST_ID),
        insn(BPF_JMP | BPF_JA, 0, 0, 7),
        insn(BPF_RET | BPF_K, 0, 0, u32::from(fallback)),
        // 16: a reliable datagram by its EE context, anything else by its QP.
        insn(BPF_LD | BPF_B | BPF_ABS, 0, 0, 0),
        insn(BPF_ALU | BPF_AND | BPF_K, 0, 0, 0xE0),
        insn(BPF_JMP | BPF_JEQ | BPF_K, 0, 2, RD_CLASS as u32),
        insn(BPF_LD | BPF_B | BPF_ABS, 0, 0, 13),
        insn(BPF_JMP | BPF_JA, 0, 0, 1),
        insn(BPF_LD | BPF_B | BPF_ABS, 0, 0, 5),
        // 22: the search.
    ];
    out[..PROGRAM_HEAD].copy_from_slice(&head);
    let pairs = &pairs[..pairs.len().min(PAIRS_MAX)];
    PROGRAM_HEAD + search(pairs, fallback, &mut out[PROGRAM_HEAD..])
}

/// Instructions of the search over `n` pairs: 4 per pair, and a leaf per gap.
const fn search_len(n: usize) -> usize {
    5 * n + 1
}

/// Writes the binary search over `pairs` at the start of `out`; returns its length.
fn search(pairs: &[(u8, u8)], fallback: u8, out: &mut [Insn]) -> usize {
    if pairs.is_empty() {
        out[0] = insn(BPF_RET | BPF_K, 0, 0, u32::from(fallback));
        return 1;
    }
    let mid = pairs.len() / 2;
    let (slot, index) = pairs[mid];
    // A equal: the next instruction returns the index; else it is skipped.
    out[0] = insn(BPF_JMP | BPF_JEQ | BPF_K, 0, 1, u32::from(slot));
    out[1] = insn(BPF_RET | BPF_K, 0, 0, u32::from(index));
    // A greater: over the left half to the right one; else into the left half.
    out[2] = insn(BPF_JMP | BPF_JGT | BPF_K, 0, 1, u32::from(slot));
    out[3] = insn(BPF_JMP | BPF_JA, 0, 0, search_len(mid) as u32);
    let left = search(&pairs[..mid], fallback, &mut out[4..]);
    debug_assert_eq!(left, search_len(mid));
    4 + left + search(&pairs[mid + 1..], fallback, &mut out[4 + left..])
}

/// Runs `prog` on `data` as the kernel runs a reuse-port program (the data being the UDP
/// payload); `None` where the kernel would fall back to its hash (a load past the end).
pub fn run_program(prog: &[Insn], data: &[u8]) -> Option<u32> {
    let mut a: u32 = 0;
    let mut pc = 0usize;
    while let Some(i) = prog.get(pc) {
        pc += 1;
        match i.code {
            c if c == BPF_LD | BPF_W | BPF_LEN => a = data.len() as u32,
            c if c == BPF_LD | BPF_B | BPF_ABS => a = u32::from(*data.get(i.k as usize)?),
            c if c == BPF_LD | BPF_H | BPF_ABS => {
                let b = data.get(i.k as usize..i.k as usize + 2)?;
                a = u32::from(u16::from_be_bytes([b[0], b[1]]));
            }
            c if c == BPF_LD | BPF_W | BPF_ABS => {
                let b = data.get(i.k as usize..i.k as usize + 4)?;
                a = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
            }
            c if c == BPF_ALU | BPF_AND | BPF_K => a &= i.k,
            c if c == BPF_RET | BPF_A => return Some(a),
            c if c == BPF_RET | BPF_K => return Some(i.k),
            c if c == BPF_JMP | BPF_JA => pc += i.k as usize,
            c if c & 0x07 == BPF_JMP => {
                let hit = match c & 0xF0 {
                    BPF_JEQ => a == i.k,
                    BPF_JGT => a > i.k,
                    BPF_JGE => a >= i.k,
                    _ => return None,
                };
                pc += usize::from(if hit { i.jt } else { i.jf });
            }
            _ => return None,
        }
    }
    None
}

/// Attaches the program of `pairs` (slot, index) and `fallback` to the reuse-port group of
/// `socket` ([`steering_program`]). Allocates nothing.
fn attach_steering(socket: BorrowedFd<'_>, mut pairs: Pairs, fallback: u8) -> io::Result<()> {
    let mut prog = [Insn::default(); PROGRAM_MAX];
    let n = write_program(pairs.sorted(), fallback, &mut prog);
    attach(socket, &prog[..n])
}

/// `SOFTIB_STEER=0` attaches no program: the kernel's hash chooses, and datagrams that reach
/// the wrong member are all handed on (`bench/host-wide.sh` measures that step so).
fn steering() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("SOFTIB_STEER").map_or(true, |v| v != "0"))
}

/// Attaches `prog` to the reuse-port group of `socket`.
fn attach(socket: BorrowedFd<'_>, prog: &[Insn]) -> io::Result<()> {
    if !steering() {
        return Ok(());
    }
    const _: () = assert!(
        std::mem::size_of::<Insn>() == std::mem::size_of::<libc::sock_filter>()
            && std::mem::align_of::<Insn>() == std::mem::align_of::<libc::sock_filter>()
    );
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        // `Insn` is `struct sock_filter`'s layout (#[repr(C)], the same fields in order).
        filter: prog.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: setsockopt reads the program through `fprog`, which points at `filter`, alive
    // for the call.
    let r = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ATTACH_REUSEPORT_CBPF,
            (&fprog as *const libc::sock_fprog).cast(),
            std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// One member as `softib status` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberStatus {
    pub slot: u8,
    pub live: bool,
    pub pid: u32,
    pub comm: String,
    /// The socket's index in the group, if known.
    pub index: Option<u32>,
    /// Seconds in its state.
    pub secs: u64,
    /// [`COUNTERS`], in order.
    pub counters: Vec<u64>,
}

/// A host-wide device as `softib status` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceStatus {
    pub addr: SocketAddr,
    /// Sockets bound to the address (the reuse-port group).
    pub sockets: usize,
    /// The generation of the steering program, and whether a round of probes is under way.
    pub generation: u64,
    pub probing: bool,
    pub members: Vec<MemberStatus>,
    /// Bound ports and listened Service IDs: (key, slot, kind).
    pub ports: Vec<(u64, u8, PortKind)>,
    /// Shared XRC domains: (id, the file's st_dev and st_ino, the slots holding it).
    pub xrc_domains: Vec<(u32, (u64, u64), Vec<u8>)>,
    /// Published XRC SRQs of live members: (SRQ number, domain id, credits).
    pub xrc_srqs: Vec<(u32, u32, u32)>,
}

/// The host-wide devices of this network namespace and user (their tables in `/dev/shm`),
/// with their live and quiet members.
pub fn devices() -> Vec<DeviceStatus> {
    let Ok(dir) = std::fs::read_dir("/dev/shm") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in dir.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(stem) = name.strip_suffix(".host") else {
            continue;
        };
        let Some(addr) = crate::shm::address_of_inbox_name(stem) else {
            continue;
        };
        let Ok(fd) = rustix::fs::open(e.path(), OFlags::RDWR | OFlags::CLOEXEC, Mode::empty())
        else {
            continue;
        };
        if rustix::fs::fstat(&fd).map(|s| s.st_size as usize) != Ok(FILE_LEN) {
            continue;
        }
        let Ok(t) = Table::map(&fd) else {
            continue;
        };
        if t.u64_at(OFF_MAGIC).load(Ordering::Acquire) != MAGIC {
            continue;
        }
        let now = boot_ns();
        let mut members = Vec::new();
        for s in FIRST_SLOT..=LAST_SLOT {
            let st = t.state(s);
            if st == FREE {
                continue;
            }
            let live = st == LIVE && ofd_held(fd.as_fd(), LOCK_SLOTS + i64::from(s));
            let index = t.u32_at(t.slot(s, S_INDEX)).load(Ordering::Relaxed);
            members.push(MemberStatus {
                slot: s,
                live,
                pid: t.u32_at(t.slot(s, S_PID)).load(Ordering::Relaxed),
                comm: t.comm(s),
                index: (index != NO_INDEX && live).then_some(index),
                secs: now.saturating_sub(t.u64_at(t.slot(s, S_SINCE)).load(Ordering::Relaxed))
                    / 1_000_000_000,
                counters: (0..COUNTERS.len())
                    .map(|i| {
                        t.u64_at(t.slot(s, S_COUNTERS + 8 * i))
                            .load(Ordering::Relaxed)
                    })
                    .collect(),
            });
        }
        let mut ports = Vec::new();
        for i in 0..PORT_ENTRIES {
            let at = Table::port_entry(i);
            let kind = match t.u32_at(at + 12).load(Ordering::Acquire) {
                1 => PortKind::Bound,
                2 => PortKind::Listening,
                _ => continue,
            };
            let s = t.u32_at(at + 8).load(Ordering::Relaxed) as u8;
            if t.state(s) == LIVE {
                ports.push((t.u64_at(at).load(Ordering::Relaxed), s, kind));
            }
        }
        let mut xrc_domains = Vec::new();
        for at in (0..XRCD_ENTRIES).map(Table::xrcd_entry) {
            let id = t.u32_at(at + X_ID).load(Ordering::Acquire);
            if id == 0 {
                continue;
            }
            let file = (
                t.u64_at(at + X_DEV).load(Ordering::Relaxed),
                t.u64_at(at + X_INO).load(Ordering::Relaxed),
            );
            let holders = (FIRST_SLOT..=LAST_SLOT)
                .filter(|&s| {
                    let (w, bit) = Table::holder(at, s);
                    t.u64_at(w).load(Ordering::Relaxed) & bit != 0
                })
                .collect();
            xrc_domains.push((id, file, holders));
        }
        let mut xrc_srqs = Vec::new();
        for s in (FIRST_SLOT..=LAST_SLOT).filter(|&s| t.state(s) == LIVE) {
            for i in 0..SRQ_ENTRIES {
                let at = Table::srq_entry(s, i);
                let key = t.u64_at(at).load(Ordering::Acquire);
                if key != 0 {
                    let c = t.u64_at(at + 8).load(Ordering::Relaxed) as u32;
                    xrc_srqs.push((key as u32, (key >> 32) as u32, c));
                }
            }
        }
        xrc_srqs.sort_unstable();
        out.push(DeviceStatus {
            addr,
            sockets: group_size(addr),
            generation: t.u64_at(OFF_GEN).load(Ordering::Relaxed),
            probing: t.u64_at(OFF_PENDING).load(Ordering::Relaxed) != 0,
            members,
            ports,
            xrc_domains,
            xrc_srqs,
        });
    }
    out.sort_by_key(|d| d.addr);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bth_to(qpn: u32) -> Vec<u8> {
        let mut d = vec![0u8; 28];
        d[5..8].copy_from_slice(&qpn.to_be_bytes()[1..]);
        d
    }

    /// What the exit sweep waits for: a process that is gone, a zombie, or one in the
    /// kernel's exit path; not one that runs.
    #[test]
    fn exiting_tells_a_dying_process_from_a_live_one() {
        assert!(!exiting(std::process::id()));
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id();
        assert!(!exiting(pid));
        // Stopped, then killed: the SIGKILL is pending until the kernel wakes it to die, and
        // it is already exiting for the sweep (or has died meanwhile).
        // SAFETY: signals to our own child.
        unsafe { libc::kill(pid as i32, libc::SIGSTOP) };
        let t = std::time::Instant::now();
        while !std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
            s.rsplit(')')
                .next()
                .is_some_and(|r| r.trim_start().starts_with('T'))
        }) {
            assert!(t.elapsed() < Duration::from_secs(10));
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(!exiting(pid), "a stopped process is not exiting");
        child.kill().unwrap();
        assert!(exiting(pid));
        // Killed and not reaped: exiting, then a zombie.
        let t = std::time::Instant::now();
        while !std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
            s.rsplit(')')
                .next()
                .is_some_and(|r| r.trim_start().starts_with('Z'))
        }) {
            assert!(t.elapsed() < Duration::from_secs(10));
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(exiting(pid));
        child.wait().unwrap();
        // Gone (a pid above any pid_max names no process).
        assert!(exiting(4_194_304 + 1));
    }

    #[test]
    fn surely_mine_takes_only_data_for_the_slot() {
        assert!(surely_mine(&bth_to(0x05_0011), 5));
        assert!(!surely_mine(&bth_to(0x06_0011), 5));
        // QP1 (high byte 0) and reliable datagrams (by their EECN) are looked at closer.
        for slot in [FIRST_SLOT, LAST_SLOT] {
            assert!(!surely_mine(&bth_to(softib_core::GSI_QPN), slot));
        }
        let mut rd = bth_to(0x05_0011);
        rd[0] = 0x40;
        assert!(!surely_mine(&rd, 5));
        // A probe is no datagram of anyone's.
        let mut probe = bth_to(0x05_0011);
        probe.truncate(PROBE_LEN);
        assert!(!surely_mine(&probe, 5));
    }

    #[test]
    fn program_steers_by_slot_and_probes_by_index() {
        let pairs: Vec<(u8, u8)> = (1..=254u8).map(|s| (s, s.wrapping_mul(7) % 200)).collect();
        let prog = steering_program(&pairs, 3);
        assert!(prog.len() < 4096, "{} instructions", prog.len());
        for &(s, i) in &pairs {
            assert_eq!(
                run_program(&prog, &bth_to(u32::from(s) << 16 | 0x1234)),
                Some(u32::from(i)),
                "slot {s}"
            );
        }
        // A reliable datagram goes by its EE context (RDETH), not its QP.
        let mut rd = bth_to(0x05_0011);
        rd[0] = 0x44;
        rd[13..16].copy_from_slice(&[9, 0, 1]);
        assert_eq!(
            run_program(&prog, &rd),
            Some(u32::from(9u8.wrapping_mul(7) % 200))
        );
        assert_eq!(destination(&rd), Some(0x09_0001));
        assert_eq!(destination(&rd[..14]), None);
        // A CM MAD to QP1: a request to the fallback, a reply by the ID it names.
        let mad = |attr: u16, id_at: usize, id: u32| {
            let mut d = bth_to(1);
            d.resize(12 + 8 + 256 + 4, 0);
            d[20 + 16..20 + 18].copy_from_slice(&attr.to_be_bytes());
            d[id_at..id_at + 4].copy_from_slice(&id.to_be_bytes());
            d
        };
        let slot5 = Some(u32::from(5u8.wrapping_mul(7) % 200));
        assert_eq!(run_program(&prog, &mad(0x0015, 48, 0x0500_0001)), slot5);
        assert_eq!(run_program(&prog, &mad(0x0013, 48, 0x0500_0001)), slot5);
        assert_eq!(run_program(&prog, &mad(0x0018, 44, 0x0500_0001)), slot5);
        assert_eq!(run_program(&prog, &mad(0x0010, 48, 0x0500_0001)), Some(3));
        assert_eq!(run_program(&prog, &mad(0x0017, 48, 0x0500_0001)), Some(3));
        // What names no member's ID, and the multicast QPN.
        assert_eq!(run_program(&prog, &mad(0x0015, 48, 0xFF00_0001)), Some(3));
        assert_eq!(run_program(&prog, &bth_to(0xFF_FFFF)), Some(3));
        // A probe for index 9.
        let probe = [PROBE_MARK, 9, 0, 0, 1, 0, 0, 0];
        assert_eq!(run_program(&prog, &probe), Some(9));
        // Too short to read byte 1: the kernel's hash.
        assert_eq!(run_program(&prog, &[PROBE_MARK]), None);
        for n in 0..10u8 {
            let some: Vec<(u8, u8)> = (0..n).map(|k| (k * 20 + 1, k)).collect();
            let prog = steering_program(&some, 77);
            for s in 0..=255u8 {
                let want = some.iter().find(|p| p.0 == s).map_or(77, |p| p.1);
                assert_eq!(
                    run_program(&prog, &bth_to(u32::from(s) << 16)),
                    Some(u32::from(want))
                );
            }
        }
    }

    #[test]
    fn group_sockets_are_counted() {
        let addr: SocketAddr = "127.0.0.77:0".parse().unwrap();
        let a = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None).unwrap();
        rustix::net::sockopt::set_socket_reuseport(&a, true).unwrap();
        a.bind(&addr.into()).unwrap();
        let bound = a.local_addr().unwrap().as_socket().unwrap();
        let b = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None).unwrap();
        rustix::net::sockopt::set_socket_reuseport(&b, true).unwrap();
        b.bind(&bound.into()).unwrap();
        assert_eq!(group_size(bound), 2);
        drop(b);
        assert_eq!(group_size(bound), 1);
    }
}
