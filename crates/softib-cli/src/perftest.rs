//! perftest's out-of-band exchange ("Data ex. method: Ethernet"), so that `softib bench` and
//! perftest's `ib_write_bw`, `ib_read_bw`, `ib_send_bw` and `ib_atomic_bw` can face each other.
//!
//! # The exchange (perftest 6.06, as Debian's perftest 4.5+0.17 speaks it)
//!
//! One TCP connection (port `-p`, 18515). Every step is a *swap* of a fixed-size message: the
//! client writes its message and then reads the server's; the server reads first and then
//! writes. The steps, in order:
//!
//! | step | bytes | content |
//! |---|---|---|
//! | version | 16 | the version text, NUL-padded (`"6.06"`) |
//! | cycle buffer | 4 | big-endian `int`: the remote-address cycle, a page (4096); both take the larger |
//! | cache line | 4 | big-endian `int` (64); both take the larger |
//! | MTU | 2 | `"%d"` of the port's `enum ibv_mtu` (1..5, `"3"` = 1024) and a NUL; both take the smaller |
//! | keys (handshake) | 108 | `"%04x:%04x:%06x:%06x:%08x:%016x:"` LID, out_reads, QPN, PSN, R_Key, VA, then the 16 GID bytes as `"%02x:"` each, then `"%08x:"` SRQN, NUL |
//! | report field | 8 | big-endian `u64` or IEEE-754 `double` |
//! | done | 5 | `"done\0"`, written by both sides at the end without waiting for the other's |
//!
//! (The cycle-buffer and cache-line steps happen only when the peer's version is 5.32 or
//! later, the MTU step from 5.1, with 2 bytes from 5.31; the iteration count of a report is
//! 8 bytes from 5.33, else 4. softib announces 6.06.)
//!
//! A keys message is swapped at every synchronisation point ("handshake"), always with the
//! same content. What perftest 6.06 does, observed on the wire between two of its own
//! processes:
//!
//! - `ib_write_bw`, `ib_read_bw`, `ib_atomic_bw`: handshake (keys; both sides then connect
//!   their QPs), handshake (both in RTR/RTS), handshake, the client runs, handshake, the
//!   client's report is swapped field by field (size, iterations, BW peak, BW average, message
//!   rate; bandwidths in MiB/s; the server prints the client's report and sends meaningless
//!   values back), handshake, `done`.
//! - `ib_send_bw`: four handshakes (the server has its receives posted by the fourth), the
//!   client sends, handshake, `done`; each side prints its own report.
//!
//! The server of either program only ever answers, so `softib bench` as a server follows
//! whatever a perftest client sends: keys are answered with its keys (the first connects the
//! QP), report fields with zeros, `done` with `done`. As a client it performs the sequence
//! above. The out_reads a side announces becomes the peer requester's `max_rd_atomic`; the
//! R_Key and VA are where the client's WRITE, READ and atomics go (softib's client targets the
//! announced VA for every WR; perftest's client cycles through `max(size, cycle buffer)`
//! bytes from it, which softib's buffer covers).

use std::io::{self, Read, Write};

use softib_core::verbs::types::{Gid, Mtu};

use crate::net_common::Error;

/// The version text softib announces: the exchange it implements.
pub const VERSION: &str = "6.06";
/// Bytes of the version message (`char version[16]`).
pub const VERSION_LEN: usize = 16;
/// Bytes of a keys message with a GID (`KEY_MSG_SIZE_GID`).
pub const KEYS_LEN: usize = 108;
/// The closing message.
pub const DONE: &[u8; 5] = b"done\0";
/// perftest's cycle buffer (a page) and cache line, as announced.
pub const CYCLE_BUFFER: u32 = 4096;
pub const CACHE_LINE: u32 = 64;

/// What one side tells the other at every handshake (`struct pingpong_dest`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Keys {
    pub lid: u16,
    pub out_reads: u16,
    pub qpn: u32,
    pub psn: u32,
    pub rkey: u32,
    pub vaddr: u64,
    pub gid: Gid,
    pub srqn: u32,
}

impl Keys {
    /// The 108-byte message.
    pub fn to_message(self) -> [u8; KEYS_LEN] {
        let mut s = format!(
            "{:04x}:{:04x}:{:06x}:{:06x}:{:08x}:{:016x}:",
            self.lid, self.out_reads, self.qpn, self.psn, self.rkey, self.vaddr
        );
        for b in self.gid.0 {
            s.push_str(&format!("{b:02x}:"));
        }
        s.push_str(&format!("{:08x}:", self.srqn));
        let mut m = [0u8; KEYS_LEN];
        let n = s.len().min(KEYS_LEN - 1);
        m[..n].copy_from_slice(&s.as_bytes()[..n]);
        m
    }

    /// Parses a keys message (untrusted: every field is checked).
    pub fn parse(m: &[u8]) -> Result<Keys, Error> {
        let end = m.iter().position(|&b| b == 0).unwrap_or(m.len());
        let s = std::str::from_utf8(&m[..end]).map_err(|_| "perftest keys: not text")?;
        let f: Vec<&str> = s.split(':').collect();
        // 6 fields, 16 GID bytes, the SRQN, and the empty rest after the last ':'.
        if f.len() < 23 {
            return Err(format!("perftest keys {s:?}: {} fields, want 23", f.len()).into());
        }
        let hex = |i: usize, what: &str, max: u64| -> Result<u64, Error> {
            match u64::from_str_radix(f[i], 16) {
                Ok(v) if v <= max && !f[i].is_empty() => Ok(v),
                _ => Err(format!("perftest keys {s:?}: bad {what} {:?}", f[i]).into()),
            }
        };
        let mut gid = [0u8; 16];
        for (k, b) in gid.iter_mut().enumerate() {
            *b = hex(6 + k, "GID byte", 0xff)? as u8;
        }
        Ok(Keys {
            lid: hex(0, "LID", 0xffff)? as u16,
            out_reads: hex(1, "out_reads", 0xffff)? as u16,
            qpn: hex(2, "QPN", 0xff_ffff)? as u32,
            psn: hex(3, "PSN", 0xff_ffff)? as u32,
            rkey: hex(4, "R_Key", 0xffff_ffff)? as u32,
            vaddr: hex(5, "VA", u64::MAX)?,
            gid: Gid(gid),
            srqn: hex(22, "SRQN", 0xffff_ffff)? as u32,
        })
    }
}

/// A bandwidth report as swapped after a WRITE, READ or atomic run (`struct bw_report_data`,
/// the fields that travel; bandwidths in MiB/s, message rate in Mpps).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Report {
    pub size: u64,
    pub iters: u64,
    pub bw_peak: f64,
    pub bw_avg: f64,
    pub msg_rate: f64,
}

/// Bytes of the report's fields in the order they are swapped (size, iterations, BW peak,
/// BW average, message rate) when the peer announced `peer_version`: the iteration count is a
/// 4-byte `int` before 5.33.
pub fn report_field_lens(peer_version: f64) -> [usize; 5] {
    [8, if peer_version >= 5.33 { 8 } else { 4 }, 8, 8, 8]
}

impl Report {
    /// The report of `iters` messages of `size` bytes in `secs` seconds, at best `peak_msgs`
    /// messages per second (bandwidths in MiB/s, as perftest's default report).
    pub fn of_run(size: usize, iters: u64, secs: f64, peak_msgs: f64) -> Report {
        let avg = iters as f64 / secs;
        let mib = |msgs: f64| msgs * size as f64 / 1048576.0;
        Report {
            size: size as u64,
            iters,
            bw_peak: mib(peak_msgs.max(avg)),
            bw_avg: mib(avg),
            msg_rate: avg / 1e6,
        }
    }

    /// The run behind the report, as [`Report::of_run`] takes it: (seconds, peak messages
    /// per second).
    pub fn run(&self) -> (f64, f64) {
        let avg_msgs = self.msg_rate * 1e6;
        let secs = self.iters as f64 / avg_msgs.max(1e-9);
        (secs, self.bw_peak * 1048576.0 / (self.size.max(1) as f64))
    }

    /// The fields as they travel, each big-endian, of the lengths of [`report_field_lens`].
    pub fn to_fields(self, peer_version: f64) -> [Vec<u8>; 5] {
        let lens = report_field_lens(peer_version);
        let vals = [
            self.size,
            self.iters,
            self.bw_peak.to_bits(),
            self.bw_avg.to_bits(),
            self.msg_rate.to_bits(),
        ];
        std::array::from_fn(|i| vals[i].to_be_bytes()[8 - lens[i]..].to_vec())
    }

    /// The report from its fields as they travel (any length up to 8 each, big-endian).
    pub fn from_fields(f: &[Vec<u8>; 5]) -> Report {
        let v = |i: usize| {
            let mut a = [0u8; 8];
            let b = &f[i][f[i].len().saturating_sub(8)..];
            a[8 - b.len()..].copy_from_slice(b);
            u64::from_be_bytes(a)
        };
        Report {
            size: v(0),
            iters: v(1),
            bw_peak: f64::from_bits(v(2)),
            bw_avg: f64::from_bits(v(3)),
            msg_rate: f64::from_bits(v(4)),
        }
    }
}

/// Parses a version text as perftest does (`atof`): leading digits and one dot.
pub fn version_number(v: &[u8]) -> f64 {
    let end = v.iter().position(|&b| b == 0).unwrap_or(v.len());
    let s = String::from_utf8_lossy(&v[..end]);
    let t: String = s
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    t.parse().unwrap_or(0.0)
}

/// One side of a perftest exchange over `S` (a TCP stream).
pub struct Exchange<S> {
    s: S,
    client: bool,
    /// The peer's version (`atof`), known after [`Exchange::preamble`].
    pub peer_version: f64,
}

/// What both sides agreed on in the preamble.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Agreed {
    pub mtu: Mtu,
    pub cycle_buffer: u32,
    pub cache_line: u32,
}

impl<S: Read + Write> Exchange<S> {
    pub fn new(s: S, client: bool) -> Exchange<S> {
        Exchange {
            s,
            client,
            peer_version: 0.0,
        }
    }

    /// Swaps a message of `mine.len()` bytes (client: write then read; server: read then
    /// write).
    pub fn swap(&mut self, mine: &[u8]) -> Result<Vec<u8>, Error> {
        let mut theirs = vec![0u8; mine.len()];
        if self.client {
            self.s.write_all(mine)?;
            self.read(&mut theirs)?;
        } else {
            self.read(&mut theirs)?;
            self.s.write_all(mine)?;
        }
        Ok(theirs)
    }

    fn read(&mut self, buf: &mut [u8]) -> Result<(), Error> {
        self.s.read_exact(buf).map_err(|e| {
            if e.kind() == io::ErrorKind::UnexpectedEof {
                "perftest exchange: the peer closed the connection".into()
            } else {
                Error::from(format!("perftest exchange: {e}"))
            }
        })
    }

    /// Version, cycle buffer, cache line and MTU; `mtu` is this side's port MTU.
    pub fn preamble(&mut self, mtu: Mtu) -> Result<Agreed, Error> {
        let mut v = [0u8; VERSION_LEN];
        v[..VERSION.len()].copy_from_slice(VERSION.as_bytes());
        let theirs = self.swap(&v)?;
        self.peer_version = version_number(&theirs);
        let mut agreed = Agreed {
            mtu,
            cycle_buffer: CYCLE_BUFFER,
            cache_line: CACHE_LINE,
        };
        if self.peer_version >= 5.32 {
            let c = self.swap(&CYCLE_BUFFER.to_be_bytes())?;
            let l = self.swap(&CACHE_LINE.to_be_bytes())?;
            let c = u32::from_be_bytes([c[0], c[1], c[2], c[3]]);
            let l = u32::from_be_bytes([l[0], l[1], l[2], l[3]]);
            // Bounded: a peer cannot make this side allocate without limit.
            agreed.cycle_buffer = c.clamp(CYCLE_BUFFER, 1 << 20);
            agreed.cache_line = l.clamp(CACHE_LINE, 4096);
        }
        if self.peer_version >= 5.1 {
            let len = if self.peer_version >= 5.31 { 2 } else { 4 };
            let mut m = vec![0u8; len];
            m[0] = b'0' + mtu.raw();
            let r = self.swap(&m)?;
            let end = r.iter().position(|&b| b == 0).unwrap_or(r.len());
            let theirs = std::str::from_utf8(&r[..end])
                .ok()
                .and_then(|t| t.trim().parse::<u8>().ok())
                .and_then(Mtu::from_raw);
            if let Some(t) = theirs {
                agreed.mtu = mtu.min(t);
            }
        }
        Ok(agreed)
    }

    /// One handshake: swaps `keys`, returns the peer's.
    pub fn handshake(&mut self, keys: &Keys) -> Result<Keys, Error> {
        let r = self.swap(&keys.to_message())?;
        Keys::parse(&r)
    }

    /// Swaps a report field by field (the client's report; the server sends zeros).
    pub fn swap_report(&mut self, mine: &Report) -> Result<Report, Error> {
        let mut theirs: [Vec<u8>; 5] = Default::default();
        for (t, m) in theirs.iter_mut().zip(mine.to_fields(self.peer_version)) {
            *t = self.swap(&m)?;
        }
        Ok(Report::from_fields(&theirs))
    }

    /// Writes `done` (the peer may have closed already: not an error).
    pub fn done(&mut self) {
        let _ = self.s.write_all(DONE);
    }
}

/// What the server side reads next from a perftest client, told by the first bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Incoming {
    /// A keys message (108 bytes): a handshake.
    Keys,
    /// `done\0`: the client is finished.
    Done,
    /// The first field of a report (a big-endian size: first byte 0).
    Report,
}

impl Incoming {
    /// Classifies the start of the next message; `None` when `b` is empty or not a message
    /// a perftest client sends here.
    pub fn classify(b: &[u8]) -> Option<Incoming> {
        match b.first()? {
            0 => Some(Incoming::Report),
            b'd' if b.len() < 2 || b[1] == b'o' => Some(Incoming::Done),
            c if c.is_ascii_hexdigit() => Some(Incoming::Keys),
            _ => None,
        }
    }

    /// Bytes of the whole message (of the report: its first field).
    pub fn len(self) -> usize {
        match self {
            Incoming::Keys => KEYS_LEN,
            Incoming::Done => DONE.len(),
            Incoming::Report => 8,
        }
    }
}

/// True when the first bytes a server got are a perftest client's version message.
pub fn looks_like_version(first: &[u8]) -> bool {
    first.first().is_some_and(|c| c.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};

    #[test]
    fn keys_round_trip_in_perftests_format() {
        let k = Keys {
            lid: 0,
            out_reads: 1,
            qpn: 0x11,
            psn: 0xf6a591,
            rkey: 0x2cc,
            vaddr: 0x5630_3297_c000,
            gid: softib_core::gid_of_ipv4([10, 99, 0, 2]),
            srqn: 0,
        };
        let m = k.to_message();
        let text = b"0000:0001:000011:f6a591:000002cc:000056303297c000:00:00:00:00:00:00:00:00:00:00:ff:ff:0a:63:00:02:00000000:";
        assert_eq!(&m[..text.len()], &text[..]);
        assert_eq!(text.len(), KEYS_LEN - 1);
        assert_eq!(m[KEYS_LEN - 1], 0);
        assert_eq!(Keys::parse(&m).unwrap(), k);
        assert!(Keys::parse(&m[..40]).is_err());
        assert!(Keys::parse(b"").is_err());
        assert!(Keys::parse(&[0xff; KEYS_LEN]).is_err());
        let mut bad = m;
        bad[12] = b'g'; // inside the QPN
        assert!(Keys::parse(&bad).is_err());
    }

    /// Untrusted input: mutations of a valid keys message (bytes replaced, truncated, no NUL)
    /// and random bytes either parse to keys within the fields' ranges or are refused, never a
    /// panic; the same bytes never panic the version parser or the classifier either.
    #[test]
    fn keys_parse_never_panics_on_mutated_or_random_input() {
        let valid = Keys {
            qpn: 0xabcdef,
            psn: 0x123456,
            rkey: 0x1234,
            vaddr: 0xdead_beef,
            gid: softib_core::gid_of_ipv4([10, 0, 0, 1]),
            ..Keys::default()
        }
        .to_message();
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let (mut parsed, mut refused) = (0, 0);
        for round in 0..20_000 {
            let mut m = if round % 4 == 0 {
                (0..(next() % 130) as usize).map(|_| next() as u8).collect()
            } else {
                valid.to_vec()
            };
            for _ in 0..(next() % 4) {
                if !m.is_empty() {
                    let i = (next() as usize) % m.len();
                    m[i] = b"0123456789abcdef:\0xg"[(next() % 20) as usize];
                }
            }
            if next() % 8 == 0 {
                m.truncate((next() as usize) % (m.len() + 1));
            }
            let _ = version_number(&m);
            let _ = Incoming::classify(&m);
            match Keys::parse(&m) {
                Ok(k) => {
                    assert!(k.qpn <= 0xff_ffff && k.psn <= 0xff_ffff);
                    parsed += 1;
                }
                Err(_) => refused += 1,
            }
        }
        assert!(
            parsed > 0 && refused > 0,
            "{parsed} parsed, {refused} refused"
        );
    }

    #[test]
    fn versions_parse_like_atof() {
        assert_eq!(version_number(b"6.06\0\0\0\0\0\0\0\0\0\0\0\0"), 6.06);
        assert_eq!(version_number(b"5.33"), 5.33);
        assert_eq!(version_number(b"SOFTIB-BE"), 0.0);
        assert!(looks_like_version(b"6.06"));
        assert!(!looks_like_version(b"SOFTIB-BENCH/1"));
    }

    #[test]
    fn incoming_messages_are_told_apart() {
        assert_eq!(Incoming::classify(b"0000:0001"), Some(Incoming::Keys));
        assert_eq!(Incoming::classify(b"done\0"), Some(Incoming::Done));
        assert_eq!(Incoming::classify(b"d"), Some(Incoming::Done));
        assert_eq!(Incoming::classify(&[0, 0, 0, 0]), Some(Incoming::Report));
        assert_eq!(Incoming::classify(b"zz"), None);
        assert_eq!(Incoming::classify(b""), None);
    }

    /// A client and a server exchange over real TCP: preamble, handshake, report, done.
    #[test]
    fn client_and_server_agree_on_every_step() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let srv = std::thread::spawn(move || {
            let (s, _) = l.accept().unwrap();
            let mut x = Exchange::new(s, false);
            let a = x.preamble(Mtu::Mtu4096).unwrap();
            let k = x
                .handshake(&Keys {
                    qpn: 2,
                    ..Keys::default()
                })
                .unwrap();
            let r = x.swap_report(&Report::default()).unwrap();
            (a, k, r)
        });
        let s = TcpStream::connect(addr).unwrap();
        let mut x = Exchange::new(s, true);
        let a = x.preamble(Mtu::Mtu1024).unwrap();
        assert_eq!(a.mtu, Mtu::Mtu1024);
        assert_eq!(x.peer_version, 6.06);
        let k = x
            .handshake(&Keys {
                qpn: 1,
                psn: 7,
                ..Keys::default()
            })
            .unwrap();
        assert_eq!(k.qpn, 2);
        let mine = Report {
            size: 64,
            iters: 5,
            bw_peak: 0.23,
            bw_avg: 0.03,
            msg_rate: 0.000452,
        };
        assert_eq!(x.swap_report(&mine).unwrap(), Report::default());
        let (sa, sk, sr) = srv.join().unwrap();
        assert_eq!(sa.mtu, Mtu::Mtu1024);
        assert_eq!((sk.qpn, sk.psn), (1, 7));
        assert_eq!(sr, mine);
    }

    /// A report survives its fields in both layouts (8- and 4-byte iteration count), and the
    /// run it describes comes back out of it.
    #[test]
    fn report_fields_round_trip_and_give_back_the_run() {
        let r = Report::of_run(4096, 1000, 0.5, 2500.0);
        assert_eq!(r.iters, 1000);
        assert!((r.msg_rate - 0.002).abs() < 1e-12);
        assert!((r.bw_avg - 2000.0 * 4096.0 / 1048576.0).abs() < 1e-9);
        for v in [6.06, 5.0] {
            let f = r.to_fields(v);
            let lens: Vec<usize> = f.iter().map(|x| x.len()).collect();
            assert_eq!(lens, report_field_lens(v));
            assert_eq!(Report::from_fields(&f), r);
        }
        assert_eq!(report_field_lens(5.0)[1], 4);
        let (secs, peak) = r.run();
        assert!((secs - 0.5).abs() < 1e-9 && (peak - 2500.0).abs() < 1e-6);
    }

    /// The report bytes perftest 6.06 sent for 64 B x 5 (BW peak 0.23 MiB/s).
    #[test]
    fn captured_report_fields_decode() {
        let peak = f64::from_bits(u64::from_be_bytes([
            0x3f, 0xcd, 0xaa, 0x97, 0x55, 0xd0, 0x67, 0x41,
        ]));
        assert!((peak - 0.2318).abs() < 1e-3, "{peak}");
    }
}
