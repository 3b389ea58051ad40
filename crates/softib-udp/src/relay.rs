//! A lossy UDP relay for tests: two sockets, each facing one peer; every datagram received on
//! one side is forwarded from the other side's socket to the other peer, unless the seeded
//! generator drops it or holds it back behind the next datagram (reordering).
//!
//! Wiring for two devices A and B (each bound to port 4791 on its own loopback address):
//! the relay binds `side_a` (facing A) and `side_b` (facing B); A routes B's address via
//! `side_a` ([`crate::Device::add_route`]) and B routes A's address via `side_b`. All four
//! sockets use the same port, so the UDP source port each device sees is the one its peer
//! sent from, and the ICRC of every relayed packet still verifies.
//!
//! With shared memory ([`Relay::bind_shm`]) each side also has an inbox
//! ([`crate::shm`]): devices that find it send their datagrams there, and the relay forwards
//! into the peer's inbox when it has one, so the same faults apply to the same-host path.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Loss and reordering of a [`Relay`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RelayConfig {
    /// Probability that a datagram is dropped.
    pub loss: f64,
    /// Probability that a datagram is held back and sent after the next one in the same
    /// direction.
    pub reorder: f64,
    /// Seed of the generator.
    pub seed: u64,
}

/// Counters of a relay.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RelayStats {
    /// Datagrams received.
    pub received: u64,
    /// Datagrams forwarded.
    pub forwarded: u64,
    /// Datagrams dropped on purpose.
    pub dropped: u64,
    /// Datagrams sent after a later one.
    pub reordered: u64,
}

/// Set by SIGTERM or SIGINT once [`stop_on_signals`] installed the handlers.
static SIGNALLED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop_signal(_: libc::c_int) {
    SIGNALLED.store(true, Ordering::Relaxed);
}

/// Makes SIGTERM and SIGINT stop [`Relay::run`] in an orderly way (its inboxes are removed),
/// for a relay process that is told to end rather than killed.
#[allow(unsafe_code)]
pub fn stop_on_signals() {
    for sig in [libc::SIGTERM, libc::SIGINT] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe {
            libc::signal(sig, on_stop_signal as *const () as libc::sighandler_t);
        }
    }
}

/// splitmix64: small, seedable, good enough to pick losses.
#[derive(Debug, Clone)]
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A two-sided lossy relay (see the module documentation).
pub struct Relay {
    sockets: [UdpSocket; 2],
    /// Peer of each side.
    peers: [SocketAddr; 2],
    cfg: RelayConfig,
    rng: Rng,
    /// A datagram held back per direction (index = receiving side).
    held: [Option<Vec<u8>>; 2],
    stats: RelayStats,
    /// Shared memory: each side's inbox, and each peer's inbox once found (looked for again
    /// at most every second while it is missing).
    inboxes: Option<[crate::shm::Inbox; 2]>,
    /// The inbox a side's peer takes datagrams for a member in (the member's slot, 0 for the
    /// address's own inbox).
    outboxes: [Option<(u8, crate::shm::Outbox)>; 2],
    next_look: [Instant; 2],
    /// Each side's bound address (the source of what it forwards).
    sides: [SocketAddr; 2],
}

impl std::fmt::Debug for Relay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Relay")
            .field("peers", &self.peers)
            .field("cfg", &self.cfg)
            .field("shm", &self.inboxes.is_some())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl Relay {
    /// Binds `side_a` (facing `peer_a`) and `side_b` (facing `peer_b`).
    pub fn bind(
        side_a: SocketAddr,
        peer_a: SocketAddr,
        side_b: SocketAddr,
        peer_b: SocketAddr,
        cfg: RelayConfig,
    ) -> io::Result<Relay> {
        let a = UdpSocket::bind(side_a)?;
        let b = UdpSocket::bind(side_b)?;
        a.set_nonblocking(true)?;
        b.set_nonblocking(true)?;
        let sides = [a.local_addr()?, b.local_addr()?];
        Ok(Relay {
            sockets: [a, b],
            peers: [peer_a, peer_b],
            cfg,
            rng: Rng(cfg.seed),
            held: [None, None],
            stats: RelayStats::default(),
            inboxes: None,
            outboxes: [None, None],
            next_look: [Instant::now(); 2],
            sides,
        })
    }

    /// [`Relay::bind`], with a shared-memory inbox on each side as well.
    pub fn bind_shm(
        side_a: SocketAddr,
        peer_a: SocketAddr,
        side_b: SocketAddr,
        peer_b: SocketAddr,
        cfg: RelayConfig,
    ) -> io::Result<Relay> {
        let mut r = Relay::bind(side_a, peer_a, side_b, peer_b, cfg)?;
        r.inboxes = Some([
            crate::shm::Inbox::create(side_a)?,
            crate::shm::Inbox::create(side_b)?,
        ]);
        Ok(r)
    }

    /// Counters so far.
    pub fn stats(&self) -> RelayStats {
        self.stats
    }

    /// Forwards datagrams until `stop` is set or `limit` has passed.
    pub fn run(&mut self, stop: &AtomicBool, limit: Duration) -> io::Result<RelayStats> {
        let start = Instant::now();
        let mut buf = vec![0u8; 65_536];
        while !stop.load(Ordering::Relaxed)
            && !SIGNALLED.load(Ordering::Relaxed)
            && start.elapsed() < limit
        {
            let mut moved = false;
            for side in 0..2 {
                loop {
                    let n = match self.sockets[side].recv_from(&mut buf) {
                        // An empty datagram is a doorbell (for the inbox), not data.
                        Ok((0, _)) => continue,
                        Ok((n, from)) if from == self.peers[side] => n,
                        Ok(_) => continue,
                        Err(e)
                            if matches!(
                                e.kind(),
                                io::ErrorKind::WouldBlock
                                    | io::ErrorKind::TimedOut
                                    | io::ErrorKind::Interrupted
                                    | io::ErrorKind::ConnectionRefused
                            ) =>
                        {
                            break
                        }
                        Err(e) => return Err(e),
                    };
                    moved = true;
                    self.forward(side, &buf[..n]);
                }
            }
            for side in 0..2 {
                while let Some(got) = self.inboxes.as_mut().and_then(|ib| ib[side].pop(&mut buf)) {
                    moved = true;
                    if let Some((from, n)) = got {
                        if from == self.peers[side] {
                            self.forward(side, &buf[..n]);
                        }
                    }
                }
            }
            if !moved {
                let wakers: Vec<_> = self
                    .inboxes
                    .iter()
                    .flatten()
                    .map(crate::shm::Inbox::waker)
                    .collect();
                if !wakers.iter().all(crate::shm::Waker::sleep_begin) {
                    wakers.iter().for_each(crate::shm::Waker::sleep_end);
                    continue;
                }
                // Sleep until either side has a datagram (at most 5 ms, to see `stop`).
                let ts = rustix::event::Timespec {
                    tv_sec: 0,
                    tv_nsec: 5_000_000,
                };
                let [a, b] = &self.sockets;
                let mut fds = [
                    rustix::event::PollFd::new(a, rustix::event::PollFlags::IN),
                    rustix::event::PollFd::new(b, rustix::event::PollFlags::IN),
                ];
                let r = rustix::event::poll(&mut fds, Some(&ts));
                wakers.iter().for_each(crate::shm::Waker::sleep_end);
                match r {
                    Ok(_) | Err(rustix::io::Errno::INTR) => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
        Ok(self.stats)
    }

    /// Sends `data` out of side `out` to its peer: into the peer's inbox when the relay has
    /// inboxes and the peer one (ringing its doorbell if it sleeps), else over UDP.
    fn send(&mut self, out: usize, data: &[u8]) -> bool {
        if self.inboxes.is_some() {
            // The peer may be a member of a host-wide device: the inbox of the member the
            // datagram is for.
            let member = crate::member_of(data);
            if self.outboxes[out]
                .as_ref()
                .is_some_and(|(m, _)| *m != member)
            {
                self.outboxes[out] = None;
                self.next_look[out] = Instant::now();
            }
            if self.outboxes[out].is_none() && Instant::now() >= self.next_look[out] {
                let peer = self.peers[out];
                self.outboxes[out] = (member != 0)
                    .then(|| crate::shm::Outbox::attach_member(peer, member))
                    .flatten()
                    .or_else(|| crate::shm::Outbox::attach(peer))
                    .map(|o| (member, o));
                self.next_look[out] = Instant::now() + Duration::from_secs(1);
            }
            if let Some((_, o)) = &self.outboxes[out] {
                match o.push(self.sides[out], data) {
                    crate::shm::Pushed::Queued => {
                        if o.peer_sleeping() {
                            let _ = self.sockets[out].send_to(&[], o.bell());
                        }
                        return true;
                    }
                    crate::shm::Pushed::Full => {
                        // Full, or its owner has gone (then forget it): UDP this time.
                        if !o.still_valid() {
                            self.outboxes[out] = None;
                        }
                    }
                }
            }
        }
        self.sockets[out].send_to(data, self.peers[out]).is_ok()
    }

    /// Applies loss / reordering to a datagram received on `side` and sends the survivors out
    /// of the other side.
    fn forward(&mut self, side: usize, data: &[u8]) {
        self.stats.received += 1;
        if self.rng.unit() < self.cfg.loss {
            self.stats.dropped += 1;
            return;
        }
        let out = 1 - side;
        if self.held[side].is_none() && self.rng.unit() < self.cfg.reorder {
            self.held[side] = Some(data.to_vec());
            self.stats.reordered += 1;
            return;
        }
        // Send errors (the peer not listening yet) are a loss like any other.
        if self.send(out, data) {
            self.stats.forwarded += 1;
        }
        if let Some(h) = self.held[side].take() {
            if self.send(out, &h) {
                self.stats.forwarded += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rng_is_seeded_and_uniform_enough() {
        let mut a = Rng(7);
        let mut b = Rng(7);
        let xs: Vec<u64> = (0..8).map(|_| a.next_u64()).collect();
        let ys: Vec<u64> = (0..8).map(|_| b.next_u64()).collect();
        assert_eq!(xs, ys);
        let mut r = Rng(1);
        let hits = (0..100_000).filter(|_| r.unit() < 0.01).count();
        assert!((800..1200).contains(&hits), "{hits}");
    }
}
