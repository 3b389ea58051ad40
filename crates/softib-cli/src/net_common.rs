//! Shared parts of the tools that run softib over real UDP (`devinfo`, `pingpong`, `bench`):
//! device options and the out-of-band exchange of the rdma-core pingpong examples.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::path::PathBuf;

use clap::Args;
use softib_core::setup::EndpointInfo;
use softib_core::verbs::types::{Gid, Mtu};
use softib_udp::{Device, DeviceConfig, IcrcPolicy, PollMode};
use softib_wire::{Psn, Qpn};

pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// Options of the soft RoCEv2 device every network tool opens.
#[derive(Args, Debug, Clone)]
pub struct DeviceArgs {
    /// Local address of the RoCEv2 socket: `IP` (port 4791) or `IP:PORT`. Its GID (the
    /// IPv4-mapped form for IPv4) is GID index 0.
    #[arg(long, default_value = "127.0.0.1")]
    pub bind: String,
    /// Write every RoCEv2 frame sent and received (Ethernet, as the simulator writes them)
    /// to this pcap file.
    #[arg(long)]
    pub pcap: Option<PathBuf>,
    /// Sleep in poll(2) while waiting instead of busy polling.
    #[arg(short = 'e', long)]
    pub events: bool,
    /// Accept IPv4 packets without checking their ICRC (an opt-out for debugging a peer with
    /// wrong ICRCs). Default: verify every ICRC; for IPv4, whose Identification a UDP socket
    /// cannot see, the Identification is solved from the ICRC (16 of its 32 bits remain a
    /// check), which covers Linux rxe peers too.
    #[arg(long)]
    pub no_ipv4_icrc_check: bool,
    /// Send batches with sendmmsg only (no UDP GSO).
    #[arg(long)]
    pub no_gso: bool,
    /// Send the peer's datagrams to this socket address (a relay) instead of PEER_IP:4791,
    /// and take datagrams from it as the peer's.
    #[arg(long)]
    pub peer_via: Option<SocketAddr>,
    /// Requester PSN window: most packets in flight per QP (rxe: 128).
    #[arg(long, default_value_t = 512)]
    pub window: u32,
    /// Idle polls a busy poller yields the CPU for before it sleeps in poll(2) until a
    /// datagram arrives (at most 1 ms); 4294967295 never sleeps.
    #[arg(long, default_value_t = softib_udp::BUSY_YIELDS)]
    pub busy_yields: u32,
    /// Print the runtime's and the HCA's counters to stderr at the end.
    #[arg(long)]
    pub stats: bool,
    /// Path to same-host softib peers: `shm` (shared memory), `udp` (the kernel's UDP
    /// stack), or `auto`: shared memory to a peer that offers it, UDP otherwise.
    #[arg(long, default_value_t = softib_udp::Transport::Auto)]
    pub transport: softib_udp::Transport,
    /// The clock the device reads: `precise`, `coarse` (a kernel tick's resolution, read for
    /// its cost), or `auto`: the coarse one where the precise one is slow to read.
    #[arg(long, default_value_t = softib_udp::ClockChoice::Auto)]
    pub clock: softib_udp::ClockChoice,
}

impl DeviceArgs {
    /// The device of a tool that has no device flags of its own (`softib devinfo`, `softib
    /// cm`): bound to `bind`, every ICRC verified, GSO on, busy polling, rxe's window of 128.
    pub fn plain(bind: &str, pcap: Option<PathBuf>) -> DeviceArgs {
        DeviceArgs {
            bind: bind.to_string(),
            pcap,
            events: false,
            no_ipv4_icrc_check: false,
            no_gso: false,
            peer_via: None,
            stats: false,
            window: 128,
            busy_yields: softib_udp::BUSY_YIELDS,
            transport: softib_udp::Transport::Auto,
            clock: softib_udp::ClockChoice::Auto,
        }
    }

    /// The bound socket address.
    pub fn bind_addr(&self) -> Result<SocketAddr, Error> {
        if let Ok(a) = self.bind.parse::<SocketAddr>() {
            return Ok(a);
        }
        let ip: IpAddr = self
            .bind
            .parse()
            .map_err(|_| format!("--bind {}: not an IP address or IP:PORT", self.bind))?;
        Ok(SocketAddr::new(ip, softib_wire::udp::ROCEV2_PORT))
    }

    pub fn config(&self, mtu: Mtu) -> Result<DeviceConfig, Error> {
        let mut c = DeviceConfig::new(self.bind_addr()?);
        c.active_mtu = mtu;
        c.pcap = self.pcap.clone();
        c.gso = !self.no_gso;
        c.max_unacked_psns = self.window;
        c.busy_yields = self.busy_yields;
        c.transport = self.transport;
        c.clock = self.clock;
        if self.no_ipv4_icrc_check {
            c.icrc = IcrcPolicy::AcceptIpv4Unverified;
        }
        Ok(c)
    }

    pub fn mode(&self) -> PollMode {
        if self.events {
            PollMode::Blocking
        } else {
            PollMode::Busy
        }
    }

    /// Opens the device; routes the peer through `--peer-via` once its GID is known
    /// ([`DeviceArgs::route_peer`]).
    pub fn open(&self, mtu: Mtu) -> Result<Device, Error> {
        let cfg = self.config(mtu)?;
        Device::open(&cfg).map_err(|e| format!("bind {}: {e}", cfg.bind).into())
    }

    /// Prints the counters when `--stats` was given.
    pub fn report(&self, dev: &Device) {
        if self.stats {
            eprintln!("runtime: {:?}", dev.stats());
            eprintln!("hca: {:?}", dev.hca().counters());
            eprintln!("clock: {:?}", dev.clock());
        }
    }

    pub fn route_peer(&self, dev: &mut Device, peer: &Gid) {
        if let Some(via) = self.peer_via {
            dev.add_route(softib_udp::frame::ip_of_gid(peer), via);
        }
    }
}

/// Parses an MTU in bytes (256..4096).
pub fn parse_mtu(s: &str) -> Result<Mtu, String> {
    s.parse::<u32>()
        .ok()
        .and_then(Mtu::from_bytes)
        .ok_or_else(|| format!("{s}: not one of 256, 512, 1024, 2048, 4096"))
}

/// Length of the pingpong exchange message, NUL included: `"%04x:%06x:%06x:%s"`.
pub const PP_MSG_LEN: usize = 52;

/// The message of `ibv_*_pingpong`: LID, QPN, PSN and the GID as 32 hex digits of its bytes in
/// order, NUL-terminated, 52 bytes.
pub fn pp_message(i: &EndpointInfo) -> [u8; PP_MSG_LEN] {
    let gid: String = i.gid.0.iter().map(|b| format!("{b:02x}")).collect();
    let s = format!(
        "{:04x}:{:06x}:{:06x}:{gid}",
        i.lid,
        i.qpn.value(),
        i.psn.value()
    );
    let mut m = [0u8; PP_MSG_LEN];
    m[..s.len().min(PP_MSG_LEN - 1)].copy_from_slice(&s.as_bytes()[..s.len().min(PP_MSG_LEN - 1)]);
    m
}

/// Parses a pingpong message (`sscanf("%x:%x:%x:%s")`).
pub fn parse_pp_message(m: &[u8]) -> Result<EndpointInfo, Error> {
    let end = m.iter().position(|&b| b == 0).unwrap_or(m.len());
    let s = std::str::from_utf8(&m[..end]).map_err(|_| "exchange message is not text")?;
    let mut it = s.split(':');
    let mut hex = |what: &str| -> Result<u32, Error> {
        let f = it
            .next()
            .ok_or_else(|| format!("exchange message {s:?}: no {what}"))?;
        u32::from_str_radix(f, 16).map_err(|_| format!("exchange message {s:?}: bad {what}").into())
    };
    let lid = hex("LID")? as u16;
    let qpn = hex("QPN")?;
    let psn = hex("PSN")?;
    let g = it.next().ok_or("exchange message: no GID")?;
    if g.len() != 32 {
        return Err(format!("exchange message {s:?}: GID is not 32 hex digits").into());
    }
    let mut gid = [0u8; 16];
    for (k, b) in gid.iter_mut().enumerate() {
        *b = u8::from_str_radix(&g[2 * k..2 * k + 2], 16)
            .map_err(|_| "exchange message: bad GID")?;
    }
    Ok(EndpointInfo {
        qpn: Qpn::new(qpn & 0xff_ffff),
        psn: Psn::new(psn & 0xff_ffff),
        gid: Gid(gid),
        lid,
    })
}

/// Reads exactly `buf.len()` bytes (the peer may split its writes).
/// Connects to the out-of-band exchange of a server, retrying for up to five seconds while the
/// connection is refused (a server started just before may not be listening yet).
pub fn connect_exchange(server: &str, port: u16) -> std::io::Result<TcpStream> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        match TcpStream::connect((server, port)) {
            Err(e)
                if e.kind() == std::io::ErrorKind::ConnectionRefused
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            r => return r,
        }
    }
}

pub fn read_full(s: &mut TcpStream, buf: &mut [u8]) -> Result<(), Error> {
    s.read_exact(buf)
        .map_err(|e| format!("exchange: couldn't read remote address: {e}").into())
}

pub fn write_all(s: &mut TcpStream, buf: &[u8]) -> Result<(), Error> {
    s.write_all(buf)
        .map_err(|e| format!("exchange: couldn't send local address: {e}").into())
}

/// A random 24-bit PSN (`lrand48() & 0xffffff` in the examples).
pub fn random_psn() -> Psn {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let mut x = t ^ (u64::from(std::process::id()) << 32) ^ 0x9E37_79B9_7F4A_7C15;
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    Psn::new((x & 0xff_ffff) as u32)
}

/// `inet_ntop(AF_INET6)` of a GID, as the examples print it.
pub fn gid_text(g: &Gid) -> String {
    std::net::Ipv6Addr::from(g.0).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pingpong_message_round_trips_in_the_examples_format() {
        let i = EndpointInfo {
            qpn: Qpn::new(0x11),
            psn: Psn::new(0xabcdef),
            gid: softib_core::gid_of_ipv4([127, 0, 0, 1]),
            lid: 0,
        };
        let m = pp_message(&i);
        assert_eq!(
            &m[..51],
            b"0000:000011:abcdef:00000000000000000000ffff7f000001"
        );
        assert_eq!(m[51], 0);
        assert_eq!(parse_pp_message(&m).unwrap(), i);
        assert!(parse_pp_message(b"0000:zz:1:00").is_err());
        assert!(parse_pp_message(b"").is_err());
    }
}
