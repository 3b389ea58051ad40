//! softib-udp: softib over real UDP — a soft RoCEv2 NIC in user space.
//!
//! A [`Device`] owns one `Hca` and one UDP socket bound to a configurable
//! address (port 4791 by default). Its progress engine moves frames between the two:
//! datagrams are received in batches (`recvmmsg`, with UDP GRO where the kernel offers it),
//! given the IP and UDP header the peer's kernel wrote (see [`frame`]) and handed to the
//! HCA; frames the HCA sends are stripped to their UDP payload and sent in batches (UDP GSO
//! for runs of equal-sized datagrams to one peer, `sendmmsg` when GSO is unavailable or
//! turned off). Timers run on the monotonic clock, mapped onto the HCA's
//! `softib_core::time::Instant`.
//!
//! The HCA is built with [`HcaConfig::udp_socket_port`](softib_core::HcaConfig) set, so the
//! ICRC it computes covers the header the kernel will actually write (IPv4 identification
//! 0, DF, UDP source port = the bound port); segment k of an IPv4 GSO send, which the kernel
//! numbers k, gets the ICRC of Identification k. See [`IcrcPolicy`] for the receive side.
//!
//! The runtime is single-threaded and sans-callback: the application owns the `Device`,
//! drives the verbs through [`Device::hca_mut`] and calls [`Device::progress`] (busy-poll or
//! blocking) whenever it waits for completions.

// No unsafe code except the one `setsockopt` call of `sockopt`, the shared-memory mapping
// of `shm` and the clock reads of `clock` (which allow it).
#![deny(unsafe_code)]

pub mod clock;
pub mod endpoint;
pub mod frame;
pub mod host;
pub mod relay;
pub mod shm;
mod shmem;
mod sockopt;

use std::fs::File;
use std::io::{self, BufWriter, IoSlice, IoSliceMut};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::time::Duration;

pub use clock::{Clock, ClockChoice};
use quinn_udp::{RecvMeta, Transmit, UdpSockRef, UdpSocketState, BATCH_SIZE};
use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::net::{SendAncillaryBuffer, SendFlags, SocketAddrAny};
use softib_core::time::Instant;
use softib_core::verbs::device::GidEntry;
use softib_core::verbs::types::{Gid, GidType, Mtu};
use softib_core::{Hca, HcaConfig, Transmitted};
use softib_wire::pcap::{PcapWriter, LINKTYPE_ETHERNET};
use softib_wire::udp::ROCEV2_PORT;

/// Bytes of one receive slot: a GRO batch is at most 64 KiB.
const RX_SLOT: usize = 1 << 16;
/// Room in front of every receive slot for the rebuilt Ethernet + IP + UDP header (at most
/// 14 + 40 + 8 bytes): a datagram's frame is assembled in place, not copied (see
/// [`Device::receive`]).
const RX_HEADROOM: usize = 64;
/// Datagrams gathered before the first send batch of a flush goes: a stream's first datagrams
/// leave while the HCA builds the next ones, and the peer, which acknowledges what it
/// received, works on them meanwhile. Later batches of the flush gather up to the kernel's most
/// segments per GSO send ([`gso_max_segments`]), fewer system calls per datagram. (A window of
/// 128 messages, perftest's default, went 0.74x as fast when sent as one 128-segment send.)
const TX_FIRST_BATCH: usize = 64;
/// Largest GSO transmit (total UDP payload bytes).
const GSO_MAX_BYTES: usize = 65_000;
/// Most GSO segments per transmit: the kernel's UDP_MAX_SEGMENTS since Linux 6.9 (64 before;
/// [`gso_max_segments`] finds which).
const GSO_MAX_SEGMENTS: usize = 128;
/// Default of [`DeviceConfig::busy_yields`]: idle polls a busy-polling loop yields the CPU
/// for before it sleeps in poll(2). Measured on a shared 2-core machine (more busy pollers
/// than cores), pure yielding halved bandwidth and message rate against sleeping at once;
/// a short run of yields keeps most of busy polling's latency and most of sleeping's
/// throughput.
pub const BUSY_YIELDS: u32 = 16;

/// Longest sleep of a busy-polling loop once it has been idle for a while.
pub const BUSY_SLEEP: Duration = Duration::from_millis(1);

/// What a polling loop does when a poll found nothing, the `idle`-th time in a row: in
/// [`PollMode::Busy`], yield the CPU (`sched_yield`, staying runnable) and, from the
/// `busy_yields`-th idle poll on, sleep in poll(2) until `socket` is readable (at most
/// [`BUSY_SLEEP`] or `max_wait`); in [`PollMode::Blocking`], sleep in poll(2) at once (at most
/// `max_wait`). softib's progress engine and the raw-UDP baseline both wait this way.
pub fn idle_step(
    socket: &impl std::os::fd::AsFd,
    mode: PollMode,
    idle: u32,
    busy_yields: u32,
    max_wait: Duration,
) -> io::Result<()> {
    idle_step_on(&[socket.as_fd()], mode, idle, busy_yields, max_wait)
}

/// [`idle_step`] sleeping until any of `fds` is readable (a host-wide device's member also
/// wakes on its doorbell socket).
pub fn idle_step_on(
    fds: &[std::os::fd::BorrowedFd<'_>],
    mode: PollMode,
    idle: u32,
    busy_yields: u32,
    max_wait: Duration,
) -> io::Result<()> {
    let sleep = match mode {
        PollMode::Blocking => max_wait,
        PollMode::Busy if idle > busy_yields => max_wait.min(BUSY_SLEEP),
        PollMode::Busy => {
            std::thread::yield_now();
            return Ok(());
        }
    };
    if sleep.is_zero() {
        return Ok(());
    }
    let ts = Timespec {
        tv_sec: sleep.as_secs() as _,
        tv_nsec: sleep.subsec_nanos() as _,
    };
    let mut p: Vec<PollFd<'_>> = fds.iter().map(|f| PollFd::new(f, PollFlags::IN)).collect();
    match rustix::event::poll(&mut p, Some(&ts)) {
        Ok(_) | Err(rustix::io::Errno::INTR) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// What the receive side does with the ICRC of an IPv4 packet.
///
/// A UDP socket does not show the IPv4 Identification of a received packet, yet the ICRC
/// covers it. softib peers send through an unconnected socket with `IP_PMTUDISC_DO`, for which
/// Linux writes Identification 0, except that the kernel numbers the segments of a UDP GSO
/// send 0, 1, 2, ... (softib's sender gives segment k the ICRC for Identification k). Linux
/// rxe writes its own, varying Identifications.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IcrcPolicy {
    /// Verify every ICRC. IPv4: against the rebuilt header with Identification 0 first (one
    /// ICRC pass), else for the one Identification that makes the ICRC match, solved from the
    /// difference without a second pass ([`softib_wire::icrc::solve_roce_v4_ident`]; for the
    /// segments of a GRO buffer the Identification after the previous segment's is tried
    /// first, which is cheaper and gives the same answer, see [`frame::GroIdents`]); the
    /// solved Identification is written into the frame the HCA and the pcap capture see. With
    /// the Identification unknown, 16 of the 32 ICRC bits remain a check (a corrupted packet
    /// passes with probability 2^-16). A packet whose ICRC matches no Identification is
    /// dropped and counted by the HCA (`icrc_err`). IPv6 packets, whose header the socket
    /// fully reveals, are verified in full. Right for softib and rxe peers alike.
    #[default]
    Verify,
    /// Opt-out: IPv4 packets are accepted without an ICRC check (the runtime writes the ICRC
    /// of the rebuilt header before the HCA sees the frame); IPv6 packets are still verified.
    /// For debugging a peer whose ICRCs are wrong.
    AcceptIpv4Unverified,
}

/// How [`Device::progress`] waits when there is nothing to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PollMode {
    /// Poll without sleeping while there is work; an idle round yields the CPU
    /// (`sched_yield`), and after [`DeviceConfig::busy_yields`] idle rounds in a row the
    /// engine sleeps in poll(2) (at most [`BUSY_SLEEP`]) until a datagram arrives.
    #[default]
    Busy,
    /// Sleep in `poll(2)` until a datagram arrives or the next HCA timer is due.
    Blocking,
}

/// Which path datagrams take to other softib devices on this host ([`shm`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Transport {
    /// Shared memory to a peer that has an inbox (a softib device of this host, same user),
    /// UDP to any other peer; the device has an inbox of its own.
    #[default]
    Auto,
    /// UDP only, and no inbox: peers reach this device over UDP too.
    Udp,
    /// Shared memory only: a datagram to a peer without an inbox is dropped (counted in
    /// [`DeviceStats::tx_dropped`]); for tests and measurements that must not fall back.
    Shm,
}

impl std::str::FromStr for Transport {
    type Err = String;
    fn from_str(s: &str) -> Result<Transport, String> {
        match s {
            "auto" => Ok(Transport::Auto),
            "udp" => Ok(Transport::Udp),
            "shm" => Ok(Transport::Shm),
            other => Err(format!("transport {other:?}: auto, udp or shm")),
        }
    }
}

impl std::fmt::Display for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Transport::Auto => "auto",
            Transport::Udp => "udp",
            Transport::Shm => "shm",
        })
    }
}

/// Configuration of a [`Device`].
#[derive(Debug, Clone)]
pub struct DeviceConfig {
    /// Local address of the RoCEv2 socket (port 4791 unless a test wants another).
    pub bind: SocketAddr,
    /// Node id the GUIDs derive from.
    pub node_id: u32,
    /// Active MTU of the port (path MTUs may not exceed it).
    pub active_mtu: Mtu,
    /// Requester PSN window (see [`HcaConfig::max_unacked_psns`]).
    pub max_unacked_psns: u32,
    /// Receive-side ICRC policy.
    pub icrc: IcrcPolicy,
    /// Use UDP GSO for send batches when the kernel offers it (else `sendmmsg`).
    pub gso: bool,
    /// Write every frame sent and received (RoCEv2 Ethernet frames) to this pcap file.
    pub pcap: Option<PathBuf>,
    /// Socket buffer sizes requested (bytes; the kernel may clamp them).
    pub socket_buffer: usize,
    /// Idle rounds a busy-polling [`Device::progress`] yields the CPU for before it sleeps
    /// (see [`idle_step`]); `u32::MAX` never sleeps.
    pub busy_yields: u32,
    /// UDP, shared memory to same-host peers, or either ([`Transport::Auto`]).
    pub transport: Transport,
    /// The UDP port of a peer reached without a route ([`Device::add_route`]): 4791, the
    /// RoCEv2 port, unless every softib process on the host uses another one (see
    /// softib-verbs' "auto" devices on a host whose kernel rxe holds 4791).
    pub peer_port: u16,
    /// The clock the device reads: the precise one, or the coarse one where the precise one
    /// is slow to read ([`clock`]).
    pub clock: ClockChoice,
    /// Share the address with the other processes of the host that open a device on it, as
    /// one HCA ([`host`]): the device is a member of the host-wide device of its address. When
    /// false (or where `/dev/shm` is unavailable), the device holds the address alone.
    pub host_wide: bool,
}

impl DeviceConfig {
    /// Defaults for a device bound to `bind`: node id from the address, active MTU 4096,
    /// PSN window 128 (rxe's), ICRC verified, GSO on, no capture, 4 MiB socket buffers,
    /// [`BUSY_YIELDS`] yields before a busy poller sleeps.
    pub fn new(bind: SocketAddr) -> DeviceConfig {
        let node_id = match frame::canonical_ip(bind.ip()) {
            IpAddr::V4(a) => u32::from(a),
            IpAddr::V6(a) => {
                let o = a.octets();
                u32::from_be_bytes([o[12], o[13], o[14], o[15]])
            }
        };
        DeviceConfig {
            bind,
            node_id,
            active_mtu: Mtu::Mtu4096,
            max_unacked_psns: 128,
            icrc: IcrcPolicy::Verify,
            gso: true,
            pcap: None,
            socket_buffer: 4 << 20,
            busy_yields: BUSY_YIELDS,
            transport: Transport::Auto,
            peer_port: ROCEV2_PORT,
            clock: ClockChoice::Auto,
            host_wide: true,
        }
    }

    /// The HCA configuration of this device: rxe limits, one RoCEv2 port whose GID table
    /// holds the GID of the bound address (IPv4-mapped for IPv4) at index 0 and the port's
    /// link-local default GID (`fe80::` and the port GUID, as every RoCE port of Linux lists
    /// one) at index 1, and headers numbered for a kernel socket bound to the configured port.
    ///
    /// The link-local GID names the port, as on hardware (libfabric's verbs provider, for
    /// one, offers connected endpoints only on a device with a GID whose subnet prefix is not
    /// zero, or with an address on an interface other than loopback); it carries no traffic:
    /// the device sends and receives from its bound address only.
    pub fn hca_config(&self) -> HcaConfig {
        let mut c = HcaConfig::new(self.node_id);
        c.max_unacked_psns = self.max_unacked_psns;
        c.udp_socket_port = Some(self.bind.port());
        let port = &mut c.ports[0];
        port.active_mtu = self.active_mtu;
        let own = GidEntry {
            gid: frame::gid_of_ip(self.bind.ip()),
            gid_type: GidType::RoceV2,
        };
        let link_local = GidEntry {
            gid: Gid::new(Gid::LINK_LOCAL_PREFIX, c.device.node_guid),
            gid_type: GidType::RoceV2,
        };
        port.gids = if own.gid == link_local.gid {
            vec![own]
        } else {
            vec![own, link_local]
        };
        c
    }
}

/// Counters of the runtime (the HCA keeps its own, [`Hca::counters`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeviceStats {
    /// Datagrams received (GRO segments counted one by one).
    pub rx_datagrams: u64,
    /// Receive system calls that returned data.
    pub rx_batches: u64,
    /// Datagrams dropped before the HCA: address families differ or the payload is too big.
    pub rx_unframed: u64,
    /// Datagrams sent.
    pub tx_datagrams: u64,
    /// Send system calls.
    pub tx_syscalls: u64,
    /// Frames from the HCA that were not IP/UDP (never expected).
    pub tx_unframed: u64,
    /// Datagrams dropped because the socket refused them (full buffer after waiting, or an
    /// error such as no route); the transport recovers them like any loss.
    pub tx_dropped: u64,
    /// Datagrams sent through a peer's shared-memory inbox (counted in `tx_datagrams` too).
    pub tx_shm: u64,
    /// Datagrams taken from this device's inbox (counted in `rx_datagrams` too).
    pub rx_shm: u64,
    /// Doorbells sent to sleeping same-host peers, and received (empty UDP datagrams,
    /// counted in `rx_datagrams` too).
    pub doorbells_sent: u64,
    pub doorbells_received: u64,
    /// RDMA WRITEs this device placed into a same-host peer's memory itself.
    pub tx_placed: u64,
    /// RDMA WRITEs a same-host peer placed into this device's memory.
    pub rx_placed: u64,
    /// Same-host peers this device stopped placing WRITEs into because the kernel refused
    /// (process_vm_writev failed with EPERM or ENOSYS: a seccomp filter, a ptrace policy).
    pub placement_refused: u64,
    /// Datagrams that reached this member's socket for another member of its host-wide device
    /// and were handed on to that member's inbox ([`host`]).
    pub forwarded: u64,
    /// Datagrams another member handed on to this one (counted in `rx_shm` too).
    pub forwarded_in: u64,
    /// Datagrams for a number no live member of the host-wide device holds (dropped), and
    /// datagrams that could not be handed on (the member's inbox full or gone).
    pub unowned: u64,
    /// Probes of the host-wide device's socket group answered ([`host`]).
    pub probes: u64,
    /// Delegations this member's XRC target QPs emitted for another member's XRC SRQs and
    /// handed to that member's inbox (`softib_core::Hca::poll_delegation`).
    pub xrc_delegated: u64,
    /// Delegations other members handed to this one, for its XRC SRQs (counted in
    /// `rx_datagrams` and `rx_shm` too).
    pub xrc_delegated_in: u64,
    /// Delegations dropped: for a member that is gone (or whose inbox is), or more waiting
    /// for a full inbox than [`DELEGATIONS_HELD_MAX`].
    pub xrc_delegations_dropped: u64,
}

/// One datagram waiting in the send batch.
#[derive(Debug, Clone, Copy)]
struct TxEntry {
    /// Its destination, by index into [`Device::tx_dests`]: equal destinations (address and
    /// member), equal indices (GSO runs are found by comparing them).
    dest: u32,
    start: usize,
    len: usize,
}

/// A soft RoCEv2 NIC: one HCA, one UDP socket, and the progress engine between them.
pub struct Device {
    hca: Hca,
    socket: UdpSocket,
    state: UdpSocketState,
    local: SocketAddr,
    clock: Clock,
    icrc: IcrcPolicy,
    gso: bool,
    /// Most datagrams of one send batch: the kernel's most GSO segments (64 without GSO).
    tx_batch_most: usize,
    /// Datagrams gathered before the batch goes ([`TX_FIRST_BATCH`] at the start of a flush,
    /// then `tx_batch_most`).
    tx_limit: usize,
    /// Peers reached through another socket address: (peer IP, where its datagrams go and
    /// come from).
    routes: Vec<(IpAddr, SocketAddr)>,
    /// [`DeviceConfig::peer_port`].
    peer_port: u16,
    /// The last IPv4 destination of a sent frame and where its datagrams go
    /// ([`Device::route_to`]); forgotten when the routes change.
    tx_route4: Option<([u8; 4], SocketAddr)>,
    /// The ICRC deltas of the GSO segment sizes retagged last ([`Device::retag_gso_run`]).
    ident_deltas: softib_wire::icrc::Ipv4IdentDeltaCache,
    tx_frame: Vec<u8>,
    tx_buf: Vec<u8>,
    /// Where each datagram the HCA appended to `tx_buf` in the last call starts.
    tx_starts: Vec<usize>,
    /// The device slept in poll(2) since its last round: the next round's receive batch is a
    /// backlog, whose acknowledgements leave while it is handled ([`RX_FLUSH_EVERY`]).
    rx_after_sleep: bool,
    tx: Vec<TxEntry>,
    /// The destinations of the datagrams in `tx`, each once.
    tx_dests: Vec<PeerKey>,
    /// Pure ACKs at the end of `tx` (pushed after its last other datagram): a request pushed
    /// after none has no ACK to pass ([`Device::ack_behind_request`]).
    tx_acks_at_tail: usize,
    rx_buf: Vec<u8>,
    rx_meta: Vec<RecvMeta>,
    rx_frame: Vec<u8>,
    rx_builder: frame::FrameBuilder,
    /// The rebuilt headers of datagrams from the inbox, and the source and length of the
    /// datagram `rx_shm_builder` holds the header of ([`Device::receive_shm`]); forgotten
    /// when the routes change.
    rx_shm_builder: frame::FrameBuilder,
    rx_shm_last: Option<(SocketAddr, usize)>,
    rx_idents: frame::GroIdents,
    pcap: Option<PcapWriter<BufWriter<File>>>,
    stats: DeviceStats,
    /// Consecutive idle rounds of [`Device::progress`].
    idle_polls: u32,
    busy_yields: u32,
    transport: Transport,
    /// This device's shared-memory inbox (not with [`Transport::Udp`], or where `/dev/shm`
    /// is unavailable in [`Transport::Auto`]).
    inbox: Option<shm::Inbox>,
    /// The inbox's sleeping flag (set around sleeps in poll(2)).
    waker: Option<shm::Waker>,
    /// How each destination seen so far is reached.
    peers: Vec<(PeerKey, Peer)>,
    /// Receive buffer of inbox datagrams, with headroom for the rebuilt header.
    rx_shm: Vec<u8>,
    /// Peers whose inboxes this flush wrote to: their doorbells are rung after it if they
    /// sleep.
    shm_pushed_to: Vec<PeerKey>,
    /// Empty socket reads in a row, and when the quiet socket is read next (ns, HCA clock).
    udp_quiet: u32,
    udp_next_check: u64,
    /// Rounds the quiet socket was not read in (on the coarse clock, which cannot time
    /// [`UDP_QUIET_CHECK_NS`], the socket is read every [`UDP_QUIET_CHECK_ROUNDS`]).
    udp_skipped: u32,
    /// The inboxes of the other members of the host-wide device, for what reached this one's
    /// socket for them, and those written to in this round (rung if they sleep).
    forward_to: Vec<(u8, shm::Outbox)>,
    forwarded_to: Vec<u8>,
    /// The delegation being handed on, and those waiting for room in a member's inbox (in
    /// the order the HCA emitted them: a member's are never reordered).
    delegation: Vec<u8>,
    delegations_held: std::collections::VecDeque<Vec<u8>>,
    /// Connection requests for a Service ID no member listens on yet: (until when, in device
    /// ns; the sender; the datagram).
    unlistened: Vec<(u64, SocketAddr, Vec<u8>)>,
    /// The multicast groups the device receives (a UD QP of its HCA is attached to each):
    /// a socket bound to the group's address, joined on the bound address's interface.
    mcast: Vec<McastRx>,
    /// An epoll descriptor readable when a doorbell or a multicast datagram is waiting
    /// ([`Device::aux_fd`]).
    aux: std::os::fd::OwnedFd,
    /// This device's membership of the host-wide device of its address. Declared after the
    /// socket, so that the socket has left the group when the member leaves.
    member: Option<host::Member>,
}

/// The receiving side of a multicast group: every process that attached a QP to the group has
/// its own socket in it, and the kernel hands each a copy of every datagram (IP multicast does
/// the fan-out that a switch does on InfiniBand).
struct McastRx {
    group: IpAddr,
    socket: UdpSocket,
    state: UdpSocketState,
}

/// A destination: the address, and the member of a host-wide device there the datagram is
/// for (the high byte of its destination number), 0 for none in particular.
type PeerKey = (SocketAddr, u8);

/// The member a datagram (BTH first) is for: the high byte of its [`host::destination`] when
/// that is a member slot, else 0.
#[inline(always)]
fn member_of(datagram: &[u8]) -> u8 {
    match host::destination(datagram).map(|n| (n >> 16) as u8) {
        Some(h) if (host::FIRST_SLOT..=host::LAST_SLOT).contains(&h) => h,
        _ => 0,
    }
}

/// How a destination is reached.
enum Peer {
    /// Through its shared-memory inbox.
    Shm(shm::Outbox),
    /// Over UDP; looked for an inbox again after this time ([`Transport::Auto`]).
    Udp(Instant),
}

/// How often a destination reached over UDP is looked at again for an inbox (a softib peer
/// that started after the first datagram to it).
const SHM_LOOK_AGAIN_NS: u64 = 1_000_000_000;

/// Empty socket reads in a row after which a device with an inbox reads its socket only
/// every [`UDP_QUIET_CHECK_NS`] (on the coarse clock, every [`UDP_QUIET_CHECK_ROUNDS`]
/// rounds).
const UDP_QUIET_ROUNDS: u32 = 8;
const UDP_QUIET_CHECK_NS: u64 = 50_000;
const UDP_QUIET_CHECK_ROUNDS: u32 = 64;

/// Most datagrams one round takes from the inbox (what one GRO receive batch may hold).
const SHM_RX_BATCH: usize = 1024;
/// After a sleep, datagrams a round hands to the HCA between two flushes: over UDP one GRO
/// buffer (at most 64 segments), from the inbox this many. The backlog a sleeper wakes to is
/// a long receive batch (up to 32 GRO buffers, 2 048 datagrams), and one acknowledgement
/// after all of it stopped a 1 024-deep sender for most of the batch, which then slept and
/// woke itself: `bench send -s 64 -e` 1.9–2.2 Mpps, 3.2–3.7 with a flush every 64. Busy
/// polling gains nothing from it and loses the system calls (4.9–5.9 against 4.0–4.6 Mpps),
/// so rounds that did not follow a sleep flush only at their end.
const RX_FLUSH_EVERY: usize = 64;

/// How long an idle busy poller with an inbox spins on it before its round ends, and how
/// often it yields the CPU meanwhile.
const SHM_SPIN_NS: u64 = 20_000;
const SHM_SPIN_YIELD_NS: u64 = 2_000;

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device")
            .field("local", &self.local)
            .field("icrc", &self.icrc)
            .field("gso", &self.gso)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl Device {
    /// Binds the socket and builds the HCA.
    pub fn open(cfg: &DeviceConfig) -> io::Result<Device> {
        let domain = match cfg.bind {
            SocketAddr::V4(_) => socket2::Domain::IPV4,
            SocketAddr::V6(_) => socket2::Domain::IPV6,
        };
        let s = socket2::Socket::new(domain, socket2::Type::DGRAM, Some(socket2::Protocol::UDP))?;
        if cfg.bind.is_ipv6() {
            s.set_only_v6(true)?;
            // rxe sends UDP checksum 0 over IPv6; the ICRC protects the packet.
            sockopt::set_udp_no_check6_rx(&s, true)?;
        }
        // Best effort: the kernel clamps to net.core.{r,w}mem_max.
        let _ = s.set_recv_buffer_size(cfg.socket_buffer);
        let _ = s.set_send_buffer_size(cfg.socket_buffer);
        let member = if cfg.host_wide && cfg.bind.port() != 0 {
            match host::Member::join(cfg.bind, &s) {
                Ok(m) => Some(m),
                // No shared memory to keep the host table in: the address alone.
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::NotFound | io::ErrorKind::Unsupported
                    ) && e.raw_os_error() != Some(libc::EADDRINUSE) =>
                {
                    s.bind(&cfg.bind.into())?;
                    None
                }
                // Another user's device: the address is taken as far as this user goes.
                Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                    return Err(io::Error::new(io::ErrorKind::AddrInUse, e.to_string()))
                }
                Err(e) => return Err(e),
            }
        } else {
            s.bind(&cfg.bind.into())?;
            None
        };
        let socket: UdpSocket = s.into();
        let state = UdpSocketState::new(UdpSockRef::from(&socket))?;
        let tx_batch_most = if cfg.gso && state.max_gso_segments() > 1 {
            gso_max_segments()
        } else {
            TX_FIRST_BATCH
        };
        // DF and, on an unconnected socket, IPv4 identification 0: the header the HCA's ICRC
        // covers (quinn-udp asks for IP_PMTUDISC_PROBE, which also sets DF; DO is the
        // documented contract).
        match cfg.bind {
            SocketAddr::V4(_) => rustix::net::sockopt::set_ip_mtu_discover(
                &socket,
                rustix::net::sockopt::Ipv4PathMtuDiscovery::DO,
            )?,
            SocketAddr::V6(_) => rustix::net::sockopt::set_ipv6_mtu_discover(
                &socket,
                rustix::net::sockopt::Ipv6PathMtuDiscovery::DO,
            )?,
        }
        let local = socket.local_addr()?;
        // A member always has an inbox: the others hand on to it what reached their sockets
        // for it. Over UDP only, senders do not use it themselves.
        let inbox = match (&member, cfg.transport) {
            (Some(m), t) => Some(shm::Inbox::create_member(
                local,
                m.slot(),
                m.bell_port(),
                t != Transport::Udp,
            )?),
            (None, Transport::Udp) => None,
            (None, Transport::Auto) => shm::Inbox::create(local).ok(),
            (None, Transport::Shm) => Some(shm::Inbox::create(local)?),
        };
        let pcap = match &cfg.pcap {
            Some(p) => Some(PcapWriter::new(
                BufWriter::new(File::create(p)?),
                LINKTYPE_ETHERNET,
            )?),
            None => None,
        };
        // Multicast leaves from the bound address's interface (a group's datagrams reach the
        // processes of this host that joined it by the kernel's multicast loop).
        if let IpAddr::V4(a) = local.ip() {
            if !a.is_unspecified() {
                let s = socket2::SockRef::from(&socket);
                let _ = s.set_multicast_if_v4(&a);
                let _ = s.set_multicast_loop_v4(true);
            }
        }
        let aux = rustix::event::epoll::create(rustix::event::epoll::CreateFlags::CLOEXEC)?;
        if let Some(m) = &member {
            rustix::event::epoll::add(
                &aux,
                m.bell(),
                rustix::event::epoll::EventData::new_u64(0),
                rustix::event::epoll::EventFlags::IN,
            )?;
        }
        let mut hca_config = cfg.hca_config();
        hca_config.numbers = member.as_ref().map(host::Member::numbers);
        let mut hca = Hca::new(hca_config);
        let clock = Clock::new(cfg.clock);
        hca.set_clock_lag(clock.lag());
        if let Some(i) = &inbox {
            hca.set_placement_sink(Box::new(i.publisher()));
        }
        // XRC SRQs of domains the member shares are published in the host table.
        if let Some(m) = &member {
            hca.set_xrc_share(Box::new(m.xrc_share()));
        }
        Ok(Device {
            hca,
            socket,
            state,
            local,
            clock,
            icrc: cfg.icrc,
            gso: cfg.gso,
            tx_batch_most,
            tx_limit: TX_FIRST_BATCH.min(tx_batch_most),
            routes: Vec::new(),
            peer_port: cfg.peer_port,
            tx_route4: None,
            ident_deltas: Default::default(),
            tx_frame: Vec::with_capacity(softib_core::MAX_FRAME),
            tx_buf: Vec::with_capacity(GSO_MAX_SEGMENTS * 4200),
            tx_starts: Vec::with_capacity(GSO_MAX_SEGMENTS),
            rx_after_sleep: false,
            tx: Vec::with_capacity(GSO_MAX_SEGMENTS),
            tx_dests: Vec::new(),
            tx_acks_at_tail: 0,
            rx_buf: vec![0u8; (RX_HEADROOM + RX_SLOT) * BATCH_SIZE],
            rx_meta: vec![RecvMeta::default(); BATCH_SIZE],
            rx_frame: Vec::with_capacity(RX_SLOT + 64),
            rx_builder: frame::FrameBuilder::default(),
            rx_shm_builder: frame::FrameBuilder::default(),
            rx_shm_last: None,
            rx_idents: frame::GroIdents::default(),
            pcap,
            stats: DeviceStats::default(),
            idle_polls: 0,
            busy_yields: cfg.busy_yields,
            transport: cfg.transport,
            waker: inbox.as_ref().map(shm::Inbox::waker),
            inbox,
            peers: Vec::new(),
            rx_shm: vec![0u8; RX_HEADROOM + shm::SLOT_PAYLOAD],
            shm_pushed_to: Vec::with_capacity(4),
            udp_quiet: 0,
            udp_next_check: 0,
            udp_skipped: 0,
            forward_to: Vec::new(),
            forwarded_to: Vec::new(),
            delegation: Vec::new(),
            delegations_held: std::collections::VecDeque::new(),
            unlistened: Vec::new(),
            mcast: Vec::new(),
            aux,
            member,
        })
    }

    /// A descriptor that polls readable when a same-host peer rang this device's doorbell or
    /// a multicast datagram waits: a caller that sleeps on [`Device::socket_fd`] in the
    /// device's place (the C library's progress thread) sleeps on it too.
    pub fn aux_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.aux.as_fd()
    }

    /// Joins the multicast groups a QP of the HCA is attached to and leaves those none is
    /// attached to any more: a socket per group, bound to the group's address on the device's
    /// port and joined on the bound address's interface. Call after `attach_mcast`,
    /// `detach_mcast` and `destroy_qp`.
    pub fn sync_multicast(&mut self) -> io::Result<()> {
        // Groups of the bound address's family: the device neither sends to nor receives from
        // the other (an IPv6 MGID on an IPv4 device stays an attachment of the HCA only).
        let v4 = frame::canonical_ip(self.local.ip()).is_ipv4();
        let wanted: Vec<IpAddr> = self
            .hca
            .mcast_groups()
            .map(|g| frame::canonical_ip(IpAddr::V6(std::net::Ipv6Addr::from(g.0))))
            .filter(|ip| ip.is_ipv4() == v4)
            .collect();
        let mut result = Ok(());
        self.mcast.retain(|m| {
            let keep = wanted.contains(&m.group);
            if !keep {
                let _ = rustix::event::epoll::delete(&self.aux, &m.socket);
            }
            keep
        });
        for group in wanted {
            if self.mcast.iter().any(|m| m.group == group) {
                continue;
            }
            match self.join_group(group) {
                Ok(m) => self.mcast.push(m),
                Err(e) => result = Err(e),
            }
        }
        result
    }

    fn join_group(&self, group: IpAddr) -> io::Result<McastRx> {
        let domain = match group {
            IpAddr::V4(_) => socket2::Domain::IPV4,
            IpAddr::V6(_) => socket2::Domain::IPV6,
        };
        let s = socket2::Socket::new(domain, socket2::Type::DGRAM, Some(socket2::Protocol::UDP))?;
        // Every process of the host that attached a QP to the group binds it.
        s.set_reuse_address(true)?;
        s.bind(&SocketAddr::new(group, self.local.port()).into())?;
        match (group, self.local.ip()) {
            (IpAddr::V4(g), IpAddr::V4(local)) => s.join_multicast_v4(&g, &local)?,
            (IpAddr::V6(g), IpAddr::V6(local)) => {
                s.set_only_v6(true)?;
                sockopt::set_udp_no_check6_rx(&s, true)?;
                s.join_multicast_v6(&g, interface_index(local).unwrap_or(0))?;
            }
            _ => return Err(io::Error::from(io::ErrorKind::InvalidInput)),
        }
        let _ = s.set_recv_buffer_size(1 << 20);
        let socket: UdpSocket = s.into();
        let state = UdpSocketState::new(UdpSockRef::from(&socket))?;
        rustix::event::epoll::add(
            &self.aux,
            &socket,
            rustix::event::epoll::EventData::new_u64(1),
            rustix::event::epoll::EventFlags::IN,
        )?;
        Ok(McastRx {
            group,
            socket,
            state,
        })
    }

    /// The device's slot in the host-wide device of its address ([`host`]): the high byte of
    /// its QPNs and of its connection manager's Communication IDs. `None` for a device that
    /// holds its address alone.
    pub fn member_slot(&self) -> Option<u8> {
        self.member.as_ref().map(host::Member::slot)
    }

    /// The host-wide device membership, for claims in its port table (rdma_cm's port spaces,
    /// listened Service IDs).
    pub fn member(&self) -> Option<&host::Member> {
        self.member.as_ref()
    }

    /// The inbox's sleeping flag, for a thread that sleeps on [`Device::socket_fd`] in the
    /// device's place (the C library's progress thread): `None` without an inbox.
    pub fn shm_waker(&self) -> Option<shm::Waker> {
        self.waker.clone()
    }

    /// True when this device has a shared-memory inbox (same-host softib peers reach it
    /// without the kernel's UDP stack).
    pub fn has_inbox(&self) -> bool {
        self.inbox.is_some()
    }

    /// The UDP socket, for a caller that sleeps in poll(2)/epoll on it (the C library's
    /// progress thread); reading it is the device's job.
    pub fn socket_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.socket.as_fd()
    }

    /// The HCA (verbs).
    pub fn hca(&self) -> &Hca {
        &self.hca
    }

    /// The HCA, writable (verbs).
    pub fn hca_mut(&mut self) -> &mut Hca {
        &mut self.hca
    }

    /// The bound socket address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The GID of the bound address (GID index 0 of port 1).
    pub fn gid(&self) -> Gid {
        frame::gid_of_ip(self.local.ip())
    }

    /// Runtime counters.
    pub fn stats(&self) -> DeviceStats {
        self.stats
    }

    /// True when send batches use UDP GSO (configured and offered by the kernel).
    pub fn uses_gso(&self) -> bool {
        self.gso && self.state.max_gso_segments() > 1
    }

    /// Segments the kernel coalesces per GRO receive (1 without GRO).
    pub fn gro_segments(&self) -> usize {
        self.state.gro_segments()
    }

    /// Sends the datagrams for `peer` to `via` instead of `peer:4791`, and takes datagrams
    /// from `via` as sent by `peer` (for relays and tests; the UDP source port of the rebuilt
    /// header stays the port they come from).
    pub fn add_route(&mut self, peer: IpAddr, via: SocketAddr) {
        let peer = frame::canonical_ip(peer);
        self.routes.retain(|(p, _)| *p != peer);
        self.routes.push((peer, via));
        self.tx_route4 = None;
        self.rx_shm_last = None;
    }

    /// The clock the device reads ([`DeviceConfig::clock`]).
    pub fn clock(&self) -> Clock {
        self.clock
    }

    /// The HCA's clock now.
    pub fn now(&self) -> Instant {
        self.clock.now()
    }

    /// One round of the progress engine without sleeping: send what the HCA has queued,
    /// receive one batch, run due timers (and send what they queued). Returns true if
    /// anything moved.
    ///
    /// Responses to the batch just received (ACKs, READ responses) go out at the start of the
    /// next round, together with whatever the application posts in between: a ping-pong
    /// peer's ACK and its next SEND then leave in one system call. Callers keep calling
    /// `poll_io` / [`Device::progress`] while they wait, as every verbs program polls.
    pub fn poll_io(&mut self) -> io::Result<bool> {
        let now = self.now();
        if self.member.is_some() {
            self.maintain_membership(now);
        }
        let mut busy = self.flush(now)? > 0;
        busy |= self.receive(now)? > 0;
        self.rx_after_sleep = false;
        if self.hca.poll_timeout().is_some_and(|t| t <= now) {
            self.hca.handle_timeout(now);
            self.flush(now)?;
            busy = true;
        }
        Ok(busy)
    }

    /// Makes progress: [`Device::poll_io`]; in [`PollMode::Blocking`], when that found
    /// nothing to do, sleeps until a datagram arrives, the next timer is due or `max_wait`
    /// passes, then polls again.
    pub fn progress(&mut self, mode: PollMode, max_wait: Duration) -> io::Result<()> {
        if self.poll_io()? {
            self.idle_polls = 0;
            return Ok(());
        }
        self.idle_polls = self.idle_polls.saturating_add(1);
        let now = self.now();
        let until_timer = self
            .hca
            .poll_timeout()
            .map(|t| t.duration_since(now))
            .unwrap_or(max_wait);
        // A sleep in poll(2) (not a yield) is announced in the inbox, so that same-host
        // senders ring the doorbell; a datagram that arrived meanwhile cancels it.
        if mode == PollMode::Busy && self.spin_on_inbox() {
            return Ok(());
        }
        let sleeps = mode == PollMode::Blocking || self.idle_polls > self.busy_yields;
        let waker = self.waker.as_ref().filter(|_| sleeps);
        if waker.is_none_or(shm::Waker::sleep_begin) {
            use std::os::fd::AsFd;
            idle_step_on(
                &[self.socket.as_fd(), self.aux.as_fd()],
                mode,
                self.idle_polls,
                self.busy_yields,
                max_wait.min(until_timer),
            )?;
            self.rx_after_sleep = sleeps;
            if let Some(w) = waker {
                w.sleep_end();
            }
            if sleeps {
                self.drain_doorbells();
            }
        }
        if mode == PollMode::Blocking {
            self.poll_io()?;
        }
        Ok(())
    }

    /// Hands what waits in the shared-memory inbox to the HCA when the next datagram there is
    /// a request, without reading the socket or sending anything: for a caller about to send
    /// (the C library's flush), so that the acknowledgement of what a same-host peer just
    /// sent leaves in the same flush, in front of the new requests. Responses waiting first
    /// are left to the next round: taking the ACKs of a stream one flush at a time, ahead of
    /// every post, slowed `ib_send_bw` by a fifth. Returns the datagrams taken (0, at the cost
    /// of one look at the ring, when no request waits).
    pub fn receive_inbox(&mut self) -> io::Result<usize> {
        if !self.inbox.as_ref().is_some_and(shm::Inbox::request_waiting) {
            return Ok(0);
        }
        let now = self.now();
        self.receive_shm(now)
    }

    /// Tells the device that its caller slept waiting for the socket in a poll of its own:
    /// the next round's receive batch is a backlog, whose acknowledgements leave while it is
    /// handled ([`RX_FLUSH_EVERY`]), as after [`Device::wait`].
    pub fn woke(&mut self) {
        self.rx_after_sleep = true;
        self.drain_doorbells();
    }

    /// Empties the doorbell socket (its datagrams only wake a sleeper).
    pub fn drain_doorbells(&mut self) {
        let Some(m) = &self.member else {
            return;
        };
        let mut b = [0u8; 16];
        while m.bell().recv_from(&mut b).is_ok() {
            self.stats.doorbells_received += 1;
        }
    }

    /// Sleeps until the socket is readable, the HCA's next timer is due, or `max_wait` passes.
    pub fn wait(&mut self, max_wait: Duration) -> io::Result<()> {
        let now = self.now();
        let until_timer = self
            .hca
            .poll_timeout()
            .map(|t| t.duration_since(now))
            .unwrap_or(max_wait);
        let d = max_wait.min(until_timer);
        if d.is_zero() {
            return Ok(());
        }
        let ts = Timespec {
            tv_sec: d.as_secs() as _,
            tv_nsec: d.subsec_nanos() as _,
        };
        if self.waker.as_ref().is_some_and(|w| !w.sleep_begin()) {
            return Ok(());
        }
        let r = rustix::event::poll(
            &mut [
                PollFd::new(&self.socket, PollFlags::IN),
                PollFd::new(&self.aux, PollFlags::IN),
            ],
            Some(&ts),
        );
        self.rx_after_sleep = true;
        if let Some(w) = &self.waker {
            w.sleep_end();
        }
        self.drain_doorbells();
        match r {
            Ok(_) | Err(rustix::io::Errno::INTR) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Keeps the host-wide membership going ([`host::Member::maintain`]) and hands it the
    /// counters `softib status` shows.
    fn maintain_membership(&mut self, now: Instant) {
        use std::os::fd::AsFd;
        let Some(m) = &mut self.member else {
            return;
        };
        // The counters are written into the table every 100 ms: copied for that round only.
        if m.publish_due(now.as_nanos()) {
            let st = &self.stats;
            for (i, v) in [
                self.hca.qp_count() as u64,
                st.rx_datagrams,
                st.tx_datagrams,
                st.rx_shm,
                st.tx_shm,
                st.forwarded,
                st.forwarded_in,
                st.unowned,
                st.probes,
            ]
            .into_iter()
            .enumerate()
            {
                m.set_count(i, v);
            }
            for (i, v) in [
                st.xrc_delegated,
                st.xrc_delegated_in,
                st.xrc_delegations_dropped,
            ]
            .into_iter()
            .enumerate()
            {
                m.set_count(10 + i, v);
            }
        }
        m.maintain(self.socket.as_fd(), now.as_nanos());
        if !self.unlistened.is_empty() {
            self.retry_unlistened(now);
        }
    }

    /// Hands each kept connection request to the member that listens on its Service ID now,
    /// or, when its wait is over, to this member; through the inboxes (this member's own too),
    /// so that it is taken as any datagram handed on.
    fn retry_unlistened(&mut self, now: Instant) {
        let Some(m) = &self.member else {
            return;
        };
        let mine = m.slot();
        let mut kept = std::mem::take(&mut self.unlistened);
        kept.retain(|(until, src, d)| {
            let to = match route(m, d) {
                Routed::To(host::Route::Member(s)) => s,
                Routed::To(_) => mine,
                Routed::Unlistened if now.as_nanos() >= *until => mine,
                Routed::Unlistened => return true,
            };
            forward(
                &mut self.forward_to,
                &mut self.forwarded_to,
                &mut self.stats,
                self.local,
                to,
                *src,
                d,
            );
            false
        });
        self.unlistened = kept;
        self.ring_forwarded();
    }

    /// Flushes the pcap capture, if any.
    pub fn flush_pcap(&mut self) -> io::Result<()> {
        match &mut self.pcap {
            Some(p) => p.flush(),
            None => Ok(()),
        }
    }

    /// Sends everything the HCA has ready; returns the number of datagrams handed to the
    /// socket.
    pub fn flush(&mut self, now: Instant) -> io::Result<usize> {
        // What a target QP received for another member's XRC SRQ reaches that member no later
        // than the acknowledgement reaches the requester.
        if self.hca.has_delegations() || !self.delegations_held.is_empty() {
            self.push_delegations();
        }
        let sent = self.flush_frames(now);
        if self.shm_pushed_to.is_empty() {
            return sent;
        }
        // Every inbox written to in this flush (also when the flush failed part way): one
        // look whether its owner sleeps.
        let mut pushed_to = std::mem::take(&mut self.shm_pushed_to);
        for peer in pushed_to.drain(..) {
            let bell = self.peers.iter().find_map(|(a, p)| match p {
                Peer::Shm(o) if *a == peer && o.peer_sleeping() => Some(o.bell()),
                _ => None,
            });
            if let Some(bell) = bell {
                // An empty datagram: the peer's poll(2) returns and it looks at its inbox.
                self.stats.doorbells_sent += 1;
                let _ = self.socket.send_to(&[], bell);
            }
        }
        self.shm_pushed_to = pushed_to;
        sent
    }

    /// [`Device::flush`] without the doorbells.
    #[inline(always)]
    fn flush_frames(&mut self, now: Instant) -> io::Result<usize> {
        let mut sent = 0;
        self.tx_limit = TX_FIRST_BATCH.min(self.tx_batch_most);
        loop {
            // Without a capture, the requester's common packets come as datagrams, straight
            // into the batch, several of one QP at a time; the others as frames, whose
            // datagram is copied there.
            if self.pcap.is_none() {
                let room = self.tx_limit.saturating_sub(self.tx.len());
                match self.hca.poll_transmit_batched(
                    now,
                    &mut self.tx_frame,
                    &mut self.tx_buf,
                    &mut self.tx_starts,
                    room,
                ) {
                    Transmitted::Nothing => break,
                    Transmitted::Frame => {}
                    Transmitted::Datagrams { dst } => {
                        sent += self.queue_datagrams(dst, now)?;
                        continue;
                    }
                }
            } else if !self.hca.poll_transmit(now, &mut self.tx_frame) {
                break;
            }
            if let Some(p) = &mut self.pcap {
                p.write_record(unix_ns(), &self.tx_frame)?;
            }
            // The HCA's frames on an IPv4 socket: fixed offsets, and the route of the last
            // destination again.
            let (dest, payload) = match frame::plain_ipv4_datagram(&self.tx_frame) {
                Some((dst, payload)) => (
                    route4(&mut self.tx_route4, &self.routes, self.peer_port, dst),
                    payload,
                ),
                None => match frame::datagram_of_frame(&self.tx_frame) {
                    Some((dst, payload)) => (self.route_to(dst), payload),
                    None => {
                        self.stats.tx_unframed += 1;
                        continue;
                    }
                },
            };
            let dest = (dest, member_of(payload));
            if self.transport != Transport::Udp {
                let path = shm_send(
                    &mut self.peers,
                    self.transport,
                    self.local,
                    dest,
                    payload,
                    self.hca.tx_placeable(),
                    now,
                    &mut self.stats,
                    &mut self.shm_pushed_to,
                );
                if path != ShmSend::Udp {
                    continue;
                }
            }
            let start = self.tx_buf.len();
            let len = payload.len();
            self.tx_buf.extend_from_slice(payload);
            let dest = self.dest_index(dest);
            sent += self.queued(dest, start, len)?;
        }
        sent += self.send_batch()?;
        Ok(sent)
    }

    /// Queues the datagrams the HCA appended to `tx_buf` at `tx_starts`, for IPv4 address
    /// `dst`: through a same-host peer's inbox where there is one (then off the batch),
    /// else into the batch. Returns how many datagrams a full batch sent.
    fn queue_datagrams(&mut self, dst: [u8; 4], now: Instant) -> io::Result<usize> {
        let addr = route4(&mut self.tx_route4, &self.routes, self.peer_port, dst);
        let Some(&first) = self.tx_starts.first() else {
            return Ok(0);
        };
        // One QP's datagrams: one member of the peer's device.
        let dest = (addr, member_of(&self.tx_buf[first..]));
        let n = self.tx_starts.len();
        let end =
            |k: usize, starts: &[usize], len: usize| starts.get(k + 1).copied().unwrap_or(len);
        if self.transport != Transport::Udp {
            // One destination for the run: looked up once. Only the last may be placeable
            // (the HCA ends a run with it).
            let peer = shm_peer(&mut self.peers, dest, now);
            let mut pushed = 0;
            let mut queued = false;
            // The run (but a placeable last datagram, which may be placed first) in one
            // claim of the ring's slots when it has room for all of it.
            let run = if self.hca.tx_placeable() { n - 1 } else { n };
            if run > 1 {
                if let Peer::Shm(out) = &self.peers[peer].1 {
                    let run_end = self
                        .tx_starts
                        .get(run)
                        .copied()
                        .unwrap_or(self.tx_buf.len());
                    let buf = &self.tx_buf[..run_end];
                    if out.push_run(self.local, buf, &self.tx_starts[..run]) == shm::Pushed::Queued
                    {
                        self.stats.tx_shm += run as u64;
                        self.stats.tx_datagrams += run as u64;
                        queued = true;
                        pushed = run;
                    }
                }
            }
            let first_k = pushed;
            for k in first_k..n {
                let (start, stop) = (
                    self.tx_starts[k],
                    end(k, &self.tx_starts, self.tx_buf.len()),
                );
                let path = shm_push(
                    &mut self.peers,
                    peer,
                    self.transport,
                    self.local,
                    &self.tx_buf[start..stop],
                    k + 1 == n && self.hca.tx_placeable(),
                    now,
                    &mut self.stats,
                );
                if path == ShmSend::Udp {
                    break;
                }
                queued |= path == ShmSend::Sent;
                pushed += 1;
            }
            if queued && !self.shm_pushed_to.contains(&dest) {
                self.shm_pushed_to.push(dest);
            }
            if pushed == n {
                self.tx_buf.truncate(first);
                return Ok(0);
            }
            if pushed > 0 {
                // The rest go by UDP: moved down over the ones pushed.
                let from = self.tx_starts[pushed];
                self.tx_buf.copy_within(from.., first);
                self.tx_buf.truncate(self.tx_buf.len() - (from - first));
                for s in &mut self.tx_starts[pushed..] {
                    *s -= from - first;
                }
                self.tx_starts.drain(..pushed);
            }
        }
        let mut sent = 0;
        let starts = std::mem::take(&mut self.tx_starts);
        // One destination for the run, looked up once (a full batch sent on the way empties
        // the table: looked up again then).
        let mut at = self.dest_index(dest);
        for (k, &start) in starts.iter().enumerate() {
            let len = end(k, &starts, self.tx_buf.len()) - start;
            if self.tx_dests.is_empty() {
                at = self.dest_index(dest);
            }
            sent += self.queued(at, start, len)?;
        }
        self.tx_starts = starts;
        Ok(sent)
    }

    /// The index of `dest` in [`Device::tx_dests`], added there if new.
    #[inline(always)]
    fn dest_index(&mut self, dest: PeerKey) -> u32 {
        match self.tx_dests.iter().rposition(|d| *d == dest) {
            Some(i) => i as u32,
            None => {
                self.tx_dests.push(dest);
                (self.tx_dests.len() - 1) as u32
            }
        }
    }

    /// Queues the datagram at `tx_buf[start..start + len]` for the destination at `dest` in
    /// [`Device::tx_dests`] (its ACKs behind the request they precede); sends the batch when
    /// full and returns how many went.
    #[inline(always)]
    fn queued(&mut self, dest: u32, start: usize, len: usize) -> io::Result<usize> {
        let opcode = self.tx_buf.get(start).copied();
        let request = opcode.is_some_and(|op| !is_response(op));
        self.tx.push(TxEntry { dest, start, len });
        if request {
            if self.tx_acks_at_tail > 0 {
                self.ack_behind_request();
            }
            self.tx_acks_at_tail = 0;
        } else if opcode == Some(OPCODE_RC_ACK) {
            self.tx_acks_at_tail += 1;
        } else {
            self.tx_acks_at_tail = 0;
        }
        if self.tx.len() >= self.tx_limit {
            return self.send_batch();
        }
        Ok(0)
    }

    /// Moves pure ACKs queued just before the request datagram that was pushed last behind
    /// it, so that [request, ACK] to one peer forms a GSO run (the shorter datagram last): a
    /// ping-pong's ACK and next SEND then travel as one packet through the kernel. Only ACKs
    /// pass requests; the order among requests and among responses is unchanged (IBA orders
    /// each direction's packets, not requests against responses).
    fn ack_behind_request(&mut self) {
        let n = self.tx.len();
        let last = self.tx[n - 1];
        let mut first_ack = n - 1;
        while first_ack > 0 {
            let e = self.tx[first_ack - 1];
            let is_ack = self.tx_buf.get(e.start) == Some(&OPCODE_RC_ACK) && e.dest == last.dest;
            if !is_ack {
                break;
            }
            first_ack -= 1;
        }
        if first_ack == n - 1 {
            return;
        }
        let from = self.tx[first_ack].start;
        self.tx_buf[from..last.start + last.len].rotate_right(last.len);
        self.tx.copy_within(first_ack..n - 1, first_ack + 1);
        self.tx[first_ack] = TxEntry {
            dest: last.dest,
            start: from,
            len: last.len,
        };
        for e in &mut self.tx[first_ack + 1..] {
            e.start += last.len;
        }
    }

    fn route_to(&self, dst: IpAddr) -> SocketAddr {
        route_to(&self.routes, self.peer_port, dst)
    }

    fn route_from(&self, from: SocketAddr) -> IpAddr {
        route_from(&self.routes, from)
    }

    /// Sends the queued datagrams: GSO runs when available, else `sendmmsg`.
    fn send_batch(&mut self) -> io::Result<usize> {
        let n = self.tx.len();
        if n == 0 {
            return Ok(0);
        }
        let max_segs = if self.gso && self.state.max_gso_segments() > 1 {
            self.tx_batch_most
        } else {
            1
        };
        // The next batch of this flush may be as long as one GSO send can carry.
        self.tx_limit = self.tx_batch_most;
        // GSO needs runs of equal-sized datagrams to one peer; a batch without any such run
        // (a ping-pong's ACK and SEND) goes out in one sendmmsg instead.
        let has_run = (1..n).any(|k| {
            self.tx[k].dest == self.tx[k - 1].dest && self.tx[k].len <= self.tx[k - 1].len
        });
        // A lone datagram (a ping-pong turn without an ACK to go with it) takes one plain
        // `sendmsg` as well: `sendmmsg` would only add the batch's bookkeeping.
        if (max_segs > 1 && has_run) || n == 1 {
            let mut i = 0;
            while i < n {
                let first = self.tx[i];
                let seg = first.len;
                let mut j = i + 1;
                let mut total = seg;
                // A run: same destination, every segment but the last of the first's size.
                while j < n
                    && j - i < max_segs
                    && self.tx[j].dest == first.dest
                    && self.tx[j - 1].len == seg
                    && self.tx[j].len <= seg
                    && total + self.tx[j].len <= GSO_MAX_BYTES
                {
                    total += self.tx[j].len;
                    j += 1;
                }
                let destination = self.tx_dests[first.dest as usize].0;
                if destination.is_ipv4() && j - i > 1 {
                    self.retag_gso_run(i, j);
                }
                let t = Transmit {
                    destination,
                    ecn: None,
                    contents: &self.tx_buf[first.start..first.start + total],
                    segment_size: (j - i > 1).then_some(seg),
                    src_ip: None,
                };
                send_one(&self.socket, &self.state, &t, &mut self.stats, j - i)?;
                i = j;
            }
        } else {
            self.send_mmsg()?;
        }
        self.stats.tx_datagrams += n as u64;
        self.tx.clear();
        self.tx_dests.clear();
        self.tx_buf.clear();
        self.tx_acks_at_tail = 0;
        Ok(n)
    }

    /// Gives segment k of the IPv4 GSO run `tx[i..j]` the ICRC for IPv4 Identification k.
    ///
    /// The HCA covers Identification 0, what the kernel writes for a single datagram on an
    /// unconnected socket with DF set. When the kernel (or the NIC) cuts a GSO send into
    /// segments, segment k carries Identification 0 + k (`inet_gso_segment`), so the ICRC of
    /// every segment but the first is patched for it: two table look-ups, the tables kept for
    /// the last two segment sizes, no pass over the payload
    /// ([`softib_wire::icrc::Ipv4IdentDeltaCache`]). Where the
    /// send is not cut (loopback hands the whole run to the receiver), the segments arrive
    /// with Identification 0 and the receiver solves for k ([`IcrcPolicy::Verify`]).
    fn retag_gso_run(&mut self, i: usize, j: usize) {
        let (tx, buf, cache) = (&self.tx, &mut self.tx_buf, &mut self.ident_deltas);
        // Tables for every segment number of the run at once (not widened bit by bit), taken
        // from the cache once for the run's full segments.
        let full = tx[i].len;
        let deltas = *cache.get(full, (j - i - 1) as u16);
        for (k, e) in tx[i..j].iter().enumerate().skip(1) {
            let d = &mut buf[e.start..e.start + e.len];
            // Full segments and the shorter last one: two sizes the cache keeps.
            let delta = if e.len == full {
                deltas.delta(k as u16)
            } else {
                cache.delta(e.len, k as u16)
            };
            frame::retag_ipv4_icrc(d, delta);
        }
    }

    /// `sendmmsg` of the whole batch (no GSO).
    fn send_mmsg(&mut self) -> io::Result<()> {
        let addrs: Vec<SocketAddrAny> = self
            .tx
            .iter()
            .map(|e| SocketAddrAny::from(self.tx_dests[e.dest as usize].0))
            .collect();
        let iovs: Vec<IoSlice<'_>> = self
            .tx
            .iter()
            .map(|e| IoSlice::new(&self.tx_buf[e.start..e.start + e.len]))
            .collect();
        let mut done = 0;
        let mut waited = 0;
        while done < self.tx.len() {
            let mut ctrls: Vec<SendAncillaryBuffer<'_, '_, '_>> = (done..self.tx.len())
                .map(|_| SendAncillaryBuffer::default())
                .collect();
            let mut msgs: Vec<rustix::net::MMsgHdr<'_>> = ctrls
                .iter_mut()
                .enumerate()
                .map(|(k, c)| {
                    rustix::net::MMsgHdr::new_with_addr(
                        &addrs[done + k],
                        std::slice::from_ref(&iovs[done + k]),
                        c,
                    )
                })
                .collect();
            self.stats.tx_syscalls += 1;
            match rustix::net::sendmmsg(&self.socket, &mut msgs, SendFlags::empty()) {
                Ok(k) => done += k.max(1),
                Err(rustix::io::Errno::AGAIN) if waited < 100 => {
                    waited += 1;
                    wait_writable(&self.socket)?;
                }
                Err(rustix::io::Errno::INTR) => {}
                Err(_) => {
                    // Drop the datagram that failed (no route, message too long, ...).
                    self.stats.tx_dropped += 1;
                    done += 1;
                }
            }
        }
        Ok(())
    }

    /// Receives one batch and hands every datagram to the HCA; returns the datagram count.
    ///
    /// Every receive slot has [`RX_HEADROOM`] bytes in front of it. A datagram's frame is
    /// assembled where it landed: its rebuilt header is written in front of it, into the
    /// headroom for the first datagram of a slot and over the tail of the previous GRO segment
    /// (already handed to the HCA) for the others. Only frames shorter than the Ethernet
    /// minimum, whose padding would overwrite the next segment, are copied.
    fn receive(&mut self, now: Instant) -> io::Result<usize> {
        // With an inbox, a socket that has been quiet for a while is read once every
        // UDP_QUIET_CHECK_NS, not on every round: its empty `recvmmsg` would be most of a
        // busy-polling round between same-host peers. Any datagram from it (a UDP peer)
        // brings back a read per round.
        let not_due = if self.clock.is_coarse() {
            self.udp_skipped < UDP_QUIET_CHECK_ROUNDS
        } else {
            now.as_nanos() < self.udp_next_check
        };
        let udp = if self.inbox.is_some() && self.udp_quiet >= UDP_QUIET_ROUNDS && not_due {
            self.udp_skipped += 1;
            0
        } else {
            self.udp_skipped = 0;
            let n = self.receive_udp(now, 0)?;
            if n == 0 {
                self.udp_quiet = self.udp_quiet.saturating_add(1);
                self.udp_next_check = now.as_nanos() + UDP_QUIET_CHECK_NS;
            } else {
                self.udp_quiet = 0;
            }
            n
        };
        let mut mcast = 0;
        for source in 1..=self.mcast.len() {
            mcast += self.receive_udp(now, source)?;
        }
        Ok(udp + mcast + self.receive_shm(now)?)
    }

    /// Busy polling between same-host peers: waits up to [`SHM_SPIN_NS`] for a datagram in
    /// the inbox, checking it without a system call and yielding the CPU every
    /// [`SHM_SPIN_YIELD_NS`] (a peer that shares this CPU then runs at once; one on another
    /// CPU is seen within a fraction of a microsecond). Returns true when one arrived.
    fn spin_on_inbox(&self) -> bool {
        let Some(inbox) = &self.inbox else {
            return false;
        };
        let start = std::time::Instant::now();
        let mut yielded = Duration::ZERO;
        loop {
            for _ in 0..64 {
                if inbox.ready() {
                    return true;
                }
                std::hint::spin_loop();
            }
            let t = start.elapsed();
            if t >= Duration::from_nanos(SHM_SPIN_NS) {
                return false;
            }
            if t - yielded >= Duration::from_nanos(SHM_SPIN_YIELD_NS) {
                std::thread::yield_now();
                yielded = t;
            }
        }
    }

    /// Takes up to [`SHM_RX_BATCH`] datagrams from the inbox and hands them to the HCA as
    /// [`Device::receive_udp`] does with datagrams from the socket: the same rebuilt header
    /// (the sender's bound address and port), the same ICRC check.
    fn receive_shm(&mut self, now: Instant) -> io::Result<usize> {
        let mut count = 0;
        while count < SHM_RX_BATCH {
            let Some(inbox) = self.inbox.as_mut() else {
                break;
            };
            let Some(got) = inbox.pop(&mut self.rx_shm[RX_HEADROOM..]) else {
                break;
            };
            count += 1;
            self.stats.rx_datagrams += 1;
            self.stats.rx_shm += 1;
            let Some((src, len)) = got else {
                self.stats.rx_unframed += 1;
                continue;
            };
            if self.inbox.as_ref().is_some_and(|i| i.last_delegated()) {
                // Another member's target QP received it for one of this HCA's XRC SRQs.
                self.stats.xrc_delegated_in += 1;
                self.hca
                    .handle_delegation(&self.rx_shm[RX_HEADROOM..RX_HEADROOM + len]);
                continue;
            }
            // Most datagrams come from the peer of the one before, and a stream's have one
            // length: its header is kept.
            let header = if self.rx_shm_last == Some((src, len)) {
                self.rx_shm_builder.current()
            } else {
                // A relay's datagrams stand for its peer's, as over UDP.
                let ip = route_from(&self.routes, src);
                let h = self
                    .rx_shm_builder
                    .header_and_pass(ip, src.port(), self.local.ip(), len);
                self.rx_shm_last = h.is_some().then_some((src, len));
                h
            };
            let Some((header, pass)) = header else {
                self.stats.rx_unframed += 1;
                continue;
            };
            let frame = frame_in_place(
                &mut self.rx_shm,
                &mut self.rx_frame,
                header,
                RX_HEADROOM,
                RX_HEADROOM + len,
            );
            // Not a GRO segment: its Identification is 0, as the sender sealed it.
            self.rx_idents.start();
            let placed = self.inbox.as_ref().is_some_and(|i| i.last_placed());
            let handed_on = self.inbox.as_ref().is_some_and(|i| i.last_forwarded());
            self.stats.forwarded_in += u64::from(handed_on);
            self.stats.rx_placed += u64::from(placed);
            self.hca.set_placed_by_sender(placed);
            let delivered = deliver(
                &mut self.hca,
                &mut self.pcap,
                self.icrc,
                &mut self.rx_idents,
                now,
                frame,
                pass,
                len,
            );
            self.hca.set_placed_by_sender(false);
            delivered?;
            if self.rx_after_sleep && count % RX_FLUSH_EVERY == 0 {
                self.flush(now)?;
            }
        }
        Ok(count)
    }

    /// Receives one batch from the device's socket (`source` 0) or the socket of its
    /// multicast group `source` - 1, and hands every datagram to the HCA; returns the
    /// datagram count. What reaches the device's socket for another member of its host-wide
    /// device is handed on; a multicast group's socket has its own copy of each datagram.
    fn receive_udp(&mut self, now: Instant, source: usize) -> io::Result<usize> {
        const STRIDE: usize = RX_HEADROOM + RX_SLOT;
        let n = {
            let (socket, state) = match source.checked_sub(1) {
                None => (&self.socket, &self.state),
                Some(g) => (&self.mcast[g].socket, &self.mcast[g].state),
            };
            let mut chunks = self.rx_buf.chunks_exact_mut(STRIDE);
            let mut slices: [IoSliceMut<'_>; BATCH_SIZE] = std::array::from_fn(|_| {
                IoSliceMut::new(chunks.next().map_or(&mut [][..], |c| &mut c[RX_HEADROOM..]))
            });
            match state.recv(UdpSockRef::from(socket), &mut slices, &mut self.rx_meta) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(0),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ok(0),
                // ICMP errors reported on the socket (port unreachable...): not fatal.
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => return Ok(0),
                Err(e) => return Err(e),
            }
        };
        self.stats.rx_batches += 1;
        if source == 0 && n > 0 {
            // What a same-host peer put in the inbox before it sent one of these datagrams
            // over UDP (the ACK of a SEND before its connection manager's DREQ) is handled
            // first: the two paths keep the order of one sender's packets, as one wire does.
            // It is in the ring by now: the peer wrote it before its send(2).
            while self.receive_shm(now)? == SHM_RX_BATCH {}
        }
        // The member's slot, when datagrams here may be another member's (the device's own
        // socket of a host-wide device).
        let slot = self
            .member
            .as_ref()
            .filter(|_| source == 0)
            .map(host::Member::slot);
        let mut count = 0;
        for i in 0..n {
            let meta = self.rx_meta[i];
            if meta.len == 0 {
                // A same-host peer's doorbell: its datagrams are in the inbox.
                self.stats.rx_datagrams += 1;
                self.stats.doorbells_received += 1;
                count += 1;
                continue;
            }
            let src = self.route_from(meta.addr);
            let dst = meta.dst_ip.unwrap_or(self.local.ip());
            let data = i * STRIDE + RX_HEADROOM;
            let len = meta.len.min(RX_SLOT);
            let stride = meta.stride.max(1);
            // An empty datagram is one (malformed) datagram, not none.
            let segs = len.div_ceil(stride).max(1);
            self.rx_idents.start();
            // The rebuilt header and its ICRC pass, fetched once per payload length: every
            // segment but the last has the stride's.
            let mut header = None;
            let mut header_for = usize::MAX;
            for k in 0..segs {
                let (start, end) = (
                    data + (k * stride).min(len),
                    data + ((k + 1) * stride).min(len),
                );
                count += 1;
                // What the steering program sent here is this member's (one comparison);
                // the rest (probes, CM MADs, what reached the group before a rebuild) is
                // looked at closer.
                if let Some(m) = self.member.as_mut().filter(|_| {
                    slot.is_some_and(|slot| !host::surely_mine(&self.rx_buf[start..end], slot))
                }) {
                    let d = &self.rx_buf[start..end];
                    // A probe of the socket group is no RoCEv2 datagram (not counted as one).
                    if d.len() == host::PROBE_LEN && m.answer_probe(d) {
                        self.stats.probes += 1;
                        continue;
                    }
                    self.stats.rx_datagrams += 1;
                    match route(m, d) {
                        Routed::To(host::Route::Mine) => {}
                        Routed::Unlistened => {
                            if self.unlistened.len() < UNLISTENED_MAX {
                                let until = now.as_nanos() + UNLISTENED_WAIT_NS;
                                self.unlistened.push((until, meta.addr, d.to_vec()));
                                continue;
                            }
                        }
                        Routed::To(host::Route::Member(slot)) => {
                            forward(
                                &mut self.forward_to,
                                &mut self.forwarded_to,
                                &mut self.stats,
                                self.local,
                                slot,
                                meta.addr,
                                &self.rx_buf[start..end],
                            );
                            continue;
                        }
                        Routed::To(host::Route::Nobody) => {
                            self.stats.unowned += 1;
                            continue;
                        }
                    }
                } else {
                    self.stats.rx_datagrams += 1;
                }
                if end - start != header_for {
                    header_for = end - start;
                    header =
                        self.rx_builder
                            .header_and_pass(src, meta.addr.port(), dst, header_for);
                }
                let Some((header, pass)) = header else {
                    self.stats.rx_unframed += 1;
                    continue;
                };
                let frame =
                    frame_in_place(&mut self.rx_buf, &mut self.rx_frame, header, start, end);
                deliver(
                    &mut self.hca,
                    &mut self.pcap,
                    self.icrc,
                    &mut self.rx_idents,
                    now,
                    frame,
                    pass,
                    end - start,
                )?;
            }
            // After a sleep, what the GRO buffer asked for (its acknowledgements) goes out
            // before the next one is handled ([`RX_FLUSH_EVERY`]); the round's caller
            // flushes after the last.
            if self.rx_after_sleep && i + 1 < n {
                self.flush(now)?;
            }
        }
        self.ring_forwarded();
        Ok(count)
    }

    /// Opens for this device's member the host-wide XRC domain of the file whose (st_dev,
    /// st_ino) is `file` ([`host::Member::open_xrcd`]); `Ok(None)` for a device that is no
    /// member of a host-wide device (its domains are its own).
    pub fn open_xrcd(
        &self,
        file: (u64, u64),
        create: bool,
        exclusive: bool,
    ) -> io::Result<Option<u32>> {
        match &self.member {
            Some(m) => m.open_xrcd(file, create, exclusive).map(Some),
            None => Ok(None),
        }
    }

    /// Lets go of host-wide XRC domain `id` ([`Device::open_xrcd`]).
    pub fn close_xrcd(&self, id: u32) {
        if let Some(m) = &self.member {
            m.close_xrcd(id);
        }
    }

    /// Hands the HCA's delegations (`softib_core::Hca::poll_delegation`) to the inboxes of
    /// the members that own their XRC SRQs, in order; one that finds its member's inbox full
    /// waits, with every later one for that member, for the next flush. One for a member that
    /// is gone is dropped and counted, as a datagram for it is.
    fn push_delegations(&mut self) {
        // Members whose inbox was full in this round: their later delegations wait too.
        let mut blocked = [0u64; 4];
        let is_blocked = |b: &[u64; 4], s: u8| b[usize::from(s / 64)] & (1 << (s % 64)) != 0;
        let held = self.delegations_held.len();
        for _ in 0..held {
            let Some(d) = self.delegations_held.pop_front() else {
                break;
            };
            let slot = delegation_slot(&d);
            if is_blocked(&blocked, slot) || !self.delegate(slot, &d) {
                blocked[usize::from(slot / 64)] |= 1 << (slot % 64);
                self.delegations_held.push_back(d);
            }
        }
        while self.hca.poll_delegation(&mut self.delegation) {
            let d = std::mem::take(&mut self.delegation);
            let slot = delegation_slot(&d);
            if is_blocked(&blocked, slot) || !self.delegate(slot, &d) {
                blocked[usize::from(slot / 64)] |= 1 << (slot % 64);
                self.delegations_held.push_back(d);
            } else {
                // The buffer goes back to the HCA with the next delegation polled.
                self.delegation = d;
            }
        }
        while self.delegations_held.len() > DELEGATIONS_HELD_MAX {
            self.delegations_held.pop_front();
            self.stats.xrc_delegations_dropped += 1;
        }
        self.ring_forwarded();
    }

    /// Hands one delegation to the member in `slot`: false when its inbox is full (to be
    /// tried again), true when it is queued or dropped (the member is gone).
    fn delegate(&mut self, slot: u8, d: &[u8]) -> bool {
        let route = match &self.member {
            Some(m) => m.route_number(slot),
            None => host::Route::Nobody,
        };
        let slot = match route {
            host::Route::Member(s) => s,
            // Never so (a target takes its own SRQs itself), but this HCA is the owner.
            host::Route::Mine => {
                self.stats.xrc_delegated_in += 1;
                self.hca.handle_delegation(d);
                return true;
            }
            host::Route::Nobody => {
                self.stats.xrc_delegations_dropped += 1;
                return true;
            }
        };
        let at = match self.forward_to.iter().position(|(s, _)| *s == slot) {
            Some(at) => at,
            None => match shm::Outbox::attach_member(self.local, slot) {
                Some(o) => {
                    self.forward_to.push((slot, o));
                    self.forward_to.len() - 1
                }
                None => {
                    self.stats.xrc_delegations_dropped += 1;
                    return true;
                }
            },
        };
        let out = &self.forward_to[at].1;
        match out.push_delegation(self.local, d) {
            shm::Pushed::Queued => {
                self.stats.xrc_delegated += 1;
                if !self.forwarded_to.contains(&slot) {
                    self.forwarded_to.push(slot);
                }
                true
            }
            shm::Pushed::Full if out.still_valid() => false,
            shm::Pushed::Full => {
                self.forward_to.swap_remove(at);
                self.stats.xrc_delegations_dropped += 1;
                true
            }
        }
    }

    /// Rings the members that were handed datagrams in this round and sleep.
    fn ring_forwarded(&mut self) {
        for slot in self.forwarded_to.drain(..) {
            if let Some((_, o)) = self.forward_to.iter().find(|(s, _)| *s == slot) {
                if o.peer_sleeping() {
                    self.stats.doorbells_sent += 1;
                    let _ = self.socket.send_to(&[], o.bell());
                }
            }
        }
    }
}

/// The member slot that owns the XRC SRQ a delegation names (0 for none).
fn delegation_slot(d: &[u8]) -> u8 {
    softib_core::delegation_srqn(d).map_or(0, |n| (n >> 16) as u8)
}

/// Most delegations kept waiting for room in members' inboxes; beyond, the oldest are dropped
/// and counted (a member that takes nothing from its inbox for that long is stuck).
pub const DELEGATIONS_HELD_MAX: usize = 4096;

/// Hands a received frame (rebuilt header and a datagram of `len` bytes) to the HCA. IPv4:
/// the runtime checks (or, opted out, reseals) the ICRC, finishing `headers`, the pass over
/// the rebuilt IPv4 header and UDP ports, so the HCA need not compute it again, and offers
/// the datagram to the HCA's express path before the frame; a frame that fails goes to the
/// HCA as it is, which drops and counts it. IPv6: the HCA checks.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn deliver(
    hca: &mut Hca,
    pcap: &mut Option<PcapWriter<BufWriter<File>>>,
    icrc: IcrcPolicy,
    idents: &mut frame::GroIdents,
    now: Instant,
    frame: &mut [u8],
    headers: Option<&softib_wire::icrc::Continued>,
    len: usize,
) -> io::Result<()> {
    // Verified: `Some`, with the Identification that verified when it is still to be
    // written into the frame (only if the frame itself is used: captured or handed over).
    let verified = match icrc {
        IcrcPolicy::Verify => idents.check(frame, headers, len).map(Some),
        IcrcPolicy::AcceptIpv4Unverified => frame::reseal_ipv4_icrc(frame).then_some(None),
    };
    // The frame as the sender covered it, for a use of the frame itself.
    let ident = verified.flatten();
    let finish = |frame: &mut [u8]| {
        if let Some(id) = ident {
            frame::set_ipv4_ident(frame, id);
        }
    };
    if let Some(p) = pcap {
        finish(frame);
        p.write_record(unix_ns(), frame)?;
    }
    if verified.is_none() {
        hca.handle_frame(now, frame);
        return Ok(());
    }
    // IPv4 (the rebuilt header has no options): the common packet is taken where it lies,
    // the frame handed over only when the express path declines it.
    const V4: usize = frame::ETH_LEN + frame::IPV4_LEN + frame::UDP_LEN;
    let ip = frame.get(frame::ETH_LEN..frame::ETH_LEN + frame::IPV4_LEN);
    match (headers, ip, frame.get(V4..V4 + len)) {
        (Some(_), Some(ip), Some(datagram)) => {
            let src = [ip[12], ip[13], ip[14], ip[15]];
            let dst = [ip[16], ip[17], ip[18], ip[19]];
            if !hca.handle_v4_datagram_verified(now, src, dst, datagram) {
                finish(frame);
                hca.handle_frame_declined(now, frame);
            }
        }
        _ => {
            finish(frame);
            hca.handle_frame_icrc_verified(now, frame);
        }
    }
    Ok(())
}

/// The index of the interface that holds `ip` (for an IPv6 multicast join), if any.
fn interface_index(ip: std::net::Ipv6Addr) -> Option<u32> {
    let text = std::fs::read_to_string("/proc/net/if_inet6").ok()?;
    let want: String = ip.octets().iter().map(|b| format!("{b:02x}")).collect();
    text.lines().find_map(|l| {
        let mut f = l.split_whitespace();
        let addr = f.next()?;
        let index = f.next()?;
        (addr == want).then(|| u32::from_str_radix(index, 16).ok())?
    })
}

/// Hands `datagram`, which came from `src` to this member's socket (bound to `local`), to the
/// member in `slot` of the host-wide device (its inbox, attached once and kept in `to`);
/// dropped and counted when there is no room or no such member. `rung` collects the members
/// written to, whose doorbells are rung after the batch if they sleep.
#[allow(clippy::too_many_arguments)]
fn forward(
    to: &mut Vec<(u8, shm::Outbox)>,
    rung: &mut Vec<u8>,
    stats: &mut DeviceStats,
    local: SocketAddr,
    slot: u8,
    src: SocketAddr,
    datagram: &[u8],
) {
    let at = match to.iter().position(|(s, _)| *s == slot) {
        Some(at) => at,
        None => match shm::Outbox::attach_member(local, slot) {
            Some(o) => {
                to.push((slot, o));
                to.len() - 1
            }
            None => {
                stats.unowned += 1;
                return;
            }
        },
    };
    let out = &to[at].1;
    match out.push_forwarded(src, datagram) {
        shm::Pushed::Queued => {
            stats.forwarded += 1;
            if !rung.contains(&slot) {
                rung.push(slot);
            }
        }
        shm::Pushed::Full => {
            stats.unowned += 1;
            if !out.still_valid() {
                to.swap_remove(at);
            }
        }
    }
}

/// Where a datagram (BTH first) that reached a member's socket goes: by its destination
/// number's high byte, or for a MAD to QP1 by whom it is for (a request to the member that
/// listens on its Service ID, any other message to the member whose Communication ID it
/// names). What names no live member's ID stays here (this member's CM answers or drops it).
fn route(m: &host::Member, d: &[u8]) -> Routed {
    let Some(to) = host::destination(d) else {
        return Routed::To(host::Route::Mine);
    };
    if to != softib_core::GSI_QPN || d[0] & 0xE0 == 0x40 {
        return Routed::To(m.route_number((to >> 16) as u8));
    }
    // BTH and DETH, then the MAD.
    const MAD: usize = softib_wire::bth::LEN + softib_wire::deth::LEN;
    let to = d.get(MAD..).and_then(softib_wire::cm::addressee);
    let slot = match to {
        Some(softib_wire::cm::Addressee::Service(sid)) => match m.listener(sid) {
            Some(s) => s,
            // Nobody listens yet: kept a while for a listener to come (a connect that races
            // the peer's rdma_listen), in whichever process it is.
            None => return Routed::Unlistened,
        },
        Some(softib_wire::cm::Addressee::Id(id)) => (id >> 24) as u8,
        None => return Routed::To(host::Route::Mine),
    };
    match m.route_number(slot) {
        host::Route::Member(s) => Routed::To(host::Route::Member(s)),
        _ => Routed::To(host::Route::Mine),
    }
}

/// Where [`route`] sends a datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Routed {
    To(host::Route),
    /// A connection request for a Service ID no member listens on.
    Unlistened,
}

/// How long a connection request for a Service ID nobody listens on waits for a listener in
/// any member before this member's connection manager takes it (and, by its own grace,
/// refuses it).
const UNLISTENED_WAIT_NS: u64 = 250_000_000;
/// Most such requests kept at once.
const UNLISTENED_MAX: usize = 64;

/// The peer whose datagrams come from `from` (a relay's address stands for its peer).
fn route_from(routes: &[(IpAddr, SocketAddr)], from: SocketAddr) -> IpAddr {
    let from_c = SocketAddr::new(frame::canonical_ip(from.ip()), from.port());
    routes
        .iter()
        .find(|(_, via)| *via == from_c)
        .map(|&(p, _)| p)
        .unwrap_or(from_c.ip())
}

/// Where [`shm_send`] put a datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ShmSend {
    /// Into the peer's inbox.
    Sent,
    /// Nowhere (shared memory forced, and the peer has no inbox or it is full).
    Dropped,
    /// Send it over UDP.
    Udp,
}

/// Puts `datagram` for `dest` into `dest`'s inbox when it has one (looked for on the first
/// datagram and, while there is none, again every [`SHM_LOOK_AGAIN_NS`]); for a peer reached
/// through a route, `dest` is the relay, which may have an inbox too. A full ring sends over UDP ([`Transport::Auto`]) or
/// drops ([`Transport::Shm`]); a ring whose owner has gone is forgotten.
#[allow(clippy::too_many_arguments)]
fn shm_send(
    peers: &mut Vec<(PeerKey, Peer)>,
    transport: Transport,
    local: SocketAddr,
    dest: PeerKey,
    datagram: &[u8],
    placeable: bool,
    now: Instant,
    stats: &mut DeviceStats,
    pushed_to: &mut Vec<PeerKey>,
) -> ShmSend {
    let i = shm_peer(peers, dest, now);
    let path = shm_push(peers, i, transport, local, datagram, placeable, now, stats);
    if path == ShmSend::Sent && !pushed_to.contains(&dest) {
        pushed_to.push(dest);
    }
    path
}

/// When a destination reached over UDP at `now` is looked at again for an inbox.
fn look_again(now: Instant) -> Instant {
    now.saturating_add(std::time::Duration::from_nanos(SHM_LOOK_AGAIN_NS))
}

/// The index in `peers` of `dest`, added when new, its inbox looked for when due ([`shm_send`]):
/// the inbox of the member the datagrams are for where the destination is a host-wide device
/// (and the member takes datagrams directly), else the address's own (a relay's).
fn shm_peer(peers: &mut Vec<(PeerKey, Peer)>, dest: PeerKey, now: Instant) -> usize {
    let i = match peers.iter().position(|(a, _)| *a == dest) {
        Some(i) => i,
        None => {
            peers.push((dest, Peer::Udp(Instant::ZERO)));
            peers.len() - 1
        }
    };
    if let Peer::Udp(next) = peers[i].1 {
        if now >= next {
            let (addr, member) = dest;
            let direct = (member != 0)
                .then(|| shm::Outbox::attach_member(addr, member))
                .flatten()
                .filter(shm::Outbox::direct);
            peers[i].1 = match direct.or_else(|| shm::Outbox::attach(addr)) {
                Some(o) => Peer::Shm(o),
                None => Peer::Udp(look_again(now)),
            };
        }
    }
    i
}

/// [`shm_send`] to `peers[i]` ([`shm_peer`]), not noting the push in the flush's list.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn shm_push(
    peers: &mut [(PeerKey, Peer)],
    i: usize,
    transport: Transport,
    local: SocketAddr,
    datagram: &[u8],
    placeable: bool,
    now: Instant,
    stats: &mut DeviceStats,
) -> ShmSend {
    let fallback = |stats: &mut DeviceStats| {
        if transport == Transport::Shm {
            stats.tx_dropped += 1;
            ShmSend::Dropped
        } else {
            ShmSend::Udp
        }
    };
    let Peer::Shm(out) = &peers[i].1 else {
        return fallback(stats);
    };
    // Placed only where the push will surely find room: a placed WRITE that went by UDP
    // instead would be placed a second time by the responder.
    let placed = placeable && out.roomy() && place_write(out, datagram);
    if placeable && !placed && out.take_refusal() {
        stats.placement_refused += 1;
    }
    match out.push_marked(local, datagram, placed) {
        shm::Pushed::Queued => stats.tx_placed += u64::from(placed),
        shm::Pushed::Full => {
            if !out.still_valid() {
                peers[i].1 = Peer::Udp(look_again(now));
            }
            return fallback(stats);
        }
    }
    stats.tx_shm += 1;
    stats.tx_datagrams += 1;
    ShmSend::Sent
}

/// Where datagrams for `dst` go: its relay (`routes`) or `dst` itself at the peers' port.
fn route_to(routes: &[(IpAddr, SocketAddr)], peer_port: u16, dst: IpAddr) -> SocketAddr {
    let dst = frame::canonical_ip(dst);
    routes
        .iter()
        .find(|(p, _)| *p == dst)
        .map(|&(_, via)| via)
        .unwrap_or(SocketAddr::new(dst, peer_port))
}

/// [`route_to`] for IPv4 destination `dst`, kept in `last` for the next datagram (most go
/// where the one before went).
#[inline(always)]
fn route4(
    last: &mut Option<([u8; 4], SocketAddr)>,
    routes: &[(IpAddr, SocketAddr)],
    peer_port: u16,
    dst: [u8; 4],
) -> SocketAddr {
    match *last {
        Some((l, dest)) if l == dst => dest,
        _ => {
            let dest = route_to(routes, peer_port, IpAddr::from(dst));
            *last = Some((dst, dest));
            dest
        }
    }
}

/// Places the payload of the RC RDMA WRITE Only in `datagram` (BTH, RETH, payload, pad,
/// ICRC) into the peer's memory ([`shm::Outbox::place_write`]); true when placed.
fn place_write(out: &shm::Outbox, datagram: &[u8]) -> bool {
    use softib_wire::{bth, icrc, reth};
    let (Some(b), Some(r)) = (
        datagram.get(..bth::LEN),
        datagram.get(bth::LEN..bth::LEN + reth::LEN),
    ) else {
        return false;
    };
    if b[0] != softib_wire::Opcode::RC_RDMA_WRITE_ONLY.0 {
        return false;
    }
    let pad = usize::from((b[1] >> 4) & 3);
    let qpn = u32::from_be_bytes([0, b[5], b[6], b[7]]);
    let va = u64::from_be_bytes([r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7]]);
    let rkey = u32::from_be_bytes([r[8], r[9], r[10], r[11]]);
    let dma_len = u32::from_be_bytes([r[12], r[13], r[14], r[15]]) as usize;
    let start = bth::LEN + reth::LEN;
    match datagram.len().checked_sub(icrc::LEN + pad) {
        Some(end) if end >= start && end - start == dma_len => {
            out.place_write(qpn, rkey, va, &datagram[start..end])
        }
        _ => false,
    }
}

/// The frame of the datagram at `buf[start..end]` with its rebuilt `header`: written in front
/// of it, into the room `buf` has there; a frame shorter than the Ethernet minimum, whose
/// padding would overwrite what follows, is copied into `spare` instead.
#[inline(always)]
fn frame_in_place<'a>(
    buf: &'a mut [u8],
    spare: &'a mut Vec<u8>,
    header: &[u8],
    start: usize,
    end: usize,
) -> &'a mut [u8] {
    let at = start - header.len();
    if end - at >= softib_wire::ethernet::MIN_FRAME_LEN {
        put_header(&mut buf[at..start], header);
        return &mut buf[at..end];
    }
    spare.clear();
    spare.extend_from_slice(header);
    spare.extend_from_slice(&buf[start..end]);
    spare.resize(softib_wire::ethernet::MIN_FRAME_LEN, 0);
    &mut spare[..]
}

/// Copies a rebuilt header (`dst` is as long) in front of a datagram: the IPv4 header, the
/// common case, as a fixed-size copy rather than a call to `memcpy`.
#[inline(always)]
fn put_header(dst: &mut [u8], header: &[u8]) {
    const V4: usize = frame::ETH_LEN + frame::IPV4_LEN + frame::UDP_LEN;
    if let (Ok(h), Some(d)) = (<&[u8; V4]>::try_from(header), dst.first_chunk_mut::<V4>()) {
        *d = *h;
        return;
    }
    dst.copy_from_slice(header);
}

/// BTH opcode of an RC ACKNOWLEDGE.
const OPCODE_RC_ACK: u8 = 0x11;

/// True for the response opcodes of the reliable services (RC, RD, XRC: READ response
/// first/middle/last/only, ACKNOWLEDGE, ATOMIC ACKNOWLEDGE).
#[inline(always)]
fn is_response(opcode: u8) -> bool {
    RESPONSES[usize::from(opcode)]
}

/// [`is_response`] for every opcode, looked up (one load per datagram queued).
static RESPONSES: [bool; 256] = {
    let mut t = [false; 256];
    let mut op = 0;
    while op < 256 {
        let code = op as u8;
        t[op] = matches!(code >> 5, 0 | 2 | 5) && code & 0x1f >= 0x0D && code & 0x1f <= 0x12;
        op += 1;
    }
    t
};

/// The most segments one UDP GSO send may carry on this kernel (UDP_MAX_SEGMENTS): 128 since
/// Linux 6.9, 64 before. quinn-udp reports 64 whatever the kernel; the limit is found once per
/// process by a send of 128 eight-byte segments from one loopback socket to another (the
/// kernel refuses it with EINVAL when its limit is 64; the receiving socket is closed unread),
/// and is 64 when that cannot be tried.
pub fn gso_max_segments() -> usize {
    static MOST: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *MOST.get_or_init(|| {
        let probe = || -> io::Result<()> {
            let rx = UdpSocket::bind((std::net::Ipv4Addr::LOCALHOST, 0))?;
            let tx = UdpSocket::bind((std::net::Ipv4Addr::LOCALHOST, 0))?;
            // A state of its own: a refusal must not turn GSO off for the device's socket.
            let state = UdpSocketState::new(UdpSockRef::from(&tx))?;
            if state.max_gso_segments() <= 1 {
                return Err(io::ErrorKind::Unsupported.into());
            }
            let contents = [0u8; 8 * GSO_MAX_SEGMENTS];
            let t = Transmit {
                destination: rx.local_addr()?,
                ecn: None,
                contents: &contents,
                segment_size: Some(8),
                src_ip: None,
            };
            state.try_send(UdpSockRef::from(&tx), &t)
        };
        if probe().is_ok() {
            GSO_MAX_SEGMENTS
        } else {
            64
        }
    })
}

/// One `sendmsg` (possibly a GSO run of `segs` datagrams), waiting for buffer space a
/// bounded number of times; failures are counted as dropped datagrams.
fn send_one(
    socket: &UdpSocket,
    state: &UdpSocketState,
    t: &Transmit<'_>,
    stats: &mut DeviceStats,
    segs: usize,
) -> io::Result<()> {
    for _ in 0..100 {
        stats.tx_syscalls += 1;
        match state.try_send(UdpSockRef::from(socket), t) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => wait_writable(socket)?,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    stats.tx_dropped += segs as u64;
    Ok(())
}

/// Waits up to 10 ms for room in the socket's send buffer.
fn wait_writable(socket: &UdpSocket) -> io::Result<()> {
    let ts = Timespec {
        tv_sec: 0,
        tv_nsec: 10_000_000,
    };
    let mut fds = [PollFd::new(socket, PollFlags::OUT)];
    match rustix::event::poll(&mut fds, Some(&ts)) {
        Ok(_) | Err(rustix::io::Errno::INTR) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Nanoseconds since the Unix epoch (pcap timestamps).
fn unix_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// The loopback address `127.0.0.n`, port 4791: two processes on one machine use
/// `loopback(1)` and `loopback(2)`.
pub fn loopback(n: u8) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::new(127, 0, 0, n)), ROCEV2_PORT)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv6Addr;

    /// The response opcodes are those of the opcode table: READ responses, ACKNOWLEDGE and
    /// ATOMIC ACKNOWLEDGE of RC, RD and XRC, nothing else.
    #[test]
    fn responses_are_the_tables_response_opcodes() {
        for code in 0..=u8::MAX {
            let want = softib_wire::opcode::Opcode(code)
                .info()
                .is_some_and(|i| i.operation.is_response());
            assert_eq!(is_response(code), want, "{code:#04x}");
        }
    }

    /// After `retag_gso_run`, segment k of a run (full-length ones and a shorter last one)
    /// carries the ICRC of IPv4 Identification k, the number the kernel gives it.
    #[test]
    fn gso_run_segments_carry_the_icrc_of_their_identification() {
        let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let mut dev = Device::open(&DeviceConfig::new(SocketAddr::new(lo, 0))).unwrap();
        let port = dev.local_addr().port();
        let dest = SocketAddr::new(lo, ROCEV2_PORT);
        for run in [
            vec![100usize; 2],
            vec![100; 5],
            [vec![100; 5], vec![60]].concat(),
        ] {
            dev.tx.clear();
            dev.tx_dests.clear();
            dev.tx_buf.clear();
            let dest = dev.dest_index((dest, 0));
            for (n, &len) in run.iter().enumerate() {
                // An RC SEND_ONLY body, ICRC sealed for Identification 0.
                let mut body = vec![n as u8 + 1; len];
                body[..12].copy_from_slice(&[0x04, 0, 0xff, 0xff, 0, 0, 1, 0x23, 0x80, 0, 0, 1]);
                let mut f = Vec::new();
                assert!(frame::frame_of_datagram(lo, port, lo, &body, &mut f));
                assert!(frame::reseal_ipv4_icrc(&mut f));
                let (_, sealed) = frame::datagram_of_frame(&f).unwrap();
                let start = dev.tx_buf.len();
                dev.tx_buf.extend_from_slice(sealed);
                dev.tx.push(TxEntry { dest, start, len });
            }
            dev.retag_gso_run(0, run.len());
            for (k, e) in dev.tx.iter().enumerate() {
                let mut got = Vec::new();
                let d = &dev.tx_buf[e.start..e.start + e.len];
                assert!(frame::frame_of_datagram(lo, port, lo, d, &mut got));
                assert!(
                    frame::verify_ipv4_icrc_any_ident(&mut got),
                    "run {run:?} k {k}"
                );
                let ident = u16::from_be_bytes([got[14 + 4], got[14 + 5]]);
                assert_eq!(usize::from(ident), k, "run {run:?}");
            }
        }
    }

    /// An IPv6 datagram with UDP checksum 0 (sent with `UDP_NO_CHECK6_TX`, as Linux rxe sends
    /// RoCEv2 over IPv6) reaches the device and the HCA: its ICRC verifies and the transport
    /// looks for the QP it names. Without `UDP_NO_CHECK6_RX` the kernel would drop it.
    #[test]
    fn ipv6_datagram_with_zero_checksum_is_handled() {
        let lo = IpAddr::V6(Ipv6Addr::LOCALHOST);
        let mut dev = Device::open(&DeviceConfig::new(SocketAddr::new(lo, 0))).unwrap();
        let to = dev.local_addr();
        let tx = socket2::Socket::new(
            socket2::Domain::IPV6,
            socket2::Type::DGRAM,
            Some(socket2::Protocol::UDP),
        )
        .unwrap();
        tx.bind(&SocketAddr::new(lo, 0).into()).unwrap();
        sockopt::set_udp_no_check6_tx(&tx, true).unwrap();
        let from = tx.local_addr().unwrap().as_socket().unwrap();
        // RC SEND_ONLY to QP 0x123, which does not exist; P_Key 0xFFFF; 8 payload bytes; ICRC
        // over the header the device rebuilds.
        let mut body = vec![0x04, 0, 0xff, 0xff, 0, 0, 0x01, 0x23, 0x80, 0, 0, 1];
        body.extend_from_slice(&[0xab; 8]);
        body.extend_from_slice(&[0; 4]);
        let mut f = Vec::new();
        assert!(frame::frame_of_datagram(
            from.ip(),
            from.port(),
            to.ip(),
            &body,
            &mut f
        ));
        let (ip, udp, end) = (14..54, 54..62, 62 + body.len());
        let icrc = softib_wire::icrc::roce_v6(&f[ip], &f[udp], &f[62..end - 4]);
        let n = body.len();
        body[n - 4..].copy_from_slice(&icrc.to_le_bytes());
        tx.send_to(&body, &to.into()).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while dev.stats().rx_datagrams == 0 && std::time::Instant::now() < deadline {
            dev.progress(PollMode::Blocking, Duration::from_millis(50))
                .unwrap();
        }
        assert_eq!(dev.stats().rx_datagrams, 1);
        let c = dev.hca().counters();
        assert_eq!((c.icrc_err, c.malformed, c.no_such_qp), (0, 0, 1), "{c:?}");
    }
}
