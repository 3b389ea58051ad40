//! The discrete-event fabric: nodes, links, one switch, and the event loop.
//!
//! # Event loop
//!
//! Single-threaded. Events run in the order of `(time, sequence number)`; the sequence number
//! is assigned when an event is scheduled, so events due at the same time run in the order they
//! were scheduled and every run of the same inputs is identical. There are two kinds of event:
//! a frame reaching the far end of a link direction (the switch, or an endpoint), and an
//! endpoint's timeout.
//!
//! Frames that keep FIFO order on their link direction (all but those the reorder fault or a
//! [`crate::Action::Delay`] rule holds back) arrive in the order they entered it, and their
//! sequence numbers grow in that order, so each direction keeps them in a queue sorted by
//! `(time, sequence number)`. A binary min-heap holds the first frame of each non-empty queue,
//! every held-back frame and every timeout; taking the least entry of the heap and, for a queue,
//! putting its next frame in its place is a merge of sorted sequences, so events run in exactly
//! the `(time, sequence number)` order of one global queue, while the heap stays as small as the
//! number of busy link directions, held-back frames and timeouts.
//!
//! After every call into an endpoint (a delivered frame, a timeout) and for every node marked
//! by [`Fabric::kick`] or [`Fabric::node_mut`], the fabric drains the endpoint's
//! [`Endpoint::poll_transmit`] (each frame enters the node's up direction at the current time)
//! and re-reads [`Endpoint::poll_timeout`]. Timeouts are invalidated lazily: a deadline that
//! moves later keeps its heap entry, which is re-filed when it comes up; a deadline that moves
//! earlier gets a new entry and the old one is ignored.
//!
//! # Memory
//!
//! Endpoints write their frames into one reused buffer. A frame shorter than 1 KiB that enters
//! a link direction is copied, behind a 24-byte header, into that direction's queue, whose
//! storage is a list of 64 KiB chunks recycled through a pool shared by all directions: no
//! allocation per frame, not even while many frames are in flight for the first time, and
//! frames are read back in the order they were written. A longer frame keeps a buffer of its
//! own (from a free list), which is handed from the endpoint to the queues and on to the
//! receiver without being copied; so do held-back frames. Links whose configuration has no
//! fault, no jitter and no down interval (in a fabric without rules) take a short path that
//! draws no random number, as the full path would not either.
//!
//! # Link layers
//!
//! A fabric carries Ethernet frames (the default; the switch forwards by destination MAC) or
//! native InfiniBand packets ([`Fabric::with_link_layer`] with [`LinkLayer::InfiniBand`]; nodes
//! join with [`Fabric::add_ib_node`], naming their LID range, and the switch forwards by
//! LRH:DLID). On an InfiniBand fabric:
//!
//! * a unicast DLID (0x0001..=0xBFFF) goes to the node whose range `base .. base + 2^LMC`
//!   holds it, or is dropped and counted in [`SwitchStats::unknown_dst`] (LID 0 included);
//! * a multicast DLID (0xC000..=0xFFFE) is copied to every other node, as a broadcast frame is
//!   on Ethernet (the switch has no multicast forwarding table; the HCAs filter);
//! * the permissive DLID 0xFFFF is consumed by the switch, which has no management agent:
//!   dropped and counted in [`SwitchStats::permissive`];
//! * a link's MTU is the IBA MTU: a packet may be up to MTU + 126 bytes (MTU + 124 counted by
//!   LRH:PktLen, plus the VCRC);
//! * the corruption fault flips bits anywhere in the packet until its VCRC or ICRC no longer
//!   verifies; rules match the BTH of IBA packets (raw datagrams have none);
//! * pcap captures use link type DLT_USER0 (147), as `softib pcap decode` expects for native
//!   IB.

use std::io::{self, Write};

use softib_wire::pcap::{PcapWriter, LINKTYPE_ETHERNET, LINKTYPE_USER0};

use crate::endpoint::Endpoint;
use crate::events::{Event, EventHeap, EventKind};
use crate::faults::{corrupt_frame, BthKey, Effects, Rule, RuleId, RuleState, RuleStats};
use crate::hash::TraceHash;
use crate::link::{eth_header_len, serialisation_ns, Direction, LinkConfig, LinkStats};
use crate::queue::{ChunkPool, FrameQueue, Taken};
use crate::rng::Rng;

/// Identifies a node of a [`Fabric`] (its index, in order of [`Fabric::add_node`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub(crate) u32);

impl NodeId {
    /// The node's index: 0 for the first node added, and so on.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// What the fabric's links carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LinkLayer {
    /// Ethernet frames, switched by destination MAC address.
    #[default]
    Ethernet,
    /// Native InfiniBand packets (LRH first, VCRC last), switched by LRH:DLID.
    InfiniBand,
}

/// Bytes a native IB packet may carry beyond the link's MTU: MTU + 124 bytes counted by
/// LRH:PktLen (IBA 7.7.8), then the 2-byte VCRC.
pub const IB_PACKET_OVERHEAD: usize = 126;

/// No node has this LID.
const NO_NODE: u32 = u32::MAX;
/// First multicast LID.
const MULTICAST_LID: u16 = 0xC000;
/// The permissive LID.
const PERMISSIVE_LID: u16 = 0xFFFF;

/// Why a run stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunOutcome {
    /// No frame in flight and no endpoint timeout due by the limit.
    Idle,
    /// The time limit came with frames still in flight (virtual time is now the limit).
    TimeLimit,
    /// The event budget ran out.
    EventLimit,
}

/// Which frames a pcap capture records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capture {
    /// Every frame handed to an endpoint, stamped with its delivery time.
    Delivered,
    /// As `Delivered`, plus every frame an endpoint transmits, stamped with its send time (so
    /// the file holds each delivered frame twice and is not sorted by time).
    DeliveredAndSent,
}

/// Counters of the switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SwitchStats {
    /// Frames forwarded to one known destination.
    pub forwarded: u64,
    /// Broadcast / multicast frames copied to every other node.
    pub flooded: u64,
    /// Frames to a unicast MAC address no node has (dropped).
    pub unknown_dst: u64,
    /// Frames shorter than an Ethernet header (or, on an InfiniBand fabric, an LRH) (dropped).
    pub malformed: u64,
    /// InfiniBand fabric: packets to the permissive LID, which the switch consumes (dropped).
    pub permissive: u64,
}

/// Fabric-wide counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Totals {
    /// Frames (and bytes) endpoints transmitted.
    pub transmitted_frames: u64,
    pub transmitted_bytes: u64,
    /// Frames (and bytes) handed to endpoints.
    pub delivered_frames: u64,
    pub delivered_bytes: u64,
    /// Every link direction's counters added up (a frame crossing the switch is counted on two
    /// directions), with the largest queueing delay of any.
    pub links: LinkStats,
    pub switch: SwitchStats,
}

/// Frames one endpoint may emit in one go before other nodes get a turn (the node is polled
/// again straight after); it keeps a runaway endpoint from starving the event loop.
const MAX_TRANSMITS_PER_POLL: usize = 1 << 16;

/// A buffer kept on the free list when recycled is cut back to this capacity if larger.
const MAX_POOLED_CAPACITY: usize = 16 * 1024;

/// Frames at least this long are handed from queue to queue in buffers of their own; shorter
/// ones are copied into the queues' storage (copying them costs less than a buffer each).
const OWNED_MIN: usize = 1024;

/// A frame on its way through the fabric: bytes borrowed from where they are (an endpoint's
/// transmit buffer, a queue's storage), or a buffer of its own, which is handed on rather than
/// copied.
enum Frame<'a> {
    Borrowed(&'a [u8]),
    Owned(Vec<u8>),
}

impl Frame<'_> {
    #[inline(always)]
    fn bytes(&self) -> &[u8] {
        match self {
            Frame::Borrowed(b) => b,
            Frame::Owned(v) => v,
        }
    }
}

struct Node<E> {
    ep: E,
    mac: [u8; 6],
    /// The deadline the endpoint last reported (clamped to the time it was read).
    want: Option<u64>,
    /// The heap entry standing for the timeout: (time, seq).
    armed: Option<(u64, u64)>,
    dirty: bool,
}

struct Link {
    cfg: LinkConfig,
    rng: Rng,
    node: u32,
    dir: Direction,
    /// When the transmitter finishes the last frame given to it.
    busy_until: u64,
    /// Arrival time of the last frame that keeps FIFO order.
    last_arrival: u64,
    /// The Gilbert–Elliott chain is in its bad state.
    in_burst: bool,
    stats: LinkStats,
    /// Frames that keep FIFO order, in arrival order; while it is not empty, the heap holds one
    /// [`EventKind::Link`] entry for its first frame.
    queue: FrameQueue,
    /// What `cfg` implies, worked out again after [`Fabric::link_mut`].
    derived: Derived,
}

/// Facts about a link direction's configuration that the per-frame path would otherwise work
/// out for every frame.
#[derive(Debug, Clone, Copy)]
struct Derived {
    /// The configuration may have changed since these were computed.
    stale: bool,
    /// No fault can act and there is no jitter: no frame is dropped (but by the MTU) or delayed
    /// and no random number is drawn, so a frame only needs its timing worked out.
    plain: bool,
    /// Serialisation time of the last frame length seen, as (length, ns).
    ser: (usize, u64),
}

impl Derived {
    const STALE: Derived = Derived {
        stale: true,
        plain: false,
        ser: (usize::MAX, 0),
    };
}

/// True when [`Rng::chance`] with probability `p` is always false (and draws nothing).
fn never(p: f64) -> bool {
    p.is_nan() || p <= 0.0
}

impl Link {
    fn derive(&mut self) {
        let c = &self.cfg;
        let f = &c.faults;
        self.derived = Derived {
            stale: false,
            plain: never(f.loss)
                && f.burst.is_none()
                && never(f.corrupt)
                && never(f.dup)
                && never(f.reorder)
                && c.jitter_ns == 0
                && f.jitter_ns == 0
                && f.down.is_empty(),
            ser: (usize::MAX, 0),
        };
    }

    /// Serialisation time of a `bytes`-long frame.
    #[inline(always)]
    fn ser(&mut self, bytes: usize) -> u64 {
        if self.derived.ser.0 != bytes {
            self.derived.ser = (bytes, serialisation_ns(bytes, self.cfg.bandwidth_bps));
        }
        self.derived.ser.1
    }
}

struct Slot {
    buf: Vec<u8>,
    link: u32,
    /// The node that transmitted the frame.
    src: u32,
}

struct PcapSink {
    w: PcapWriter<Box<dyn Write>>,
    sent: bool,
    err: Option<io::Error>,
}

impl PcapSink {
    fn record(&mut self, ts_ns: u64, frame: &[u8]) {
        if self.err.is_none() {
            if let Err(e) = self.w.write_record(ts_ns, frame) {
                self.err = Some(e);
            }
        }
    }
}

/// Everything but the endpoints, so that an endpoint can be borrowed while the network is
/// updated.
struct Net {
    now: u64,
    seq: u64,
    heap: EventHeap,
    slots: Vec<Slot>,
    free_slots: Vec<u32>,
    free_bufs: Vec<Vec<u8>>,
    links: Vec<Link>,
    /// (MAC as u64, node index), sorted.
    macs: Vec<(u64, u32)>,
    /// The entry of `macs` found last (a key no MAC has, initially).
    last_lookup: (u64, u32),
    rules: Vec<RuleState>,
    switch_latency_ns: u64,
    in_flight: usize,
    events: u64,
    /// The trace digest, unless switched off by [`Fabric::without_trace_hash`].
    trace: Option<TraceHash>,
    totals: Totals,
    pcap: Option<PcapSink>,
    dirty: Vec<u32>,
    seed: u64,
    /// Buffers of frames of their own (long, held back or corrupted) created because the free
    /// list was empty.
    bufs_created: u64,
    /// Storage of the frames queued on links.
    chunks: ChunkPool,
    /// The links carry native IB packets.
    native: bool,
    /// InfiniBand fabric: the node of each unicast LID (`NO_NODE` if none), indexed by LID.
    lids: Vec<u32>,
}

/// Bytes of a frame that its link's MTU does not count.
#[inline(always)]
fn frame_overhead(native: bool, frame: &[u8]) -> usize {
    if native {
        IB_PACKET_OVERHEAD
    } else {
        eth_header_len(frame)
    }
}

/// The DLID of a native IB packet (bytes 2-3 of the LRH).
#[inline(always)]
fn dlid_of(frame: &[u8]) -> Option<u16> {
    frame.get(2..4).map(|b| u16::from_be_bytes([b[0], b[1]]))
}

#[inline(always)]
fn mac_key(mac: &[u8]) -> u64 {
    let mut k = [0u8; 8];
    k[2..8].copy_from_slice(&mac[..6]);
    u64::from_be_bytes(k)
}

fn link_index(node: u32, dir: Direction) -> usize {
    node as usize * 2
        + match dir {
            Direction::Up => 0,
            Direction::Down => 1,
        }
}

impl Net {
    fn schedule(&mut self, time: u64, kind: EventKind, idx: u32) -> u64 {
        let seq = self.seq;
        self.seq += 1;
        self.heap.push(Event {
            time,
            seq,
            idx,
            kind,
        });
        seq
    }

    fn take_buf(&mut self) -> Vec<u8> {
        self.free_bufs.pop().unwrap_or_else(|| {
            self.bufs_created += 1;
            Vec::new()
        })
    }

    fn put_buf(&mut self, mut buf: Vec<u8>) {
        buf.clear();
        if buf.capacity() > MAX_POOLED_CAPACITY {
            buf.shrink_to(MAX_POOLED_CAPACITY);
        }
        self.free_bufs.push(buf);
    }

    /// The node that has `mac`.
    fn find(&self, mac: &[u8]) -> Option<(u64, u32)> {
        let k = mac_key(mac);
        let i = self.macs.binary_search_by_key(&k, |&(m, _)| m).ok()?;
        Some(self.macs[i])
    }

    /// As [`Net::find`], remembering the answer (entries never change once added).
    #[inline]
    fn lookup(&mut self, mac: &[u8]) -> Option<u32> {
        if self.last_lookup.0 == mac_key(mac) {
            return Some(self.last_lookup.1);
        }
        let e = self.find(mac)?;
        self.last_lookup = e;
        Some(e.1)
    }

    /// Gives a frame's buffer, if it has one, back to the free list.
    #[inline(always)]
    fn recycle(&mut self, frame: Frame<'_>) {
        if let Frame::Owned(v) = frame {
            self.put_buf(v);
        }
    }

    /// Schedules the arrival of `frame` at the far end of link direction `link` at `time`. A
    /// frame that keeps FIFO order (`fifo`, and not due before the last one queued) joins the
    /// direction's queue; others (held back) get a buffer and a heap entry of their own.
    #[inline]
    fn schedule_frame(&mut self, time: u64, frame: Frame<'_>, link: usize, src: u32, fifo: bool) {
        if fifo && self.links[link].queue.last_time() <= time {
            self.push_fifo(time, frame, link, src);
        } else {
            self.hold_frame(time, frame, link, src);
        }
    }

    /// Appends `frame`, due at `time` and no earlier than the frames queued on link direction
    /// `link`, to that direction's queue.
    #[inline(always)]
    fn push_fifo(&mut self, time: u64, frame: Frame<'_>, link: usize, src: u32) {
        let l = &mut self.links[link];
        debug_assert!(l.queue.last_time() <= time);
        self.in_flight += 1;
        let seq = self.seq;
        self.seq += 1;
        if l.queue.is_empty() {
            self.heap.push(Event {
                time,
                seq,
                idx: link as u32,
                kind: EventKind::Link,
            });
        }
        match frame {
            Frame::Borrowed(b) if b.len() <= FrameQueue::MAX_FRAME => {
                l.queue.push(&mut self.chunks, time, seq, src, b)
            }
            Frame::Borrowed(b) => {
                let mut v = self.free_bufs.pop().unwrap_or_else(|| {
                    self.bufs_created += 1;
                    Vec::new()
                });
                v.extend_from_slice(b);
                l.queue.push_boxed(&mut self.chunks, time, seq, src, v)
            }
            Frame::Owned(v) => l.queue.push_boxed(&mut self.chunks, time, seq, src, v),
        }
    }

    /// Schedules the arrival of a frame that does not keep FIFO order (see
    /// [`Net::schedule_frame`]).
    #[inline(never)]
    fn hold_frame(&mut self, time: u64, frame: Frame<'_>, link: usize, src: u32) {
        self.in_flight += 1;
        let buf = match frame {
            Frame::Owned(v) => v,
            Frame::Borrowed(b) => {
                let mut v = self.take_buf();
                v.extend_from_slice(b);
                v
            }
        };
        let slot = Slot {
            buf,
            link: link as u32,
            src,
        };
        let idx = match self.free_slots.pop() {
            Some(i) => {
                self.slots[i as usize] = slot;
                i
            }
            None => {
                self.slots.push(slot);
                (self.slots.len() - 1) as u32
            }
        };
        self.schedule(time, EventKind::Held, idx);
    }

    /// Takes a held-back frame out of the slab.
    fn take_slot(&mut self, idx: u32) -> Slot {
        let slot = std::mem::replace(
            &mut self.slots[idx as usize],
            Slot {
                buf: Vec::new(),
                link: 0,
                src: 0,
            },
        );
        self.free_slots.push(idx);
        self.in_flight -= 1;
        slot
    }

    /// A frame transmitted by node `src` at the current time.
    #[inline(always)]
    fn transmit(&mut self, src: u32, frame: Frame<'_>) {
        let b = frame.bytes();
        self.totals.transmitted_frames += 1;
        self.totals.transmitted_bytes += b.len() as u64;
        if let Some(p) = self.pcap.as_mut().filter(|p| p.sent) {
            p.record(self.now, b);
        }
        self.enqueue(link_index(src, Direction::Up), self.now, frame, src);
    }

    /// A frame from node `src` enters link direction `li` at time `t`: applies the MTU, the
    /// down schedule, the rules and the faults, and schedules its arrival (see
    /// [`crate::faults`] for the order).
    #[inline(always)]
    fn enqueue(&mut self, li: usize, t: u64, frame: Frame<'_>, src: u32) {
        let native = self.native;
        let link = &mut self.links[li];
        // `plain` is false while the configuration is stale.
        if link.derived.plain && self.rules.is_empty() {
            let b = frame.bytes();
            let n = b.len();
            link.stats.sent_frames += 1;
            link.stats.sent_bytes += n as u64;
            if n.saturating_sub(frame_overhead(native, b)) > link.cfg.mtu {
                link.stats.dropped_mtu += 1;
                self.recycle(frame);
                return;
            }
            self.admit_plain(li, t, frame, src);
        } else {
            self.enqueue_impaired(li, t, frame, src);
        }
    }

    /// What [`Net::enqueue`] does after the MTU check when nothing can happen to the frame on
    /// its way (a plain direction, no rules).
    #[inline(always)]
    fn admit_plain(&mut self, li: usize, t: u64, frame: Frame<'_>, src: u32) {
        let link = &mut self.links[li];
        let ser = link.ser(frame.bytes().len());
        let start = t.max(link.busy_until);
        link.stats.max_queue_delay_ns = link.stats.max_queue_delay_ns.max(start - t);
        let finish = start.saturating_add(ser);
        link.busy_until = finish;
        let arrival = finish
            .saturating_add(link.cfg.latency_ns.saturating_add(link.cfg.faults.delay_ns))
            .max(link.last_arrival);
        link.last_arrival = arrival;
        // FIFO: `arrival` is no earlier than any frame queued on the direction.
        self.push_fifo(arrival, frame, li, src);
    }

    /// [`Net::enqueue`] on a direction with faults (or a stale configuration), or with rules.
    #[inline(never)]
    fn enqueue_impaired(&mut self, li: usize, t: u64, frame: Frame<'_>, src: u32) {
        let n = frame.bytes().len();
        let native = self.native;
        {
            let link = &mut self.links[li];
            link.stats.sent_frames += 1;
            link.stats.sent_bytes += n as u64;
            if n.saturating_sub(frame_overhead(native, frame.bytes())) > link.cfg.mtu {
                link.stats.dropped_mtu += 1;
                self.recycle(frame);
                return;
            }
            if link.derived.stale {
                link.derive();
            }
            if link.derived.plain && self.rules.is_empty() {
                self.admit_plain(li, t, frame, src);
                return;
            }
            if link.cfg.faults.is_down(t) {
                link.stats.dropped_link_down += 1;
                self.recycle(frame);
                return;
            }
        }
        let mut fx = Effects::default();
        if !self.rules.is_empty() {
            let key = if native {
                BthKey::of_native(frame.bytes())
            } else {
                BthKey::of(frame.bytes())
            };
            if let Some(key) = key {
                let (hop, node) = (self.links[li].dir, self.links[li].node);
                let to = match hop {
                    Direction::Up if native => {
                        dlid_of(frame.bytes()).and_then(|d| self.lid_node(d))
                    }
                    Direction::Up => frame.bytes().get(..6).and_then(|m| self.lookup(m)),
                    Direction::Down => Some(node),
                };
                for r in &mut self.rules {
                    r.apply(&key, hop, NodeId(src), to.map(NodeId), &mut fx);
                    if fx.drop {
                        break;
                    }
                }
            }
        }
        let link = &mut self.links[li];
        if fx.drop {
            link.stats.dropped_rule += 1;
            self.recycle(frame);
            return;
        }
        let f = &link.cfg.faults;
        if link.rng.chance(f.loss) {
            link.stats.dropped_loss += 1;
            self.recycle(frame);
            return;
        }
        if let Some(b) = f.burst {
            let p = if link.in_burst { b.leave } else { b.enter };
            if link.rng.chance(p) {
                link.in_burst = !link.in_burst;
            }
            if link.in_burst && link.rng.chance(b.loss) {
                link.stats.dropped_loss += 1;
                self.recycle(frame);
                return;
            }
        }
        let corrupt = link.rng.chance(f.corrupt) | fx.corrupt;
        // A frame is corrupted in a buffer of its own; borrowed bytes are not touched.
        let frame = if corrupt {
            let mut v = match frame {
                Frame::Owned(v) => v,
                Frame::Borrowed(b) => {
                    let mut v = self.free_bufs.pop().unwrap_or_else(|| {
                        self.bufs_created += 1;
                        Vec::new()
                    });
                    v.extend_from_slice(b);
                    v
                }
            };
            if corrupt_frame(&mut link.rng, &mut v, native) {
                link.stats.corrupted += 1;
            }
            Frame::Owned(v)
        } else {
            frame
        };
        let f = &link.cfg.faults;
        let dup = link.rng.chance(f.dup) | fx.dup;
        let mut hold = fx.delay_ns;
        if fx.delay_ns > 0 {
            link.stats.delayed += 1;
        }
        if link.rng.chance(f.reorder) {
            link.stats.reordered += 1;
            hold = hold.saturating_add(f.reorder_delay_ns);
        }

        let ser = link.ser(n);
        let f = &link.cfg.faults;
        let fixed = link.cfg.latency_ns.saturating_add(f.delay_ns);
        let jitter = link.cfg.jitter_ns.saturating_add(f.jitter_ns);

        let start = t.max(link.busy_until);
        link.stats.max_queue_delay_ns = link.stats.max_queue_delay_ns.max(start - t);
        let finish = start.saturating_add(ser);
        link.busy_until = finish;
        let j = if jitter > 0 {
            link.rng.up_to(jitter)
        } else {
            0
        };
        let mut arrival = finish
            .saturating_add(fixed)
            .saturating_add(j)
            .max(link.last_arrival);
        if hold == 0 {
            link.last_arrival = arrival;
        } else {
            arrival = arrival.saturating_add(hold);
        }

        let copy = if dup {
            link.stats.duplicated += 1;
            let start = link.busy_until;
            let finish = start.saturating_add(ser);
            link.busy_until = finish;
            let j = if jitter > 0 {
                link.rng.up_to(jitter)
            } else {
                0
            };
            let arrival = finish
                .saturating_add(fixed)
                .saturating_add(j)
                .max(link.last_arrival);
            link.last_arrival = arrival;
            Some(arrival)
        } else {
            None
        };

        let faults = &link.cfg.faults;
        let lost = faults.down_during(t, arrival);
        let copy = copy.map(|a| (a, faults.down_during(t, a)));
        // The copy's bytes, taken before the original is handed on.
        let copy = copy.map(|(a, copy_lost)| {
            let c = match (&frame, copy_lost) {
                (_, true) => None,
                (&Frame::Borrowed(b), false) => Some(Frame::Borrowed(b)),
                (Frame::Owned(v), false) => {
                    let mut c = self.take_buf();
                    c.extend_from_slice(v);
                    Some(Frame::Owned(c))
                }
            };
            (a, c)
        });
        if lost {
            self.links[li].stats.dropped_link_down += 1;
            self.recycle(frame);
        } else {
            self.schedule_frame(arrival, frame, li, src, hold == 0);
        }
        match copy {
            Some((a, Some(c))) => self.schedule_frame(a, c, li, src, true),
            Some((_, None)) => self.links[li].stats.dropped_link_down += 1,
            None => {}
        }
    }

    /// The node that has unicast LID `lid` (InfiniBand fabric).
    #[inline]
    fn lid_node(&self, lid: u16) -> Option<u32> {
        self.lids
            .get(usize::from(lid))
            .copied()
            .filter(|&n| n != NO_NODE)
    }

    /// A frame from node `src` has fully arrived at the switch.
    #[inline(always)]
    fn forward(&mut self, src: u32, frame: Frame<'_>, node_count: u32) {
        if self.native {
            self.forward_native(src, frame, node_count);
            return;
        }
        let b = frame.bytes();
        if b.len() < 14 {
            self.totals.switch.malformed += 1;
            self.recycle(frame);
            return;
        }
        let t = self.now.saturating_add(self.switch_latency_ns);
        if b[0] & 1 == 1 {
            // Broadcast / multicast: a copy to every other node.
            self.totals.switch.flooded += 1;
            for d in (0..node_count).filter(|&d| d != src) {
                self.enqueue(
                    link_index(d, Direction::Down),
                    t,
                    Frame::Borrowed(frame.bytes()),
                    src,
                );
            }
            self.recycle(frame);
            return;
        }
        match self.lookup(&b[..6]) {
            Some(d) => {
                self.totals.switch.forwarded += 1;
                self.enqueue(link_index(d, Direction::Down), t, frame, src);
            }
            None => {
                self.totals.switch.unknown_dst += 1;
                self.recycle(frame);
            }
        }
    }

    /// A native IB packet from node `src` has fully arrived at the switch: forwarded by DLID
    /// (see the module docs).
    fn forward_native(&mut self, src: u32, frame: Frame<'_>, node_count: u32) {
        let Some(dlid) = dlid_of(frame.bytes()).filter(|_| frame.bytes().len() >= 8) else {
            self.totals.switch.malformed += 1;
            self.recycle(frame);
            return;
        };
        let t = self.now.saturating_add(self.switch_latency_ns);
        if dlid == PERMISSIVE_LID {
            self.totals.switch.permissive += 1;
            self.recycle(frame);
            return;
        }
        if dlid >= MULTICAST_LID {
            self.totals.switch.flooded += 1;
            for d in (0..node_count).filter(|&d| d != src) {
                self.enqueue(
                    link_index(d, Direction::Down),
                    t,
                    Frame::Borrowed(frame.bytes()),
                    src,
                );
            }
            self.recycle(frame);
            return;
        }
        match self.lid_node(dlid) {
            Some(d) => {
                self.totals.switch.forwarded += 1;
                self.enqueue(link_index(d, Direction::Down), t, frame, src);
            }
            None => {
                self.totals.switch.unknown_dst += 1;
                self.recycle(frame);
            }
        }
    }
}

/// A star network: every node has one port cabled to a single non-blocking switch that forwards
/// by destination MAC address. The fabric owns the endpoints; see the [crate docs](crate) for
/// an example.
pub struct Fabric<E> {
    nodes: Vec<Node<E>>,
    net: Net,
    /// Scratch list swapped with `net.dirty` while servicing.
    dirty_scratch: Vec<u32>,
    /// The buffer endpoints write their frames into.
    tx: Vec<u8>,
}

impl<E: Endpoint> Fabric<E> {
    /// An empty Ethernet fabric whose random faults all derive from `seed`.
    pub fn new(seed: u64) -> Self {
        Fabric::with_link_layer(seed, LinkLayer::Ethernet)
    }

    /// An empty fabric of the given link layer (nodes join an InfiniBand fabric with
    /// [`Fabric::add_ib_node`]).
    pub fn with_link_layer(seed: u64, link_layer: LinkLayer) -> Self {
        Fabric {
            nodes: Vec::new(),
            net: Net {
                now: 0,
                seq: 0,
                heap: EventHeap::default(),
                slots: Vec::new(),
                free_slots: Vec::new(),
                free_bufs: Vec::new(),
                links: Vec::new(),
                macs: Vec::new(),
                last_lookup: (u64::MAX, 0),
                rules: Vec::new(),
                switch_latency_ns: 0,
                in_flight: 0,
                events: 0,
                trace: Some(TraceHash::default()),
                totals: Totals::default(),
                pcap: None,
                dirty: Vec::new(),
                seed,
                bufs_created: 0,
                chunks: ChunkPool::default(),
                native: link_layer == LinkLayer::InfiniBand,
                lids: Vec::new(),
            },
            dirty_scratch: Vec::new(),
            tx: Vec::new(),
        }
    }

    /// What the links carry.
    pub fn link_layer(&self) -> LinkLayer {
        if self.net.native {
            LinkLayer::InfiniBand
        } else {
            LinkLayer::Ethernet
        }
    }

    /// Attaches `endpoint` to an InfiniBand fabric as the port with LIDs `base_lid ..
    /// base_lid + 2^lmc`, both link directions configured as `link`. The node has no MAC
    /// address ([`Fabric::mac`] reads all zeros).
    ///
    /// # Panics
    /// If the fabric is not InfiniBand, `lmc` is above 7, the range holds LID 0, reaches the
    /// multicast LIDs, is not aligned to 2^LMC, or overlaps another node's.
    pub fn add_ib_node(&mut self, endpoint: E, base_lid: u16, lmc: u8, link: LinkConfig) -> NodeId {
        self.add_ib_node_with(endpoint, base_lid, lmc, link.clone(), link)
    }

    /// As [`Fabric::add_ib_node`] with separate configurations for the up and down directions.
    ///
    /// # Panics
    /// As [`Fabric::add_ib_node`].
    pub fn add_ib_node_with(
        &mut self,
        endpoint: E,
        base_lid: u16,
        lmc: u8,
        up: LinkConfig,
        down: LinkConfig,
    ) -> NodeId {
        assert!(self.net.native, "add_ib_node needs an InfiniBand fabric");
        assert!(lmc <= 7, "LMC {lmc} is above 7");
        let count = 1usize << lmc;
        let base = usize::from(base_lid);
        assert!(
            base != 0 && base % count == 0 && base + count <= usize::from(MULTICAST_LID),
            "LID range {base_lid:#x} + 2^{lmc} is not a unicast range aligned to 2^LMC"
        );
        if self.net.lids.is_empty() {
            self.net.lids = vec![NO_NODE; usize::from(MULTICAST_LID)];
        }
        assert!(
            self.net.lids[base..base + count]
                .iter()
                .all(|&n| n == NO_NODE),
            "LID range {base_lid:#x} + 2^{lmc} overlaps another node's"
        );
        let id = self.attach(endpoint, [0; 6], up, down);
        self.net.lids[base..base + count].fill(id.0);
        id
    }

    /// The seed given to [`Fabric::new`].
    pub fn seed(&self) -> u64 {
        self.net.seed
    }

    /// Attaches `endpoint` with MAC address `mac`, both link directions configured as `link`.
    /// The node is polled (transmits and timeout) at the next step.
    ///
    /// # Panics
    /// If another node already has `mac`, `mac` is a multicast / broadcast address, or the
    /// fabric is InfiniBand.
    pub fn add_node(&mut self, endpoint: E, mac: [u8; 6], link: LinkConfig) -> NodeId {
        self.add_node_with(endpoint, mac, link.clone(), link)
    }

    /// As [`Fabric::add_node`] with separate configurations for the node's up (node to switch)
    /// and down (switch to node) directions.
    ///
    /// # Panics
    /// If another node already has `mac`, or `mac` is a multicast / broadcast address.
    pub fn add_node_with(
        &mut self,
        endpoint: E,
        mac: [u8; 6],
        up: LinkConfig,
        down: LinkConfig,
    ) -> NodeId {
        assert!(
            !self.net.native,
            "an InfiniBand fabric takes nodes by LID (add_ib_node)"
        );
        assert!(mac[0] & 1 == 0, "node MAC {mac:02x?} is a group address");
        let key = mac_key(&mac);
        let pos = match self.net.macs.binary_search_by_key(&key, |&(m, _)| m) {
            Ok(_) => panic!("two nodes with MAC {mac:02x?}"),
            Err(pos) => pos,
        };
        let id = u32::try_from(self.nodes.len()).expect("too many nodes");
        self.net.macs.insert(pos, (key, id));
        self.attach(endpoint, mac, up, down)
    }

    /// Adds the node's links and the node itself (addressing already registered).
    fn attach(&mut self, endpoint: E, mac: [u8; 6], up: LinkConfig, down: LinkConfig) -> NodeId {
        let id = u32::try_from(self.nodes.len()).expect("too many nodes");
        for (dir, cfg) in [(Direction::Up, up), (Direction::Down, down)] {
            let stream = link_index(id, dir) as u64;
            self.net.links.push(Link {
                cfg,
                rng: Rng::stream(self.net.seed, stream),
                node: id,
                dir,
                busy_until: 0,
                last_arrival: 0,
                in_burst: false,
                stats: LinkStats::default(),
                queue: FrameQueue::default(),
                derived: Derived::STALE,
            });
        }
        self.nodes.push(Node {
            ep: endpoint,
            mac,
            want: None,
            armed: None,
            dirty: false,
        });
        self.kick(NodeId(id));
        NodeId(id)
    }

    /// Number of nodes.
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// The node's endpoint.
    pub fn node(&self, id: NodeId) -> &E {
        &self.nodes[id.index()].ep
    }

    /// The node's endpoint, for posting work or changing it; marks the node to be polled at
    /// the next step (as [`Fabric::kick`]).
    pub fn node_mut(&mut self, id: NodeId) -> &mut E {
        self.kick(id);
        &mut self.nodes[id.index()].ep
    }

    /// Two distinct nodes' endpoints at once; marks both to be polled.
    ///
    /// # Panics
    /// If `a == b`.
    pub fn node_pair_mut(&mut self, a: NodeId, b: NodeId) -> (&mut E, &mut E) {
        assert_ne!(a, b, "node_pair_mut needs two different nodes");
        self.kick(a);
        self.kick(b);
        let (i, j) = (a.index(), b.index());
        if i < j {
            let (x, y) = self.nodes.split_at_mut(j);
            (&mut x[i].ep, &mut y[0].ep)
        } else {
            let (x, y) = self.nodes.split_at_mut(i);
            (&mut y[0].ep, &mut x[j].ep)
        }
    }

    /// Every node with its id, in order.
    pub fn nodes(&self) -> impl Iterator<Item = (NodeId, &E)> + '_ {
        self.nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (NodeId(i as u32), &n.ep))
    }

    /// Gives the endpoints back, in node order.
    pub fn into_nodes(self) -> Vec<E> {
        self.nodes.into_iter().map(|n| n.ep).collect()
    }

    /// The node's MAC address.
    pub fn mac(&self, id: NodeId) -> [u8; 6] {
        self.nodes[id.index()].mac
    }

    /// The node that has `mac`, if any.
    pub fn node_by_mac(&self, mac: [u8; 6]) -> Option<NodeId> {
        self.net.find(&mac).map(|e| NodeId(e.1))
    }

    /// Marks the node to be polled for transmits and its timeout at the current time, before
    /// the next event runs. Call it after posting work to an endpoint reached by other means
    /// than [`Fabric::node_mut`].
    pub fn kick(&mut self, id: NodeId) {
        let n = &mut self.nodes[id.index()];
        if !n.dirty {
            n.dirty = true;
            self.net.dirty.push(id.0);
        }
    }

    /// The configuration of one direction of the node's link.
    pub fn link(&self, id: NodeId, dir: Direction) -> &LinkConfig {
        &self.net.links[link_index(id.0, dir)].cfg
    }

    /// Changes one direction of the node's link; frames already on it are not affected.
    pub fn link_mut(&mut self, id: NodeId, dir: Direction) -> &mut LinkConfig {
        let l = &mut self.net.links[link_index(id.0, dir)];
        l.derived = Derived::STALE;
        &mut l.cfg
    }

    /// The counters of one direction of the node's link.
    pub fn stats(&self, id: NodeId, dir: Direction) -> &LinkStats {
        &self.net.links[link_index(id.0, dir)].stats
    }

    /// Fabric-wide counters.
    pub fn totals(&self) -> Totals {
        let mut t = self.net.totals;
        t.links = LinkStats::default();
        for l in &self.net.links {
            t.links.accumulate(&l.stats);
        }
        t
    }

    /// Delay added by the switch between a frame's arrival on an up direction and its entry
    /// into the down direction (0 by default).
    pub fn set_switch_latency(&mut self, ns: u64) {
        self.net.switch_latency_ns = ns;
    }

    /// Adds a scripted rule (evaluated after the rules added before it).
    pub fn add_rule(&mut self, rule: Rule) -> RuleId {
        self.net.rules.push(RuleState {
            rule,
            stats: RuleStats::default(),
        });
        RuleId((self.net.rules.len() - 1) as u32)
    }

    /// How often the rule matched and acted.
    pub fn rule_stats(&self, id: RuleId) -> RuleStats {
        self.net.rules[id.0 as usize].stats
    }

    /// Starts capturing frames to `w` as a pcap file (virtual timestamps; link type Ethernet,
    /// or DLT_USER0 on an InfiniBand fabric). Replaces any previous capture (which is dropped
    /// unflushed: use [`Fabric::finish_pcap`]).
    pub fn capture_pcap(&mut self, w: Box<dyn Write>, what: Capture) -> io::Result<()> {
        let link_type = if self.net.native {
            LINKTYPE_USER0
        } else {
            LINKTYPE_ETHERNET
        };
        let w = PcapWriter::new(w, link_type)?;
        self.net.pcap = Some(PcapSink {
            w,
            sent: what == Capture::DeliveredAndSent,
            err: None,
        });
        Ok(())
    }

    /// Stops capturing: flushes and returns the writer, or the first write error the capture
    /// met. `Ok(None)` when there was no capture.
    pub fn finish_pcap(&mut self) -> io::Result<Option<Box<dyn Write>>> {
        match self.net.pcap.take() {
            None => Ok(None),
            Some(PcapSink { err: Some(e), .. }) => Err(e),
            Some(PcapSink { mut w, .. }) => {
                w.flush()?;
                Ok(Some(w.into_inner()))
            }
        }
    }

    /// Virtual time in ns.
    pub fn now(&self) -> u64 {
        self.net.now
    }

    /// Frames on the wire or in the switch.
    pub fn frames_in_flight(&self) -> usize {
        self.net.in_flight
    }

    /// Events run so far (frame arrivals, timeouts, and polls of kicked nodes).
    pub fn events_processed(&self) -> u64 {
        self.net.events
    }

    /// Frame storage the fabric has allocated so far: 64 KiB chunks of the link queues (about one
    /// per 64 KiB of short frames ever in flight at once, plus one per busy link direction) and
    /// buffers of frames that have one of their own (1 KiB or longer, held back, or corrupted).
    /// Storage is recycled, so this stops growing once a run has reached its largest number of
    /// frames in flight.
    pub fn buffers_created(&self) -> u64 {
        self.net.bufs_created + self.net.chunks.created
    }

    /// The digest of every delivery so far (time, node, bytes); equal for two runs exactly when
    /// they delivered the same frames at the same times (see [`crate::hash`]). `None` once
    /// [`Fabric::without_trace_hash`] switched it off.
    pub fn trace_hash(&self) -> Option<u64> {
        self.net.trace.map(|t| t.value())
    }

    /// Stops computing the trace digest. The digest reads every byte of every delivered frame
    /// (about a tenth of the wall time of a bulk-data simulation); a run that never asks for
    /// [`Fabric::trace_hash`] can skip it. Nothing else changes: the run is as deterministic
    /// as before, only no longer fingerprinted.
    pub fn without_trace_hash(&mut self) {
        self.net.trace = None;
    }

    /// The time of the next event, if any.
    pub fn next_event_time(&mut self) -> Option<u64> {
        if !self.net.dirty.is_empty() {
            return Some(self.net.now);
        }
        self.peek_due().map(|ev| ev.time)
    }

    /// Runs the polls of kicked nodes and then the next event, if any. Returns false when there
    /// was nothing to do.
    pub fn step(&mut self) -> bool {
        let serviced = self.service_dirty();
        if let Some(ev) = self.peek_due() {
            self.process(ev);
            true
        } else {
            serviced
        }
    }

    /// Runs every event due at or before `t`, then sets the clock to `t` (if it is later).
    pub fn run_until(&mut self, t: u64) {
        self.run(t, u64::MAX, false);
        self.net.now = self.net.now.max(t);
    }

    /// Runs for `duration_ns` of virtual time from now.
    pub fn run_for(&mut self, duration_ns: u64) {
        self.run_until(self.net.now.saturating_add(duration_ns));
    }

    /// Runs until nothing is in flight and no endpoint timeout is due at or before `limit_ns`
    /// ([`RunOutcome::Idle`]; the clock stays at the last event), or until `limit_ns` comes with
    /// frames still in flight ([`RunOutcome::TimeLimit`]; the clock is then `limit_ns`).
    pub fn run_until_idle(&mut self, limit_ns: u64) -> RunOutcome {
        self.run(limit_ns, u64::MAX, true)
    }

    /// Runs until idle (as [`Fabric::run_until_idle`] with no time limit) or until
    /// `max_events` more events have run ([`RunOutcome::EventLimit`]). A guard for tests:
    /// endpoints that never settle make it return instead of spinning.
    pub fn drive_bounded(&mut self, max_events: u64) -> RunOutcome {
        self.run(u64::MAX, max_events, true)
    }

    fn run(&mut self, limit: u64, max_events: u64, stop_when_idle: bool) -> RunOutcome {
        let budget_end = self.net.events.saturating_add(max_events);
        loop {
            if self.net.events >= budget_end {
                return RunOutcome::EventLimit;
            }
            if self.service_dirty() {
                continue;
            }
            match self.peek_due() {
                Some(ev) if ev.time <= limit => {
                    self.process(ev);
                }
                next => {
                    if self.net.in_flight == 0 && stop_when_idle {
                        return RunOutcome::Idle;
                    }
                    if next.is_none() {
                        return RunOutcome::Idle;
                    }
                    self.net.now = self.net.now.max(limit);
                    return RunOutcome::TimeLimit;
                }
            }
        }
    }

    /// Polls every kicked node; true if there was any.
    fn service_dirty(&mut self) -> bool {
        if self.net.dirty.is_empty() {
            return false;
        }
        let mut list = std::mem::take(&mut self.dirty_scratch);
        std::mem::swap(&mut list, &mut self.net.dirty);
        for &i in &list {
            self.nodes[i as usize].dirty = false;
            self.net.events += 1;
            self.service(i);
        }
        list.clear();
        self.dirty_scratch = list;
        true
    }

    /// Drains the node's transmits and re-reads its timeout.
    fn service(&mut self, i: u32) {
        let now = self.net.now;
        let node = &mut self.nodes[i as usize];
        let mut sent = 0;
        loop {
            self.tx.clear();
            if !node.ep.poll_transmit(now, &mut self.tx) {
                break;
            }
            if self.tx.len() >= OWNED_MIN {
                // Handed on in this buffer; the endpoint writes its next frame into another.
                let fresh = self.net.take_buf();
                let frame = std::mem::replace(&mut self.tx, fresh);
                self.net.transmit(i, Frame::Owned(frame));
            } else {
                self.net.transmit(i, Frame::Borrowed(&self.tx));
            }
            sent += 1;
            if sent == MAX_TRANSMITS_PER_POLL {
                if !node.dirty {
                    node.dirty = true;
                    self.net.dirty.push(i);
                }
                break;
            }
        }
        if self.tx.capacity() > MAX_POOLED_CAPACITY {
            self.tx.clear();
            self.tx.shrink_to(MAX_POOLED_CAPACITY);
        }
        let want = node.ep.poll_timeout().map(|d| d.max(now));
        node.want = want;
        if let Some(w) = want {
            match node.armed {
                Some((at, _)) if at <= w => {} // re-filed when it comes up
                _ => {
                    let seq = self.net.schedule(w, EventKind::Timer, i);
                    node.armed = Some((w, seq));
                }
            }
        }
    }

    /// The time of the next live event, discarding stale timeouts and re-filing postponed ones.
    fn peek_due(&mut self) -> Option<Event> {
        loop {
            let top = *self.net.heap.peek()?;
            if top.kind == EventKind::Timer {
                let node = &mut self.nodes[top.idx as usize];
                if node.armed.map(|(_, s)| s) != Some(top.seq) {
                    self.net.heap.pop();
                    continue;
                }
                match node.want {
                    None => {
                        self.net.heap.pop();
                        node.armed = None;
                        continue;
                    }
                    Some(w) if w > top.time => {
                        self.net.heap.pop();
                        let seq = self.net.schedule(w, EventKind::Timer, top.idx);
                        self.nodes[top.idx as usize].armed = Some((w, seq));
                        continue;
                    }
                    Some(_) => {}
                }
            }
            return Some(top);
        }
    }

    /// Runs `ev`, the event at the top of the heap (which [`Fabric::peek_due`] has vetted).
    fn process(&mut self, ev: Event) {
        let net = &mut self.net;
        debug_assert_eq!(net.heap.peek(), Some(&ev));
        debug_assert!(ev.time >= net.now, "time went backwards");
        net.now = net.now.max(ev.time);
        net.events += 1;
        match ev.kind {
            EventKind::Timer => {
                net.heap.pop();
                let node = &mut self.nodes[ev.idx as usize];
                node.armed = None;
                node.want = None;
                node.ep.handle_timeout(net.now);
                self.service(ev.idx);
            }
            EventKind::Held => {
                net.heap.pop();
                let slot = net.take_slot(ev.idx);
                self.arrive(slot.link as usize, slot.src, Frame::Owned(slot.buf));
            }
            EventKind::Link => {
                let li = ev.idx as usize;
                let q = &mut net.links[li].queue;
                let Some((p, taken)) = q.pop(&mut net.chunks) else {
                    unreachable!("a link event without a queued frame")
                };
                debug_assert!(p.time == ev.time && p.seq == ev.seq);
                // The queue's next frame takes the event's place.
                match q.front() {
                    Some(next) => net.heap.replace_top(Event {
                        time: next.time,
                        seq: next.seq,
                        ..ev
                    }),
                    None => {
                        net.heap.pop();
                    }
                }
                net.in_flight -= 1;
                match taken {
                    Taken::Inline { off, len } => {
                        // Arriving frames are only ever enqueued on other link directions, so
                        // the chunk can be lent out while the frame is handled.
                        let chunk = q.take_chunk();
                        self.arrive(li, p.src, Frame::Borrowed(&chunk[off..off + len]));
                        self.net.links[li].queue.return_chunk(chunk);
                    }
                    Taken::Boxed(buf) => self.arrive(li, p.src, Frame::Owned(buf)),
                }
            }
        }
    }

    /// A frame sent by `src` reaches the far end of link direction `link` at the current time.
    fn arrive(&mut self, link: usize, src: u32, frame: Frame<'_>) {
        let net = &mut self.net;
        let l = &mut net.links[link];
        let n = frame.bytes().len();
        l.stats.delivered_frames += 1;
        l.stats.delivered_bytes += n as u64;
        match l.dir {
            Direction::Up => {
                let count = self.nodes.len() as u32;
                net.forward(src, frame, count);
            }
            Direction::Down => {
                let dst = l.node;
                let now = net.now;
                let b = frame.bytes();
                net.totals.delivered_frames += 1;
                net.totals.delivered_bytes += n as u64;
                if let Some(t) = net.trace.as_mut() {
                    t.record(now, dst, b);
                }
                if let Some(p) = net.pcap.as_mut() {
                    p.record(now, b);
                }
                self.nodes[dst as usize].ep.handle_frame(now, b);
                self.net.recycle(frame);
                self.service(dst);
            }
        }
    }
}

impl<E> std::fmt::Debug for Fabric<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fabric")
            .field("seed", &self.net.seed)
            .field("now", &self.net.now)
            .field("nodes", &self.nodes.len())
            .field("in_flight", &self.net.in_flight)
            .field("events", &self.net.events)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::faults::Faults;
    use softib_wire::pcap::PcapReader;
    use std::cell::RefCell;
    use std::rc::Rc;

    const GBPS10: u64 = 10_000_000_000;

    fn mac(n: u8) -> [u8; 6] {
        [0x02, 0, 0, 0, 0, n]
    }

    /// A raw frame of `len` bytes to `dst` whose payload starts with `tag`.
    fn raw_frame(dst: [u8; 6], src: [u8; 6], len: usize, tag: u8) -> Vec<u8> {
        let mut f = vec![0u8; len];
        f[..6].copy_from_slice(&dst);
        f[6..12].copy_from_slice(&src);
        f[12] = 0x88;
        f[13] = 0xB5; // local experimental EtherType
        if len > 14 {
            f[14] = tag;
        }
        f
    }

    /// Sends scripted frames at scripted times; records what it receives and when its
    /// timeouts fire.
    #[derive(Default)]
    struct Script {
        /// (send time, frame), sorted by time.
        sends: Vec<(u64, Vec<u8>)>,
        next: usize,
        /// Deadlines to report, in order; each is dropped once it has fired.
        timers: Vec<u64>,
        got: Vec<(u64, Vec<u8>)>,
        fired: Vec<u64>,
    }

    impl Endpoint for Script {
        fn handle_frame(&mut self, now_ns: u64, frame: &[u8]) {
            self.got.push((now_ns, frame.to_vec()));
        }
        fn poll_transmit(&mut self, now_ns: u64, out: &mut Vec<u8>) -> bool {
            match self.sends.get(self.next) {
                Some((t, f)) if *t <= now_ns => {
                    assert!(out.is_empty(), "out not cleared");
                    out.extend_from_slice(f);
                    self.next += 1;
                    true
                }
                _ => false,
            }
        }
        fn poll_timeout(&self) -> Option<u64> {
            let send = self.sends.get(self.next).map(|s| s.0);
            let timer = self.timers.first().copied();
            match (send, timer) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            }
        }
        fn handle_timeout(&mut self, now_ns: u64) {
            if self.timers.first().is_some_and(|&t| t <= now_ns) {
                self.timers.remove(0);
                self.fired.push(now_ns);
            }
        }
    }

    fn pair(up: LinkConfig, down: LinkConfig) -> (Fabric<Script>, NodeId, NodeId) {
        let mut f = Fabric::new(1);
        let a = f.add_node_with(Script::default(), mac(1), up.clone(), down.clone());
        let b = f.add_node_with(Script::default(), mac(2), up, down);
        (f, a, b)
    }

    #[test]
    fn latency_and_serialisation_are_exact() {
        let cfg = LinkConfig::new(1_000, GBPS10).with_mtu(1500);
        let (mut f, a, b) = pair(cfg.clone(), cfg);
        f.node_mut(a).sends = vec![
            (0, raw_frame(mac(2), mac(1), 1500, 1)),
            (0, raw_frame(mac(2), mac(1), 1500, 2)),
            (10_000, raw_frame(mac(2), mac(1), 1500, 3)),
        ];
        assert_eq!(f.run_until_idle(u64::MAX), RunOutcome::Idle);
        let times: Vec<u64> = f.node(b).got.iter().map(|g| g.0).collect();
        // Frame 1: 1200 (serialise) + 1000 (wire) to the switch, again to B.
        // Frame 2 waits 1200 ns for the up transmitter, then follows frame 1 back to back.
        // Frame 3 finds idle links.
        assert_eq!(times, [4_400, 5_600, 14_400]);
        assert_eq!(f.node(b).got[1].1[14], 2);
        assert_eq!(f.stats(a, Direction::Up).max_queue_delay_ns, 1_200);
        assert_eq!(f.stats(b, Direction::Down).max_queue_delay_ns, 0);
        assert_eq!(f.now(), 14_400);

        // With a switch latency and a slower down direction towards B.
        let mut f = Fabric::new(1);
        let a = f.add_node(Script::default(), mac(1), LinkConfig::new(1_000, GBPS10));
        let b = f.add_node_with(
            Script::default(),
            mac(2),
            LinkConfig::ideal(),
            LinkConfig::new(250, 1_000_000_000),
        );
        f.set_switch_latency(300);
        f.node_mut(a).sends = vec![
            (0, raw_frame(mac(2), mac(1), 1000, 1)),
            (0, raw_frame(mac(2), mac(1), 1000, 2)),
        ];
        f.run_until_idle(u64::MAX);
        let times: Vec<u64> = f.node(b).got.iter().map(|g| g.0).collect();
        // Up: 800 + 1000 (and the second 800 later); switch 300; down: 8000 + 250, queued.
        assert_eq!(times, [2_100 + 8_000 + 250, 2_100 + 16_000 + 250]);
        assert_eq!(f.stats(b, Direction::Down).max_queue_delay_ns, 8_000 - 800);
    }

    #[test]
    fn mtu_unknown_destination_and_broadcast() {
        let cfg = LinkConfig::ideal().with_mtu(1500);
        let mut f = Fabric::new(3);
        let a = f.add_node(Script::default(), mac(1), cfg.clone());
        let b = f.add_node(Script::default(), mac(2), cfg.clone());
        let c = f.add_node(Script::default(), mac(3), cfg);
        let mut tagged = raw_frame(mac(2), mac(1), 1518, 4);
        tagged[12] = 0x81;
        tagged[13] = 0x00;
        f.node_mut(a).sends = vec![
            (0, raw_frame(mac(2), mac(1), 1514, 1)),
            (0, raw_frame(mac(2), mac(1), 1515, 2)),
            (0, raw_frame(mac(9), mac(1), 100, 3)),
            (0, tagged),
            (0, raw_frame([0xFF; 6], mac(1), 60, 5)),
            (0, vec![1, 2, 3]),
        ];
        f.run_until_idle(u64::MAX);
        let tags = |id| -> Vec<u8> { f.node(id).got.iter().map(|g| g.1[14]).collect() };
        assert_eq!(tags(b), [1, 4, 5]);
        assert_eq!(tags(c), [5]);
        assert!(
            f.node(a).got.is_empty(),
            "no echo of a broadcast to its sender"
        );
        assert_eq!(f.stats(a, Direction::Up).dropped_mtu, 1);
        let t = f.totals();
        assert_eq!(t.switch.unknown_dst, 1);
        assert_eq!(t.switch.flooded, 1);
        assert_eq!(t.switch.forwarded, 2);
        assert_eq!(t.switch.malformed, 1);
        assert_eq!(t.transmitted_frames, 6);
        assert_eq!(t.delivered_frames, 4);
        assert_eq!(f.node_by_mac(mac(3)), Some(c));
        assert_eq!(f.node_by_mac(mac(4)), None);
    }

    #[test]
    fn timeouts_fire_at_their_deadline_and_can_move() {
        let mut f = Fabric::new(0);
        let a = f.add_node(Script::default(), mac(1), LinkConfig::ideal());
        f.node_mut(a).timers = vec![12_345];
        assert_eq!(f.run_until_idle(10_000), RunOutcome::Idle);
        assert!(f.node(a).fired.is_empty());
        assert_eq!(f.run_until_idle(u64::MAX), RunOutcome::Idle);
        assert_eq!(f.node(a).fired, [12_345]);
        assert_eq!(f.now(), 12_345);

        // Postponed: the old heap entry is re-filed, the timeout fires once, late.
        f.node_mut(a).timers = vec![20_000];
        f.run_until(f.now());
        f.node_mut(a).timers = vec![30_000];
        f.run_until(25_000);
        assert_eq!(f.node(a).fired, [12_345]);
        assert_eq!(f.now(), 25_000);
        // Brought forward.
        f.node_mut(a).timers = vec![26_000];
        f.run_until_idle(u64::MAX);
        assert_eq!(f.node(a).fired, [12_345, 26_000]);
        // Cancelled.
        f.node_mut(a).timers = vec![40_000];
        f.run_until(f.now());
        f.node_mut(a).timers.clear();
        assert_eq!(f.run_until_idle(u64::MAX), RunOutcome::Idle);
        assert_eq!(f.node(a).fired, [12_345, 26_000]);
        assert_eq!(f.now(), 26_000);
        // A deadline in the past fires at once.
        f.node_mut(a).timers = vec![5];
        f.run_until_idle(u64::MAX);
        assert_eq!(f.node(a).fired, [12_345, 26_000, 26_000]);
    }

    #[test]
    fn run_outcomes() {
        let cfg = LinkConfig::new(1_000_000, 0);
        let (mut f, a, b) = pair(cfg.clone(), cfg);
        f.node_mut(a).sends = vec![(0, raw_frame(mac(2), mac(1), 64, 1))];
        assert_eq!(f.run_until_idle(500_000), RunOutcome::TimeLimit);
        assert_eq!(f.now(), 500_000);
        assert_eq!(f.frames_in_flight(), 1);
        f.run_until(1_999_999);
        assert!(f.node(b).got.is_empty());
        f.run_until(2_000_000);
        assert_eq!(f.node(b).got.len(), 1);
        assert_eq!(f.frames_in_flight(), 0);
        assert_eq!(f.run_until_idle(u64::MAX), RunOutcome::Idle);
        assert!(!f.step(), "nothing left to do");
        f.run_for(5);
        assert_eq!(f.now(), 2_000_005);
    }

    /// Asks for a timeout that is always due: never idle.
    struct Spinner(u64);
    impl Endpoint for Spinner {
        fn handle_frame(&mut self, _: u64, _: &[u8]) {}
        fn poll_transmit(&mut self, _: u64, _: &mut Vec<u8>) -> bool {
            false
        }
        fn poll_timeout(&self) -> Option<u64> {
            Some(0)
        }
        fn handle_timeout(&mut self, _: u64) {
            self.0 += 1;
        }
    }

    /// Always has another frame.
    struct Flooder(u64);
    impl Endpoint for Flooder {
        fn handle_frame(&mut self, _: u64, _: &[u8]) {}
        fn poll_transmit(&mut self, _: u64, out: &mut Vec<u8>) -> bool {
            self.0 += 1;
            out.extend_from_slice(&[0u8; 14]);
            true
        }
        fn poll_timeout(&self) -> Option<u64> {
            None
        }
        fn handle_timeout(&mut self, _: u64) {}
    }

    #[test]
    fn drive_bounded_stops_runaway_endpoints() {
        let mut f = Fabric::new(0);
        let n = f.add_node(Spinner(0), mac(1), LinkConfig::ideal());
        assert_eq!(f.drive_bounded(1_000), RunOutcome::EventLimit);
        assert!(f.node(n).0 >= 998);
        assert_eq!(f.now(), 0);

        let mut f = Fabric::new(0);
        let n = f.add_node(Flooder(0), mac(1), LinkConfig::ideal().with_mtu(0));
        assert_eq!(f.drive_bounded(3), RunOutcome::EventLimit);
        assert_eq!(f.node(n).0, 3 * MAX_TRANSMITS_PER_POLL as u64);
        assert_eq!(f.stats(n, Direction::Up).sent_frames, f.node(n).0);
    }

    #[derive(Clone, Default)]
    struct SharedBuf(Rc<RefCell<Vec<u8>>>);
    impl Write for SharedBuf {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.0.borrow_mut().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn pcap_capture() {
        for (what, records) in [(Capture::Delivered, 2), (Capture::DeliveredAndSent, 4)] {
            let cfg = LinkConfig::new(1_500_000, 0);
            let (mut f, a, _) = pair(cfg.clone(), cfg);
            let out = SharedBuf::default();
            f.capture_pcap(Box::new(out.clone()), what).unwrap();
            f.node_mut(a).sends = vec![
                (0, raw_frame(mac(2), mac(1), 100, 1)),
                (2_000_000_000, raw_frame(mac(2), mac(1), 60, 2)),
            ];
            f.run_until_idle(u64::MAX);
            assert!(f.finish_pcap().unwrap().is_some());
            assert!(f.finish_pcap().unwrap().is_none());
            let bytes = out.0.borrow();
            let r = PcapReader::new(&bytes).unwrap();
            assert_eq!(r.link_type(), LINKTYPE_ETHERNET);
            let recs: Vec<_> = r.records().map(|r| r.unwrap()).collect();
            assert_eq!(recs.len(), records);
            let delivered: Vec<_> = recs
                .iter()
                .filter(|r| r.timestamp_ns() % 1_000_000_000 != 0)
                .collect();
            assert_eq!(delivered.len(), 2);
            assert_eq!(delivered[0].timestamp_ns(), 3_000_000);
            assert_eq!(delivered[0].data, &raw_frame(mac(2), mac(1), 100, 1)[..]);
            assert_eq!(delivered[1].timestamp_ns(), 2_003_000_000);
        }
    }

    #[test]
    fn conservation_with_faults_on_both_hops() {
        let faults = Faults {
            loss: 0.1,
            dup: 0.1,
            reorder: 0.1,
            reorder_delay_ns: 5_000,
            corrupt: 0.1,
            jitter_ns: 300,
            down: vec![(50_000, 60_000)],
            ..Faults::none()
        };
        let cfg = LinkConfig::new(500, GBPS10).with_faults(faults);
        let (mut f, a, b) = pair(cfg.clone(), cfg);
        f.node_mut(a).sends = (0..2_000u64)
            .map(|i| (i * 100, raw_frame(mac(2), mac(1), 200, i as u8)))
            .collect();
        f.node_mut(b).sends = (0..2_000u64)
            .map(|i| (i * 77, raw_frame(mac(1), mac(2), 300, i as u8)))
            .collect();
        assert_eq!(f.run_until_idle(u64::MAX), RunOutcome::Idle);
        for n in [a, b] {
            for d in [Direction::Up, Direction::Down] {
                let s = f.stats(n, d);
                assert_eq!(
                    s.sent_frames + s.duplicated,
                    s.delivered_frames + s.dropped()
                );
                assert!(s.dropped_loss > 0 && s.duplicated > 0 && s.reordered > 0);
                assert!(s.corrupted > 0 && s.dropped_link_down > 0);
            }
            let up = f.stats(n, Direction::Up);
            assert_eq!(up.sent_frames, 2_000);
        }
        let t = f.totals();
        assert_eq!(
            t.delivered_frames,
            (f.node(a).got.len() + f.node(b).got.len()) as u64
        );
        assert_eq!(
            t.links.delivered_frames,
            t.delivered_frames
                + f.stats(a, Direction::Up).delivered_frames
                + f.stats(b, Direction::Up).delivered_frames
        );
    }

    #[test]
    fn buffers_are_recycled() {
        let cfg = LinkConfig::new(1_000, GBPS10);
        let (mut f, a, b) = pair(cfg.clone(), cfg);
        let burst = |start: u64| -> Vec<(u64, Vec<u8>)> {
            (0..1_000u64)
                .map(|i| (start + i * 2_000, raw_frame(mac(2), mac(1), 1_000, 0)))
                .collect()
        };
        f.node_mut(a).sends = burst(0);
        f.run_until_idle(u64::MAX);
        let warm = f.buffers_created();
        // One frame in flight at a time (2 µs apart, 3.6 µs end to end: at most two), plus the
        // buffers the polls of both nodes take.
        assert!(warm <= 4, "{warm}");
        let t = f.now();
        f.node_mut(a).sends = burst(t + 1);
        f.node_mut(a).next = 0;
        f.run_until_idle(u64::MAX);
        assert_eq!(f.node(b).got.len(), 2_000);
        assert_eq!(f.buffers_created(), warm);
    }

    #[test]
    fn node_pair_mut_and_iteration() {
        let (mut f, a, b) = pair(LinkConfig::ideal(), LinkConfig::ideal());
        {
            let (x, y) = f.node_pair_mut(b, a);
            x.timers = vec![7];
            y.timers = vec![9];
        }
        f.run_until_idle(u64::MAX);
        assert_eq!(f.node(a).fired, [9]);
        assert_eq!(f.node(b).fired, [7]);
        assert_eq!(f.nodes().map(|(id, _)| id).collect::<Vec<_>>(), [a, b]);
        assert_eq!(f.mac(b), mac(2));
        assert_eq!(f.into_nodes().len(), 2);
    }

    #[test]
    #[should_panic(expected = "two nodes with MAC")]
    fn duplicate_mac_panics() {
        let (mut f, _, _) = pair(LinkConfig::ideal(), LinkConfig::ideal());
        f.add_node(Script::default(), mac(2), LinkConfig::ideal());
    }
}
