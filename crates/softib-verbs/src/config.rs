//! Which softib devices a process sees, and where each one binds: the list itself
//! (`SOFTIB_BIND`, or a `devices.conf`, or one "auto" device `softib0`) is read by
//! `softib_config`, which the preload library of `softib run` shares; the settings below are
//! the library's own.
//!
//! "auto" (the default) is how two unmodified processes on one machine work with no
//! configuration at all: each opened device binds UDP port 4791 on the first address of
//! 127.0.0.1 ... 127.0.0.254 that no other process holds, so every process (and every context
//! of one process) gets its own RoCEv2 GID. Peers on one host reach each other through those
//! GIDs exactly as hosts on a network do. On a host whose kernel rxe driver is loaded (it holds
//! port 4791 on every address), "auto" devices use port 4792 instead, and reach each other
//! there.
//!
//! Other settings: `SOFTIB_PCAP=PATH` writes every frame of every context to
//! `PATH.<pid>.<n>.pcap`; `SOFTIB_MTU=256..4096` caps the port's active MTU (otherwise it is
//! the largest IB MTU the bound interface's MTU allows, as rxe does); `SOFTIB_WINDOW=N` sets
//! the requester's PSN window (default [`DEFAULT_WINDOW`], as the CLI tools).
//! `SOFTIB_TRANSPORT=auto|udp|shm` chooses the path to softib peers on the same host (shared
//! memory when both ends offer it, by default; see softib-udp's `shm`).
//! `SOFTIB_PEER_VIA=PEER=VIA[,PEER=VIA...]` sends what is for the peer at address PEER to the
//! UDP address VIA instead (a relay such as `softib relay`), and takes what comes from VIA as
//! sent by PEER.
//! The connection manager (librdmacm): `SOFTIB_CM_RESPONSE_TIMEOUT=0..31` (the exponent t of
//! 4.096 us * 2^t, default 20) and `SOFTIB_CM_RETRIES=0..15` (default 15) set how long a
//! request waits for its answer and how often it is resent; `SOFTIB_CM_DEBUG` traces the CM's
//! events on stderr.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use softib_wire::udp::ROCEV2_PORT;

pub use softib_config::{devices, parse_bind, DeviceSpec};

/// First loopback address an "auto" device tries.
pub const FIRST_LOOPBACK: u8 = 1;
/// Last loopback address an "auto" device tries.
pub const LAST_LOOPBACK: u8 = 254;

/// The loopback address `n` (127.0.0.n) on the RoCEv2 port.
pub fn loopback(n: u8) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::new(127, 0, 0, n)), ROCEV2_PORT)
}

/// The port "auto" devices use when the RoCEv2 port is taken on every loopback address: a
/// socket bound to 4791 on the wildcard address holds it, as the kernel's rxe driver does
/// while loaded. All of them then use this one, and reach each other there.
pub const FALLBACK_PORT: u16 = ROCEV2_PORT + 1;

/// The requester PSN window (packets in flight per QP) of a device, as `softib bench`'s
/// default: rxe's 128 limits a 64-byte message stream to 128 messages per round trip.
pub const DEFAULT_WINDOW: u32 = 512;

/// `SOFTIB_WINDOW`, or [`DEFAULT_WINDOW`].
pub fn window() -> u32 {
    std::env::var("SOFTIB_WINDOW")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&w| (1..=(1 << 23)).contains(&w))
        .unwrap_or(DEFAULT_WINDOW)
}

/// `SOFTIB_PEER_VIA`: (peer address, relay address) pairs; entries that do not parse are
/// skipped.
pub fn peer_via() -> Vec<(IpAddr, SocketAddr)> {
    std::env::var("SOFTIB_PEER_VIA")
        .map(|v| parse_peer_via(&v))
        .unwrap_or_default()
}

/// Parses `PEER=VIA[,PEER=VIA...]`.
pub fn parse_peer_via(v: &str) -> Vec<(IpAddr, SocketAddr)> {
    v.split(',')
        .filter_map(|e| {
            let (p, via) = e.split_once('=')?;
            Some((p.trim().parse().ok()?, parse_bind(via)?))
        })
        .collect()
}

/// `SOFTIB_TRANSPORT=auto|udp|shm`: the path to same-host softib peers (default auto:
/// shared memory to a peer that offers it, UDP otherwise).
pub fn transport() -> softib_udp::Transport {
    std::env::var("SOFTIB_TRANSPORT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_default()
}

/// `SOFTIB_CLOCK=auto|precise|coarse`: the clock the device reads (default auto: the coarse
/// one where the precise one is slow to read, as in a VM whose clock source is emulated).
pub fn clock() -> softib_udp::ClockChoice {
    std::env::var("SOFTIB_CLOCK")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_default()
}

/// `SOFTIB_PCAP`, if set.
pub fn pcap_base() -> Option<String> {
    std::env::var("SOFTIB_PCAP").ok().filter(|s| !s.is_empty())
}

/// `SOFTIB_MTU`, if set to a valid IB MTU.
pub fn mtu_cap() -> Option<u32> {
    std::env::var("SOFTIB_MTU")
        .ok()?
        .parse()
        .ok()
        .filter(|m| [256, 512, 1024, 2048, 4096].contains(m))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peer_via_forms() {
        assert_eq!(
            parse_peer_via("127.0.0.1=127.0.0.3:4791, 10.0.0.2=10.0.0.9,bad,x=y"),
            vec![
                (
                    "127.0.0.1".parse().unwrap(),
                    "127.0.0.3:4791".parse().unwrap()
                ),
                (
                    "10.0.0.2".parse().unwrap(),
                    "10.0.0.9:4791".parse().unwrap()
                ),
            ]
        );
    }
}
