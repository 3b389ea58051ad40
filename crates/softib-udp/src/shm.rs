//! The same-host path: RoCEv2 datagrams between softib processes on one machine through shared
//! memory instead of the kernel's UDP stack.
//!
//! Every [`Device`](crate::Device) that allows it owns an *inbox*: a file in `/dev/shm` named
//! after its network namespace and bound socket address (`softib-<netns>-<ip>-<port>`, mode
//! 0600), holding a bounded
//! multi-producer, single-consumer ring of datagram slots. A device that sends to a peer
//! address first looks for that peer's inbox; when one exists, is well formed and its owner
//! is alive, the datagrams (BTH .. ICRC, exactly what the UDP socket would carry, with the
//! sender's address beside them) go into its ring; otherwise they go over UDP. Everything
//! above the datagram is unchanged: the receiver rebuilds the frame, checks the ICRC and hands
//! it to the HCA as it does for a UDP datagram, so PSNs, ACKs and retransmissions work the
//! same, and a full ring or a vanished peer is just a lost datagram.
//!
//! Wake-up: a receiver about to sleep in poll(2) on its UDP socket sets its inbox's
//! `sleeping` flag and looks at the ring once more; a sender that finds the flag set after
//! filling a slot sends one empty UDP datagram (a doorbell) to the receiver's socket, which
//! the receiver ignores. A busy-polling receiver never costs its senders a system call.
//!
//! The ring is Vyukov's bounded queue: slot `i` carries a sequence number; a producer claims
//! position `p` by compare-and-swap on the tail when slot `p mod n` has sequence `p`, writes
//! the datagram and publishes it with sequence `p + 1`; the consumer takes position `p` when
//! its sequence is `p + 1` and frees the slot with sequence `p + n`. Whatever a slot holds is
//! untrusted (any process of the same user can write the file): lengths are bounded here and
//! the datagram itself passes the ICRC check and the transport's parsing like any other.

// Shared memory needs raw pointers: the mapping is created, sized and checked here and only
// touched through the bounds-checked accessors below.
#![allow(unsafe_code)]

use std::ffi::c_void;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use rustix::fs::{Mode, OFlags};

/// "SOFTIBQ5": the inbox format.
const MAGIC: u64 = u64::from_be_bytes(*b"SOFTIBQ5");
/// Slots of a ring (a power of two): 4 MiB of data, what a UDP socket buffer holds, so that a
/// requester's window of full-MTU packets fits as it fits in the kernel's buffers.
pub const SLOTS: u64 = 32768;
/// Bytes of one slot. A datagram and its 24-byte header take as many consecutive slots as
/// it needs: a 64-byte SEND (80 bytes from BTH to ICRC) one, so small messages sit on
/// consecutive cache lines.
const SLOT_SIZE: usize = 128;
/// Bytes in front of a datagram: its length, the sender's UDP port, address family and IP.
const ENTRY_HDR: usize = 24;
/// Largest datagram the ring carries (BTH .. ICRC of a 4096-byte MTU packet with the longest
/// extension headers fits with room to spare).
pub const SLOT_PAYLOAD: usize = 4288;
/// Most slots one datagram takes.
const MAX_SLOTS: usize = (ENTRY_HDR + SLOT_PAYLOAD).div_ceil(SLOT_SIZE);
/// The ring's header page.
const HEADER: usize = 4096;
/// The slots' sequence numbers (Vyukov's), apart from the data so that a datagram's bytes
/// run on across the slots it takes.
const SEQS: usize = HEADER;
/// The data area: SLOTS slots, and room behind the last one for a datagram that starts near
/// the end (it runs on there instead of wrapping; the slots it stands for at the start are
/// claimed all the same).
const DATA: usize = SEQS + 8 * SLOTS as usize;
const FILE_LEN: usize = DATA + SLOT_SIZE * (SLOTS as usize + MAX_SLOTS);

// Header page offsets (each hot field on its own cache line).
const OFF_MAGIC: usize = 0;
const OFF_SLOTS: usize = 8;
const OFF_SLOT_SIZE: usize = 12;
const OFF_PID: usize = 16;
/// The inode of the owner's PID namespace: [`OFF_PID`] means that process only to a peer in
/// the same one.
const OFF_PID_NS: usize = 24;
const OFF_TAIL: usize = 64;
const OFF_HEAD: usize = 128;
/// 0 while the owner is awake; while it sleeps, the number of that sleep (never 0), so that
/// a sender rings once per sleep ([`Outbox::peer_sleeping`]).
const OFF_SLEEPING: usize = 192;
/// How many sleeps the owner has announced (the source of [`OFF_SLEEPING`]'s numbers).
const OFF_SLEEPS: usize = 196;
/// Senders placing a WRITE into the owner's memory right now (see [`Outbox::place_write`]).
const OFF_PLACING: usize = 256;
/// The UDP port a sleeping owner is rung at ([`Outbox::bell`]); 0: the inbox's own address.
const OFF_BELL: usize = 320;
/// 1 when senders may put their datagrams here directly; 0 when the owner takes only what
/// other members of its host-wide device hand on (its device sends and receives over UDP).
const OFF_DIRECT: usize = 324;
/// The owner's RC QPs that take placed WRITEs: [`QP_ENTRIES`] entries of `state: u32` (1:
/// live), `qpn: u32`, `pd: u64`.
const OFF_QPS: usize = 512;
const QP_ENTRIES: usize = 32;
const QP_ENTRY: usize = 16;
/// The owner's regions that take placed WRITEs: [`REGION_ENTRIES`] entries of `state: u32`,
/// `rkey: u32`, `pd: u64`, `iova: u64`, `len: u64`, `addr: u64` (in the owner's address
/// space), 8 bytes unused.
const OFF_REGIONS: usize = OFF_QPS + QP_ENTRIES * QP_ENTRY;
const REGION_ENTRIES: usize = (HEADER - OFF_REGIONS) / REGION_ENTRY;
const REGION_ENTRY: usize = 48;
/// The high bit of an entry's address family: its sender placed the datagram's RDMA WRITE.
const E_PLACED: u8 = 0x80;
/// The next bit: another member of the owner's host-wide device handed the datagram on (it
/// reached that member's socket, [`crate::host`]).
const E_FORWARDED: u8 = 0x40;
/// The next bit: the entry is no datagram but a delegation: what an XRC target QP of another
/// member received for one of the owner's XRC SRQs (`softib_core::Hca::handle_delegation`).
const E_DELEGATED: u8 = 0x20;

// Entry header offsets.
const E_LEN: usize = 0;
const E_PORT: usize = 4;
const E_FAMILY: usize = 6;
const E_IP: usize = 8;

/// Where inbox files are, and how their names start.
const INBOX_DIR: &str = "/dev/shm";
const INBOX_PREFIX: &str = "softib-";

/// The inbox file of the device bound to `addr` in this process's network namespace: the
/// namespace is part of the name, since the same address may be bound in another one (whose
/// devices are not this one's peers).
pub fn inbox_path(addr: SocketAddr) -> PathBuf {
    let ip = crate::frame::canonical_ip(addr.ip());
    let ns = net_namespace();
    let name = match ip {
        IpAddr::V4(a) => format!("{INBOX_PREFIX}{ns}-{a}-{}", addr.port()),
        IpAddr::V6(a) => format!(
            "{INBOX_PREFIX}{ns}-{}-{}",
            a.to_string().replace(':', "_"),
            addr.port()
        ),
    };
    PathBuf::from(INBOX_DIR).join(name)
}

/// The inbox file of the member in `slot` of the host-wide device bound to `addr`
/// ([`crate::host`]).
pub fn member_inbox_path(addr: SocketAddr, slot: u8) -> PathBuf {
    let mut p = inbox_path(addr).into_os_string();
    p.push(format!(".{slot}"));
    PathBuf::from(p)
}

/// The address an inbox file name of this network namespace stands for
/// (`softib-<netns>-<ip>-<port>`, as [`inbox_path`] makes it); `None` for another namespace's.
pub fn address_of_inbox_name(name: &str) -> Option<SocketAddr> {
    let rest = name.strip_prefix(INBOX_PREFIX)?;
    let (ns, rest) = rest.split_once('-')?;
    if ns.parse::<u64>().ok()? != net_namespace() {
        return None;
    }
    let (ip, port) = rest.rsplit_once('-')?;
    let ip: IpAddr = ip.replace('_', ":").parse().ok()?;
    Some(SocketAddr::new(ip, port.parse().ok()?))
}

/// The inode number of this process's network namespace (`/proc/self/ns/net`), 0 if unknown.
fn net_namespace() -> u64 {
    static NS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *NS.get_or_init(|| namespace("net"))
}

/// The inode number of this process's PID namespace (`/proc/self/ns/pid`), 0 if unknown.
/// Processes that share `/dev/shm` and a network namespace may still see different PIDs
/// (containers started with the host's network and IPC but their own PIDs).
pub(crate) fn pid_namespace() -> u64 {
    static NS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *NS.get_or_init(|| namespace("pid"))
}

/// The inode number of this process's namespace of `kind`, 0 if unknown.
fn namespace(kind: &str) -> u64 {
    std::fs::read_link(format!("/proc/self/ns/{kind}"))
        .ok()
        .and_then(|p| {
            let s = p.to_string_lossy().into_owned();
            s.strip_prefix(kind)?
                .strip_prefix(":[")?
                .strip_suffix(']')?
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

/// A mapping of an inbox file.
struct Mapping {
    map: crate::shmem::SharedMap,
    /// Inode of the mapped file (a sender checks that the path still names it).
    ino: u64,
    /// Owner of the file (a sender places WRITEs only into its own user's processes).
    uid: u32,
}

impl Mapping {
    /// Opens and maps the existing inbox file at `path`.
    fn open(path: &std::path::Path) -> io::Result<Mapping> {
        let fd = rustix::fs::open(path, OFlags::RDWR | OFlags::CLOEXEC, Mode::empty())?;
        Mapping::map(&fd)
    }

    /// Maps `fd` (FILE_LEN bytes long) read-write and shared.
    fn map(fd: &rustix::fd::OwnedFd) -> io::Result<Mapping> {
        let st = rustix::fs::fstat(fd)?;
        if usize::try_from(st.st_size).ok() != Some(FILE_LEN) {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "inbox size"));
        }
        Ok(Mapping {
            map: crate::shmem::SharedMap::map(fd, FILE_LEN)?,
            ino: st.st_ino,
            uid: st.st_uid,
        })
    }

    /// The 64-bit atomic at byte `off` (8-aligned, inside the mapping).
    #[inline]
    fn u64_at(&self, off: usize) -> &AtomicU64 {
        self.map.u64_at(off)
    }

    #[inline]
    fn u32_at(&self, off: usize) -> &AtomicU32 {
        self.map.u32_at(off)
    }

    /// True when the table entry at `at` (a state word, 1 when live, then a 32-bit key) is
    /// live with `key`. The state is read SeqCst: a sender's look pairs with the owner's
    /// clear (see [`Outbox::place_write`]).
    fn entry_is(&self, at: usize, key: u32) -> bool {
        self.u32_at(at).load(Ordering::SeqCst) == 1
            && self.u32_at(at + 4).load(Ordering::Relaxed) == key
    }

    /// The sequence number of the slot of position `pos`.
    fn seq(&self, pos: u64) -> &AtomicU64 {
        self.u64_at(SEQS + 8 * (pos % SLOTS) as usize)
    }

    /// Byte offset of the data of the slot of position `pos`.
    fn slot(pos: u64) -> usize {
        DATA + (pos % SLOTS) as usize * SLOT_SIZE
    }

    /// Copies `src` into the mapping at `off`.
    #[inline]
    fn write(&self, off: usize, src: &[u8]) {
        self.map.write(off, src)
    }

    /// Copies `dst.len()` bytes from the mapping at `off`.
    #[inline]
    fn read(&self, off: usize, dst: &mut [u8]) {
        self.map.read(off, dst)
    }

    fn well_formed(&self) -> bool {
        self.u64_at(OFF_MAGIC).load(Ordering::Acquire) == MAGIC
            && self.u32_at(OFF_SLOTS).load(Ordering::Relaxed) == SLOTS as u32
            && self.u32_at(OFF_SLOT_SIZE).load(Ordering::Relaxed) == SLOT_SIZE as u32
    }

    /// True when the owner's PID names the same process here as there: both in one known
    /// PID namespace.
    fn same_pid_namespace(&self) -> bool {
        let ours = pid_namespace();
        ours != 0 && self.u64_at(OFF_PID_NS).load(Ordering::Relaxed) == ours
    }

    /// True unless the owner is known to be gone: its PID names no process, in the same PID
    /// namespace (an owner in another one is taken to be alive).
    fn owner_alive(&self) -> bool {
        if !self.same_pid_namespace() {
            return true;
        }
        let pid = self.u32_at(OFF_PID).load(Ordering::Relaxed);
        let Some(pid) = rustix::process::Pid::from_raw(pid as i32) else {
            return false;
        };
        match rustix::process::test_kill_process(pid) {
            Ok(()) => true,
            // Alive but not ours to signal: still a process.
            Err(rustix::io::Errno::PERM) => true,
            Err(_) => false,
        }
    }
}

/// Removes the inbox files of this user whose owner died without removing them (a process
/// killed by SIGKILL, which runs no exit handler): well formed, owned by a process of this
/// PID namespace that no longer exists. A file is unlinked only while its path still names
/// the file looked at (a new owner may have replaced it meanwhile).
pub(crate) fn sweep_dead_inboxes() {
    let Ok(dir) = std::fs::read_dir(INBOX_DIR) else {
        return;
    };
    let me = rustix::process::geteuid().as_raw();
    for entry in dir.flatten() {
        if !entry
            .file_name()
            .as_encoded_bytes()
            .starts_with(INBOX_PREFIX.as_bytes())
        {
            continue;
        }
        let path = entry.path();
        let Ok(map) = Mapping::open(&path) else {
            continue;
        };
        let dead =
            map.uid == me && map.well_formed() && map.same_pid_namespace() && !map.owner_alive();
        if dead && rustix::fs::stat(&path).is_ok_and(|st| st.st_ino == map.ino) {
            let _ = rustix::fs::unlink(&path);
        }
    }
}

/// Paths of the inboxes this process created, with its process id then (a child after
/// fork(2) inherits the list, not the inboxes).
static LIVE: std::sync::Mutex<Vec<(u32, PathBuf)>> = std::sync::Mutex::new(Vec::new());

fn this_pid() -> u32 {
    rustix::process::getpid().as_raw_nonzero().get() as u32
}

/// Removes the inbox files of this process: for a process that exits without dropping its
/// devices (a C program that never closes its verbs context), from an `atexit` handler.
/// Peers then stop finding it and fall back to UDP, as for a device that is gone. A forked
/// child's exit leaves its parent's inboxes alone.
pub fn remove_inboxes() {
    let me = this_pid();
    let mut live = match LIVE.lock() {
        Ok(l) => l,
        Err(p) => p.into_inner(),
    };
    live.retain(|(pid, p)| {
        if *pid == me {
            let _ = rustix::fs::unlink(p);
        }
        *pid != me
    });
}

/// A device's own inbox: created at open, removed when dropped.
pub struct Inbox {
    map: std::sync::Arc<Mapping>,
    path: PathBuf,
    head: u64,
    /// The last datagram popped was marked placed by its sender.
    placed: bool,
    /// The last datagram popped was handed on by another member ([`Outbox::push_forwarded`]).
    forwarded: bool,
    /// The last entry popped was a delegation ([`Outbox::push_delegation`]).
    delegated: bool,
    /// The entry header of the last well-formed datagram popped (its placed mark cleared)
    /// and what it said: a stream's next datagram, alike, is not decoded again.
    last: ([u8; ENTRY_HDR], Option<(SocketAddr, usize)>),
}

/// The sender's address (`None` for an unknown address family) and the datagram's length an
/// entry header (its placed mark cleared) gives.
fn decode_entry(hdr: &[u8; ENTRY_HDR]) -> (Option<SocketAddr>, usize) {
    let len = u32::from_ne_bytes([hdr[E_LEN], hdr[E_LEN + 1], hdr[E_LEN + 2], hdr[E_LEN + 3]]);
    let port = u16::from_ne_bytes([hdr[E_PORT], hdr[E_PORT + 1]]);
    let mut ip = [0u8; 16];
    ip.copy_from_slice(&hdr[E_IP..E_IP + 16]);
    let ip = match hdr[E_FAMILY] {
        4 => Some(IpAddr::V4(Ipv4Addr::new(ip[0], ip[1], ip[2], ip[3]))),
        6 => Some(IpAddr::V6(Ipv6Addr::from(ip))),
        _ => None,
    };
    (ip.map(|ip| SocketAddr::new(ip, port)), len as usize)
}

impl Inbox {
    /// Creates the inbox of the device bound to `addr` (a relay's, or a device that holds its
    /// address alone), replacing a stale one. Senders ring `addr` itself.
    pub fn create(addr: SocketAddr) -> io::Result<Inbox> {
        Inbox::create_at(inbox_path(addr), 0, true)
    }

    /// Creates the inbox of the member in `slot` of the host-wide device bound to `addr`:
    /// senders ring its doorbell at `bell_port` of the same address; with `direct` false
    /// only the other members put datagrams in it (what reached them for this member).
    pub fn create_member(
        addr: SocketAddr,
        slot: u8,
        bell_port: u16,
        direct: bool,
    ) -> io::Result<Inbox> {
        Inbox::create_at(member_inbox_path(addr, slot), bell_port, direct)
    }

    fn create_at(path: PathBuf, bell_port: u16, direct: bool) -> io::Result<Inbox> {
        sweep_dead_inboxes();
        // A file left by a process that died goes; a live owner's stays (the address is
        // bound, so a second device on it could not have come this far).
        let _ = rustix::fs::unlink(&path);
        let fd = rustix::fs::open(
            &path,
            OFlags::CREATE | OFlags::EXCL | OFlags::RDWR | OFlags::CLOEXEC,
            Mode::RUSR | Mode::WUSR,
        )?;
        rustix::fs::ftruncate(&fd, FILE_LEN as u64)?;
        // The ring's pages are allocated now, not by the first datagram that reaches each
        // (a fault and a page to zero on the data path); a full /dev/shm then fails here, and
        // the device goes without an inbox, instead of a SIGBUS in a sender's write.
        rustix::fs::fallocate(&fd, rustix::fs::FallocateFlags::empty(), 0, FILE_LEN as u64)?;
        let map = Mapping::map(&fd)?;
        for i in 0..SLOTS {
            map.seq(i).store(i, Ordering::Relaxed);
        }
        map.u64_at(OFF_TAIL).store(0, Ordering::Relaxed);
        map.u64_at(OFF_HEAD).store(0, Ordering::Relaxed);
        map.u32_at(OFF_SLOTS).store(SLOTS as u32, Ordering::Relaxed);
        map.u32_at(OFF_SLOT_SIZE)
            .store(SLOT_SIZE as u32, Ordering::Relaxed);
        map.u32_at(OFF_PID).store(this_pid(), Ordering::Relaxed);
        map.u64_at(OFF_PID_NS)
            .store(pid_namespace(), Ordering::Relaxed);
        map.u32_at(OFF_BELL)
            .store(u32::from(bell_port), Ordering::Relaxed);
        map.u32_at(OFF_DIRECT)
            .store(u32::from(direct), Ordering::Relaxed);
        map.u64_at(OFF_MAGIC).store(MAGIC, Ordering::Release);
        if let Ok(mut l) = LIVE.lock() {
            l.push((this_pid(), path.clone()));
        }
        Ok(Inbox {
            map: std::sync::Arc::new(map),
            path,
            head: 0,
            placed: false,
            forwarded: false,
            delegated: false,
            last: ([0; ENTRY_HDR], None),
        })
    }

    /// Takes the oldest datagram, if any: its bytes go into `buf` (at most [`SLOT_PAYLOAD`]);
    /// returns the sender's address and the length. A datagram whose claimed length or
    /// address is out of range is consumed and reported as `Some(None)`.
    pub fn pop(&mut self, buf: &mut [u8]) -> Option<Option<(SocketAddr, usize)>> {
        let head = self.head;
        if self.map.seq(head).load(Ordering::Acquire) != head.wrapping_add(1) {
            return None;
        }
        let at = Mapping::slot(head);
        let mut hdr = [0u8; ENTRY_HDR];
        self.map.read(at, &mut hdr);
        self.placed = hdr[E_FAMILY] & E_PLACED != 0;
        self.forwarded = hdr[E_FAMILY] & E_FORWARDED != 0;
        self.delegated = hdr[E_FAMILY] & E_DELEGATED != 0;
        hdr[E_FAMILY] &= !(E_PLACED | E_FORWARDED | E_DELEGATED);
        let (src, len) = match self.last {
            (last, Some((src, len))) if last == hdr => (Some(src), len),
            _ => {
                let (src, len) = decode_entry(&hdr);
                if let Some(src) = src {
                    self.last = (hdr, Some((src, len)));
                }
                (src, len)
            }
        };
        // A hostile length still frees one slot at least and never more than a datagram
        // can take.
        let fits = len <= SLOT_PAYLOAD;
        let k = if fits { slots_for(len) } else { 1 };
        let out = match src {
            Some(src) if fits && len <= buf.len() => {
                self.map.read(at + ENTRY_HDR, &mut buf[..len]);
                Some((src, len))
            }
            _ => None,
        };
        for i in 0..k as u64 {
            let pos = head.wrapping_add(i);
            self.map
                .seq(pos)
                .store(pos.wrapping_add(SLOTS), Ordering::Release);
        }
        self.head = head.wrapping_add(k as u64);
        self.map
            .u64_at(OFF_HEAD)
            .store(self.head, Ordering::Release);
        Some(out)
    }

    /// True when a datagram is waiting.
    pub fn ready(&self) -> bool {
        ready(&self.map)
    }

    /// True when a datagram is waiting whose first byte (the BTH's OpCode) is not that of a
    /// response (an ACK, a READ response, an atomic ACKnowledge: opcodes 0x0D..=0x12 of any
    /// class), i.e. when taking it may owe its sender an answer. A hint only: the datagram is
    /// untrusted and is parsed as always when it is taken.
    pub fn request_waiting(&self) -> bool {
        let head = self.head;
        if self.map.seq(head).load(Ordering::Acquire) != head.wrapping_add(1) {
            return false;
        }
        let mut op = [0u8; 1];
        self.map.read(Mapping::slot(head) + ENTRY_HDR, &mut op);
        !(0x0D..=0x12).contains(&(op[0] & 0x1F))
    }

    /// True when the sender of the datagram [`Inbox::pop`] took last placed its RDMA WRITE
    /// itself.
    pub fn last_placed(&self) -> bool {
        self.placed
    }

    /// True when the datagram [`Inbox::pop`] took last was handed on by another member of the
    /// host-wide device.
    pub fn last_forwarded(&self) -> bool {
        self.forwarded
    }

    /// True when the entry [`Inbox::pop`] took last is a delegation, not a datagram.
    pub fn last_delegated(&self) -> bool {
        self.delegated
    }

    /// The HCA's placement sink that publishes in this inbox (see
    /// `softib_core::PlacementSink`).
    pub fn publisher(&self) -> Publisher {
        Publisher {
            map: std::sync::Arc::clone(&self.map),
        }
    }

    /// A handle with which another thread (the C library's progress thread) announces that
    /// it sleeps on the device's socket for the inbox's owner.
    pub fn waker(&self) -> Waker {
        Waker {
            map: std::sync::Arc::clone(&self.map),
        }
    }
}

/// The consumer's next slot holds a datagram (read from the published head).
fn ready(map: &Mapping) -> bool {
    let head = map.u64_at(OFF_HEAD).load(Ordering::Acquire);
    map.seq(head).load(Ordering::Acquire) == head.wrapping_add(1)
}

/// The entry header of a datagram of `len` bytes from `src`, its family byte carrying `mark`
/// ([`E_PLACED`], [`E_FORWARDED`]).
#[inline(always)]
fn entry_header(src: SocketAddr, len: usize, mark: u8) -> [u8; ENTRY_HDR] {
    let mut hdr = [0u8; ENTRY_HDR];
    hdr[E_LEN..E_LEN + 4].copy_from_slice(&(len as u32).to_ne_bytes());
    hdr[E_PORT..E_PORT + 2].copy_from_slice(&src.port().to_ne_bytes());
    match crate::frame::canonical_ip(src.ip()) {
        IpAddr::V4(a) => {
            hdr[E_FAMILY] = 4 | mark;
            hdr[E_IP..E_IP + 4].copy_from_slice(&a.octets());
        }
        IpAddr::V6(a) => {
            hdr[E_FAMILY] = 6 | mark;
            hdr[E_IP..E_IP + 16].copy_from_slice(&a.octets());
        }
    }
    hdr
}

/// Slots a datagram of `len` bytes takes with its header.
fn slots_for(len: usize) -> usize {
    (ENTRY_HDR + len).div_ceil(SLOT_SIZE)
}

/// Publishes what same-host senders may place into this process (the owner's side of
/// [`Outbox::place_write`]): the HCA reports its regions and QPs to it.
#[derive(Debug)]
pub struct Publisher {
    map: std::sync::Arc<Mapping>,
}

impl std::fmt::Debug for Mapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Mapping(ino {})", self.ino)
    }
}

impl Publisher {
    fn qp_at(i: usize) -> usize {
        OFF_QPS + i * QP_ENTRY
    }

    fn region_at(i: usize) -> usize {
        OFF_REGIONS + i * REGION_ENTRY
    }

    /// Clears every live entry at `offsets` whose 32-bit key (at +4) is `key`, then waits
    /// until no sender places any more (one that looked before the clear may be copying).
    fn withdraw(&self, offsets: impl Iterator<Item = usize>, key: u32) {
        let mut found = false;
        for at in offsets {
            if self.map.entry_is(at, key) {
                // Pairs with the sender's count of itself and its look at the entry.
                self.map.u32_at(at).store(0, Ordering::SeqCst);
                found = true;
            }
        }
        if !found {
            return;
        }
        // A sender counts itself before it looks and uncounts after its copy; one that
        // stopped in between (a stopped or dying process) is waited for a second at most.
        let start = std::time::Instant::now();
        while self.map.u32_at(OFF_PLACING).load(Ordering::SeqCst) != 0
            && start.elapsed() < std::time::Duration::from_secs(1)
        {
            std::thread::yield_now();
        }
    }

    /// Writes an entry's fields behind its state word, then makes it live. Nothing when the
    /// table is full (the region or QP is then simply not published).
    fn publish(&self, offsets: impl Iterator<Item = usize>, fields: &[(usize, u64)], key: u32) {
        let m = &self.map;
        for at in offsets {
            if m.u32_at(at).load(Ordering::Relaxed) != 0 {
                continue;
            }
            m.u32_at(at + 4).store(key, Ordering::Relaxed);
            for &(off, v) in fields {
                m.u64_at(at + off).store(v, Ordering::Relaxed);
            }
            m.u32_at(at).store(1, Ordering::Release);
            return;
        }
    }
}

impl softib_core::PlacementSink for Publisher {
    fn update(&mut self, u: softib_core::PlacementUpdate) {
        use softib_core::PlacementUpdate as U;
        let qps = (0..QP_ENTRIES).map(Publisher::qp_at);
        let regions = (0..REGION_ENTRIES).map(Publisher::region_at);
        match u {
            U::Qp { qpn, pd } => {
                // Published again on every modify: replace, so that the PD stays exact.
                self.withdraw(qps.clone(), qpn);
                self.publish(qps, &[(8, pd)], qpn);
            }
            U::QpGone { qpn } => self.withdraw(qps, qpn),
            U::Region {
                rkey,
                pd,
                iova,
                len,
                addr,
            } => {
                self.withdraw(regions.clone(), rkey);
                self.publish(regions, &[(8, pd), (16, iova), (24, len), (32, addr)], rkey);
            }
            U::RegionGone { rkey } => self.withdraw(regions, rkey),
        }
    }
}

/// The inbox's sleeping flag, usable without the device.
#[derive(Clone)]
pub struct Waker {
    map: std::sync::Arc<Mapping>,
}

impl Waker {
    /// About to sleep on the device's socket: sets the sleeping flag to the number of this
    /// sleep (senders that fill a slot from now on ring the doorbell, each once) and returns
    /// false, clearing it again, when a datagram is already waiting (then do not sleep: poll
    /// the device).
    pub fn sleep_begin(&self) -> bool {
        let n = self.map.u32_at(OFF_SLEEPS).fetch_add(1, Ordering::Relaxed);
        let sleep = n.wrapping_add(1).max(1);
        self.map.u32_at(OFF_SLEEPING).store(sleep, Ordering::SeqCst);
        if ready(&self.map) {
            self.sleep_end();
            return false;
        }
        true
    }

    /// True when a datagram is waiting in the inbox (the flag untouched).
    pub fn ready(&self) -> bool {
        ready(&self.map)
    }

    /// How many datagrams have been taken from the inbox so far (its consumer's position):
    /// a sleeper that finds it moved on waking, and nothing waiting, knows that another
    /// thread of its process took what came meanwhile.
    pub fn taken(&self) -> u64 {
        self.map.u64_at(OFF_HEAD).load(Ordering::Acquire)
    }

    /// Awake again: senders stop ringing.
    pub fn sleep_end(&self) {
        self.map.u32_at(OFF_SLEEPING).store(0, Ordering::SeqCst);
    }
}

impl Drop for Inbox {
    fn drop(&mut self) {
        if let Ok(mut l) = LIVE.lock() {
            l.retain(|(_, p)| *p != self.path);
        }
        // Only the process that created the inbox retires and removes it: a forked child that
        // drops an inherited device must not take its parent's inbox away.
        if self.map.u32_at(OFF_PID).load(Ordering::Relaxed) == this_pid() {
            self.map.u64_at(OFF_MAGIC).store(0, Ordering::Release);
            let _ = rustix::fs::unlink(&self.path);
        }
    }
}

/// What [`Outbox::push`] did with a datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pushed {
    /// In the peer's ring. Once the sender has pushed what it has for the peer, it asks
    /// [`Outbox::peer_sleeping`] whether to ring its doorbell.
    Queued,
    /// The ring is full (or the datagram too long): send it another way or lose it.
    Full,
}

/// A sender's attachment to a peer's inbox.
pub struct Outbox {
    map: Mapping,
    path: PathBuf,
    /// Where the owner is rung when it sleeps.
    bell: SocketAddr,
    /// Senders may put their datagrams here ([`Inbox::create_member`]).
    direct: bool,
    /// Placing into the peer is allowed: its inbox belongs to this user, its owner's PID is
    /// one of this PID namespace, and the kernel has not refused yet.
    may_place: std::sync::atomic::AtomicBool,
    /// The kernel refused a placement, not yet reported ([`Outbox::take_refusal`]).
    refused: std::sync::atomic::AtomicBool,
    /// The owner's sleep this outbox rang last ([`Outbox::peer_sleeping`]).
    rung: AtomicU32,
    /// Positions below this are free for the lap they are in: the consumer's head, as last
    /// read, one lap on. A push inside it claims its slots without reading the consumer's
    /// cache lines; past it, the head is read again.
    free_below: AtomicU64,
}

impl Outbox {
    /// Attaches to the inbox of the device bound to `peer`, if there is a well-formed one
    /// whose owner is alive.
    pub fn attach(peer: SocketAddr) -> Option<Outbox> {
        Outbox::attach_at(inbox_path(peer), peer)
    }

    /// Attaches to the inbox of the member in `slot` of the host-wide device bound to `peer`,
    /// if there is a well-formed one whose owner is alive.
    pub fn attach_member(peer: SocketAddr, slot: u8) -> Option<Outbox> {
        Outbox::attach_at(member_inbox_path(peer, slot), peer)
    }

    fn attach_at(path: PathBuf, peer: SocketAddr) -> Option<Outbox> {
        let map = Mapping::open(&path).ok()?;
        // Placement writes into the process the header's PID names: only one of this user,
        // named in this PID namespace.
        let ours = map.uid == rustix::process::geteuid().as_raw() && map.same_pid_namespace();
        let bell = match map.u32_at(OFF_BELL).load(Ordering::Relaxed) {
            0 => peer,
            port => SocketAddr::new(peer.ip(), port as u16),
        };
        let direct = map.u32_at(OFF_DIRECT).load(Ordering::Relaxed) != 0;
        (map.well_formed() && map.owner_alive()).then(|| Outbox {
            bell,
            direct,
            may_place: std::sync::atomic::AtomicBool::new(ours),
            refused: std::sync::atomic::AtomicBool::new(false),
            map,
            path,
            free_below: AtomicU64::new(0),
            rung: AtomicU32::new(0),
        })
    }

    /// Where the owner is rung when it sleeps ([`Outbox::peer_sleeping`]): an empty datagram
    /// to this address wakes it.
    pub fn bell(&self) -> SocketAddr {
        self.bell
    }

    /// True when senders may put datagrams here themselves; false when the owner takes only
    /// what other members of its device hand on.
    pub fn direct(&self) -> bool {
        self.direct
    }

    /// True while the path still names the mapped inbox, it is well formed and its owner
    /// lives (a peer that restarted has a new inbox; one that died has none).
    pub fn still_valid(&self) -> bool {
        let same = rustix::fs::stat(&self.path).is_ok_and(|st| st.st_ino == self.map.ino);
        same && self.map.well_formed() && self.map.owner_alive()
    }

    /// Queues `datagram` from `src`.
    pub fn push(&self, src: SocketAddr, datagram: &[u8]) -> Pushed {
        self.push_marked(src, datagram, false)
    }

    /// [`Outbox::push`], marked as placed by its sender when `placed`.
    pub fn push_marked(&self, src: SocketAddr, datagram: &[u8], placed: bool) -> Pushed {
        if datagram.len() > SLOT_PAYLOAD {
            return Pushed::Full;
        }
        let Some(pos) = self.claim(slots_for(datagram.len()) as u64) else {
            return Pushed::Full;
        };
        let mark = if placed { E_PLACED } else { 0 };
        self.fill(pos, &entry_header(src, datagram.len(), mark), datagram);
        Pushed::Queued
    }

    /// Queues `datagram`, which reached the socket of another member of the owner's host-wide
    /// device from `src` ([`crate::host`]), marked as handed on.
    pub fn push_forwarded(&self, src: SocketAddr, datagram: &[u8]) -> Pushed {
        if datagram.len() > SLOT_PAYLOAD {
            return Pushed::Full;
        }
        let Some(pos) = self.claim(slots_for(datagram.len()) as u64) else {
            return Pushed::Full;
        };
        self.fill(
            pos,
            &entry_header(src, datagram.len(), E_FORWARDED),
            datagram,
        );
        Pushed::Queued
    }

    /// Queues a delegation for the owner's XRC SRQs (`softib_core::Hca::poll_delegation`),
    /// from the member bound at `src`, marked as one.
    pub fn push_delegation(&self, src: SocketAddr, delegation: &[u8]) -> Pushed {
        if delegation.len() > SLOT_PAYLOAD {
            return Pushed::Full;
        }
        let Some(pos) = self.claim(slots_for(delegation.len()) as u64) else {
            return Pushed::Full;
        };
        self.fill(
            pos,
            &entry_header(src, delegation.len(), E_DELEGATED),
            delegation,
        );
        Pushed::Queued
    }

    /// Queues the datagrams `buf[starts[j]..starts[j + 1]]` (the last up to the end of
    /// `buf`) from `src`, none marked placed, in order, with one claim of all their slots and
    /// one entry header for a run of one length: what a GSO send is to a socket. All or
    /// nothing: [`Pushed::Full`] (nothing queued) when the ring has no room for all of them
    /// at once or one is longer than a slot run carries; the caller then pushes them one by
    /// one.
    pub fn push_run(&self, src: SocketAddr, buf: &[u8], starts: &[usize]) -> Pushed {
        let datagrams = || {
            starts.iter().enumerate().map(|(j, &start)| {
                let end = starts.get(j + 1).copied().unwrap_or(buf.len());
                buf.get(start..end)
            })
        };
        let mut k = 0u64;
        for d in datagrams() {
            match d {
                Some(d) if d.len() <= SLOT_PAYLOAD => k += slots_for(d.len()) as u64,
                _ => return Pushed::Full,
            }
        }
        if k == 0 {
            return Pushed::Queued;
        }
        let Some(mut pos) = self.claim(k) else {
            return Pushed::Full;
        };
        let mut hdr = entry_header(src, 0, 0);
        let mut hdr_len = None;
        for datagram in datagrams().flatten() {
            if hdr_len != Some(datagram.len()) {
                hdr_len = Some(datagram.len());
                hdr[E_LEN..E_LEN + 4].copy_from_slice(&(datagram.len() as u32).to_ne_bytes());
            }
            self.fill(pos, &hdr, datagram);
            pos = pos.wrapping_add(slots_for(datagram.len()) as u64);
        }
        Pushed::Queued
    }

    /// Claims `k` consecutive slots (`k >= 1`) for this producer; returns the position of the
    /// first, or `None` when the ring has no room for them.
    #[inline(always)]
    fn claim(&self, k: u64) -> Option<u64> {
        let tail = self.map.u64_at(OFF_TAIL);
        let mut pos = tail.load(Ordering::Relaxed);
        loop {
            // The consumer frees slots in order: the last of the k being free means all are.
            let last = pos.wrapping_add(k - 1);
            // Free by what the consumer's head said last time (it frees a slot's sequence
            // number before it publishes the head past it): claimed without a look at the
            // slot. Another producer's claim still shows as a moved tail.
            let below = self.free_below.load(Ordering::Relaxed);
            if (below.wrapping_sub(last) as i64) <= 0 {
                // Not known free: the slot's own sequence number tells.
                let seq = self.map.seq(last).load(Ordering::Acquire);
                let dif = seq.wrapping_sub(last) as i64;
                if dif < 0 {
                    return None;
                }
                if dif > 0 {
                    // Another producer took the slot: the tail has moved on (the sequence
                    // number read with Acquire shows that producer's claim). A sequence
                    // number ahead of a tail nobody moved is a corrupt ring: refuse rather
                    // than spin.
                    let now = tail.load(Ordering::Relaxed);
                    if now == pos {
                        return None;
                    }
                    pos = now;
                    continue;
                }
                let head = self.map.u64_at(OFF_HEAD).load(Ordering::Acquire);
                self.free_below
                    .store(head.wrapping_add(SLOTS), Ordering::Relaxed);
            }
            match tail.compare_exchange_weak(
                pos,
                pos.wrapping_add(k),
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Some(pos),
                Err(now) => pos = now,
            }
        }
    }

    /// Writes the entry header `hdr` and `datagram` into the slots claimed at `pos` and
    /// publishes them.
    #[inline(always)]
    fn fill(&self, pos: u64, hdr: &[u8; ENTRY_HDR], datagram: &[u8]) {
        let at = Mapping::slot(pos);
        self.map.write(at, hdr);
        self.map.write(at + ENTRY_HDR, datagram);
        // The first slot's sequence publishes the whole datagram.
        self.map
            .seq(pos)
            .store(pos.wrapping_add(1), Ordering::Release);
    }

    /// Places the payload of an RDMA WRITE to the peer's QP `qpn` (R_Key `rkey`, address
    /// `va`) straight into the peer's memory, with process_vm_writev(2), if the peer
    /// published both the QP and a region of the QP's PD that holds `[va, va + len)`. The
    /// last byte is stored last, as the responder places it. True when placed; false leaves
    /// it to the responder (also, from then on, when the kernel refuses: EPERM for another
    /// user's process, a ptrace policy or a seccomp filter such as a container's default;
    /// ENOSYS where the system call is missing, as under gVisor).
    ///
    /// The caller's HCA vouches that the responder expects this packet next (see
    /// `softib_core::PlacementUpdate`); the responder still checks it, without the copy.
    pub fn place_write(&self, qpn: u32, rkey: u32, va: u64, data: &[u8]) -> bool {
        if data.is_empty() || !self.may_place.load(Ordering::Relaxed) {
            return false;
        }
        let m = &self.map;
        // Counted before the look: the owner clears an entry, then waits for the count.
        m.u32_at(OFF_PLACING).fetch_add(1, Ordering::SeqCst);
        let placed = self
            .find_target(qpn, rkey, va, data.len() as u64)
            .is_some_and(|addr| {
                let pid = m.u32_at(OFF_PID).load(Ordering::Relaxed) as libc::pid_t;
                let (last, head) = data.split_last().expect("not empty");
                let local = [
                    libc::iovec {
                        iov_base: head.as_ptr() as *mut c_void,
                        iov_len: head.len(),
                    },
                    libc::iovec {
                        iov_base: last as *const u8 as *mut c_void,
                        iov_len: 1,
                    },
                ];
                // The kernel copies into each remote iovec from the local ones in order, one
                // copy per local iovec, so the last byte is a store of its own after the
                // others. On x86-64 that orders it after them (stores of separate string
                // operations are not reordered, Intel SDM vol. 3A 9.2.4.1), and one remote
                // iovec pins the page once: 3.7–3.9 µs per 64-byte placement in the rxe
                // guest against 5.1–5.2 µs with the destination split too (1.5 against
                // 1.8 µs on the host). Elsewhere the destination is split as well: between
                // two remote iovecs the kernel releases its pins and locks, which orders the
                // copies on weaker memory models too.
                let remote = [
                    libc::iovec {
                        iov_base: addr as *mut c_void,
                        iov_len: if cfg!(target_arch = "x86_64") {
                            data.len()
                        } else {
                            head.len()
                        },
                    },
                    libc::iovec {
                        iov_base: (addr + head.len() as u64) as *mut c_void,
                        iov_len: 1,
                    },
                ];
                let remotes = if cfg!(target_arch = "x86_64") { 1 } else { 2 };
                // SAFETY: the local iovecs name `data`, which lives across the call; the remote
                // ones name the peer's memory, which the kernel checks (EFAULT), not ours.
                let n = unsafe {
                    libc::process_vm_writev(pid, local.as_ptr(), 2, remote.as_ptr(), remotes, 0)
                };
                if n < 0
                    && matches!(
                        io::Error::last_os_error().raw_os_error(),
                        Some(libc::EPERM | libc::ENOSYS)
                    )
                {
                    self.may_place.store(false, Ordering::Relaxed);
                    self.refused.store(true, Ordering::Relaxed);
                }
                n == data.len() as isize
            });
        m.u32_at(OFF_PLACING).fetch_sub(1, Ordering::Release);
        placed
    }

    /// True once after the kernel refused a placement (placing into this peer is off from
    /// then on).
    pub fn take_refusal(&self) -> bool {
        self.refused.swap(false, Ordering::Relaxed)
    }

    /// The peer's address of `[va, va + len)` under `rkey` for its QP `qpn`, if published.
    fn find_target(&self, qpn: u32, rkey: u32, va: u64, len: u64) -> Option<u64> {
        let m = &self.map;
        let qp = (0..QP_ENTRIES)
            .map(Publisher::qp_at)
            .find(|&at| m.entry_is(at, qpn))?;
        let pd = m.u64_at(qp + 8).load(Ordering::Relaxed);
        let r = (0..REGION_ENTRIES)
            .map(Publisher::region_at)
            .find(|&at| m.entry_is(at, rkey) && m.u64_at(at + 8).load(Ordering::Relaxed) == pd)?;
        let iova = m.u64_at(r + 16).load(Ordering::Relaxed);
        let rlen = m.u64_at(r + 24).load(Ordering::Relaxed);
        let addr = m.u64_at(r + 32).load(Ordering::Relaxed);
        let off = va.checked_sub(iova)?;
        (off.checked_add(len)? <= rlen).then_some(())?;
        addr.checked_add(off)
    }

    /// True when at least half the ring is free (as the consumer's head last said).
    pub fn roomy(&self) -> bool {
        let tail = self.map.u64_at(OFF_TAIL).load(Ordering::Relaxed);
        let head = self.map.u64_at(OFF_HEAD).load(Ordering::Acquire);
        tail.wrapping_sub(head) < SLOTS / 2
    }

    /// True when the peer sleeps (or is about to) without having seen what was pushed
    /// before this call, and this outbox has not rung it in this sleep yet: ring its
    /// doorbell. Asked once after a batch of pushes, not after each: the fence waits for the
    /// batch's stores to become visible, which costs a cache miss per line the peer last held
    /// (measured: a fence per 64-byte push was most of the sender's time in `Outbox::push`).
    ///
    /// One ring per sleep: the first wakes the sleeper, and until it runs and clears its flag
    /// the next ones only cost the sender (an empty UDP send that wakes a thread on another
    /// CPU took the sender 15-20 us in a VM; a UCX ping-pong's first round trip rang three
    /// times). A sleeper that sleeps again has a new number and is rung again.
    pub fn peer_sleeping(&self) -> bool {
        // Pairs with the receiver's SeqCst store of the flag and its second look at the ring.
        std::sync::atomic::fence(Ordering::SeqCst);
        let sleep = self.map.u32_at(OFF_SLEEPING).load(Ordering::Relaxed);
        sleep != 0 && self.rung.swap(sleep, Ordering::Relaxed) != sleep
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::new(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 93)), port)
    }

    #[test]
    fn datagrams_cross_in_order_and_the_ring_fills() {
        let me = addr(40_001);
        let mut inbox = Inbox::create(me).unwrap();
        let out = Outbox::attach(me).expect("own inbox is attachable");
        let from = addr(40_002);
        let mut buf = vec![0u8; SLOT_PAYLOAD];
        assert!(inbox.pop(&mut buf).is_none());
        // Sizes from one slot to the largest, so that datagrams run past the ring's end.
        let size = |i: usize| [1, 80, 104, 105, 300, 1100, 4150, SLOT_PAYLOAD][i % 8];
        for round in 0..5u8 {
            let mut sent = 0;
            while out.push(from, &vec![round ^ sent as u8; size(sent)]) != Pushed::Full {
                sent += 1;
            }
            assert!(sent > 10, "{sent}");
            for i in 0..sent {
                let (src, len) = inbox.pop(&mut buf).unwrap().unwrap();
                assert_eq!(src, from);
                assert_eq!(len, size(i));
                assert!(buf[..len].iter().all(|&b| b == round ^ i as u8));
            }
            assert!(inbox.pop(&mut buf).is_none());
            // A ring of small datagrams holds SLOTS of them.
            for i in 0..SLOTS {
                assert_eq!(out.push(from, &[i as u8; 80]), Pushed::Queued, "{i}");
            }
            assert_eq!(out.push(from, &[0; 80]), Pushed::Full);
            for _ in 0..SLOTS {
                assert_eq!(inbox.pop(&mut buf).unwrap().unwrap().1, 80);
            }
        }
        let w = inbox.waker();
        assert!(w.sleep_begin());
        assert_eq!(out.push(from, &[9]), Pushed::Queued);
        assert!(out.peer_sleeping(), "pushed while the owner sleeps: ring");
        assert_eq!(out.push(from, &[9]), Pushed::Queued);
        assert!(!out.peer_sleeping(), "rung in this sleep already");
        let other = Outbox::attach(me).unwrap();
        assert_eq!(other.push(from, &[9]), Pushed::Queued);
        assert!(other.peer_sleeping(), "another sender rings once too");
        w.sleep_end();
        assert!(inbox.pop(&mut buf).is_some() && inbox.pop(&mut buf).is_some());
        assert!(inbox.pop(&mut buf).is_some() && inbox.pop(&mut buf).is_none());
        assert!(w.sleep_begin(), "nothing waits: a new sleep");
        assert_eq!(out.push(from, &[9]), Pushed::Queued);
        assert!(out.peer_sleeping(), "a new sleep: ring again");
        assert!(inbox.ready());
        assert!(!w.sleep_begin(), "a datagram waits: no sleep");
        assert_eq!(out.push(from, &[9]), Pushed::Queued);
        assert!(!out.peer_sleeping(), "the owner stayed awake: no ring");
        assert!(out.push(from, &vec![0; SLOT_PAYLOAD + 1]) == Pushed::Full);
        assert!(out.still_valid());
        drop(inbox);
        assert!(!out.still_valid());
        assert!(Outbox::attach(me).is_none());
    }

    /// `push_run` queues a run in order (a run of one length and a shorter last; lengths
    /// that take several slots and run past the ring's end), all or nothing: a run with no
    /// room for all of it, or with a datagram longer than a slot run, queues none.
    #[test]
    fn runs_cross_in_order_all_or_nothing() {
        let me = addr(40_051);
        let mut inbox = Inbox::create(me).unwrap();
        let out = Outbox::attach(me).unwrap();
        let from = addr(40_052);
        let mut buf = vec![0u8; SLOT_PAYLOAD];
        let run = |sizes: &[usize], seed: u8| {
            let (mut bytes, mut starts) = (Vec::new(), Vec::new());
            for (j, &n) in sizes.iter().enumerate() {
                starts.push(bytes.len());
                bytes.extend(std::iter::repeat_n(seed ^ j as u8, n));
            }
            (bytes, starts)
        };
        let sizes: [&[usize]; 3] = [
            &[80, 80, 80, 80, 52],
            &[300, 80, 4150, 1],
            &[SLOT_PAYLOAD; 3],
        ];
        for round in 0..40u8 {
            for (r, sizes) in sizes.iter().enumerate() {
                let seed = round.wrapping_mul(7) ^ r as u8;
                let (bytes, starts) = run(sizes, seed);
                assert_eq!(out.push_run(from, &bytes, &starts), Pushed::Queued);
                for (j, &n) in sizes.iter().enumerate() {
                    let (src, len) = inbox.pop(&mut buf).unwrap().unwrap();
                    assert_eq!((src, len), (from, n), "round {round} run {r} datagram {j}");
                    assert!(buf[..len].iter().all(|&b| b == seed ^ j as u8));
                }
                assert!(inbox.pop(&mut buf).is_none());
            }
        }
        // Two slots left: a run of three one-slot datagrams does not fit and queues nothing.
        for i in 0..SLOTS - 2 {
            assert_eq!(out.push(from, &[i as u8; 80]), Pushed::Queued);
        }
        let (bytes, starts) = run(&[80, 80, 80], 1);
        assert_eq!(out.push_run(from, &bytes, &starts), Pushed::Full);
        let (bytes, starts) = run(&[80, 80], 2);
        assert_eq!(out.push_run(from, &bytes, &starts), Pushed::Queued);
        for _ in 0..SLOTS - 2 {
            assert_eq!(inbox.pop(&mut buf).unwrap().unwrap().1, 80);
        }
        for j in 0..2 {
            assert_eq!(inbox.pop(&mut buf).unwrap().unwrap().1, 80);
            assert!(buf[..80].iter().all(|&b| b == 2 ^ j as u8));
        }
        assert!(inbox.pop(&mut buf).is_none());
        let (bytes, starts) = run(&[80, SLOT_PAYLOAD + 1], 3);
        assert_eq!(out.push_run(from, &bytes, &starts), Pushed::Full);
        assert!(inbox.pop(&mut buf).is_none());
    }

    /// `request_waiting` looks at the OpCode of the next datagram only: responses of every
    /// class say no, anything else (requests, garbage) yes, an empty ring no.
    #[test]
    fn request_waiting_tells_requests_from_responses() {
        let me = addr(40_021);
        let mut inbox = Inbox::create(me).unwrap();
        let out = Outbox::attach(me).unwrap();
        let from = addr(40_022);
        let mut buf = vec![0u8; SLOT_PAYLOAD];
        assert!(!inbox.request_waiting());
        for class in [0x00u8, 0x20, 0x40, 0x60, 0xA0] {
            for low in 0..0x20u8 {
                let op = class | low;
                assert_eq!(out.push(from, &[op, 0, 0xff, 0xff]), Pushed::Queued);
                assert_eq!(
                    inbox.request_waiting(),
                    !(0x0D..=0x12).contains(&low),
                    "{op:#04x}"
                );
                // Behind it, a request: still the first datagram decides.
                assert_eq!(out.push(from, &[0x04]), Pushed::Queued);
                assert_eq!(inbox.request_waiting(), !(0x0D..=0x12).contains(&low));
                inbox.pop(&mut buf).unwrap();
                assert!(inbox.request_waiting());
                inbox.pop(&mut buf).unwrap();
                assert!(!inbox.request_waiting());
            }
        }
    }

    /// Four producer threads, one consumer: every datagram arrives once, each producer's in
    /// its order. Two producers push one datagram at a time, two runs of five
    /// ([`Outbox::push_run`]).
    #[test]
    fn producers_race_without_losing_or_duplicating() {
        let me = addr(40_011);
        let mut inbox = Inbox::create(me).unwrap();
        let per = 5000u32;
        let handles: Vec<_> = (0..4u16)
            .map(|p| {
                std::thread::spawn(move || {
                    let out = Outbox::attach(me).unwrap();
                    let from = addr(41_000 + p);
                    if p % 2 == 0 {
                        for i in 0..per {
                            while out.push(from, &i.to_le_bytes()) == Pushed::Full {
                                std::thread::yield_now();
                            }
                        }
                        return;
                    }
                    for i in (0..per).step_by(5) {
                        let bytes: Vec<u8> = (i..i + 5).flat_map(u32::to_le_bytes).collect();
                        let starts = [0, 4, 8, 12, 16];
                        while out.push_run(from, &bytes, &starts) == Pushed::Full {
                            std::thread::yield_now();
                        }
                    }
                })
            })
            .collect();
        let mut next = [0u32; 4];
        let mut buf = vec![0u8; SLOT_PAYLOAD];
        let mut got = 0;
        while got < 4 * per {
            match inbox.pop(&mut buf) {
                Some(Some((src, 4))) => {
                    let p = usize::from(src.port() - 41_000);
                    let v = u32::from_le_bytes(buf[..4].try_into().unwrap());
                    assert_eq!(v, next[p], "producer {p}");
                    next[p] += 1;
                    got += 1;
                }
                Some(other) => panic!("{other:?}"),
                None => std::thread::yield_now(),
            }
        }
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(next, [per; 4]);
    }

    /// An inbox whose creator is another process (what a forked child holds) is neither
    /// retired nor removed when dropped.
    #[test]
    fn a_child_leaves_its_parents_inbox_alone() {
        let me = addr(40_031);
        let inbox = Inbox::create(me).unwrap();
        let path = inbox_path(me);
        // As the child sees it: the creator is another process, and a live one (the test
        // runner's parent), so that no other test's open sweeps the file away meanwhile.
        let parent = rustix::process::getppid().map_or(1, |p| p.as_raw_nonzero().get() as u32);
        inbox.map.u32_at(OFF_PID).store(parent, Ordering::Relaxed);
        drop(inbox);
        assert!(path.exists(), "a child's drop removed the inbox");
        let _ = rustix::fs::unlink(&path);
    }

    /// A hostile writer of the file (any process of the same user): random entry headers and
    /// random sequence numbers under published datagrams, seeded. Popping never panics,
    /// never hands out more than a slot's payload, and every datagram it returns has a length
    /// its buffer holds.
    #[test]
    fn random_garbage_in_the_ring_is_survived() {
        let me = addr(40_041);
        let mut inbox = Inbox::create(me).unwrap();
        let out = Outbox::attach(me).unwrap();
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut buf = vec![0u8; SLOT_PAYLOAD];
        for round in 0..2000u64 {
            let len = (next() % 300) as usize;
            if out.push(addr(1), &vec![7u8; len]) == Pushed::Full {
                while inbox.pop(&mut buf).is_some() {}
                continue;
            }
            // Scribble over the entry header of the datagram just queued, or over a
            // sequence number somewhere in the ring.
            let pos = out.map.u64_at(OFF_TAIL).load(Ordering::Relaxed) - 1;
            let mut junk = [0u8; ENTRY_HDR];
            junk.iter_mut().for_each(|b| *b = next() as u8);
            match round % 3 {
                0 => inbox.map.write(Mapping::slot(pos), &junk),
                1 => inbox.map.seq(next()).store(next(), Ordering::Relaxed),
                _ => {}
            }
            for _ in 0..(next() % 4) {
                if let Some(Some((_, n))) = inbox.pop(&mut buf) {
                    assert!(n <= SLOT_PAYLOAD);
                }
            }
        }
    }

    /// A slot claiming a length beyond the slot is consumed and reported, not read.
    #[test]
    fn a_hostile_length_is_refused() {
        let me = addr(40_061);
        let mut inbox = Inbox::create(me).unwrap();
        let out = Outbox::attach(me).unwrap();
        assert_eq!(out.push(addr(1), &[1, 2, 3]), Pushed::Queued);
        let at = Mapping::slot(0);
        inbox.map.write(at + E_LEN, &(u32::MAX).to_ne_bytes());
        let mut buf = vec![0u8; SLOT_PAYLOAD];
        assert_eq!(inbox.pop(&mut buf), Some(None));
        assert!(inbox.pop(&mut buf).is_none());
    }

    #[test]
    fn placed_writes_go_only_where_published() {
        use softib_core::{PlacementSink, PlacementUpdate as U};
        let me = addr(40_071);
        let inbox = Inbox::create(me).unwrap();
        let mut publisher = inbox.publisher();
        let out = Outbox::attach(me).expect("own inbox is attachable");
        // This process's own memory stands for the peer's.
        let mut target = vec![b'.'; 64];
        let at = target.as_mut_ptr() as u64;
        let place = |qpn, rkey, va, data: &[u8]| out.place_write(qpn, rkey, va, data);
        // The 64 bytes at I/O virtual address 0x1000, under `rkey` in `pd`.
        let region = |rkey, pd| U::Region {
            rkey,
            pd,
            iova: 0x1000,
            len: 64,
            addr: at,
        };
        assert!(!place(5, 0x100, 0x1000, b"early"), "nothing published yet");
        publisher.update(U::Qp { qpn: 5, pd: 7 });
        publisher.update(region(0x100, 7));
        publisher.update(region(0x200, 8));
        assert!(place(5, 0x100, 0x1010, b"hello"));
        // SAFETY: process_vm_writev wrote through the pointer; read it back volatile.
        let read = |i: usize| unsafe { std::ptr::read_volatile(target.as_ptr().add(i)) };
        let now: Vec<u8> = (0..64).map(read).collect();
        assert_eq!(&now[16..21], b"hello");
        assert!(now[..16].iter().chain(&now[21..]).all(|&b| b == b'.'));
        assert!(!place(5, 0x101, 0x1010, b"x"), "unknown R_Key");
        assert!(!place(6, 0x100, 0x1010, b"x"), "unknown QP");
        assert!(!place(5, 0x200, 0x1010, b"x"), "region of another PD");
        assert!(
            !place(5, 0x100, 0x1000 + 60, b"12345"),
            "past the region's end"
        );
        assert!(!place(5, 0x100, 0x0fff, b"x"), "before the region");
        assert!(
            place(5, 0x100, 0x1000 + 59, b"12345"),
            "to the region's last byte"
        );
        publisher.update(U::RegionGone { rkey: 0x100 });
        assert!(!place(5, 0x100, 0x1010, b"x"), "withdrawn region");
        publisher.update(region(0x100, 7));
        assert!(place(5, 0x100, 0x1010, b"y"), "published again");
        publisher.update(U::QpGone { qpn: 5 });
        assert!(!place(5, 0x100, 0x1010, b"x"), "withdrawn QP");
        // A QP published again takes its new PD.
        publisher.update(U::Qp { qpn: 5, pd: 8 });
        assert!(
            !place(5, 0x100, 0x1010, b"x"),
            "the region's PD is not the QP's now"
        );
        assert!(place(5, 0x200, 0x1010, b"z"));
        assert_eq!(read(16), b'z');
        drop(target);
    }

    #[test]
    fn nothing_is_placed_into_an_owner_of_another_pid_namespace() {
        use softib_core::{PlacementSink, PlacementUpdate as U};
        let me = addr(40_034);
        let inbox = Inbox::create(me).unwrap();
        let mut publisher = inbox.publisher();
        let target = vec![b'.'; 64];
        publisher.update(U::Qp { qpn: 5, pd: 7 });
        publisher.update(U::Region {
            rkey: 0x100,
            pd: 7,
            iova: 0x1000,
            len: 64,
            addr: target.as_ptr() as u64,
        });
        let place = |out: &Outbox| out.place_write(5, 0x100, 0x1000, b"x");
        assert!(place(&Outbox::attach(me).unwrap()), "same namespace");
        // The header's PID names another process there than here: a sender attaching now
        // still delivers into the ring, but places nothing.
        let ns = &inbox.map.u64_at(OFF_PID_NS);
        ns.store(ns.load(Ordering::Relaxed) ^ 1, Ordering::Relaxed);
        let out = Outbox::attach(me).expect("an owner of another namespace counts as alive");
        assert!(!place(&out), "placed across PID namespaces");
        assert_eq!(out.push(me, b"still delivered"), Pushed::Queued);
        drop(target);
    }

    #[test]
    fn inboxes_of_dead_owners_are_swept_at_the_next_open() {
        // A process killed by SIGKILL leaves its inbox file: the next inbox created on the
        // host removes it, and only such files.
        let dead_pid = (1u32 << 22) + 12_345; // above the kernel's largest pid_max
        let stale = |port, tweak: &dyn Fn(&Mapping)| {
            let inbox = Inbox::create(addr(port)).unwrap();
            inbox.map.u32_at(OFF_PID).store(dead_pid, Ordering::Relaxed);
            tweak(&inbox.map);
            let path = inbox.path.clone();
            // As a killed process would: no Drop, no removal.
            if let Ok(mut l) = LIVE.lock() {
                l.retain(|(_, p)| *p != path);
            }
            std::mem::forget(inbox);
            path
        };
        let dead = stale(40_035, &|_| {});
        let other_ns = stale(40_036, &|m| {
            let ns = m.u64_at(OFF_PID_NS);
            ns.store(ns.load(Ordering::Relaxed) ^ 1, Ordering::Relaxed);
        });
        let unfinished = stale(40_037, &|m| m.u64_at(OFF_MAGIC).store(0, Ordering::Relaxed));
        let live = Inbox::create(addr(40_038)).unwrap();
        assert!(live.path.exists());
        assert!(!dead.exists(), "a dead owner's inbox stayed");
        assert!(
            other_ns.exists(),
            "an owner of another PID namespace cannot be judged"
        );
        assert!(unfinished.exists(), "an inbox not yet made was removed");
        let again = Inbox::create(addr(40_039)).unwrap();
        assert!(live.path.exists(), "a live owner's inbox was removed");
        for p in [other_ns, unfinished] {
            let _ = std::fs::remove_file(p);
        }
        drop(again);
    }

    #[test]
    fn a_withdrawal_waits_for_a_placement_in_progress() {
        use softib_core::{PlacementSink, PlacementUpdate as U};
        let me = addr(40_032);
        let inbox = Inbox::create(me).unwrap();
        let mut publisher = inbox.publisher();
        publisher.update(U::Qp { qpn: 9, pd: 1 });
        // A sender between its count and its copy, for 100 ms.
        let map = std::sync::Arc::clone(&inbox.map);
        map.u32_at(OFF_PLACING).fetch_add(1, Ordering::SeqCst);
        let sender = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(100));
            map.u32_at(OFF_PLACING).fetch_sub(1, Ordering::SeqCst);
        });
        let start = std::time::Instant::now();
        publisher.update(U::QpGone { qpn: 9 });
        assert!(start.elapsed() >= std::time::Duration::from_millis(90));
        sender.join().unwrap();
        // Nothing to withdraw: no wait.
        let start = std::time::Instant::now();
        publisher.update(U::QpGone { qpn: 9 });
        assert!(start.elapsed() < std::time::Duration::from_millis(50));
    }

    #[test]
    fn a_popped_datagram_says_whether_it_was_placed() {
        let me = addr(40_033);
        let mut inbox = Inbox::create(me).unwrap();
        let out = Outbox::attach(me).unwrap();
        let mut buf = vec![0u8; SLOT_PAYLOAD];
        for placed in [true, false, true] {
            assert_eq!(out.push_marked(addr(1), b"frame", placed), Pushed::Queued);
            let (src, len) = inbox.pop(&mut buf).unwrap().unwrap();
            assert_eq!((src, &buf[..len]), (addr(1), &b"frame"[..]));
            assert_eq!(inbox.last_placed(), placed);
        }
    }

    /// What a sleeper reads on waking: how many datagrams were taken meanwhile, and whether
    /// one waits.
    #[test]
    fn the_waker_counts_what_was_taken() {
        let me = addr(40_042);
        let mut inbox = Inbox::create(me).unwrap();
        let w = inbox.waker();
        let out = Outbox::attach(me).unwrap();
        let mut buf = vec![0u8; SLOT_PAYLOAD];
        let before = w.taken();
        assert_eq!(out.push(addr(1), b"one"), Pushed::Queued);
        assert_eq!(out.push(addr(1), b"two"), Pushed::Queued);
        assert_eq!(w.taken(), before, "pushed, not taken");
        assert!(w.ready());
        inbox.pop(&mut buf).unwrap().unwrap();
        assert_eq!(w.taken(), before + 1);
        assert!(w.ready(), "one still waits");
        inbox.pop(&mut buf).unwrap().unwrap();
        assert_eq!(w.taken(), before + 2);
        assert!(!w.ready());
    }

    /// The entry header of the last datagram is kept, and what it said reused only for a
    /// header alike: senders, families and lengths in turn, each popped as it was pushed.
    #[test]
    fn a_kept_entry_header_is_reused_only_for_its_like() {
        let me = addr(40_081);
        let mut inbox = Inbox::create(me).unwrap();
        let out = Outbox::attach(me).unwrap();
        let mut buf = vec![0u8; SLOT_PAYLOAD];
        let v6 = SocketAddr::new(IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 7)), 2);
        let from = [addr(1), addr(1), addr(2), addr(1), v6, v6, addr(2), addr(2)];
        let lens = [80, 80, 80, 81, 81, 80, 80, 4150];
        for round in 0..3 {
            for (i, (&src, &len)) in from.iter().zip(&lens).enumerate() {
                let placed = (i + round) % 3 == 0;
                let bytes = vec![i as u8; len];
                assert_eq!(out.push_marked(src, &bytes, placed), Pushed::Queued);
                assert_eq!(
                    inbox.pop(&mut buf).unwrap(),
                    Some((src, len)),
                    "{round} {i}"
                );
                assert_eq!(&buf[..len], &bytes[..]);
                assert_eq!(inbox.last_placed(), placed);
            }
        }
    }
}
