//! ICRC — the 32-bit invariant CRC that ends every IBA transport packet (RoCEv2 and native IB).
//!
//! # Algorithm
//!
//! The standard reflected CRC-32 (polynomial 0x04C11DB7, reflected 0xEDB88320: the
//! Ethernet / zlib CRC, computed here by `crc32fast`) over, in order:
//!
//! 1. 8 bytes of 0xFF standing for the LRH: every LRH field is variant, since switches rewrite
//!    VL and routers replace the whole LRH, so the LRH is covered as all ones;
//! 2. RoCEv2: the IPv4 header with TOS, TTL and header checksum set to all ones, or the IPv6
//!    header with traffic class, flow label and hop limit set to all ones; native IB: the GRH,
//!    if present, with TClass, FlowLabel and HopLmt set to all ones (the GRH has the IPv6
//!    layout);
//! 3. RoCEv2 only: the UDP header with the checksum set to all ones;
//! 4. the BTH with byte 4 (FECN, BECN, Resv6a — "Resv8a" in IBA 1.0/1.1) set to 0xFF;
//! 5. everything after the BTH up to the ICRC: extension headers, payload and pad bytes.
//!
//! The result (the CRC-32 as zlib reports it, i.e. already complemented) goes on the wire least
//! significant byte first: `icrc.to_le_bytes()` are the four ICRC bytes ([`put`], [`get`]).
//!
//! # Sources
//!
//! * RoCEv2: Linux `drivers/infiniband/sw/rxe/rxe_icrc.c` (`rxe_icrc_hdr`): it seeds the CRC
//!   register with 0xDEBB20E3, "the result of computing a CRC with a seed of 0xffffffff and
//!   8 bytes of 0xff representing a masked LRH", masks the IP, UDP and BTH fields listed above,
//!   and stores the complemented CRC little-endian. Checked on every UDP/4791 packet of the rxe
//!   captures in `shared/testvectors/rxe` (IPv4 and IPv6) by the tests below, as
//!   `check_icrc.py` (and scapy's `BTH.compute_icrc`) did when they were recorded.
//! * Native IB, the LRH: the pre-mainline rxe that carried real LRH/GRH headers (Mellanox /
//!   System Fabric Works 2009-2010, `rxe_sb8_ib_headers`) uses the same 0xDEBB20E3 seed when an
//!   LRH is present and starts feeding at the GRH (or BTH), i.e. the whole LRH counts as ones;
//!   it masks GRH bytes 0 (low nibble), 1-3 and 7 and BTH byte 4 exactly as here. This agrees
//!   with the IBA rule that the ICRC covers only fields that neither switches (LRH:VL,
//!   BTH:Resv8a) nor routers (the whole LRH, GRH:TClass/FlowLabel/HopLmt) may change, so that
//!   it protects the packet end to end while routers recompute only the VCRC. The LRH is
//!   protected hop by hop by the VCRC ([`crate::vcrc`]).
//!
//! softib feeds the eight 0xFF bytes instead of starting from rxe's register value
//! ([`LRH_MASKED_REGISTER`]); the two are the same computation (tested).
//!
//! # Cost
//!
//! The headers are copied, masked, into one stack array (LRH stand-in + IP + UDP + BTH: 48 bytes
//! for IPv4, three whole 16-byte blocks) and fed in one call. The bytes after the BTH join them
//! in that array when they are few (up to 80: ACKs, short SENDs), which saves a second call and
//! its final reduction; longer ones are fed straight from the caller's slice, never copied.
//! Each `crc32fast` call ends in a reduction and a byte-wise tail, so fewer, block-aligned calls
//! keep the ICRC near plain `crc32fast` speed: 0.83× (IPv4) and 0.81× (IPv6) of
//! `crc32fast::hash` over the same bytes for a 4 KiB payload on the development machine
//! (`icrc_speed`, an on-demand test). `crc32fast::Hasher::new` looks up the CPU's features on
//! every call, so softib keeps one initial hasher and clones it.
//!
//! [`crate::roce::build`] does better still: it owns the frame, so it writes the masked headers
//! and the LRH stand-in (over the end of the Ethernet header) into the frame itself, computes
//! the ICRC over the frame in one pass, and then writes the headers as they go on the wire over
//! the masked ones ([`crate::roce::HeaderTemplate`] keeps both forms of a connection's IP and
//! UDP headers ready).
//!
//! # The IPv4 Identification
//!
//! RoCEv2 over IPv4 covers the Identification, which a UDP socket neither lets the sender
//! choose per segment nor shows the receiver. CRC-32 being affine in the message bits,
//! [`Ipv4IdentShift`] gives the ICRC change for a new Identification without a pass over the
//! packet, and [`solve_roce_v4_ident`] finds the Identification an ICRC was computed over (at
//! the price of a 16-bit instead of a 32-bit check, documented there).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use crc32fast::Hasher;

use crate::bth;
use crate::error::{check_len, Error, Header, Result};
use crate::{ipv4, udp};

/// Length of the ICRC in bytes.
pub const LEN: usize = 4;

/// Raw CRC-32 register value after 8 bytes of 0xFF from the standard initial value (rxe's seed).
pub const LRH_MASKED_REGISTER: u32 = 0xDEBB_20E3;

/// ICRC-variant bits of an IPv4 header, as (byte offset, bits): TOS, TTL, header checksum.
pub(crate) const IPV4_VARIANT: &[(usize, u8)] = &[(1, 0xFF), (8, 0xFF), (10, 0xFF), (11, 0xFF)];
/// ICRC-variant bits of an IPv6 header or GRH: traffic class (byte 0 bits 3:0, byte 1 bits
/// 7:4), flow label (byte 1 bits 3:0, bytes 2-3), hop limit (byte 7).
pub(crate) const IPV6_VARIANT: &[(usize, u8)] =
    &[(0, 0x0F), (1, 0xFF), (2, 0xFF), (3, 0xFF), (7, 0xFF)];
/// ICRC-variant bits of the UDP header: the checksum.
const UDP_VARIANT: &[(usize, u8)] = &[(6, 0xFF), (7, 0xFF)];
/// ICRC-variant bits of the BTH: FECN, BECN, Resv6a.
const BTH_VARIANT: &[(usize, u8)] = &[(bth::ICRC_MASKED_BYTE, 0xFF)];

/// Length of the all-ones LRH stand-in.
const LRH_LEN: usize = 8;
/// Length of the IPv6 header (and of the GRH).
const IPV6_LEN: usize = 40;
/// Room for the longest masked run: LRH stand-in + IPv4 with options + UDP + BTH.
const STAGE_LEN: usize = LRH_LEN + ipv4::MAX_LEN + udp::LEN + bth::LEN;
/// Every variant bit lies in the first this-many bytes of its header.
const VARIANT_SPAN: usize = 12;

/// How the ICRC's CRC-32 passes ([`Pass`], [`Continued::finish`]) are computed: `crc32fast`'s
/// carry-less multiplication (PCLMULQDQ) or a slice-by-16 table, whichever this CPU runs
/// faster, measured once ([`Engine::choose`]).
///
/// On the development machine PCLMULQDQ is faster from 32 bytes on (96 bytes: 11.5 against
/// 21 ns); under an emulator that lacks it in hardware (QEMU's TCG, the rxe guest of
/// `bench/rxe-guest.sh`) each carry-less multiplication is a loop in a helper, and the table
/// is 2.3–4× faster (96 bytes: 208 against 478 ns; 20 bytes: 73 against 298 ns). Some CPUs
/// have a slow PCLMULQDQ too. `SOFTIB_CRC=clmul` or `SOFTIB_CRC=table` skips the measurement
/// (`bench/instructions.sh` counts the CPU's own choice, `clmul`, as valgrind emulates the
/// instruction in a helper too).
struct Engine {
    /// A `crc32fast` hasher at its initial state: `Hasher::new` detects the CPU's features on
    /// every call, so this is made once and cloned.
    initial: Hasher,
    /// The table is the faster.
    table: bool,
}

/// [`Engine::table`] of the process's engine, for the passes that follow one it made.
static TABLE: AtomicBool = AtomicBool::new(false);

/// The process's [`Engine`], chosen at its first use.
#[inline(always)]
fn engine() -> &'static Engine {
    static ENGINE: OnceLock<Engine> = OnceLock::new();
    ENGINE.get_or_init(Engine::choose)
}

/// How this process computes the ICRC's CRC-32 ([`Engine`]): `"clmul"` or `"table"`.
pub fn crc_way() -> &'static str {
    if engine().table {
        "table"
    } else {
        "clmul"
    }
}

/// The slice-by-16 CRC-32 (the `crc` crate's, 16 KiB of tables built at compile time).
static TABLE_CRC: crc::Crc<u32, crc::Table<16>> =
    crc::Crc::<u32, crc::Table<16>>::new(&crc::CRC_32_ISO_HDLC);

/// The CRC-32 of the bytes whose CRC-32 is `state`, followed by `data` (what
/// `crc32fast::Hasher::new_with_initial(state)` and an update give), by the table.
#[inline(always)]
fn table_update(state: u32, data: &[u8]) -> u32 {
    // The `crc` crate takes its initial register bit-reversed for a reflected CRC; the
    // register is the complement of the CRC so far.
    let mut d = TABLE_CRC.digest_with_initial((!state).reverse_bits());
    d.update(data);
    d.finalize()
}

/// A CRC-32 pass, computed the faster way on this CPU ([`Engine`]).
#[derive(Clone)]
enum Pass {
    Clmul(Hasher),
    /// The CRC-32 so far.
    Table(u32),
}

impl Pass {
    #[inline(always)]
    fn new() -> Pass {
        let e = engine();
        if e.table {
            Pass::Table(0)
        } else {
            Pass::Clmul(e.initial.clone())
        }
    }

    #[inline(always)]
    fn update(&mut self, data: &[u8]) {
        match self {
            Pass::Clmul(h) => h.update(data),
            Pass::Table(s) => *s = table_update(*s, data),
        }
    }

    #[inline(always)]
    fn finalize(self) -> u32 {
        match self {
            Pass::Clmul(h) => h.finalize(),
            Pass::Table(s) => s,
        }
    }
}

impl Engine {
    /// Measures both ways over an express pass's lengths (an ACK's 20 bytes, a 64-byte
    /// WRITE's 96), best of 8 rounds of 16 passes each, unless `SOFTIB_CRC` names one.
    fn choose() -> Engine {
        let initial = Hasher::new();
        let table = match std::env::var("SOFTIB_CRC").as_deref() {
            Ok("table") => true,
            Ok("clmul") => false,
            _ => Engine::table_is_faster(&initial),
        };
        TABLE.store(table, Ordering::Relaxed);
        Engine { initial, table }
    }

    fn table_is_faster(initial: &Hasher) -> bool {
        use std::hint::black_box;
        let buf = [0xa5u8; 96];
        let mut best = [u128::MAX; 2];
        for _ in 0..8 {
            for (way, best) in best.iter_mut().enumerate() {
                let t = std::time::Instant::now();
                let mut s = 0u32;
                for k in 0..16 {
                    let bytes = black_box(if k % 2 == 0 { &buf[..20] } else { &buf[..] });
                    s ^= if way == 0 {
                        let mut h = initial.clone();
                        h.update(bytes);
                        h.finalize()
                    } else {
                        table_update(s, bytes)
                    };
                }
                black_box(s);
                *best = (*best).min(t.elapsed().as_nanos());
            }
        }
        best[1] < best[0]
    }
}

/// Collects the LRH stand-in and the masked copies of the headers so that `crc32fast` sees them
/// as one run, then takes the payload straight from the caller's slice. One call per run
/// matters: every call ends in a reduction and a byte-wise tail, and for RoCEv2/IPv4 the run
/// (8 + 20 + 8 + 12 bytes) is exactly three 16-byte blocks.
struct Staged {
    h: Pass,
    buf: [u8; STAGE_LEN],
    len: usize,
}

impl Staged {
    /// Starts with the 8 all-ones bytes standing for the LRH.
    fn after_lrh() -> Staged {
        Staged {
            h: Pass::new(),
            buf: [0xFF; STAGE_LEN],
            len: LRH_LEN,
        }
    }

    fn flush(&mut self) {
        self.h.update(&self.buf[..self.len]);
        self.len = 0;
    }

    /// Appends `hdr` with the bits of `variant` set to one (offsets past its end are ignored).
    fn push(&mut self, hdr: &[u8], variant: &[(usize, u8)]) {
        if self.len + hdr.len() > STAGE_LEN {
            self.flush();
        }
        // Longer than any valid header: stage the part that holds the variant bits, feed the rest.
        let (head, tail) = if hdr.len() > STAGE_LEN {
            hdr.split_at(VARIANT_SPAN)
        } else {
            (hdr, &[][..])
        };
        let at = self.len;
        self.buf[at..at + head.len()].copy_from_slice(head);
        for &(off, bits) in variant {
            if off < head.len() {
                self.buf[at + off] |= bits;
            }
        }
        self.len += head.len();
        if !tail.is_empty() {
            self.flush();
            self.h.update(tail);
        }
    }

    /// Appends the BTH (masked) and feeds everything after it; returns the ICRC.
    fn finish(mut self, transport: &[u8]) -> u32 {
        let (bth, rest) = transport.split_at(transport.len().min(bth::LEN));
        self.push(bth, BTH_VARIANT);
        self.flush();
        self.h.update(rest);
        self.h.finalize()
    }
}

/// Everything after the BTH up to this many bytes is copied behind the headers and fed in the
/// same `crc32fast` call (up to 128 bytes in all for IPv4), saving a call and its final
/// reduction on small packets such as ACKs and short SENDs.
const SMALL_REST: usize = 80;

/// IPv4 + UDP + BTH.
const V4_HEADERS: usize = ipv4::LEN + udp::LEN + bth::LEN;
/// IPv6 + UDP + BTH.
const V6_HEADERS: usize = IPV6_LEN + udp::LEN + bth::LEN;
/// Stack room for the fast path of [`roce_v4`]: LRH stand-in, headers and a small rest.
const V4_RUN: usize = LRH_LEN + V4_HEADERS + SMALL_REST;
/// Stack room for the fast path of [`roce_v6`].
const V6_RUN: usize = LRH_LEN + V6_HEADERS + SMALL_REST;

/// Sets the ICRC-variant bits of contiguous IP (`ip_variant`), UDP and BTH headers.
#[inline(always)]
pub(crate) fn mask_roce_headers<const H: usize>(hdrs: &mut [u8; H], ip_variant: &[(usize, u8)]) {
    let bth_at = H - bth::LEN;
    mask_ip_udp(hdrs, bth_at - udp::LEN, ip_variant);
    for &(off, bits) in BTH_VARIANT {
        hdrs[bth_at + off] |= bits;
    }
}

/// Sets the ICRC-variant bits of an IP header of `ip_len` bytes (`ip_variant`) at the start of
/// `hdrs` and of the UDP header behind it.
#[inline(always)]
pub(crate) fn mask_ip_udp(hdrs: &mut [u8], ip_len: usize, ip_variant: &[(usize, u8)]) {
    for &(off, bits) in ip_variant {
        hdrs[off] |= bits;
    }
    for &(off, bits) in UDP_VARIANT {
        hdrs[ip_len + off] |= bits;
    }
}

/// The CRC-32 of `covered`, which already holds the LRH stand-in and the masked headers: the
/// ICRC of a packet laid out for it.
#[inline(always)]
pub(crate) fn raw(covered: &[u8]) -> u32 {
    let mut h = Pass::new();
    h.update(covered);
    h.finalize()
}

/// A CRC-32 pass stopped after some bytes, to be finished over several different rests
/// (`Continued::after(a).finish(b) == raw(a ++ b)`), without looking up the CPU's features
/// again for each.
#[derive(Clone, Default)]
pub struct Continued(Hasher);

impl Continued {
    /// The pass over `covered`.
    pub fn after(covered: &[u8]) -> Continued {
        let mut p = Pass::new();
        p.update(covered);
        match p {
            Pass::Clmul(h) => Continued(h),
            // The state kept in a hasher ([`Continued::finish`] takes it out again).
            Pass::Table(s) => Continued(Hasher::new_with_initial(s)),
        }
    }

    /// The CRC-32 of the bytes so far followed by `rest`, the faster way on this CPU
    /// ([`Engine`]).
    #[inline(always)]
    pub fn finish(&self, rest: &[u8]) -> u32 {
        let mut h = self.0.clone();
        // A `Continued` comes from `after`, which chose the engine.
        if TABLE.load(Ordering::Relaxed) {
            return table_update(h.finalize(), rest);
        }
        h.update(rest);
        h.finalize()
    }

    /// The CRC-32 of the bytes so far.
    pub fn value(&self) -> u32 {
        self.0.clone().finalize()
    }
}

/// Two passes are equal when they reached the same CRC.
impl PartialEq for Continued {
    fn eq(&self, other: &Continued) -> bool {
        self.value() == other.value()
    }
}

impl Eq for Continued {}

impl std::fmt::Debug for Continued {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Continued({:#010x})", self.value())
    }
}

/// The fast path of [`roce_v4`] / [`roce_v6`] (`ip_hdr` of exactly `IP` bytes, an 8-byte UDP
/// header, room for a BTH; `None` otherwise), in one stack array of `N` bytes: the LRH
/// stand-in, then the IP, UDP and BTH headers (`H` bytes), masked, then the bytes after the BTH
/// when they fit. The run is fed to `crc32fast` in one call; a longer rest is fed straight from
/// the caller's slice.
#[inline(always)]
fn contiguous<const IP: usize, const H: usize, const N: usize>(
    ip_hdr: &[u8],
    ip_variant: &[(usize, u8)],
    udp_hdr: &[u8],
    transport: &[u8],
) -> Option<u32> {
    const { assert!(H == IP + udp::LEN + bth::LEN && N >= LRH_LEN + H) };
    let (bth_hdr, rest) = transport.split_first_chunk::<{ bth::LEN }>()?;
    if ip_hdr.len() != IP || udp_hdr.len() != udp::LEN {
        return None;
    }
    let mut buf = [0xFF; N];
    let (run, tail) = buf.split_at_mut(LRH_LEN + H);
    let hdrs = run.last_chunk_mut::<H>()?;
    hdrs[..IP].copy_from_slice(ip_hdr);
    hdrs[IP..IP + udp::LEN].copy_from_slice(udp_hdr);
    hdrs[IP + udp::LEN..].copy_from_slice(bth_hdr);
    mask_roce_headers(hdrs, ip_variant);
    let mut h = Pass::new();
    if let Some(dst) = tail.get_mut(..rest.len()) {
        dst.copy_from_slice(rest);
        h.update(&buf[..LRH_LEN + H + rest.len()]);
    } else {
        h.update(run);
        h.update(rest);
    }
    Some(h.finalize())
}

/// ICRC of a RoCEv2 packet over IPv4.
///
/// `ip_hdr` is the whole IPv4 header (options included), `udp_hdr` the 8-byte UDP header and
/// `transport` the UDP payload from the first BTH byte through the last pad byte (the ICRC
/// excluded). Lengths are not judged: the bytes given are covered as given.
pub fn roce_v4(ip_hdr: &[u8], udp_hdr: &[u8], transport: &[u8]) -> u32 {
    let fast = contiguous::<{ ipv4::LEN }, V4_HEADERS, V4_RUN>;
    if let Some(icrc) = fast(ip_hdr, IPV4_VARIANT, udp_hdr, transport) {
        return icrc;
    }
    let mut s = Staged::after_lrh();
    s.push(ip_hdr, IPV4_VARIANT);
    s.push(udp_hdr, UDP_VARIANT);
    s.finish(transport)
}

/// ICRC of a RoCEv2 packet over IPv6: as [`roce_v4`], with the 40-byte IPv6 header.
pub fn roce_v6(ip_hdr: &[u8], udp_hdr: &[u8], transport: &[u8]) -> u32 {
    let fast = contiguous::<IPV6_LEN, V6_HEADERS, V6_RUN>;
    if let Some(icrc) = fast(ip_hdr, IPV6_VARIANT, udp_hdr, transport) {
        return icrc;
    }
    let mut s = Staged::after_lrh();
    s.push(ip_hdr, IPV6_VARIANT);
    s.push(udp_hdr, UDP_VARIANT);
    s.finish(transport)
}

/// ICRC of a native IB packet (LRH:LNH = IBA local or IBA global).
///
/// `grh` is the 40-byte GRH when LNH says one follows the LRH; `transport` runs from the first
/// BTH byte through the last pad byte. The LRH takes no argument: every LRH bit is variant, so
/// it is covered as 8 bytes of 0xFF (see the module documentation), and two packets that differ
/// only in their LRH have the same ICRC. Raw packets (LNH = raw, IPv6 non-IBA) carry no ICRC.
pub fn native(grh: Option<&[u8]>, transport: &[u8]) -> u32 {
    let mut s = Staged::after_lrh();
    if let Some(g) = grh {
        s.push(g, IPV6_VARIANT);
    }
    s.finish(transport)
}

/// Writes `icrc` to the first 4 bytes of `buf` in wire order (least significant byte first);
/// returns 4.
pub fn put(buf: &mut [u8], icrc: u32) -> Result<usize> {
    check_len(Header::Icrc, buf, LEN)?;
    buf[..LEN].copy_from_slice(&icrc.to_le_bytes());
    Ok(LEN)
}

/// Reads the ICRC from the first 4 bytes of `buf` (wire order, least significant byte first).
pub fn get(buf: &[u8]) -> Result<u32> {
    check_len(Header::Icrc, buf, LEN)?;
    Ok(u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]))
}

/// Splits `transport_and_icrc` into the covered bytes and the ICRC found at its end.
fn split(transport_and_icrc: &[u8]) -> Result<(&[u8], u32)> {
    let have = transport_and_icrc.len();
    if have < LEN {
        return Err(Error::truncated(Header::Icrc, LEN, have));
    }
    let (covered, tail) = transport_and_icrc.split_at(have - LEN);
    Ok((covered, get(tail)?))
}

fn compare(computed: u32, found: u32) -> Result<()> {
    if computed == found {
        Ok(())
    } else {
        Err(Error::Icrc { computed, found })
    }
}

/// Checks the ICRC at the end of `transport_and_icrc` (BTH .. ICRC) of a RoCEv2/IPv4 packet.
pub fn verify_roce_v4(ip_hdr: &[u8], udp_hdr: &[u8], transport_and_icrc: &[u8]) -> Result<()> {
    let (covered, found) = split(transport_and_icrc)?;
    compare(roce_v4(ip_hdr, udp_hdr, covered), found)
}

/// Checks the ICRC at the end of `transport_and_icrc` (BTH .. ICRC) of a RoCEv2/IPv6 packet.
pub fn verify_roce_v6(ip_hdr: &[u8], udp_hdr: &[u8], transport_and_icrc: &[u8]) -> Result<()> {
    let (covered, found) = split(transport_and_icrc)?;
    compare(roce_v6(ip_hdr, udp_hdr, covered), found)
}

/// Checks the ICRC at the end of `transport_and_icrc` (BTH .. ICRC) of a native IB packet.
pub fn verify_native(grh: Option<&[u8]>, transport_and_icrc: &[u8]) -> Result<()> {
    let (covered, found) = split(transport_and_icrc)?;
    compare(native(grh, covered), found)
}

// ---------------------------------------------------------------------------------------------
// The IPv4 Identification.
//
// CRC-32 is affine in the message bits: for two messages of equal length,
// crc(A ^ D) = crc(A) ^ lin(D), where lin is the CRC with initial value and final XOR 0, i.e.
// D(x) * x^32 mod P. A change confined to the 16 Identification bits, followed by n covered
// bytes, changes the ICRC by lin(id bytes) * x^(8n) mod P: a linear, injective map of the
// 16-bit change (P has a non-zero constant term, so x is invertible mod P). Polynomials are in
// the reflected representation of zlib's crc32_combine: bit 31 holds x^0, bit 0 holds x^31.
// ---------------------------------------------------------------------------------------------

/// The reflected CRC-32 polynomial.
const POLY: u32 = 0xEDB8_8320;
/// x^0, the multiplicative identity, in the reflected representation.
const ONE: u32 = 1 << 31;
/// Byte offset of the Identification in the IPv4 header.
const IDENT_AT: usize = 4;

/// a(x) * b(x) mod P.
const fn multmodp(mut a: u32, mut b: u32) -> u32 {
    let mut p = 0;
    while a != 0 {
        if a & ONE != 0 {
            p ^= b;
        }
        a <<= 1;
        b = if b & 1 != 0 { (b >> 1) ^ POLY } else { b >> 1 };
    }
    p
}

/// a(x) * b(x) mod P, as [`multmodp`] but faster at run time (no branch on the bits of `a`):
/// the 63-bit carry-less product is formed four bits of `a` at a time, then its upper 32
/// coefficients are reduced with four steps of the byte-wise CRC table, as four zero bytes
/// fed to a CRC register would.
#[inline]
fn mul(a: u32, b: u32) -> u32 {
    let b = u64::from(b);
    let mut t = [0u64; 16];
    t[1] = b;
    t[2] = b << 1;
    t[4] = b << 2;
    t[8] = b << 3;
    t[3] = t[2] ^ b;
    t[5] = t[4] ^ b;
    t[6] = t[4] ^ t[2];
    t[7] = t[6] ^ b;
    let mut i = 9;
    while i < 16 {
        t[i] = t[8] ^ t[i - 8];
        i += 1;
    }
    let a = u64::from(a);
    let mut p = 0u64;
    let mut k = 0;
    while k < 32 {
        p ^= t[((a >> k) & 0xf) as usize] << k;
        k += 4;
    }
    // Reflected: bit 63 - m of `p << 1` holds x^m.
    let p = p << 1;
    let mut c = p as u32;
    for _ in 0..4 {
        c = (c >> 8) ^ CRC_TABLE[(c & 0xff) as usize];
    }
    (p >> 32) as u32 ^ c
}

/// `X2N[k]` = x^(2^k) mod P.
const X2N: [u32; 32] = {
    let mut t = [0u32; 32];
    t[0] = ONE >> 1;
    let mut k = 1;
    while k < 32 {
        t[k] = multmodp(t[k - 1], t[k - 1]);
        k += 1;
    }
    t
};

/// x^(8n) mod P: the effect of `n` more bytes after a change (O(log n) multiplications).
fn x8n(mut n: u64) -> u32 {
    let mut p = ONE;
    let mut k = 3;
    while n != 0 {
        if n & 1 != 0 {
            p = mul(X2N[k % 32], p);
        }
        n >>= 1;
        k += 1;
    }
    p
}

/// x^-1 mod P. With P = x^32 + p(x) and p(0) = 1: x * (x^31 + (p(x) - 1) / x) = x^32 + p(x) - 1
/// = 1 mod P. In the normal representation that is 0x8260_8EDB; bit-reversed here.
const X_INV: u32 = (0x8000_0000u32 | (0x04C1_1DB7u32 >> 1)).reverse_bits();

/// Powers of x^-8: `.0[a]` = x^(-8a), `.1[b]` = x^(-2048b), so that x^(-8n) for n < 65536 is
/// one product.
const X_INV8N: ([u32; 256], [u32; 256]) = {
    let mut x_inv8 = ONE;
    let mut i = 0;
    while i < 8 {
        x_inv8 = multmodp(x_inv8, X_INV);
        i += 1;
    }
    let mut lo = [0u32; 256];
    let mut hi = [0u32; 256];
    lo[0] = ONE;
    let mut a = 1;
    while a < 256 {
        lo[a] = multmodp(lo[a - 1], x_inv8);
        a += 1;
    }
    let x_inv2048 = multmodp(lo[255], x_inv8);
    hi[0] = ONE;
    let mut b = 1;
    while b < 256 {
        hi[b] = multmodp(hi[b - 1], x_inv2048);
        b += 1;
    }
    (lo, hi)
};

/// The byte-wise CRC table: `CRC_TABLE[b]` = lin(b), one byte.
const CRC_TABLE: [u32; 256] = {
    let mut t = [0u32; 256];
    let mut n = 0;
    while n < 256 {
        let mut c = n as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 { (c >> 1) ^ POLY } else { c >> 1 };
            k += 1;
        }
        t[n] = c;
        n += 1;
    }
    t
};

/// lin(hi byte, 0): the high (first) Identification byte, followed by one more byte.
const IDENT_HI: [u32; 256] = {
    let mut t = [0u32; 256];
    let mut n = 0;
    while n < 256 {
        let c = CRC_TABLE[n];
        t[n] = CRC_TABLE[(c & 0xff) as usize] ^ (c >> 8);
        n += 1;
    }
    t
};

/// lin of the two Identification bytes (big-endian on the wire) with nothing after them.
#[inline]
const fn ident_lin(id: u16) -> u32 {
    IDENT_HI[(id >> 8) as usize] ^ CRC_TABLE[(id & 0xff) as usize]
}

/// The left inverse of [`ident_lin`] as four byte tables: `IDENT_OF[j][b]` is the Identification
/// contribution of byte `j` (bits 8j..8j+8) of a 32-bit value. For y = ident_lin(id) the XOR of
/// the four contributions is id; for y outside the image it is some id with ident_lin(id) != y.
const IDENT_OF: [[u16; 256]; 4] = {
    // Reduced echelon form of the 16 images ident_lin(1 << i): every pivot bit is set in
    // exactly one basis vector, so y = XOR of the basis vectors whose pivot bits y has set.
    let mut y = [0u32; 16];
    let mut id = [0u16; 16];
    let mut pivot = [0u32; 16];
    let mut i = 0;
    while i < 16 {
        y[i] = ident_lin(1 << i);
        id[i] = 1 << i;
        let mut j = 0;
        while j < i {
            if y[i] & pivot[j] != 0 {
                y[i] ^= y[j];
                id[i] ^= id[j];
            }
            j += 1;
        }
        // Non-zero: the images are linearly independent (ident_lin is injective).
        pivot[i] = 1 << (31 - y[i].leading_zeros());
        let mut j = 0;
        while j < i {
            if y[j] & pivot[i] != 0 {
                y[j] ^= y[i];
                id[j] ^= id[i];
            }
            j += 1;
        }
        i += 1;
    }
    let mut t = [[0u16; 256]; 4];
    let mut byte = 0;
    while byte < 4 {
        let mut b = 0;
        while b < 256 {
            let v = (b as u32) << (8 * byte);
            let mut acc = 0u16;
            let mut k = 0;
            while k < 16 {
                if v & pivot[k] != 0 {
                    acc ^= id[k];
                }
                k += 1;
            }
            t[byte][b] = acc;
            b += 1;
        }
        byte += 1;
    }
    t
};

/// The Identification change whose ICRC change, with `after` covered bytes behind the
/// Identification, is `diff`; `None` if no change of the Identification yields `diff`.
#[inline]
fn ident_change_for(diff: u32, after: usize) -> Option<u16> {
    if after >= 1 << 16 {
        // Longer than any IPv4 packet.
        return None;
    }
    let undo = mul(X_INV8N.0[after & 0xff], X_INV8N.1[after >> 8]);
    let y = mul(undo, diff);
    let id = IDENT_OF[0][(y & 0xff) as usize]
        ^ IDENT_OF[1][((y >> 8) & 0xff) as usize]
        ^ IDENT_OF[2][((y >> 16) & 0xff) as usize]
        ^ IDENT_OF[3][(y >> 24) as usize];
    (ident_lin(id) == y).then_some(id)
}

/// Covered bytes behind the Identification of a RoCEv2/IPv4 packet whose IPv4 header is
/// `ip_hdr_len` bytes and whose UDP payload (BTH through ICRC) is `udp_payload_len` bytes.
fn bytes_after_ident(ip_hdr_len: usize, udp_payload_len: usize) -> usize {
    (ip_hdr_len + udp::LEN + udp_payload_len).saturating_sub(IDENT_AT + 2 + LEN)
}

/// How the ICRC of a RoCEv2/IPv4 packet of a given size changes with its IPv4 Identification,
/// without a pass over the packet.
///
/// The ICRC covers the Identification, so a packet whose Identification is rewritten (the
/// kernel numbers the segments of a UDP GSO send base, base + 1, ...) needs a new ICRC:
/// `icrc(id) = icrc(0) ^ shift.delta(id)`. [`Ipv4IdentShift::new`] costs O(log n) carry-less
/// multiplications for n bytes; [`Ipv4IdentShift::delta`] one, plus two table look-ups. For the
/// many small changes of one GSO run or GRO buffer, [`Ipv4IdentShift::deltas`] precomputes one
/// multiplication per bit of the largest change, after which each delta is two look-ups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4IdentShift {
    /// n, the covered bytes behind the Identification (what the shift was made for).
    after: usize,
    /// x^(8n) mod P.
    shift: u32,
}

impl Ipv4IdentShift {
    /// For packets with an IPv4 header of `ip_hdr_len` bytes (20 without options) and a UDP
    /// payload of `udp_payload_len` bytes (BTH through ICRC: what a UDP socket sends).
    pub fn new(ip_hdr_len: usize, udp_payload_len: usize) -> Ipv4IdentShift {
        let after = bytes_after_ident(ip_hdr_len, udp_payload_len);
        Ipv4IdentShift {
            after,
            shift: x8n(after as u64),
        }
    }

    /// The value to XOR into the ICRC when the Identification changes by `change` (from `a` to
    /// `b`: `change = a ^ b`; from 0 to `id`: `change = id`).
    #[inline]
    pub fn delta(&self, change: u16) -> u32 {
        mul(self.shift, ident_lin(change))
    }

    /// [`Ipv4IdentShift::delta`] out of line: a change its tables do not cover.
    #[cold]
    #[inline(never)]
    fn delta_cold(&self, change: u16) -> u32 {
        self.delta(change)
    }

    /// The deltas of every change up to `max`, each from then on two table look-ups (one
    /// multiplication per bit of `max`, at most 8, and 30 XORs).
    pub fn deltas(&self, max: u8) -> Ipv4IdentDeltas {
        let bits = u8::BITS - max.leading_zeros();
        let mut bit = [0u32; 8];
        for (i, d) in bit.iter_mut().enumerate().take(bits as usize) {
            *d = mul(self.shift, ident_lin(1 << i));
        }
        let mut nibbles = [[0u32; 16]; 2];
        for (half, table) in nibbles.iter_mut().enumerate() {
            for c in 1..16 {
                // c without its lowest set bit, plus that bit's delta.
                table[c] = table[c & (c - 1)] ^ bit[4 * half + c.trailing_zeros() as usize];
            }
        }
        Ipv4IdentDeltas {
            shift: *self,
            nibbles,
            bits,
        }
    }
}

/// [`Ipv4IdentShift::delta`] for small changes, by table ([`Ipv4IdentShift::deltas`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4IdentDeltas {
    shift: Ipv4IdentShift,
    /// `nibbles[0][c]` = the delta of change `c`, `nibbles[1][c]` that of change `c << 4`
    /// (c < 16; entries of bits at or above `bits` are 0): the delta is linear in the change.
    nibbles: [[u32; 16]; 2],
    bits: u32,
}

impl Ipv4IdentDeltas {
    /// [`Ipv4IdentShift::delta`] of `change`: two look-ups when `change` is at most the `max`
    /// this was made for, one multiplication otherwise.
    #[inline(always)]
    pub fn delta(&self, change: u16) -> u32 {
        if u32::from(change) >> self.bits != 0 {
            return self.shift.delta_cold(change);
        }
        let c = usize::from(change);
        self.nibbles[0][c & 0xf] ^ self.nibbles[1][c >> 4]
    }

    /// The shift these deltas were made from.
    pub fn shift(&self) -> &Ipv4IdentShift {
        &self.shift
    }

    /// True when the delta of `change` is a table look-up (not a multiplication).
    #[inline]
    pub fn covers(&self, change: u16) -> bool {
        u32::from(change) >> self.bits == 0
    }
}

/// [`Ipv4IdentDeltas`] of the two packet sizes used last, for senders and receivers that see a
/// few sizes over and over (a GSO run's full segments and its shorter last one; a ping-pong's
/// request and its ACK). A size met for the first time costs an [`Ipv4IdentShift::new`] and
/// one multiplication per bit of the change asked for; a later change with more bits, the
/// multiplications of the bits it adds. Every answer is exactly [`Ipv4IdentShift::delta`].
#[derive(Debug, Clone, Default)]
pub struct Ipv4IdentDeltaCache {
    /// (UDP payload length, deltas for a header without options), filled in place.
    slots: [Option<(usize, Ipv4IdentDeltas)>; 2],
    /// The slot used last; a new size replaces the other one.
    mru: usize,
}

impl Ipv4IdentDeltaCache {
    /// The deltas of packets with `udp_payload_len` bytes of UDP payload (BTH .. ICRC) behind
    /// a 20-byte IPv4 header, made to cover `change` by table when it is below 256. A hit is
    /// a comparison or two: the tables stay where they are.
    #[inline]
    pub fn get(&mut self, udp_payload_len: usize, change: u16) -> &Ipv4IdentDeltas {
        let want = u8::try_from(change).unwrap_or(u8::MAX);
        let at = match (&self.slots[self.mru], &self.slots[self.mru ^ 1]) {
            (Some((len, d)), _) if *len == udp_payload_len && d.covers(u16::from(want)) => self.mru,
            (_, Some((len, d))) if *len == udp_payload_len && d.covers(u16::from(want)) => {
                self.mru ^ 1
            }
            _ => self.fill(udp_payload_len, want),
        };
        self.mru = at;
        match &self.slots[at] {
            Some((_, d)) => d,
            None => unreachable!("slot {at} was just filled"),
        }
    }

    /// Makes the deltas of `udp_payload_len` cover `want` in the slot that holds that size
    /// (widening it: the bits covered so far and those of `want`), or in the older slot;
    /// returns the slot.
    #[cold]
    fn fill(&mut self, udp_payload_len: usize, want: u8) -> usize {
        let hit = (0..2).find(|&i| self.slots[i].is_some_and(|(len, _)| len == udp_payload_len));
        let (at, deltas) = match hit.and_then(|i| self.slots[i].map(|(_, d)| (i, d))) {
            Some((i, d)) => (i, d.shift.deltas(want | ((1u32 << d.bits) - 1) as u8)),
            None => (
                self.mru ^ 1,
                Ipv4IdentShift::new(ipv4::LEN, udp_payload_len).deltas(want),
            ),
        };
        // A fresh cache fills slot 0 first.
        let at = if self.slots[0].is_none() { 0 } else { at };
        self.slots[at] = Some((udp_payload_len, deltas));
        at
    }

    /// [`Ipv4IdentShift::delta`] of `change` for packets of `udp_payload_len` bytes of UDP
    /// payload behind a 20-byte IPv4 header.
    #[inline]
    pub fn delta(&mut self, udp_payload_len: usize, change: u16) -> u32 {
        self.get(udp_payload_len, change).delta(change)
    }
}

/// The IPv4 Identification under which the ICRC at the end of `transport_and_icrc` (BTH ..
/// ICRC) of a RoCEv2/IPv4 packet is right, the other header fields as in `ip_hdr` and
/// `udp_hdr`.
///
/// A receiver on a UDP socket does not see the Identification the sender's kernel wrote, yet
/// the ICRC covers it. This returns the Identification found in `ip_hdr` when the ICRC
/// verifies as the header stands (one ICRC pass, the cost of [`verify_roce_v4`]); otherwise
/// it solves for the one Identification (if any) that makes the ICRC match, from the
/// difference alone: two carry-less multiplications and six table look-ups, no second pass.
/// The Identification is unique when it exists. If none matches, the error is the
/// [`Error::Icrc`] of the header as given.
///
/// Strength: with the Identification unknown, 16 of the 32 ICRC bits remain a check. The ICRC
/// differences that some Identification explains form a 16-dimensional subspace of the 2^32
/// possible ones, so a randomly corrupted packet is accepted with probability 2^-16 (instead
/// of 2^-32), and the CRC-32 guarantees for short bursts and few bit errors no longer hold for
/// every pattern: an error that an Identification change happens to cancel passes. Everything
/// but the Identification is still covered.
pub fn solve_roce_v4_ident(
    ip_hdr: &[u8],
    udp_hdr: &[u8],
    transport_and_icrc: &[u8],
) -> Result<u16> {
    solve_roce_v4_ident_hinted(ip_hdr, udp_hdr, transport_and_icrc, None)
}

/// [`solve_roce_v4_ident`] with a guess: `hint` is an [`Ipv4IdentShift`] made for packets of
/// this size and the Identification the packet most likely carries (segment k of a GSO run:
/// base + k). When the ICRC does not verify as the header stands, the guess is tried first, a
/// few XORs ([`Ipv4IdentShift::delta`] of a change below 256) instead of the solve; if it
/// fails, or the shift was made for another packet size, the solve runs as without a hint.
///
/// The result is exactly that of [`solve_roce_v4_ident`], hint or not: the Identification
/// that explains an ICRC difference is unique, and a guess is accepted only when it explains
/// the difference for this packet's size, so the strength statement there holds unchanged.
pub fn solve_roce_v4_ident_hinted(
    ip_hdr: &[u8],
    udp_hdr: &[u8],
    transport_and_icrc: &[u8],
    hint: Option<(&Ipv4IdentDeltas, u16)>,
) -> Result<u16> {
    let given = match ip_hdr.get(IDENT_AT..IDENT_AT + 2) {
        Some(b) => u16::from_be_bytes([b[0], b[1]]),
        None => return Err(Error::truncated(Header::Ipv4, ipv4::LEN, ip_hdr.len())),
    };
    let (covered, found) = split(transport_and_icrc)?;
    let computed = roce_v4(ip_hdr, udp_hdr, covered);
    let after = (ip_hdr.len() - IDENT_AT - 2) + udp_hdr.len() + covered.len();
    solve_from(given, computed, found, after, || hint)
}

/// Length of the untagged Ethernet header [`solve_roce_v4_frame_ident`] expects.
const ETH_LEN: usize = 14;

/// [`solve_roce_v4_ident_hinted`] over a whole frame: an untagged Ethernet header, an IPv4
/// header without options, UDP, BTH .. ICRC, the UDP length saying where the ICRC ends
/// (Ethernet padding may follow).
///
/// The ICRC is computed over the frame itself, its payload not copied: the LRH stand-in, the
/// masked IPv4 header and the UDP ports are one small pass ([`v4_headers_pass`]), finished
/// over the UDP datagram ([`solve_roce_v4_udp_ident`]), whose variant bits (the UDP checksum,
/// the BTH's) are written into the frame for the pass and then put back, so the frame is left
/// as it was. The result is that of [`solve_roce_v4_ident_hinted`] over the frame's IP header,
/// UDP header and BTH .. ICRC; a frame without that layout (another EtherType, IPv4 options,
/// a UDP length that does not fit) is an error.
pub fn solve_roce_v4_frame_ident(
    frame: &mut [u8],
    hint: Option<(&Ipv4IdentDeltas, u16)>,
) -> Result<u16> {
    solve_roce_v4_frame_ident_lazy(frame, || hint)
}

/// Two kept values by key, the one used less recently replaced by a new key: the prefix
/// passes of a QP's last two IP total lengths ([`crate::roce::V4PrefixCrc`]) or of the last
/// two sizes of a receiver's rebuilt header ([`v4_headers_pass`]). Keys and values are kept
/// apart (a QP holds one of the former: a `u16` key beside a 16-byte value packs two slots
/// into 40 bytes). `K::default()` is "none" and must never be looked up. Slot 0 holds the one
/// used last, so a stream of one key finds it at the first look and writes nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TwoSlots<K, V> {
    keys: [K; 2],
    values: [V; 2],
}

impl<K: PartialEq, V> TwoSlots<K, V> {
    /// The value of `key`, made by `make` (and kept, in place of the one used less recently)
    /// when neither slot holds it.
    #[inline(always)]
    pub fn get_or_make(&mut self, key: K, make: impl FnOnce(&K) -> V) -> &V {
        if self.keys[0] != key {
            if self.keys[1] != key {
                self.keys[1] = key;
                self.values[1] = make(&self.keys[1]);
            }
            self.keys.swap(0, 1);
            self.values.swap(0, 1);
        }
        &self.values[0]
    }

    /// The value kept for `key`, if a slot holds it (the slots are left as they are).
    #[inline(always)]
    pub fn get(&self, key: &K) -> Option<&V> {
        self.keys
            .iter()
            .position(|k| k == key)
            .map(|i| &self.values[i])
    }
}

/// The ICRC pass over what an IPv4 RoCEv2 packet's ICRC covers before its UDP length: the
/// LRH stand-in, the IPv4 header (without options, its variant fields masked) and the UDP
/// ports. A receiver that rebuilds the headers of a peer's datagrams makes it once per header
/// and finishes it over each UDP datagram ([`solve_roce_v4_udp_ident`]). (The 32 bytes of the
/// pass leave 20 bytes for an ACK's rest and 80 for a 64-byte SEND's: PCLMULQDQ folding runs
/// 16 bytes at a time.)
pub fn v4_headers_pass(ip_hdr: &[u8; ipv4::LEN], udp_hdr: &[u8; udp::LEN]) -> Continued {
    let mut p = [0xFFu8; LRH_LEN + ipv4::LEN + 4];
    p[LRH_LEN..LRH_LEN + ipv4::LEN].copy_from_slice(ip_hdr);
    for &(off, bits) in IPV4_VARIANT {
        p[LRH_LEN + off] |= bits;
    }
    p[LRH_LEN + ipv4::LEN..].copy_from_slice(&udp_hdr[..4]);
    Continued::after(&p)
}

/// [`solve_roce_v4_ident_hinted`] for a UDP datagram (its header, then BTH .. ICRC, exactly)
/// whose IPv4 header and UDP ports made `headers` ([`v4_headers_pass`]), the IPv4 header
/// holding Identification `given`; the hint is made only when the ICRC does not verify under
/// `given`. The variant bits (the UDP checksum, the BTH's) are written into `udp` for the
/// pass and put back, so it is left as it was; a datagram with no room for a BTH and an ICRC
/// is an error.
#[inline(always)]
pub fn solve_roce_v4_udp_ident<'d>(
    headers: &Continued,
    given: u16,
    udp: &mut [u8],
    hint: impl FnOnce() -> Option<(&'d Ipv4IdentDeltas, u16)>,
) -> Result<u16> {
    let n = udp.len();
    if n < udp::LEN + bth::LEN + LEN {
        return Err(Error::truncated(Header::Icrc, udp::LEN + bth::LEN + LEN, n));
    }
    let variant = udp::LEN + bth::ICRC_MASKED_BYTE;
    let saved = [udp[6], udp[7], udp[variant]];
    udp[6] = 0xFF;
    udp[7] = 0xFF;
    udp[variant] = 0xFF;
    let computed = headers.finish(&udp[4..n - LEN]);
    udp[6] = saved[0];
    udp[7] = saved[1];
    udp[variant] = saved[2];
    let found = get(&udp[n - LEN..])?;
    // The covered bytes behind the Identification: the rest of the IPv4 header, the UDP
    // datagram up to its ICRC.
    let after = ipv4::LEN - IDENT_AT - 2 + n - LEN;
    solve_from(given, computed, found, after, hint)
}

/// [`solve_roce_v4_frame_ident`] with the hint made only when it is needed: when the ICRC
/// does not verify under the Identification the frame holds.
pub fn solve_roce_v4_frame_ident_lazy<'d>(
    frame: &mut [u8],
    hint: impl FnOnce() -> Option<(&'d Ipv4IdentDeltas, u16)>,
) -> Result<u16> {
    const UDP_AT: usize = ipv4::LEN;
    let have = frame.len();
    let ether_type = match frame.get(12..14) {
        Some(t) => u16::from_be_bytes([t[0], t[1]]),
        None => return Err(Error::truncated(Header::Ethernet, ETH_LEN, have)),
    };
    let Some(hdrs) = frame
        .get(ETH_LEN..)
        .and_then(|f| f.first_chunk::<{ V4_HEADERS_LEN }>())
    else {
        return Err(Error::truncated(
            Header::Ipv4,
            ETH_LEN + V4_HEADERS_LEN,
            have,
        ));
    };
    if ether_type != crate::ethernet::ETHERTYPE_IPV4 {
        return Err(Error::BadField {
            field: crate::error::Field::EtherType,
            value: u64::from(ether_type),
        });
    }
    if hdrs[0] != 0x45 {
        return Err(Error::BadField {
            field: crate::error::Field::Ipv4Ihl,
            value: u64::from(hdrs[0] & 0x0f),
        });
    }
    let udp_len = usize::from(u16::from_be_bytes([hdrs[UDP_AT + 4], hdrs[UDP_AT + 5]]));
    let end = UDP_AT + udp_len;
    if udp_len < udp::LEN + bth::LEN + LEN || end > have - ETH_LEN {
        return Err(Error::truncated(Header::Icrc, ETH_LEN + end, have));
    }
    let given = u16::from_be_bytes([hdrs[IDENT_AT], hdrs[IDENT_AT + 1]]);
    let (ip, rest) = hdrs.split_at(ipv4::LEN);
    let (Ok(ip), Some(udp_hdr)) = (<&[u8; ipv4::LEN]>::try_from(ip), rest.first_chunk()) else {
        return Err(Error::truncated(
            Header::Udp,
            ETH_LEN + V4_HEADERS_LEN,
            have,
        ));
    };
    let headers = v4_headers_pass(ip, udp_hdr);
    solve_roce_v4_udp_ident(
        &headers,
        given,
        &mut frame[ETH_LEN + UDP_AT..ETH_LEN + end],
        hint,
    )
}

/// IPv4 + UDP + BTH.
const V4_HEADERS_LEN: usize = ipv4::LEN + udp::LEN + bth::LEN;

/// The end of the solves: `computed` is the ICRC under Identification `given`, `found` the
/// packet's, `after` the covered bytes behind the Identification.
#[inline(always)]
fn solve_from<'d>(
    given: u16,
    computed: u32,
    found: u32,
    after: usize,
    hint: impl FnOnce() -> Option<(&'d Ipv4IdentDeltas, u16)>,
) -> Result<u16> {
    if computed == found {
        return Ok(given);
    }
    if let Some((deltas, guess)) = hint() {
        let change = given ^ guess;
        if deltas.shift.after == after && computed ^ deltas.delta(change) == found {
            return Ok(guess);
        }
    }
    match ident_change_for(computed ^ found, after) {
        Some(change) => Ok(given ^ change),
        None => Err(Error::Icrc { computed, found }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pcap::{PcapReader, LINKTYPE_ETHERNET};

    const VECTORS: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/testvectors/rxe"
    );

    /// One RoCEv2 packet cut out of a capture: IP header, UDP header, BTH .. ICRC.
    struct Roce {
        v6: bool,
        ip: Vec<u8>,
        udp: Vec<u8>,
        rest: Vec<u8>,
    }

    impl Roce {
        fn icrc(&self) -> u32 {
            let covered = &self.rest[..self.rest.len() - LEN];
            if self.v6 {
                roce_v6(&self.ip, &self.udp, covered)
            } else {
                roce_v4(&self.ip, &self.udp, covered)
            }
        }
        fn ok(&self) -> bool {
            let r = if self.v6 {
                verify_roce_v6(&self.ip, &self.udp, &self.rest)
            } else {
                verify_roce_v4(&self.ip, &self.udp, &self.rest)
            };
            r.is_ok()
        }
    }

    /// Every UDP/4791 packet of every capture, split with a minimal hand parser (independent of
    /// the crate's packet parsers).
    fn roce_packets() -> Vec<(String, Roce)> {
        let mut out = Vec::new();
        let mut names: Vec<_> = std::fs::read_dir(VECTORS)
            .expect("test vectors")
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "pcap"))
            .collect();
        names.sort();
        assert!(names.len() >= 10, "too few captures in {VECTORS}");
        for path in names {
            let data = std::fs::read(&path).unwrap();
            let rd = PcapReader::new(&data).unwrap();
            assert_eq!(rd.link_type(), LINKTYPE_ETHERNET);
            for rec in rd.records() {
                let f = rec.unwrap().data;
                let et = u16::from_be_bytes([f[12], f[13]]);
                let ip = &f[14..];
                let (v6, ihl, proto) = match et {
                    0x0800 => (false, usize::from(ip[0] & 0xf) * 4, ip[9]),
                    0x86dd => (true, 40, ip[6]),
                    _ => continue,
                };
                let udp = &ip[ihl..];
                if proto != 17 || u16::from_be_bytes([udp[2], udp[3]]) != udp::ROCEV2_PORT {
                    continue;
                }
                let ulen = usize::from(u16::from_be_bytes([udp[4], udp[5]]));
                out.push((
                    path.file_name().unwrap().to_string_lossy().into_owned(),
                    Roce {
                        v6,
                        ip: ip[..ihl].to_vec(),
                        udp: udp[..8].to_vec(),
                        rest: udp[8..ulen].to_vec(),
                    },
                ));
            }
        }
        out
    }

    /// rxe's seed is the CRC register after the 8 all-ones bytes softib feeds for the LRH, so
    /// seeding with it and skipping the stand-in gives the same ICRC.
    #[test]
    fn rxe_seed_is_register_after_eight_ones() {
        assert_eq!(!crc32fast::hash(&[0xff; 8]), LRH_MASKED_REGISTER);
        let t = *b"123456789abcdef";
        let mut m = t;
        m[4] = 0xff;
        let mut h = Hasher::new_with_initial(!LRH_MASKED_REGISTER);
        h.update(&m);
        assert_eq!(native(None, &t), h.finalize());
    }

    /// The mask tables agree with the per-header helpers of `ipv4` and `udp`.
    #[test]
    fn variant_tables_match_header_helpers() {
        let apply = |len: usize, variant: &[(usize, u8)]| {
            let mut b = vec![0u8; len];
            for &(off, bits) in variant {
                b[off] |= bits;
            }
            b
        };
        assert_eq!(apply(20, IPV4_VARIANT), ipv4::icrc_masked(&[0; 20]));
        assert_eq!(apply(8, UDP_VARIANT), udp::icrc_masked(&[0; 8]));
        let mut v6 = apply(40, IPV6_VARIANT);
        assert_eq!(&v6[..8], &[0x0f, 0xff, 0xff, 0xff, 0, 0, 0, 0xff]);
        v6[..8].fill(0);
        assert!(v6.iter().all(|&b| b == 0));
        for t in [IPV4_VARIANT, IPV6_VARIANT, UDP_VARIANT, BTH_VARIANT] {
            assert!(t.iter().all(|&(off, _)| off < VARIANT_SPAN));
        }
    }

    /// IPv4 options are covered unmasked, after the masked fixed header.
    #[test]
    fn ipv4_options_are_covered() {
        let mut ip = [0u8; 24];
        ip[..20].copy_from_slice(&[
            0x46, 0x00, 0x00, 0x70, 0xe8, 0x0e, 0x40, 0x00, 0x40, 0x11, 0, 0, 10, 99, 0, 2, 10, 99,
            0, 3,
        ]);
        ip[20..].copy_from_slice(&[0x94, 0x04, 0x00, 0x00]);
        let udp = [0xc1, 0x69, 0x12, 0xb7, 0x00, 0x1c, 0x00, 0x00];
        let t = [
            0x11u8, 0, 0xff, 0xff, 0, 0, 0, 0x13, 0, 0, 0, 1, 0x1f, 0, 0, 1,
        ];
        let mut s = vec![0xffu8; 8];
        let mut i = ip;
        for &(off, bits) in IPV4_VARIANT {
            i[off] |= bits;
        }
        s.extend_from_slice(&i);
        s.extend_from_slice(&udp::icrc_masked(&udp));
        let mut tt = t;
        tt[4] = 0xff;
        s.extend_from_slice(&tt);
        assert_eq!(roce_v4(&ip, &udp, &t), crc32fast::hash(&s));
        let mut ip2 = ip;
        ip2[23] = 1;
        assert_ne!(roce_v4(&ip2, &udp, &t), roce_v4(&ip, &udp, &t));
    }

    /// Oversized or split inputs are covered byte for byte like the explicit string.
    #[test]
    fn oversized_headers_are_covered_as_given() {
        let ip = [0x11u8; 100];
        let udp = [0x22u8; 9];
        let t = [0x33u8; 20];
        let mut s = vec![0xffu8; 8];
        let mut i = ip.to_vec();
        for &(off, bits) in IPV4_VARIANT {
            i[off] |= bits;
        }
        s.extend_from_slice(&i);
        let mut u = udp.to_vec();
        u[6] = 0xff;
        u[7] = 0xff;
        s.extend_from_slice(&u);
        let mut tt = t.to_vec();
        tt[4] = 0xff;
        s.extend_from_slice(&tt);
        assert_eq!(roce_v4(&ip, &udp, &t), crc32fast::hash(&s));
    }

    #[test]
    fn every_capture_packet_verifies() {
        let pkts = roce_packets();
        assert!(pkts.len() > 300, "only {} RoCEv2 packets", pkts.len());
        assert!(pkts.iter().any(|(_, p)| p.v6), "no IPv6 capture");
        for (file, p) in &pkts {
            assert!(p.ok(), "{file}: bad ICRC on {:02x?}", &p.rest[..12]);
            // The general (staged) path agrees with the fixed-size fast path.
            let mut s = Staged::after_lrh();
            s.push(&p.ip, if p.v6 { IPV6_VARIANT } else { IPV4_VARIANT });
            s.push(&p.udp, UDP_VARIANT);
            assert_eq!(s.finish(&p.rest[..p.rest.len() - LEN]), p.icrc());
        }
    }

    #[derive(Clone, Copy)]
    enum Part {
        Ip,
        Udp,
        Rest,
    }

    /// Flips the bits `bit` of byte `at` of `part` and reports whether the ICRC still verifies.
    fn still_ok(p: &Roce, part: Part, at: usize, bit: u8) -> bool {
        let mut q = Roce {
            v6: p.v6,
            ip: p.ip.clone(),
            udp: p.udp.clone(),
            rest: p.rest.clone(),
        };
        match part {
            Part::Ip => q.ip[at] ^= bit,
            Part::Udp => q.udp[at] ^= bit,
            Part::Rest => q.rest[at] ^= bit,
        }
        q.ok()
    }

    #[test]
    fn covered_fields_are_protected_and_variant_fields_are_not() {
        let pkts = roce_packets();
        let v4 = &pkts
            .iter()
            .find(|(_, p)| !p.v6 && p.rest.len() > 40)
            .unwrap()
            .1;
        let v6 = &pkts.iter().find(|(_, p)| p.v6).unwrap().1;
        use Part::{Ip as ip, Rest as rest, Udp as udp};
        for p in [v4, v6] {
            let src_addr = if p.v6 { 8 } else { 12 };
            let dst_addr = if p.v6 { 39 } else { 19 };
            // Covered: addresses, ports, UDP length, BTH opcode / P_Key / DestQP / PSN,
            // AckReq, payload bytes.
            assert!(!still_ok(p, ip, src_addr, 0x01));
            assert!(!still_ok(p, ip, dst_addr, 0x80));
            assert!(!still_ok(p, udp, 0, 0x01));
            assert!(!still_ok(p, udp, 3, 0x01));
            assert!(!still_ok(p, udp, 5, 0x04));
            for (at, bit) in [(0, 1), (2, 0x80), (7, 1), (8, 0x80), (11, 1), (12, 1)] {
                assert!(!still_ok(p, rest, at, bit), "BTH byte {at}");
            }
            let last = p.rest.len() - LEN - 1;
            assert!(!still_ok(p, rest, last, 0x10));
            // The ICRC itself.
            assert!(!still_ok(p, rest, last + 1, 0x01));
            // Variant: BTH FECN, BECN, Resv6a; UDP checksum.
            for bit in [0x80, 0x40, 0x01] {
                assert!(still_ok(p, rest, 4, bit));
            }
            assert!(still_ok(p, udp, 6, 0xff));
            assert!(still_ok(p, udp, 7, 0x01));
        }
        // IPv4: TOS (DSCP and ECN), TTL and header checksum are variant; ID, flags, length and
        // protocol are covered.
        for (at, bit) in [(1, 0x03), (1, 0xfc), (8, 0x40), (10, 0x01), (11, 0x80)] {
            assert!(still_ok(v4, ip, at, bit), "IPv4 byte {at}");
        }
        for (at, bit) in [
            (0, 0x01),
            (2, 0x01),
            (3, 0x04),
            (4, 0x01),
            (6, 0x40),
            (9, 1),
        ] {
            assert!(!still_ok(v4, ip, at, bit), "IPv4 byte {at}");
        }
        // IPv6: traffic class, flow label and hop limit are variant; version, payload length
        // and next header are covered.
        for (at, bit) in [
            (0, 0x08),
            (1, 0xf0),
            (1, 0x01),
            (2, 0xff),
            (3, 0x01),
            (7, 0x40),
        ] {
            assert!(still_ok(v6, ip, at, bit), "IPv6 byte {at}");
        }
        for (at, bit) in [(0, 0x10), (5, 0x01), (6, 0x01)] {
            assert!(!still_ok(v6, ip, at, bit), "IPv6 byte {at}");
        }
    }

    #[test]
    fn wire_order_is_little_endian() {
        let pkts = roce_packets();
        let p = &pkts[0].1;
        let n = p.rest.len();
        let icrc = p.icrc();
        assert_eq!(icrc.to_le_bytes(), p.rest[n - 4..]);
        let mut buf = [0u8; 5];
        assert_eq!(put(&mut buf, 0x1234_5678), Ok(4));
        assert_eq!(buf, [0x78, 0x56, 0x34, 0x12, 0]);
        assert_eq!(get(&buf), Ok(0x1234_5678));
        assert!(put(&mut [0u8; 3], 0).is_err());
        assert!(get(&[0u8; 3]).is_err());
        assert_eq!(
            verify_roce_v4(&p.ip, &p.udp, &p.rest[..3]),
            Err(Error::Truncated {
                header: Header::Icrc,
                need: 4,
                have: 3
            })
        );
        let mut bad = p.rest.clone();
        bad[n - 1] ^= 0x80;
        assert_eq!(
            verify_roce_v4(&p.ip, &p.udp, &bad),
            Err(Error::Icrc {
                computed: icrc,
                found: icrc ^ 0x8000_0000
            })
        );
    }

    /// Native IB covers FF×8 (for the LRH) ‖ masked GRH ‖ masked BTH ‖ rest: built here from
    /// the IPv6 capture (GRH = the IPv6 header with NxtHdr 0x1B) and checked against the CRC of
    /// the explicit byte string.
    #[test]
    fn native_matches_explicit_byte_string() {
        let pkts = roce_packets();
        let p = &pkts.iter().find(|(_, p)| p.v6).unwrap().1;
        let mut grh = p.ip.clone();
        grh[6] = 0x1b;
        let covered = &p.rest[..p.rest.len() - 4];
        let mut s = vec![0xffu8; 8];
        let mut g = grh.clone();
        g[0] |= 0x0f;
        g[1..4].fill(0xff);
        g[7] = 0xff;
        s.extend_from_slice(&g);
        let mut t = covered.to_vec();
        t[4] = 0xff;
        s.extend_from_slice(&t);
        let icrc = native(Some(&grh), covered);
        assert_eq!(icrc, crc32fast::hash(&s));
        // Without a GRH (LNH 2).
        let mut s = vec![0xffu8; 8];
        s.extend_from_slice(&t);
        assert_eq!(native(None, covered), crc32fast::hash(&s));
        // Variant GRH fields and BTH byte 4 do not matter; the GIDs and the payload do.
        let mut g2 = grh.clone();
        g2[1] ^= 0x5a;
        g2[7] = 1;
        let mut c2 = covered.to_vec();
        c2[4] = 0x40;
        assert_eq!(native(Some(&g2), &c2), icrc);
        g2[20] ^= 1;
        assert_ne!(native(Some(&g2), &c2), icrc);
        c2[20] ^= 1;
        assert_ne!(native(None, &c2), native(None, covered));
        // With the ICRC appended, verify_native accepts it.
        let mut with = covered.to_vec();
        with.extend_from_slice(&icrc.to_le_bytes());
        assert_eq!(verify_native(Some(&grh), &with), Ok(()));
        assert!(verify_native(None, &with).is_err());
    }

    #[test]
    fn short_inputs_do_not_panic() {
        for n in 0..14 {
            let b = vec![0x5au8; n];
            let _ = roce_v4(&b, &b, &b);
            let _ = roce_v6(&b, &b, &b);
            let _ = native(Some(&b), &b);
            let _ = native(None, &b);
        }
    }

    /// Throughput against plain `crc32fast` over the same bytes (LRH stand-in, headers, BTH and
    /// a 4 KiB payload), IPv4 and IPv6. Timing-sensitive, so run on demand:
    /// `cargo test --release -p softib-wire icrc_speed -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn icrc_speed() {
        use std::hint::black_box;
        use std::time::Instant;
        let best = |f: &dyn Fn() -> u32| {
            (0..9)
                .map(|_| {
                    let t = Instant::now();
                    let mut x = 0u32;
                    for _ in 0..100_000 {
                        x ^= f();
                    }
                    black_box(x);
                    t.elapsed().as_secs_f64()
                })
                .fold(f64::MAX, f64::min)
        };
        let udp = [0x12u8; 8];
        let transport = vec![0xa5u8; 12 + 4096];
        for ip in [vec![0x45u8; 20], vec![0x60u8; 40]] {
            let mut whole = vec![0xffu8; 8];
            whole.extend_from_slice(&ip);
            whole.extend_from_slice(&udp);
            whole.extend_from_slice(&transport);
            let f: fn(&[u8], &[u8], &[u8]) -> u32 = if ip.len() == 20 { roce_v4 } else { roce_v6 };
            let t_icrc = best(&|| f(black_box(&ip), black_box(&udp), black_box(&transport)));
            let t_plain = best(&|| crc32fast::hash(black_box(&whole)));
            let ratio = t_plain / t_icrc;
            println!("IP header {} bytes: relative speed {ratio:.3}", ip.len());
            assert!(ratio >= 0.8, "ICRC runs at {ratio:.2}x crc32fast");
        }
    }

    /// A deterministic xorshift generator for the tests below.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn bytes(&mut self, n: usize) -> Vec<u8> {
            (0..n).map(|_| self.next() as u8).collect()
        }
    }

    fn with_ident(ip: &[u8], id: u16) -> Vec<u8> {
        let mut v = ip.to_vec();
        v[4..6].copy_from_slice(&id.to_be_bytes());
        v
    }

    #[test]
    fn fast_multiplication_matches_bitwise() {
        let mut rng = Rng(0x1234_5678_9abc_def1);
        for _ in 0..100_000 {
            let (a, b) = (rng.next() as u32, (rng.next() >> 32) as u32);
            assert_eq!(mul(a, b), multmodp(a, b), "{a:#x} {b:#x}");
        }
        for (a, b) in [
            (0, 0),
            (0, 5),
            (u32::MAX, u32::MAX),
            (ONE, 7),
            (1, 1),
            (1, u32::MAX),
        ] {
            assert_eq!(mul(a, b), multmodp(a, b), "{a:#x} {b:#x}");
        }
    }

    #[test]
    fn polynomial_arithmetic() {
        assert_eq!(multmodp(ONE >> 1, X_INV), ONE);
        assert_eq!(multmodp(ONE, 0x1234_5678), 0x1234_5678);
        assert_eq!(x8n(0), ONE);
        for n in [1usize, 2, 255, 256, 257, 4000, 65_535] {
            let undo = multmodp(X_INV8N.0[n & 0xff], X_INV8N.1[n >> 8]);
            assert_eq!(multmodp(undo, x8n(n as u64)), ONE, "n = {n}");
        }
        // x^(8n) is what n zero bytes do to the linear CRC: lin(b, 0 x n) = lin(b) * x^(8n).
        let mut c = CRC_TABLE[0xa7];
        for _ in 0..300 {
            c = CRC_TABLE[(c & 0xff) as usize] ^ (c >> 8);
        }
        assert_eq!(multmodp(x8n(300), CRC_TABLE[0xa7]), c);
        // The Identification map is injective and the left inverse inverts it.
        for id in 0..=u16::MAX {
            let y = ident_lin(id);
            assert_eq!(y == 0, id == 0);
            let back = IDENT_OF[0][(y & 0xff) as usize]
                ^ IDENT_OF[1][((y >> 8) & 0xff) as usize]
                ^ IDENT_OF[2][((y >> 16) & 0xff) as usize]
                ^ IDENT_OF[3][(y >> 24) as usize];
            assert_eq!(back, id);
        }
    }

    /// The ICRC change for a new Identification equals a full recomputation with it written.
    #[test]
    fn ident_delta_matches_recomputation() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for len in [0usize, 1, 3, 12, 16, 44, 76, 1000, 4108, 8192, 65_000] {
            for ihl in [20usize, 24, 60] {
                let ip = rng.bytes(ihl);
                let udp = rng.bytes(8);
                let t = rng.bytes(len);
                let base = roce_v4(&with_ident(&ip, 0), &udp, &t);
                let shift = Ipv4IdentShift::new(ihl, len + LEN);
                for k in [1u16, 2, 63, 0xa5, 0xff, 0x100, 0x8000, rng.next() as u16] {
                    let want = roce_v4(&with_ident(&ip, k), &udp, &t);
                    assert_eq!(base ^ shift.delta(k), want, "len {len} ihl {ihl} id {k}");
                    for max in [0u8, 1, 63, 0xa5, 0xff] {
                        let d = shift.deltas(max).delta(k);
                        assert_eq!(base ^ d, want, "len {len} ihl {ihl} id {k} max {max}");
                    }
                    // From any Identification to any other.
                    let a = rng.next() as u16;
                    let from = roce_v4(&with_ident(&ip, a), &udp, &t);
                    assert_eq!(from ^ shift.delta(a ^ k), want);
                }
            }
        }
    }

    /// The table-driven delta of small changes is the multiplication, for every change.
    #[test]
    fn small_deltas_match_the_multiplication() {
        for len in [12usize, 80, 4108, 65_000] {
            let shift = Ipv4IdentShift::new(20, len);
            let tables = [0u8, 1, 2, 63, 64, 200, 255].map(|max| shift.deltas(max));
            for change in 0..=u16::MAX {
                let want = mul(shift.shift, ident_lin(change));
                assert_eq!(shift.delta(change), want, "len {len} change {change}");
                for d in &tables {
                    assert_eq!(d.delta(change), want, "len {len} change {change} {d:?}");
                }
            }
        }
    }

    /// The cache answers as the multiplication whatever the order of sizes and changes:
    /// hits, misses, evictions, and changes that widen a table or exceed it.
    #[test]
    fn delta_cache_agrees_with_the_multiplication() {
        let mut rng = Rng(0x5eed_cace);
        let mut cache = Ipv4IdentDeltaCache::default();
        let lens = [20usize, 80, 4112, 1000];
        for _ in 0..3000 {
            let len = lens[rng.next() as usize % lens.len()];
            let change = match rng.next() % 4 {
                0 => 1,
                1 => (rng.next() % 64) as u16,
                2 => (rng.next() % 256) as u16,
                _ => rng.next() as u16,
            };
            let want = Ipv4IdentShift::new(20, len).delta(change);
            assert_eq!(cache.delta(len, change), want, "len {len} change {change}");
        }
    }

    /// Real rxe packets carry real Identifications: blanked, they are solved back.
    #[test]
    fn solve_recovers_rxe_identifications() {
        let pkts = roce_packets();
        let mut solved = 0;
        let mut idents = std::collections::HashSet::new();
        for (file, p) in pkts.iter().filter(|(_, p)| !p.v6) {
            let real = u16::from_be_bytes([p.ip[4], p.ip[5]]);
            // Fast path: the header as captured.
            assert_eq!(
                solve_roce_v4_ident(&p.ip, &p.udp, &p.rest),
                Ok(real),
                "{file}"
            );
            let blank = with_ident(&p.ip, 0);
            assert_eq!(
                solve_roce_v4_ident(&blank, &p.udp, &p.rest),
                Ok(real),
                "{file}"
            );
            let other = with_ident(&p.ip, real ^ 0x5a5a);
            assert_eq!(solve_roce_v4_ident(&other, &p.udp, &p.rest), Ok(real));
            solved += usize::from(real != 0);
            idents.insert(real);
        }
        assert!(
            solved > 200,
            "only {solved} IPv4 packets with an Identification"
        );
        assert!(
            idents.len() > 100,
            "only {} distinct Identifications",
            idents.len()
        );
    }

    /// Corruption outside the Identification is rejected: deterministic flips over every rxe
    /// IPv4 packet (none of these happens to fall in the 2^-16 the solve cannot see).
    #[test]
    fn solve_rejects_corrupted_rxe_packets() {
        let pkts = roce_packets();
        let mut rng = Rng(7);
        let mut tried = 0;
        for (file, p) in pkts.iter().filter(|(_, p)| !p.v6) {
            let blank = with_ident(&p.ip, 0);
            let n = p.rest.len();
            for at in [0, 8, n / 2, n - LEN - 1, n - 1, (rng.next() as usize) % n] {
                let mut bad = p.rest.clone();
                bad[at] ^= 1 << (rng.next() % 8);
                if at == 4 {
                    continue; // BTH byte 4 is variant
                }
                assert!(
                    matches!(
                        solve_roce_v4_ident(&blank, &p.udp, &bad),
                        Err(Error::Icrc { .. })
                    ),
                    "{file}: flip at {at} accepted"
                );
                tried += 1;
            }
            let mut src = blank.clone();
            src[12] ^= 0x01;
            assert!(solve_roce_v4_ident(&src, &p.udp, &p.rest).is_err());
            let mut port = p.udp.clone();
            port[1] ^= 0x10;
            assert!(solve_roce_v4_ident(&blank, &port, &p.rest).is_err());
        }
        assert!(tried > 1000);
    }

    /// With the Identification unknown the check keeps 16 bits: of uniformly random ICRC
    /// differences, a fraction 2^-16 is explained by some Identification.
    #[test]
    fn solve_acceptance_rate_is_two_to_minus_sixteen() {
        let mut rng = Rng(0x51b1_5eed);
        let trials = 1u32 << 21;
        let accepted = (0..trials)
            .filter(|_| {
                let diff = rng.next() as u32 | 1;
                let after = 14 + (rng.next() as usize % 4200);
                ident_change_for(diff, after).is_some()
            })
            .count();
        // Expected 32 (Poisson); the bounds fail with probability below 1e-6.
        assert!((8..=70).contains(&accepted), "{accepted} of {trials}");
    }

    #[test]
    fn solve_short_inputs_do_not_panic() {
        for a in 0..26 {
            for b in [0usize, 3, 8, 9] {
                for c in 0..20 {
                    let r = solve_roce_v4_ident(&vec![0x45; a], &vec![1; b], &vec![2; c]);
                    if a < 6 || c < LEN {
                        assert!(r.is_err());
                    }
                }
            }
        }
        // Longer than any IPv4 packet: checked as given, never solved.
        let huge = vec![0u8; 70_000];
        assert!(matches!(
            solve_roce_v4_ident(&[0x45; 20], &[0; 8], &huge),
            Err(Error::Icrc { .. })
        ));
    }

    /// A hint changes nothing but the cost: right, wrong, or made for another packet size, the
    /// hinted solve answers as the plain one, on good and corrupted packets alike.
    #[test]
    fn hinted_solve_agrees_with_the_solve() {
        let mut rng = Rng(0x0dd_ba11);
        for len in [12usize, 16, 76, 1036, 4108] {
            let ip = rng.bytes(20);
            let udp = rng.bytes(8);
            let t = rng.bytes(len);
            // Deltas by table up to 255 for the right size; for another size, by table only up
            // to 3 (larger guesses multiply).
            let right = Ipv4IdentShift::new(20, len + LEN).deltas(255);
            let other = Ipv4IdentShift::new(20, len + LEN + 4).deltas(3);
            for id in [0u16, 1, 2, 5, 63, 0xff, 0x100, 0xbeef] {
                let icrc = roce_v4(&with_ident(&ip, id), &udp, &t);
                let mut wire = t.clone();
                wire.extend_from_slice(&icrc.to_le_bytes());
                let mut bad = wire.clone();
                let at = rng.next() as usize % len;
                bad[at] ^= if at == 4 { 0 } else { 1 << (rng.next() % 8) };
                for given in [0u16, id, id ^ 3] {
                    let hdr = with_ident(&ip, given);
                    for w in [&wire, &bad] {
                        let want = solve_roce_v4_ident(&hdr, &udp, w);
                        for guess in [id, id.wrapping_add(1), 0, given] {
                            for shift in [&right, &other] {
                                let got =
                                    solve_roce_v4_ident_hinted(&hdr, &udp, w, Some((shift, guess)));
                                assert_eq!(got, want, "len {len} id {id} guess {guess}");
                            }
                        }
                    }
                }
                assert_eq!(
                    solve_roce_v4_ident_hinted(
                        &with_ident(&ip, 0),
                        &udp,
                        &wire,
                        Some((&right, id))
                    ),
                    Ok(id)
                );
            }
        }
    }

    /// The in-frame solve answers as the solve over the frame's parts, with and without a
    /// hint, on good and corrupted packets, with Ethernet padding behind the packet, and
    /// leaves the frame as it was; frames of another layout are refused, never misread.
    #[test]
    fn frame_solve_agrees_with_the_solve_over_parts() {
        let mut rng = Rng(0xf4a3_e501);
        for len in [12usize, 13, 16, 44, 76, 80, 81, 1036, 4108] {
            for pad in [0usize, 6] {
                let mut f = rng.bytes(ETH_LEN + 20 + 8 + len + LEN + pad);
                f[12..14].copy_from_slice(&crate::ethernet::ETHERTYPE_IPV4.to_be_bytes());
                f[ETH_LEN] = 0x45;
                let udp_len = (8 + len + LEN) as u16;
                f[ETH_LEN + 24..ETH_LEN + 26].copy_from_slice(&udp_len.to_be_bytes());
                let id = rng.next() as u16;
                let (ip_at, udp_at, t_at) = (ETH_LEN, ETH_LEN + 20, ETH_LEN + 28);
                let end = t_at + len + LEN;
                let icrc = roce_v4(
                    &with_ident(&f[ip_at..udp_at], id),
                    &f[udp_at..t_at],
                    &f[t_at..end - LEN],
                );
                f[end - LEN..end].copy_from_slice(&icrc.to_le_bytes());
                let shift = Ipv4IdentShift::new(20, len + LEN).deltas(63);
                for given in [0u16, id, id.wrapping_sub(1)] {
                    f[ip_at + IDENT_AT..ip_at + IDENT_AT + 2].copy_from_slice(&given.to_be_bytes());
                    for flip in [None, Some(t_at + len / 2), Some(ip_at + 13)] {
                        let mut g = f.clone();
                        if let Some(at) = flip {
                            g[at] ^= 0x04;
                        }
                        for hint in [None, Some((&shift, id)), Some((&shift, id ^ 1))] {
                            let before = g.clone();
                            let want = solve_roce_v4_ident_hinted(
                                &g[ip_at..udp_at],
                                &g[udp_at..t_at],
                                &g[t_at..end],
                                hint,
                            );
                            assert_eq!(solve_roce_v4_frame_ident(&mut g, hint), want, "len {len}");
                            assert_eq!(g, before);
                            // The UDP datagram alone, after the headers' pass.
                            let headers = v4_headers_pass(
                                g[ip_at..udp_at].try_into().unwrap(),
                                g[udp_at..t_at].try_into().unwrap(),
                            );
                            assert_eq!(
                                solve_roce_v4_udp_ident(
                                    &headers,
                                    given,
                                    &mut g[udp_at..end],
                                    || hint
                                ),
                                want,
                                "len {len}"
                            );
                            assert_eq!(g, before);
                            assert_eq!(want.is_ok(), flip.is_none(), "len {len} {flip:?}");
                        }
                    }
                }
                // Other layouts.
                let mut g = f.clone();
                g[12] = 0x86;
                assert!(solve_roce_v4_frame_ident(&mut g, None).is_err());
                let mut g = f.clone();
                g[ETH_LEN] = 0x46;
                assert!(solve_roce_v4_frame_ident(&mut g, None).is_err());
                let mut g = f.clone();
                let long = udp_len + pad as u16 + 1;
                g[ETH_LEN + 24..ETH_LEN + 26].copy_from_slice(&long.to_be_bytes());
                assert!(solve_roce_v4_frame_ident(&mut g, None).is_err());
                for cut in [0, 13, 14, ETH_LEN + 39] {
                    assert!(solve_roce_v4_frame_ident(&mut f.clone()[..cut], None).is_err());
                }
            }
        }
    }

    /// The table way gives `crc32fast`'s result from any state over any length, so the
    /// engine's choice changes the speed of the express passes, never an ICRC.
    #[test]
    fn table_update_is_crc32fast() {
        let mut rng = Rng(0x7ab1_e5ee);
        let data = rng.bytes(600);
        for len in (0..=140).chain([255, 256, 511, 600]) {
            for _ in 0..4 {
                let state = rng.next() as u32;
                let at = rng.next() as usize % (data.len() - len + 1);
                let mut h = Hasher::new_with_initial(state);
                h.update(&data[at..at + len]);
                assert_eq!(
                    table_update(state, &data[at..at + len]),
                    h.finalize(),
                    "{len}"
                );
            }
        }
        assert_eq!(table_update(0, b"123456789"), 0xCBF4_3926);
        // Whichever way this machine chose, a continued pass is the whole pass.
        let c = Continued::after(&data[..32]);
        assert_eq!(c.finish(&data[32..128]), raw(&data[..128]));
    }

    /// Two slots: a third key replaces the one used less recently, and only a missing key
    /// makes a value.
    #[test]
    fn two_slots_replace_the_one_used_less_recently() {
        let mut c = TwoSlots::<u16, u32>::default();
        let mut made = Vec::new();
        for key in [1u16, 2, 1, 3, 1, 2, 2, 3] {
            let v = *c.get_or_make(key, |&k| {
                made.push(k);
                u32::from(k) * 10
            });
            assert_eq!(v, u32::from(key) * 10);
        }
        // 3 replaces 2 (1 was used after it), 2 then replaces 3, and 3 replaces 1.
        assert_eq!(made, [1, 2, 3, 2, 3]);
    }

    /// A UDP datagram too short for a BTH and an ICRC is refused, not misread.
    #[test]
    fn udp_solve_refuses_short_datagrams() {
        let headers = v4_headers_pass(&[0x45; 20], &[0; 8]);
        for n in 0..udp::LEN + bth::LEN + LEN {
            let mut d = vec![0u8; n];
            assert!(solve_roce_v4_udp_ident(&headers, 0, &mut d, || None).is_err());
        }
    }

    proptest::proptest! {
        /// Any packet, any Identification: the ICRC written for it is solved from a header
        /// carrying any other Identification, and a corrupted ICRC byte is not.
        #[test]
        fn solve_finds_the_written_identification(
            ip in proptest::collection::vec(proptest::num::u8::ANY, 20..=24),
            udp in proptest::collection::vec(proptest::num::u8::ANY, 8),
            t in proptest::collection::vec(proptest::num::u8::ANY, 12..600),
            id: u16,
            guess: u16,
        ) {
            let covered = roce_v4(&with_ident(&ip, id), &udp, &t);
            let mut wire = t.clone();
            wire.extend_from_slice(&covered.to_le_bytes());
            proptest::prop_assert_eq!(
                solve_roce_v4_ident(&with_ident(&ip, guess), &udp, &wire),
                Ok(id)
            );
            // The sender's arithmetic gives the same ICRC from the ID-0 one.
            let zero = roce_v4(&with_ident(&ip, 0), &udp, &t);
            proptest::prop_assert_eq!(
                zero ^ Ipv4IdentShift::new(ip.len(), wire.len()).delta(id),
                covered
            );
        }
    }

    /// Per-packet cost of the solve against a plain ICRC check, 64-byte and 4 KiB payloads:
    /// the fast path (Identification as given) and the solve (Identification blanked).
    /// `cargo test --release -p softib-wire ident_solve_speed -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn ident_solve_speed() {
        use std::hint::black_box;
        use std::time::Instant;
        const N: u32 = 200_000;
        let ns = |f: &dyn Fn() -> bool| {
            (0..7)
                .map(|_| {
                    let t = Instant::now();
                    let mut ok = 0u32;
                    for _ in 0..N {
                        ok += u32::from(f());
                    }
                    assert_eq!(ok, N);
                    t.elapsed().as_nanos() as f64 / f64::from(N)
                })
                .fold(f64::MAX, f64::min)
        };
        let mut rng = Rng(99);
        for payload in [64usize, 4096] {
            let ip = with_ident(&[0x45; 20], 0x1234);
            let udp = [0x12u8, 0x34, 0x12, 0xb7, 0, 0, 0, 0];
            let t = rng.bytes(12 + payload);
            let icrc = roce_v4(&ip, &udp, &t);
            let mut wire = t.clone();
            wire.extend_from_slice(&icrc.to_le_bytes());
            let blank = with_ident(&ip, 0);
            let verify = ns(&|| verify_roce_v4(black_box(&ip), &udp, black_box(&wire)).is_ok());
            let fast = ns(&|| solve_roce_v4_ident(black_box(&ip), &udp, black_box(&wire)).is_ok());
            let solve =
                ns(&|| solve_roce_v4_ident(black_box(&blank), &udp, black_box(&wire)).is_ok());
            let shift = Ipv4IdentShift::new(20, wire.len());
            let delta = ns(&|| black_box(shift.delta(black_box(7))) != 1);
            let new = ns(&|| black_box(Ipv4IdentShift::new(20, black_box(wire.len()))).shift != 0);
            println!(
                "payload {payload:>4} B: verify {verify:.1} ns, solve (ID as given) {fast:.1} ns, \
                 solve (ID blanked) {solve:.1} ns, Ipv4IdentShift::new {new:.1} ns, delta {delta:.1} ns"
            );
        }
    }
}
