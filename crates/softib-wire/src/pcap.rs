//! Classic pcap files (libpcap format; not pcapng): a zero-copy reader and a writer.
//!
//! ```text
//!  global header, 24 bytes:  magic u32 | version major u16 (2) | minor u16 (4) | thiszone i32
//!                            | sigfigs u32 | snaplen u32 | linktype u32
//!  record header, 16 bytes:  ts_sec u32 | ts_frac u32 | incl_len u32 | orig_len u32
//!  then incl_len bytes of packet data
//! ```
//!
//! Every field is in the byte order of the machine that wrote the file; the magic tells which
//! (0xA1B2C3D4: microsecond timestamps, 0xA1B23C4D: nanosecond timestamps, read as written or
//! byte-swapped). [`PcapReader`] handles all four forms. [`PcapWriter`] writes little-endian,
//! microsecond-resolution files.
//!
//! # Link types softib uses
//!
//! * [`LINKTYPE_ETHERNET`] (1): RoCEv2 frames (Ethernet + IPv4/IPv6 + UDP 4791), as the rxe test
//!   vectors are recorded; [`LINKTYPE_RAW`] (101): the same without the Ethernet header.
//!   Wireshark / tshark decode UDP port 4791 as RRoCE without any option.
//! * [`LINKTYPE_USER0`] (147): native InfiniBand packets, LRH first, ICRC and VCRC included.
//!   The registered [`LINKTYPE_INFINIBAND`] (247) is rejected by tshark 4.0 ("network type 247
//!   unknown"), so softib writes USER0 and maps it to the InfiniBand dissector with a user DLT:
//!
//!   ```text
//!   tshark -o 'uat:user_dlts:"User 0 (DLT=147)","infiniband","0","","0",""' -r native.pcap
//!   ```
//!
//!   (In Wireshark: Preferences → Protocols → DLT_USER, encapsulation "User 0 (DLT=147)",
//!   payload protocol `infiniband`.)
//!
//! The reader never panics and never allocates: a short global header, an unknown magic, a
//! version other than 2.x, a record claiming more than the snapshot length (or more than
//! [`MAX_SNAPLEN`]) and a truncated last record are all typed errors ([`Header::Pcap`]).

use std::io::{self, Write};

use crate::error::{Error, Field, Header, Result};

/// Length of the global (file) header.
pub const GLOBAL_HEADER_LEN: usize = 24;
/// Length of each record header.
pub const RECORD_HEADER_LEN: usize = 16;

/// Magic number of files with microsecond timestamps.
pub const MAGIC_MICROS: u32 = 0xA1B2_C3D4;
/// Magic number of files with nanosecond timestamps.
pub const MAGIC_NANOS: u32 = 0xA1B2_3C4D;

pub const VERSION_MAJOR: u16 = 2;
pub const VERSION_MINOR: u16 = 4;

/// Largest record the reader accepts, whatever the file's snapshot length says (libpcap's
/// `MAXIMUM_SNAPLEN`); also the snapshot length [`PcapWriter`] declares.
pub const MAX_SNAPLEN: u32 = 262_144;

/// Ethernet frames, FCS excluded.
pub const LINKTYPE_ETHERNET: u32 = 1;
/// Raw IPv4 / IPv6 packets (the version nibble tells which).
pub const LINKTYPE_RAW: u32 = 101;
/// Private use 0: softib's native InfiniBand captures (see the module documentation).
pub const LINKTYPE_USER0: u32 = 147;
/// Registered InfiniBand link type; not decoded by tshark 4.0, so softib does not write it.
pub const LINKTYPE_INFINIBAND: u32 = 247;

/// Resolution of the fractional part of record timestamps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TsResolution {
    Micros,
    Nanos,
}

/// One packet record, borrowing its bytes from the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PcapRecord<'a> {
    /// Seconds since the Unix epoch.
    pub ts_sec: u32,
    /// Fraction of the second: microseconds or nanoseconds, as `resolution` says.
    pub ts_frac: u32,
    pub resolution: TsResolution,
    /// Length of the packet on the wire (`data` may be shorter if the capture cut it).
    pub orig_len: u32,
    /// The captured bytes (`incl_len` of them).
    pub data: &'a [u8],
}

impl PcapRecord<'_> {
    /// The timestamp in nanoseconds since the Unix epoch.
    pub fn timestamp_ns(&self) -> u64 {
        let frac = match self.resolution {
            TsResolution::Micros => u64::from(self.ts_frac) * 1_000,
            TsResolution::Nanos => u64::from(self.ts_frac),
        };
        u64::from(self.ts_sec) * 1_000_000_000 + frac
    }

    /// True when the capture kept fewer bytes than were on the wire.
    pub fn is_truncated(&self) -> bool {
        (self.data.len() as u64) < u64::from(self.orig_len)
    }
}

/// A pcap file held in memory. It is itself an iterator over the records (in file order,
/// stopping after the first error); [`PcapReader::records`] starts a fresh pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PcapReader<'a> {
    data: &'a [u8],
    big_endian: bool,
    resolution: TsResolution,
    version: (u16, u16),
    snaplen: u32,
    link_type: u32,
    cursor: Records<'a>,
}

fn read_u32(b: &[u8], at: usize, big_endian: bool) -> u32 {
    let w = [b[at], b[at + 1], b[at + 2], b[at + 3]];
    if big_endian {
        u32::from_be_bytes(w)
    } else {
        u32::from_le_bytes(w)
    }
}

fn read_u16(b: &[u8], at: usize, big_endian: bool) -> u16 {
    let w = [b[at], b[at + 1]];
    if big_endian {
        u16::from_be_bytes(w)
    } else {
        u16::from_le_bytes(w)
    }
}

impl<'a> PcapReader<'a> {
    /// Reads the global header of the pcap file `data`.
    pub fn new(data: &'a [u8]) -> Result<PcapReader<'a>> {
        crate::error::check_len(Header::Pcap, data, GLOBAL_HEADER_LEN)?;
        let le = read_u32(data, 0, false);
        let be = read_u32(data, 0, true);
        let (big_endian, resolution) = match (le, be) {
            (MAGIC_MICROS, _) => (false, TsResolution::Micros),
            (MAGIC_NANOS, _) => (false, TsResolution::Nanos),
            (_, MAGIC_MICROS) => (true, TsResolution::Micros),
            (_, MAGIC_NANOS) => (true, TsResolution::Nanos),
            _ => {
                return Err(Error::BadField {
                    field: Field::PcapMagic,
                    value: le.into(),
                })
            }
        };
        let major = read_u16(data, 4, big_endian);
        let minor = read_u16(data, 6, big_endian);
        if major != VERSION_MAJOR {
            return Err(Error::BadField {
                field: Field::PcapVersion,
                value: (u64::from(major) << 16) | u64::from(minor),
            });
        }
        let snaplen = read_u32(data, 16, big_endian);
        Ok(PcapReader {
            data,
            big_endian,
            resolution,
            version: (major, minor),
            snaplen,
            link_type: read_u32(data, 20, big_endian),
            cursor: Records::new(data, big_endian, resolution, snaplen),
        })
    }

    /// The link type (`LINKTYPE_*`): the low 16 bits of the header's link-type field (the upper
    /// bits may carry FCS information, which softib does not use).
    pub fn link_type(&self) -> u32 {
        self.link_type & 0xFFFF
    }

    /// The snapshot length the file declares.
    pub fn snaplen(&self) -> u32 {
        self.snaplen
    }

    /// Resolution of the records' `ts_frac`.
    pub fn resolution(&self) -> TsResolution {
        self.resolution
    }

    /// (major, minor) file format version.
    pub fn version(&self) -> (u16, u16) {
        self.version
    }

    /// True when the file was written big-endian.
    pub fn is_big_endian(&self) -> bool {
        self.big_endian
    }

    /// All records from the first, in file order, whatever this reader has already yielded.
    /// Iteration stops after the first error.
    pub fn records(&self) -> Records<'a> {
        Records::new(self.data, self.big_endian, self.resolution, self.snaplen)
    }
}

impl<'a> Iterator for PcapReader<'a> {
    type Item = Result<PcapRecord<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        self.cursor.next()
    }
}

impl core::iter::FusedIterator for PcapReader<'_> {}

/// Iterator over the records of a [`PcapReader`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Records<'a> {
    data: &'a [u8],
    offset: usize,
    big_endian: bool,
    resolution: TsResolution,
    limit: u32,
    failed: bool,
}

impl<'a> Records<'a> {
    fn new(data: &'a [u8], big_endian: bool, resolution: TsResolution, snaplen: u32) -> Self {
        let limit = if snaplen == 0 {
            MAX_SNAPLEN
        } else {
            snaplen.min(MAX_SNAPLEN)
        };
        Records {
            data,
            offset: GLOBAL_HEADER_LEN,
            big_endian,
            resolution,
            limit,
            failed: false,
        }
    }

    fn next_record(&mut self) -> Result<PcapRecord<'a>> {
        let rest = &self.data[self.offset..];
        crate::error::check_len(Header::Pcap, rest, RECORD_HEADER_LEN)?;
        let incl_len = read_u32(rest, 8, self.big_endian);
        if incl_len > self.limit {
            return Err(Error::BadField {
                field: Field::PcapCapturedLength,
                value: incl_len.into(),
            });
        }
        // incl_len <= MAX_SNAPLEN, so this neither truncates nor overflows.
        let need = RECORD_HEADER_LEN + incl_len as usize;
        crate::error::check_len(Header::Pcap, rest, need)?;
        let rec = PcapRecord {
            ts_sec: read_u32(rest, 0, self.big_endian),
            ts_frac: read_u32(rest, 4, self.big_endian),
            resolution: self.resolution,
            orig_len: read_u32(rest, 12, self.big_endian),
            data: &rest[RECORD_HEADER_LEN..need],
        };
        self.offset += need;
        Ok(rec)
    }
}

impl<'a> Iterator for Records<'a> {
    type Item = Result<PcapRecord<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.offset >= self.data.len() {
            return None;
        }
        let r = self.next_record();
        self.failed = r.is_err();
        Some(r)
    }
}

impl core::iter::FusedIterator for Records<'_> {}

/// Writes a little-endian, microsecond-resolution pcap file.
#[derive(Debug)]
pub struct PcapWriter<W: Write> {
    w: W,
}

impl<W: Write> PcapWriter<W> {
    /// Writes the global header (snapshot length [`MAX_SNAPLEN`], link type `link_type`).
    pub fn new(mut w: W, link_type: u32) -> io::Result<PcapWriter<W>> {
        let mut h = [0u8; GLOBAL_HEADER_LEN];
        h[0..4].copy_from_slice(&MAGIC_MICROS.to_le_bytes());
        h[4..6].copy_from_slice(&VERSION_MAJOR.to_le_bytes());
        h[6..8].copy_from_slice(&VERSION_MINOR.to_le_bytes());
        // thiszone = 0 (UTC), sigfigs = 0.
        h[16..20].copy_from_slice(&MAX_SNAPLEN.to_le_bytes());
        h[20..24].copy_from_slice(&link_type.to_le_bytes());
        w.write_all(&h)?;
        Ok(PcapWriter { w })
    }

    /// Appends one record stamped `ts_ns` nanoseconds after the Unix epoch (kept to the
    /// microsecond). A packet longer than [`MAX_SNAPLEN`] is cut to it, its full length kept in
    /// `orig_len`.
    pub fn write_record(&mut self, ts_ns: u64, data: &[u8]) -> io::Result<()> {
        let secs = u32::try_from(ts_ns / 1_000_000_000).unwrap_or(u32::MAX);
        let micros = ((ts_ns % 1_000_000_000) / 1_000) as u32;
        let kept = &data[..data.len().min(MAX_SNAPLEN as usize)];
        let mut h = [0u8; RECORD_HEADER_LEN];
        h[0..4].copy_from_slice(&secs.to_le_bytes());
        h[4..8].copy_from_slice(&micros.to_le_bytes());
        h[8..12].copy_from_slice(&(kept.len() as u32).to_le_bytes());
        let orig = u32::try_from(data.len()).unwrap_or(u32::MAX);
        h[12..16].copy_from_slice(&orig.to_le_bytes());
        self.w.write_all(&h)?;
        self.w.write_all(kept)
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.w.flush()
    }

    pub fn get_ref(&self) -> &W {
        &self.w
    }

    /// Returns the underlying writer (not flushed).
    pub fn into_inner(self) -> W {
        self.w
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const VECTORS: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/testvectors/rxe"
    );

    fn vector(name: &str) -> Vec<u8> {
        std::fs::read(format!("{VECTORS}/{name}")).expect("test vector")
    }

    #[test]
    fn reads_every_test_vector() {
        let mut files = 0;
        for e in std::fs::read_dir(VECTORS).unwrap() {
            let path = e.unwrap().path();
            if path.extension().is_none_or(|x| x != "pcap") {
                continue;
            }
            let data = std::fs::read(&path).unwrap();
            let rd = PcapReader::new(&data).unwrap();
            assert_eq!(rd.link_type(), LINKTYPE_ETHERNET);
            assert_eq!(rd.resolution(), TsResolution::Micros);
            assert_eq!(rd.version(), (2, 4));
            assert!(!rd.is_big_endian());
            let mut n = 0;
            let mut bytes = GLOBAL_HEADER_LEN;
            let mut last_ts = 0;
            for rec in rd.records() {
                let rec = rec.unwrap();
                // Captured with -s 0: nothing was cut.
                assert!(!rec.is_truncated());
                assert_eq!(rec.orig_len as usize, rec.data.len());
                assert!(rec.ts_frac < 1_000_000);
                assert!(rec.timestamp_ns() >= last_ts);
                last_ts = rec.timestamp_ns();
                bytes += RECORD_HEADER_LEN + rec.data.len();
                n += 1;
            }
            assert_eq!(bytes, data.len(), "{}", path.display());
            assert!(n > 0);
            files += 1;
        }
        assert!(files >= 10);
        // Frame counts from testvectors/rxe/README.md.
        for (name, frames) in [
            ("rc_pingpong_s64_n5.pcap", 31),
            ("rc_pingpong_ipv6_s64_n3.pcap", 23),
            ("loss_write_bw_s4096_n10.pcap", 167),
        ] {
            let data = vector(name);
            assert_eq!(PcapReader::new(&data).unwrap().records().count(), frames);
        }
    }

    #[test]
    fn first_record_of_a_vector() {
        let data = vector("rc_pingpong_s64_n5.pcap");
        let rd = PcapReader::new(&data).unwrap();
        assert_eq!(rd.snaplen(), MAX_SNAPLEN);
        let first_roce = rd
            .records()
            .map(Result::unwrap)
            .find(|r| r.data.len() == 122)
            .unwrap();
        assert_eq!(first_roce.ts_sec, 1_795_363_968);
        assert_eq!(first_roce.ts_frac, 868_884);
        assert_eq!(first_roce.timestamp_ns(), 1_795_363_968_868_884_000);
        assert_eq!(&first_roce.data[12..14], &[0x08, 0x00]);
    }

    #[test]
    fn write_read_round_trip() {
        let packets: [(u64, &[u8]); 3] = [
            (1_700_000_000_123_456_789, b"first"),
            (1_700_000_001_000_000_000, &[]),
            (5_999, &[0xab; 300]),
        ];
        let mut w = PcapWriter::new(Vec::new(), LINKTYPE_USER0).unwrap();
        for (ts, p) in packets {
            w.write_record(ts, p).unwrap();
        }
        w.flush().unwrap();
        assert_eq!(w.get_ref().len(), 24 + 3 * 16 + 5 + 300);
        let file = w.into_inner();
        assert_eq!(&file[..4], &[0xd4, 0xc3, 0xb2, 0xa1]);
        let rd = PcapReader::new(&file).unwrap();
        assert_eq!(rd.link_type(), LINKTYPE_USER0);
        assert_eq!(rd.snaplen(), MAX_SNAPLEN);
        let recs: Vec<_> = rd.records().map(Result::unwrap).collect();
        assert_eq!(recs.len(), 3);
        assert_eq!(rd.map(Result::unwrap).collect::<Vec<_>>(), recs);
        for (rec, (ts, p)) in recs.iter().zip(packets) {
            assert_eq!(rec.data, p);
            assert_eq!(rec.orig_len as usize, p.len());
            assert_eq!(rec.resolution, TsResolution::Micros);
            assert_eq!(rec.timestamp_ns(), ts / 1_000 * 1_000);
        }
        assert_eq!((recs[0].ts_sec, recs[0].ts_frac), (1_700_000_000, 123_456));
        assert_eq!((recs[2].ts_sec, recs[2].ts_frac), (0, 5));
    }

    #[test]
    fn oversized_packet_is_cut_to_snaplen() {
        let big = vec![7u8; MAX_SNAPLEN as usize + 10];
        let mut w = PcapWriter::new(Vec::new(), LINKTYPE_RAW).unwrap();
        w.write_record(0, &big).unwrap();
        let file = w.into_inner();
        let rd = PcapReader::new(&file).unwrap();
        let rec = rd.records().next().unwrap().unwrap();
        assert_eq!(rec.data.len(), MAX_SNAPLEN as usize);
        assert_eq!(rec.orig_len as usize, big.len());
        assert!(rec.is_truncated());
    }

    /// Builds a file by hand in any of the four magic / byte-order forms.
    fn handmade(big_endian: bool, magic: u32, records: &[(u32, u32, &[u8])]) -> Vec<u8> {
        let u32b = |v: u32| {
            if big_endian {
                v.to_be_bytes()
            } else {
                v.to_le_bytes()
            }
        };
        let u16b = |v: u16| {
            if big_endian {
                v.to_be_bytes()
            } else {
                v.to_le_bytes()
            }
        };
        let mut f = Vec::new();
        f.extend_from_slice(&u32b(magic));
        f.extend_from_slice(&u16b(2));
        f.extend_from_slice(&u16b(4));
        f.extend_from_slice(&[0; 8]);
        f.extend_from_slice(&u32b(65_535));
        f.extend_from_slice(&u32b(LINKTYPE_RAW));
        for (s, frac, d) in records {
            f.extend_from_slice(&u32b(*s));
            f.extend_from_slice(&u32b(*frac));
            f.extend_from_slice(&u32b(d.len() as u32));
            f.extend_from_slice(&u32b(d.len() as u32 + 4));
            f.extend_from_slice(d);
        }
        f
    }

    #[test]
    fn all_magic_and_byte_order_forms() {
        for big_endian in [false, true] {
            for (magic, res, ns) in [
                (MAGIC_MICROS, TsResolution::Micros, 3_000_007_000),
                (MAGIC_NANOS, TsResolution::Nanos, 3_000_000_007),
            ] {
                let f = handmade(big_endian, magic, &[(3, 7, b"\x45abc"), (4, 0, b"")]);
                let rd = PcapReader::new(&f).unwrap();
                assert_eq!(rd.is_big_endian(), big_endian);
                assert_eq!(rd.resolution(), res);
                assert_eq!(rd.snaplen(), 65_535);
                assert_eq!(rd.link_type(), LINKTYPE_RAW);
                let recs: Vec<_> = rd.records().map(Result::unwrap).collect();
                assert_eq!(recs.len(), 2);
                assert_eq!(recs[0].data, b"\x45abc");
                assert_eq!(recs[0].orig_len, 8);
                assert!(recs[0].is_truncated());
                assert_eq!(recs[0].timestamp_ns(), ns);
            }
        }
    }

    #[test]
    fn typed_errors() {
        assert_eq!(
            PcapReader::new(&[0xd4, 0xc3, 0xb2]).unwrap_err(),
            Error::Truncated {
                header: Header::Pcap,
                need: 24,
                have: 3
            }
        );
        let mut f = handmade(false, MAGIC_MICROS, &[(1, 2, b"abcdef")]);
        let mut bad_magic = f.clone();
        bad_magic[0] = 0;
        assert!(matches!(
            PcapReader::new(&bad_magic),
            Err(Error::BadField {
                field: Field::PcapMagic,
                ..
            })
        ));
        let mut bad_version = f.clone();
        bad_version[4] = 1;
        assert_eq!(
            PcapReader::new(&bad_version),
            Err(Error::BadField {
                field: Field::PcapVersion,
                value: 0x0001_0004
            })
        );
        // Truncated last record: header cut, then data cut.
        for cut in [1, 10, 16 + 5] {
            let short = &f[..24 + cut];
            let rd = PcapReader::new(short).unwrap();
            let mut it = rd.records();
            assert!(matches!(
                it.next(),
                Some(Err(Error::Truncated {
                    header: Header::Pcap,
                    ..
                }))
            ));
            assert_eq!(it.next(), None);
        }
        // incl_len above the file's snaplen.
        f[24 + 8..24 + 12].copy_from_slice(&70_000u32.to_le_bytes());
        let rd = PcapReader::new(&f).unwrap();
        assert_eq!(
            rd.records().next(),
            Some(Err(Error::BadField {
                field: Field::PcapCapturedLength,
                value: 70_000
            }))
        );
        // incl_len above MAX_SNAPLEN with a snaplen of 0 (unspecified) or one above the cap.
        for snaplen in [0u32, u32::MAX] {
            f[16..20].copy_from_slice(&snaplen.to_le_bytes());
            f[24 + 8..24 + 12].copy_from_slice(&(MAX_SNAPLEN + 1).to_le_bytes());
            let rd = PcapReader::new(&f).unwrap();
            assert!(matches!(
                rd.records().next(),
                Some(Err(Error::BadField {
                    field: Field::PcapCapturedLength,
                    ..
                }))
            ));
        }
        // The reader iterates too, like records(), and stops after the error.
        let mut rd = PcapReader::new(&f).unwrap();
        assert!(rd.next().unwrap().is_err());
        assert!(rd.next().is_none());
        // An empty capture (global header only) has no records.
        assert_eq!(PcapReader::new(&f[..24]).unwrap().records().count(), 0);
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..256)) {
            if let Ok(rd) = PcapReader::new(&data) {
                let total: usize = rd.records().filter_map(|r| r.ok()).map(|r| r.data.len()).sum();
                prop_assert!(total <= data.len());
            }
        }

        #[test]
        fn garbage_after_a_valid_header_never_panics(
            big_endian in any::<bool>(),
            nanos in any::<bool>(),
            body in proptest::collection::vec(any::<u8>(), 0..512),
        ) {
            let magic = if nanos { MAGIC_NANOS } else { MAGIC_MICROS };
            let mut f = handmade(big_endian, magic, &[]);
            f.extend_from_slice(&body);
            let rd = PcapReader::new(&f).unwrap();
            let mut consumed = GLOBAL_HEADER_LEN;
            let mut failed = false;
            for r in rd.records() {
                prop_assert!(!failed, "record after an error");
                match r {
                    Ok(rec) => consumed += RECORD_HEADER_LEN + rec.data.len(),
                    Err(_) => failed = true,
                }
            }
            prop_assert!(consumed <= f.len());
            prop_assert!(failed || consumed == f.len());
        }
    }
}
