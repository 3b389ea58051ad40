//! Between the HCA's Ethernet frames and the UDP socket's datagrams.
//!
//! The HCA speaks whole RoCEv2 frames (Ethernet + IPv4/IPv6 + UDP + BTH ... + ICRC). A kernel
//! UDP socket carries only the UDP payload (BTH ... ICRC). On send the runtime keeps the
//! payload and the destination address of a frame ([`datagram_of_frame`]); on receive it
//! rebuilds the frame the peer's kernel put on the wire ([`frame_of_datagram`]) so the HCA can
//! check the ICRC over the same IP and UDP header the sender covered.
//!
//! The rebuilt header holds what the ICRC covers and the socket reports: source address and
//! port (from `recvfrom`), destination address (the bound address, or `IP_PKTINFO`),
//! destination port 4791, lengths from the datagram, IPv4 identification 0 and DF (what an
//! unconnected socket with `IP_PMTUDISC_DO` sends; [`verify_ipv4_icrc_any_ident`] replaces it
//! by the Identification the ICRC was computed over, see [`crate::IcrcPolicy`]). TOS / traffic
//! class, TTL / hop limit, flow label and the checksums are masked out of the ICRC, so the
//! values written for them (0, 64, 0, computed / 0) do not matter for the check.

use std::net::IpAddr;

use softib_core::verbs::types::Gid;
use softib_core::{gid_of_ipv4, mac_for_gid};
use softib_wire::ethernet::{ETHERTYPE_IPV4, ETHERTYPE_IPV6, MIN_FRAME_LEN};
use softib_wire::icrc::{v4_headers_pass, Continued, Ipv4IdentDeltaCache, TwoSlots};
use softib_wire::ipv4::Ipv4View;
use softib_wire::udp::ROCEV2_PORT;

/// Ethernet header length of the frames softib builds (no VLAN tag).
pub const ETH_LEN: usize = 14;
/// IPv4 header length (no options).
pub const IPV4_LEN: usize = 20;
/// IPv6 header length.
pub const IPV6_LEN: usize = 40;
/// UDP header length.
pub const UDP_LEN: usize = 8;
/// Largest UDP payload of one datagram.
pub const MAX_DATAGRAM: usize = 65_507;
/// TTL / hop limit written into rebuilt headers (masked out of the ICRC).
const TTL: u8 = 64;
/// IEEE 802.1Q TPID.
const ETHERTYPE_VLAN: u16 = 0x8100;

/// The GID of an IP address: IPv4-mapped for IPv4, the address itself for IPv6.
pub fn gid_of_ip(ip: IpAddr) -> Gid {
    match ip {
        IpAddr::V4(a) => gid_of_ipv4(a.octets()),
        IpAddr::V6(a) => match a.to_ipv4_mapped() {
            Some(v4) => gid_of_ipv4(v4.octets()),
            None => Gid(a.octets()),
        },
    }
}

/// The IP address of a GID: IPv4 for an IPv4-mapped GID, IPv6 otherwise.
pub fn ip_of_gid(gid: &Gid) -> IpAddr {
    match softib_core::ipv4_of(gid) {
        Some(a) => IpAddr::from(a),
        None => IpAddr::from(gid.0),
    }
}

/// An IPv4-mapped IPv6 address as IPv4; any other address unchanged.
pub fn canonical_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(a) => a.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// The destination IP address and the UDP payload of a RoCEv2 frame the HCA built, or `None`
/// if the frame is not Ethernet + IPv4/IPv6 + UDP with consistent lengths.
pub fn datagram_of_frame(frame: &[u8]) -> Option<(IpAddr, &[u8])> {
    let mut at = ETH_LEN;
    let mut ether_type = u16::from_be_bytes([*frame.get(12)?, *frame.get(13)?]);
    if ether_type == ETHERTYPE_VLAN {
        ether_type = u16::from_be_bytes([*frame.get(16)?, *frame.get(17)?]);
        at += 4;
    }
    let l3 = frame.get(at..)?;
    let (dst, udp_at) = match ether_type {
        ETHERTYPE_IPV4 => {
            let ihl = usize::from(l3.first()? & 0x0f) * 4;
            let d: [u8; 4] = l3.get(16..20)?.try_into().ok()?;
            (IpAddr::from(d), ihl)
        }
        ETHERTYPE_IPV6 => {
            let d: [u8; 16] = l3.get(24..40)?.try_into().ok()?;
            (IpAddr::from(d), IPV6_LEN)
        }
        _ => return None,
    };
    let udp = l3.get(udp_at..)?;
    let len = usize::from(u16::from_be_bytes([*udp.get(4)?, *udp.get(5)?]));
    let payload = udp.get(UDP_LEN..len.max(UDP_LEN))?;
    Some((dst, payload))
}

/// [`datagram_of_frame`] for the frames the HCA builds on an IPv4 socket: untagged Ethernet,
/// IPv4 (version 4, no options), a UDP length of at least the UDP header. Returns the
/// destination address and the UDP payload exactly as [`datagram_of_frame`] does, or `None`
/// for any other frame (which [`datagram_of_frame`] then handles).
#[inline]
pub fn plain_ipv4_datagram(frame: &[u8]) -> Option<([u8; 4], &[u8])> {
    let (h, rest) = frame.split_first_chunk::<{ ETH_LEN + IPV4_LEN + UDP_LEN }>()?;
    if u16::from_be_bytes([h[12], h[13]]) != ETHERTYPE_IPV4 || h[ETH_LEN] != 0x45 {
        return None;
    }
    let at = ETH_LEN + 16;
    let dst = [h[at], h[at + 1], h[at + 2], h[at + 3]];
    let at = ETH_LEN + IPV4_LEN + 4;
    let len = usize::from(u16::from_be_bytes([h[at], h[at + 1]]));
    let payload = rest.get(..len.checked_sub(UDP_LEN)?)?;
    Some((dst, payload))
}

/// Rebuilds the RoCEv2 frame of a datagram received from `src`:`sport` on `dst`, as the peer's
/// kernel sent it (see the module documentation), into `out`. Returns false (and leaves `out`
/// empty) when the addresses are of different families or the payload cannot fit one IP
/// packet.
pub fn frame_of_datagram(
    src: IpAddr,
    sport: u16,
    dst: IpAddr,
    payload: &[u8],
    out: &mut Vec<u8>,
) -> bool {
    out.clear();
    let (src, dst) = (canonical_ip(src), canonical_ip(dst));
    if payload.len() > MAX_DATAGRAM {
        return false;
    }
    let udp_len = (UDP_LEN + payload.len()) as u16;
    let (smac, dmac) = (mac_for_gid(&gid_of_ip(src)), mac_for_gid(&gid_of_ip(dst)));
    out.extend_from_slice(&dmac);
    out.extend_from_slice(&smac);
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            out.extend_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
            let total = (IPV4_LEN + usize::from(udp_len)) as u16;
            let ip_at = out.len();
            out.extend_from_slice(&[0x45, 0]);
            out.extend_from_slice(&total.to_be_bytes());
            // Identification 0, DF, fragment offset 0.
            out.extend_from_slice(&[0, 0, 0x40, 0, TTL, softib_wire::ipv4::PROTOCOL_UDP, 0, 0]);
            out.extend_from_slice(&s.octets());
            out.extend_from_slice(&d.octets());
            let mut view = Ipv4View::new_unchecked(&mut out[ip_at..ip_at + IPV4_LEN]);
            view.fill_checksum();
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            out.extend_from_slice(&ETHERTYPE_IPV6.to_be_bytes());
            out.extend_from_slice(&[0x60, 0, 0, 0]);
            out.extend_from_slice(&udp_len.to_be_bytes());
            out.extend_from_slice(&[softib_wire::ipv4::PROTOCOL_UDP, TTL]);
            out.extend_from_slice(&s.octets());
            out.extend_from_slice(&d.octets());
        }
        _ => {
            out.clear();
            return false;
        }
    }
    out.extend_from_slice(&sport.to_be_bytes());
    out.extend_from_slice(&ROCEV2_PORT.to_be_bytes());
    out.extend_from_slice(&udp_len.to_be_bytes());
    out.extend_from_slice(&[0, 0]);
    out.extend_from_slice(payload);
    if out.len() < MIN_FRAME_LEN {
        out.resize(MIN_FRAME_LEN, 0);
    }
    true
}

/// [`frame_of_datagram`] with the headers of the last (source, source port, destination)
/// kept: datagrams of one peer (a GRO batch, a stream) reuse them, and their lengths and IPv4
/// header checksum are patched only when the payload length changes (every segment of a GRO
/// batch but the last has the same length).
#[derive(Debug, Clone, Default)]
pub struct FrameBuilder {
    key: Option<(IpAddr, u16, IpAddr)>,
    /// Ethernet + IP + UDP header of the key, patched for `payload_len`.
    header: Vec<u8>,
    /// Payload length the lengths and checksum in `header` are patched for.
    payload_len: Option<usize>,
    /// The ICRC passes over the key's IPv4 header and UDP ports
    /// ([`softib_wire::icrc::v4_headers_pass`]) for the last two payload lengths (the IPv4
    /// total length is in them): a latency loop receives two sizes in turn, its peer's request
    /// and the ACK of its own.
    passes: TwoSlots<Option<usize>, Continued>,
}

impl FrameBuilder {
    /// Same result as [`frame_of_datagram`].
    pub fn build(
        &mut self,
        src: IpAddr,
        sport: u16,
        dst: IpAddr,
        payload: &[u8],
        out: &mut Vec<u8>,
    ) -> bool {
        out.clear();
        let Some(header) = self.header(src, sport, dst, payload.len()) else {
            return false;
        };
        out.extend_from_slice(header);
        out.extend_from_slice(payload);
        if out.len() < MIN_FRAME_LEN {
            out.resize(MIN_FRAME_LEN, 0);
        }
        true
    }

    /// The Ethernet + IP + UDP header [`frame_of_datagram`] puts in front of a payload of
    /// `payload_len` bytes from `src`:`sport` to `dst` (without the padding it adds to frames
    /// shorter than the Ethernet minimum), or `None` where it returns false. A receiver can
    /// write it straight in front of a datagram in its receive buffer instead of copying the
    /// datagram behind it.
    pub fn header(
        &mut self,
        src: IpAddr,
        sport: u16,
        dst: IpAddr,
        payload_len: usize,
    ) -> Option<&[u8]> {
        if payload_len > MAX_DATAGRAM {
            return None;
        }
        let key = (canonical_ip(src), sport, canonical_ip(dst));
        if self.key != Some(key) {
            let mut h = std::mem::take(&mut self.header);
            if !frame_of_datagram(key.0, sport, key.2, &[], &mut h) {
                self.key = None;
                self.header = h;
                return None;
            }
            h.truncate(match key.0 {
                IpAddr::V4(_) => ETH_LEN + IPV4_LEN + UDP_LEN,
                IpAddr::V6(_) => ETH_LEN + IPV6_LEN + UDP_LEN,
            });
            self.header = h;
            self.key = Some(key);
            self.payload_len = None;
            self.passes = TwoSlots::default();
        }
        if self.payload_len != Some(payload_len) {
            let out = &mut self.header;
            let udp_len = (UDP_LEN + payload_len) as u16;
            let udp_at = out.len() - UDP_LEN;
            out[udp_at + 4..udp_at + 6].copy_from_slice(&udp_len.to_be_bytes());
            if udp_at == ETH_LEN + IPV4_LEN {
                let total = (IPV4_LEN as u16) + udp_len;
                let ip = &mut out[ETH_LEN..ETH_LEN + IPV4_LEN];
                if self.payload_len.is_some() {
                    // Only the total length changed: patch the checksum for it (RFC 1624,
                    // eqn. 3), the same value a recomputation gives.
                    patch_ipv4_word(ip, 2, total);
                } else {
                    ip[2..4].copy_from_slice(&total.to_be_bytes());
                    let mut view = Ipv4View::new_unchecked(ip);
                    view.set_checksum(0);
                    view.fill_checksum();
                }
            } else {
                out[ETH_LEN + 4..ETH_LEN + 6].copy_from_slice(&udp_len.to_be_bytes());
            }
            self.payload_len = Some(payload_len);
        }
        Some(&self.header)
    }

    /// [`Self::header`] and, for an IPv4 header, the ICRC pass over its IPv4 header and UDP
    /// ports ([`softib_wire::icrc::v4_headers_pass`]), which [`GroIdents::verify`] finishes
    /// over the UDP datagram; the passes of the last two payload lengths of the key are kept.
    pub fn header_and_pass(
        &mut self,
        src: IpAddr,
        sport: u16,
        dst: IpAddr,
        payload_len: usize,
    ) -> Option<(&[u8], Option<&Continued>)> {
        self.header(src, sport, dst, payload_len)?;
        let FrameBuilder { header, passes, .. } = self;
        let pass = v4_parts(header)
            .map(|(ip, udp)| passes.get_or_make(Some(payload_len), |_| v4_headers_pass(ip, udp)));
        Some((&header[..], pass))
    }

    /// What [`Self::header_and_pass`] gave last (`None` before it gave one, or after it
    /// failed to build one for new addresses): for a caller that knows its next datagram has
    /// the same source, destination and length as that one.
    pub fn current(&self) -> Option<(&[u8], Option<&Continued>)> {
        self.key?;
        let len = self.payload_len?;
        let pass = v4_parts(&self.header).and_then(|_| self.passes.get(&Some(len)));
        Some((&self.header[..], pass))
    }
}

/// Replaces the ICRC of a rebuilt IPv4 frame with the one computed over its own header
/// (the [`crate::IcrcPolicy::AcceptIpv4Unverified`] opt-out). Returns false if the frame is
/// not an IPv4 frame from [`frame_of_datagram`] with room for an ICRC.
pub fn reseal_ipv4_icrc(frame: &mut [u8]) -> bool {
    let Some((udp_at, end)) = ipv4_parts(frame) else {
        return false;
    };
    let icrc_at = end - softib_wire::roce::ICRC_LEN;
    let icrc = softib_wire::icrc::roce_v4(
        &frame[ETH_LEN..udp_at],
        &frame[udp_at..udp_at + UDP_LEN],
        &frame[udp_at + UDP_LEN..icrc_at],
    );
    frame[icrc_at..end].copy_from_slice(&icrc.to_le_bytes());
    true
}

/// The IPv4, UDP and BTH .. ICRC parts of a rebuilt IPv4 frame (as [`frame_of_datagram`]
/// builds it: no VLAN tag, no IP options), or `None` for any other frame.
fn ipv4_parts(frame: &[u8]) -> Option<(usize, usize)> {
    if frame.len() < ETH_LEN + IPV4_LEN + UDP_LEN
        || u16::from_be_bytes([frame[12], frame[13]]) != ETHERTYPE_IPV4
        || frame[ETH_LEN] != 0x45
    {
        return None;
    }
    let udp_at = ETH_LEN + IPV4_LEN;
    let udp_len = usize::from(u16::from_be_bytes([frame[udp_at + 4], frame[udp_at + 5]]));
    let end = udp_at + udp_len;
    if udp_len < UDP_LEN + softib_wire::roce::ICRC_LEN || end > frame.len() {
        return None;
    }
    Some((udp_at, end))
}

/// The IPv4 and UDP headers of a rebuilt IPv4 header (Ethernet, IPv4 without options, UDP;
/// nothing else), `None` for any other.
fn v4_parts(header: &[u8]) -> Option<(&[u8; IPV4_LEN], &[u8; UDP_LEN])> {
    let (_, ip_udp) = header.split_first_chunk::<ETH_LEN>()?;
    let (ip, udp) = ip_udp.split_first_chunk::<IPV4_LEN>()?;
    Some((ip, udp.try_into().ok()?))
}

/// Verifies the ICRC of a rebuilt IPv4 frame for any IPv4 Identification (the
/// [`crate::IcrcPolicy::Verify`] policy): the rebuilt header carries Identification 0, the
/// fast path; otherwise the Identification that makes the ICRC match is solved for
/// ([`softib_wire::icrc::solve_roce_v4_ident`], which also says how much weaker that check
/// is) and written, with the header checksum, into the frame, so that the frame holds the
/// header the sender covered. Returns false, leaving the frame unchanged, when no
/// Identification matches or the frame is not an IPv4 frame from [`frame_of_datagram`].
pub fn verify_ipv4_icrc_any_ident(frame: &mut [u8]) -> bool {
    let Some(ident) = solve_ipv4_ident(frame) else {
        return false;
    };
    let mut view = Ipv4View::new_unchecked(&mut frame[ETH_LEN..ETH_LEN + IPV4_LEN]);
    if view.ident() != ident {
        view.set_ident(ident);
        view.set_checksum(0);
        view.fill_checksum();
    }
    true
}

/// The Identification for which the ICRC of a rebuilt IPv4 frame verifies
/// ([`verify_ipv4_icrc_any_ident`] without writing it); `None` when there is none or the
/// frame is not one [`frame_of_datagram`] builds.
fn solve_ipv4_ident(frame: &[u8]) -> Option<u16> {
    let (udp_at, end) = ipv4_parts(frame)?;
    softib_wire::icrc::solve_roce_v4_ident(
        &frame[ETH_LEN..udp_at],
        &frame[udp_at..udp_at + UDP_LEN],
        &frame[udp_at + UDP_LEN..end],
    )
    .ok()
}

/// [`verify_ipv4_icrc_any_ident`] for the segments of GRO buffers, in order: the same result
/// for every frame, faster where the sender's kernel numbered the segments of its GSO send
/// (segment k carries Identification base + k). [`GroIdents::start`] begins each buffer.
///
/// The ICRC is finished over the UDP datagram from the pass over its rebuilt IPv4 header and
/// UDP ports ([`FrameBuilder::header_and_pass`]), made once per header. A segment whose ICRC
/// does not verify with the Identification of its rebuilt header (0) is first tried with the
/// one after the Identification of the previous segment, two table look-ups with tables kept
/// for the last two segment sizes ([`softib_wire::icrc::solve_roce_v4_udp_ident`],
/// [`Ipv4IdentDeltaCache`]), and solved only if that guess fails. The Identification that
/// verified is written into the frame as there; the header checksum is patched for it (RFC
/// 1624) instead of recomputed, which gives the same checksum for the headers
/// [`frame_of_datagram`] builds.
#[derive(Debug, Clone, Default)]
pub struct GroIdents {
    /// ICRC deltas of the last two segment sizes guessed for (a run's full segments and its
    /// shorter last one).
    deltas: Ipv4IdentDeltaCache,
    /// The Identification guessed for the next segment.
    next: u16,
}

impl GroIdents {
    /// Begins the next GRO buffer: its first segment is not guessed for.
    pub fn start(&mut self) {
        self.next = 0;
    }

    /// Verifies the next segment's frame, rebuilt by [`frame_of_datagram`] or
    /// [`FrameBuilder`] around a datagram of `len` bytes, `headers` the pass over its IPv4
    /// header and UDP ports ([`FrameBuilder::header_and_pass`]; `None` takes the general
    /// solve); see [`verify_ipv4_icrc_any_ident`].
    pub fn verify(&mut self, frame: &mut [u8], headers: Option<&Continued>, len: usize) -> bool {
        match self.check(frame, headers, len) {
            Some(ident) => {
                set_ipv4_ident(frame, ident);
                true
            }
            None => false,
        }
    }

    /// [`GroIdents::verify`] without writing the Identification that verified into the frame:
    /// it is returned, for [`set_ipv4_ident`] when the frame itself is used (most datagrams
    /// never are: the HCA takes them where they lie). `None` when the ICRC does not verify.
    pub fn check(
        &mut self,
        frame: &mut [u8],
        headers: Option<&Continued>,
        len: usize,
    ) -> Option<u16> {
        const AT: usize = ETH_LEN + IPV4_LEN;
        let end = AT + UDP_LEN + len;
        let headers = headers.filter(|_| {
            len >= softib_wire::bth::LEN + softib_wire::roce::ICRC_LEN && frame.len() >= end
        });
        let given = |frame: &[u8]| u16::from_be_bytes([frame[ETH_LEN + 4], frame[ETH_LEN + 5]]);
        let Some(headers) = headers else {
            // No pass, or no room for a BTH (never a valid packet): the general solve.
            let ident = solve_ipv4_ident(frame)?;
            self.next = ident.wrapping_add(1);
            return Some(ident);
        };
        let (next, deltas) = (self.next, &mut self.deltas);
        // Made only when the ICRC does not verify as the frame stands: segment k of a GSO run
        // (Identification k) and rxe's numbered packets need it; a lone datagram or one from
        // shared memory (Identification 0) verifies at once.
        let hint = move || {
            let deltas = deltas;
            match next {
                0 => None,
                guess => Some((deltas.get(len, guess), guess)),
            }
        };
        let ident = softib_wire::icrc::solve_roce_v4_udp_ident(
            headers,
            given(frame),
            &mut frame[AT..end],
            hint,
        )
        .ok()?;
        self.next = ident.wrapping_add(1);
        Some(ident)
    }
}

/// Writes `ident` into the IPv4 header of a rebuilt frame ([`GroIdents::check`]), with the
/// header checksum patched for it.
pub fn set_ipv4_ident(frame: &mut [u8], ident: u16) {
    if let Some(ip) = frame.get_mut(ETH_LEN..ETH_LEN + IPV4_LEN) {
        patch_ipv4_ident(ip, ident);
    }
}

/// Writes `ident` into an IPv4 header (at least 20 bytes) and updates its header checksum
/// for the change (RFC 1624, eqn. 3). For a header whose checksum was right this is the
/// checksum a recomputation gives: both are the one's complement sum in 1..=0xFFFF of words
/// not all zero, complemented.
fn patch_ipv4_ident(ip: &mut [u8], ident: u16) {
    patch_ipv4_word(ip, 4, ident);
}

/// Writes `value` into the 16-bit word at byte `at` of an IPv4 header (at least 20 bytes) and
/// updates its header checksum for the change ([`patch_ipv4_ident`]'s RFC 1624 update).
fn patch_ipv4_word(ip: &mut [u8], at: usize, value: u16) {
    let old = u16::from_be_bytes([ip[at], ip[at + 1]]);
    if old == value {
        return;
    }
    let hc = u16::from_be_bytes([ip[10], ip[11]]);
    let sum = softib_wire::ipv4::checksum_adding(!hc, [!old, value]);
    ip[at..at + 2].copy_from_slice(&value.to_be_bytes());
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
}

/// XORs `delta`, the ICRC change for a new IPv4 Identification
/// ([`softib_wire::icrc::Ipv4IdentShift::delta`] for `datagram.len()` bytes of UDP payload and
/// a header without options), into the ICRC at the end of `datagram` (a UDP payload, BTH ..
/// ICRC). Does nothing to a datagram shorter than an ICRC.
pub fn retag_ipv4_icrc(datagram: &mut [u8], delta: u32) {
    if let Some(icrc) = datagram.last_chunk_mut::<{ softib_wire::roce::ICRC_LEN }>() {
        let v = u32::from_le_bytes(*icrc) ^ delta;
        *icrc = v.to_le_bytes();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    #[test]
    fn rebuilt_ipv4_frame_round_trips() {
        let payload: Vec<u8> = (0..40u8).collect();
        let mut f = Vec::new();
        let src = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1));
        let dst = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
        assert!(frame_of_datagram(src, 4791, dst, &payload, &mut f));
        assert_eq!(f.len(), ETH_LEN + IPV4_LEN + UDP_LEN + 40);
        let ip = softib_wire::ipv4::Ipv4::parse(&f[ETH_LEN..]).unwrap();
        assert_eq!(ip.ident, 0);
        assert_eq!(ip.flags, 0b010);
        assert!(Ipv4View::new_unchecked(&f[ETH_LEN..]).checksum_ok());
        let (d, p) = datagram_of_frame(&f).unwrap();
        assert_eq!(d, dst);
        assert_eq!(p, &payload[..]);
    }

    #[test]
    fn short_frames_are_padded_and_the_padding_is_not_payload() {
        let mut f = Vec::new();
        let a = IpAddr::V4(Ipv4Addr::LOCALHOST);
        assert!(frame_of_datagram(a, 1, a, &[1, 2, 3], &mut f));
        assert_eq!(f.len(), MIN_FRAME_LEN);
        assert_eq!(datagram_of_frame(&f).unwrap().1, &[1, 2, 3]);
    }

    #[test]
    fn plain_ipv4_datagrams_agree_with_the_general_parse() {
        let a = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 7));
        let b = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 9));
        for len in [0usize, 3, 40, 1500] {
            let payload: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let mut f = Vec::new();
            assert!(frame_of_datagram(a, 1, b, &payload, &mut f));
            let (d, p) = plain_ipv4_datagram(&f).unwrap();
            assert_eq!((IpAddr::from(d), p), datagram_of_frame(&f).unwrap());
            assert_eq!(p, &payload[..]);
        }
        // Anything else is left to the general parse.
        let mut f = Vec::new();
        assert!(frame_of_datagram(a, 1, b, &[5; 10], &mut f));
        let mut options = f.clone();
        options[ETH_LEN] = 0x46;
        assert_eq!(plain_ipv4_datagram(&options), None);
        let mut udp_short = f.clone();
        udp_short[ETH_LEN + IPV4_LEN + 4..ETH_LEN + IPV4_LEN + 6].copy_from_slice(&[0, 4]);
        assert_eq!(plain_ipv4_datagram(&udp_short), None);
        assert_eq!(plain_ipv4_datagram(&f[..ETH_LEN + IPV4_LEN]), None);
        let s6 = IpAddr::V6(Ipv6Addr::LOCALHOST);
        assert!(frame_of_datagram(s6, 7, s6, &[9; 20], &mut f));
        assert_eq!(plain_ipv4_datagram(&f), None);
    }

    #[test]
    fn ipv6_and_mixed_families() {
        let mut f = Vec::new();
        let s = IpAddr::V6(Ipv6Addr::LOCALHOST);
        let d = IpAddr::V6("fe80::1".parse().unwrap());
        assert!(frame_of_datagram(s, 7, d, &[9; 20], &mut f));
        assert_eq!(datagram_of_frame(&f), Some((d, &[9u8; 20][..])));
        let v4 = IpAddr::V4(Ipv4Addr::LOCALHOST);
        assert!(!frame_of_datagram(s, 7, v4, &[9; 20], &mut f));
        assert!(f.is_empty());
        // An IPv4-mapped IPv6 source counts as IPv4.
        let mapped = IpAddr::V6(Ipv4Addr::LOCALHOST.to_ipv6_mapped());
        assert!(frame_of_datagram(mapped, 7, v4, &[9; 20], &mut f));
        assert_eq!(gid_of_ip(mapped), gid_of_ip(v4));
        assert_eq!(ip_of_gid(&gid_of_ip(v4)), v4);
        assert_eq!(ip_of_gid(&gid_of_ip(d)), d);
    }

    #[test]
    fn frame_builder_matches_frame_of_datagram() {
        let mut b = FrameBuilder::default();
        let v4a = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1));
        let v4b = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
        let v6 = IpAddr::V6(Ipv6Addr::LOCALHOST);
        // Repeated and returning lengths and keys exercise the cached header and checksum.
        let cases: [(IpAddr, u16, IpAddr, usize); 10] = [
            (v4a, 4791, v4b, 80),
            (v4a, 4791, v4b, 80),
            (v4a, 4791, v4b, 20),
            (v4a, 4791, v4b, 4112),
            (v4a, 4791, v4b, 80),
            (v4b, 50000, v4a, 3),
            (v6, 7, v6, 100),
            (v6, 7, v4a, 100),
            (v6, 7, v6, 100),
            (v4a, 4791, v4b, 80),
        ];
        for (src, sport, dst, len) in cases {
            let payload: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let (mut want, mut got) = (Vec::new(), Vec::new());
            let ok = frame_of_datagram(src, sport, dst, &payload, &mut want);
            assert_eq!(b.build(src, sport, dst, &payload, &mut got), ok);
            if ok {
                assert_eq!(got, want, "{src} {sport} {dst} {len}");
                // The header alone, followed by the payload, is the frame (padding aside).
                let h = b.header(src, sport, dst, len).unwrap().to_vec();
                assert_eq!([&h[..], &payload[..]].concat(), want[..h.len() + len]);
                // With its ICRC pass: over the IPv4 and UDP headers, none for IPv6.
                let (h2, pass) = b.header_and_pass(src, sport, dst, len).unwrap();
                assert_eq!(h2, &h[..]);
                let pass = pass.cloned();
                match src {
                    IpAddr::V4(_) => assert_eq!(
                        pass,
                        Some(v4_headers_pass(
                            h[ETH_LEN..ETH_LEN + IPV4_LEN].try_into().unwrap(),
                            h[ETH_LEN + IPV4_LEN..].try_into().unwrap()
                        ))
                    ),
                    IpAddr::V6(_) => assert_eq!(pass, None),
                }
                assert_eq!(b.current(), Some((&h[..], pass.as_ref())));
            } else {
                assert!(b.header(src, sport, dst, len).is_none());
                assert_eq!(b.current(), None);
            }
        }
        assert_eq!(FrameBuilder::default().current(), None);
        // Every length after another of the same peer: the checksum is patched for the new
        // total length, not recomputed, and must come out the same.
        let mut want = Vec::new();
        for len in (0..9000)
            .step_by(37)
            .chain([MAX_DATAGRAM, 1, MAX_DATAGRAM - 1, 64])
        {
            assert!(frame_of_datagram(v4b, 4791, v4a, &vec![7; len], &mut want));
            let h = b.header(v4b, 4791, v4a, len).unwrap();
            assert_eq!(h, &want[..h.len()], "{len}");
        }
    }

    #[test]
    fn garbage_frames_yield_nothing() {
        assert_eq!(datagram_of_frame(&[]), None);
        assert_eq!(datagram_of_frame(&[0u8; 13]), None);
        let mut f = vec![0u8; 60];
        f[12] = 0x08;
        f[14] = 0x4f; // IHL 15: the UDP header is past the end.
        assert_eq!(datagram_of_frame(&f), None);
    }

    #[test]
    fn resealed_icrc_verifies() {
        let mut f = Vec::new();
        let a = IpAddr::V4(Ipv4Addr::LOCALHOST);
        assert!(frame_of_datagram(a, 5, a, &[0u8; 32], &mut f));
        assert!(reseal_ipv4_icrc(&mut f));
        let udp_at = ETH_LEN + IPV4_LEN;
        softib_wire::icrc::verify_roce_v4(
            &f[ETH_LEN..udp_at],
            &f[udp_at..udp_at + UDP_LEN],
            &f[udp_at + UDP_LEN..],
        )
        .unwrap();
    }

    /// Segment k of a GSO run gets the ICRC a full recomputation with Identification k gives,
    /// and the receiver, rebuilding Identification 0, solves k back and writes it.
    #[test]
    fn retagged_segments_match_recomputation_and_are_solved() {
        let a = IpAddr::V4(Ipv4Addr::new(10, 1, 2, 3));
        let b = IpAddr::V4(Ipv4Addr::new(10, 1, 2, 4));
        for len in [16usize, 60, 1036, 4108] {
            let mut body: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
            body[..4].copy_from_slice(&[0x07, 0, 0xff, 0xff]); // RC RDMA WRITE MIDDLE
            let mut f = Vec::new();
            assert!(frame_of_datagram(a, 4791, b, &body, &mut f));
            assert!(reseal_ipv4_icrc(&mut f));
            let sent = datagram_of_frame(&f).unwrap().1.to_vec();
            let shift = softib_wire::icrc::Ipv4IdentShift::new(IPV4_LEN, len);
            for k in [1u16, 2, 7, 63] {
                let mut seg = sent.clone();
                retag_ipv4_icrc(&mut seg, shift.delta(k));
                // What the wire carries: Identification k and the retagged ICRC.
                let mut want = f.clone();
                Ipv4View::new_unchecked(&mut want[ETH_LEN..ETH_LEN + IPV4_LEN]).set_ident(k);
                assert!(reseal_ipv4_icrc(&mut want));
                assert_eq!(
                    datagram_of_frame(&want).unwrap().1,
                    &seg[..],
                    "len {len} k {k}"
                );
                // The receiver's rebuild (Identification 0) fails as is and is solved.
                let mut got = Vec::new();
                assert!(frame_of_datagram(a, 4791, b, &seg, &mut got));
                assert!(softib_wire::roce::RocePacket::parse_verified(&got).is_err());
                assert!(verify_ipv4_icrc_any_ident(&mut got));
                let ip = Ipv4View::new_unchecked(&got[ETH_LEN..ETH_LEN + IPV4_LEN]);
                assert_eq!(ip.ident(), k);
                assert!(ip.checksum_ok());
                let r = softib_wire::roce::RocePacket::parse_verified(&got);
                assert!(r.is_ok(), "len {len} k {k}: {r:?}");
                // A corrupted segment is not accepted, and is left unchanged.
                let mut bad = got.clone();
                Ipv4View::new_unchecked(&mut bad[ETH_LEN..ETH_LEN + IPV4_LEN]).set_ident(0);
                let at = bad.len() / 2;
                bad[at] ^= 0x10;
                let before = bad.clone();
                assert!(!verify_ipv4_icrc_any_ident(&mut bad));
                assert_eq!(bad, before);
            }
            // Identification 0: the fast path, the frame untouched.
            let mut same = f.clone();
            assert!(verify_ipv4_icrc_any_ident(&mut same));
            assert_eq!(same, f);
        }
        assert!(!verify_ipv4_icrc_any_ident(&mut [0u8; 10]));
        let mut v6 = Vec::new();
        let l6 = IpAddr::V6(Ipv6Addr::LOCALHOST);
        assert!(frame_of_datagram(l6, 1, l6, &[0; 40], &mut v6));
        assert!(!verify_ipv4_icrc_any_ident(&mut v6));
    }

    /// Datagrams of two sizes in turn (a latency loop's request and ACK), and of another peer
    /// between them: the builder's kept passes (two sizes, forgotten with the peer) verify
    /// them as the general verify does, good ones and corrupted ones alike.
    #[test]
    fn kept_passes_follow_sizes_and_peers() {
        let a = IpAddr::V4(Ipv4Addr::new(10, 1, 2, 3));
        let c = IpAddr::V4(Ipv4Addr::new(10, 1, 2, 5));
        let me = IpAddr::V4(Ipv4Addr::new(10, 1, 2, 4));
        let mut fb = FrameBuilder::default();
        let mut g = GroIdents::default();
        let order = [
            (a, 92usize),
            (a, 16),
            (a, 92),
            (a, 16),
            (c, 16),
            (a, 16),
            (a, 92),
            (c, 92),
            (c, 92),
        ];
        for (k, (src, len)) in order.into_iter().enumerate() {
            for corrupt in [false, true] {
                let mut body: Vec<u8> = (0..len).map(|i| (i * 7 + k) as u8).collect();
                body[..4].copy_from_slice(&[0x04, 0, 0xff, 0xff]);
                let mut f = Vec::new();
                assert!(frame_of_datagram(src, 4791, me, &body, &mut f));
                assert!(reseal_ipv4_icrc(&mut f));
                let mut seg = datagram_of_frame(&f).unwrap().1.to_vec();
                if corrupt {
                    seg[len / 2] ^= 0x08;
                }
                let mut want = Vec::new();
                assert!(frame_of_datagram(src, 4791, me, &seg, &mut want));
                let (header, pass) = fb.header_and_pass(src, 4791, me, len).unwrap();
                let mut got = [header, &seg[..]].concat();
                got.resize(want.len(), 0);
                g.start();
                let ok = verify_ipv4_icrc_any_ident(&mut want);
                assert_eq!(ok, !corrupt);
                assert_eq!(g.verify(&mut got, pass, len), ok, "{k} {corrupt}");
                assert_eq!(got, want);
            }
        }
    }

    /// The segments of a GRO buffer, verified in order by [`GroIdents`], end up exactly as
    /// [`verify_ipv4_icrc_any_ident`] leaves them, whatever Identifications they carry (GSO
    /// numbering from 0 or from another base, a shorter last segment, gaps, repeats, random),
    /// and corrupted segments are refused and left unchanged.
    #[test]
    fn gro_idents_agree_with_the_general_verify() {
        let a = IpAddr::V4(Ipv4Addr::new(10, 1, 2, 3));
        let b = IpAddr::V4(Ipv4Addr::new(10, 1, 2, 4));
        let numberings: [&[u16]; 6] = [
            &[0, 1, 2, 3, 4, 5, 6, 7],
            &[0x1234, 0x1235, 0x1236, 0x1237],
            &[0xfffe, 0xffff, 0, 1],
            &[3, 4, 9, 10, 10, 0, 1],
            &[0, 0, 0],
            &[0x00ff, 0x0100, 0x0101, 0x7a31, 0x0003],
        ];
        let mut g = GroIdents::default();
        // A second verifier that only checks: the frame left as it was, the Identification
        // returned.
        let mut h = GroIdents::default();
        let mut fb = FrameBuilder::default();
        for seg_len in [16usize, 24, 28, 76, 1036] {
            for idents in numberings {
                for short_last in [false, true] {
                    for corrupt in [None, Some(1), Some(idents.len() - 1)] {
                        // One verifier for every buffer, as a device keeps it.
                        g.start();
                        h.start();
                        for (k, &id) in idents.iter().enumerate() {
                            let len = if short_last && k == idents.len() - 1 {
                                seg_len - 4
                            } else {
                                seg_len
                            };
                            let mut body: Vec<u8> = (0..len).map(|i| (i * 13 + k) as u8).collect();
                            body[..4].copy_from_slice(&[0x04, 0, 0xff, 0xff]);
                            // What the wire carries: Identification `id`, its ICRC.
                            let mut f = Vec::new();
                            assert!(frame_of_datagram(a, 4791, b, &body, &mut f));
                            Ipv4View::new_unchecked(&mut f[ETH_LEN..ETH_LEN + IPV4_LEN])
                                .set_ident(id);
                            assert!(reseal_ipv4_icrc(&mut f));
                            let mut seg = datagram_of_frame(&f).unwrap().1.to_vec();
                            if corrupt == Some(k) {
                                seg[len / 2 + 2] ^= 0x20;
                            }
                            // The receiver's rebuild, checked both ways.
                            let mut want = Vec::new();
                            assert!(frame_of_datagram(a, 4791, b, &seg, &mut want));
                            let (header, pass) = fb.header_and_pass(a, 4791, b, len).unwrap();
                            let mut got = [header, &seg[..]].concat();
                            got.resize(want.len(), 0);
                            assert_eq!(got, want);
                            let mut checked = got.clone();
                            let ident = h.check(&mut checked, pass, len);
                            assert_eq!(checked, got, "check leaves the frame as it was");
                            let ok = verify_ipv4_icrc_any_ident(&mut want);
                            assert_eq!(ident.is_some(), ok);
                            if let Some(ident) = ident {
                                assert_eq!(ident, id);
                                set_ipv4_ident(&mut checked, ident);
                                assert_eq!(checked, want, "{seg_len} {idents:?} {k}");
                            }
                            assert_eq!(
                                g.verify(&mut got, pass, len),
                                ok,
                                "{seg_len} {idents:?} {k}"
                            );
                            assert_eq!(got, want, "{seg_len} {idents:?} {k}");
                            assert_eq!(ok, corrupt != Some(k));
                            if ok {
                                let ip = Ipv4View::new_unchecked(&got[ETH_LEN..ETH_LEN + IPV4_LEN]);
                                assert_eq!(ip.ident(), id);
                                assert!(ip.checksum_ok());
                            }
                        }
                    }
                }
            }
        }
    }

    /// The RFC 1624 patch of the Identification gives the recomputed checksum, for every
    /// Identification and headers with many checksums.
    #[test]
    fn ident_patch_matches_recomputed_checksum() {
        let mut f = Vec::new();
        for (s, d, len) in [
            ([127, 0, 0, 1], [127, 0, 0, 2], 80usize),
            ([0, 0, 0, 0], [0, 0, 0, 0], 0),
            ([255; 4], [255; 4], 65_000),
            ([192, 168, 7, 9], [10, 0, 0, 1], 1_000),
        ] {
            let (s, d) = (IpAddr::from(s), IpAddr::from(d));
            assert!(frame_of_datagram(s, 4791, d, &vec![0; len], &mut f));
            let base = f[ETH_LEN..ETH_LEN + IPV4_LEN].to_vec();
            for from in [0u16, 1, 0xffff, 0x8000] {
                let mut start = base.clone();
                let mut v = Ipv4View::new_unchecked(&mut start[..]);
                v.set_ident(from);
                v.set_checksum(0);
                v.fill_checksum();
                for id in 0..=u16::MAX {
                    let mut got = start.clone();
                    patch_ipv4_ident(&mut got, id);
                    let mut want = start.clone();
                    let mut v = Ipv4View::new_unchecked(&mut want[..]);
                    v.set_ident(id);
                    v.set_checksum(0);
                    v.fill_checksum();
                    assert_eq!(got, want, "{s} {d} {from} {id}");
                }
            }
        }
    }
}
