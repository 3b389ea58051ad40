//! `softib pcap decode --json` agrees with Wireshark's InfiniBand dissector.
//!
//! 1. On every RoCEv2 test vector (`../shared/testvectors/rxe/*.pcap`), field by field, with the
//!    tshark output committed in `tests/data/tshark/` (written by `scripts/tshark-expected.sh`,
//!    tshark 4.0.17). This part needs no tshark at test time.
//! 2. When tshark is installed: the committed files still match what tshark says about the
//!    vectors, and a capture that softib writes itself (opcodes, pads and AETH codes the vectors
//!    lack) is decoded alike by softib and tshark, with no malformed packet.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// Keys every decoded BTH packet carries (null when the packet has no such field).
const JSON_KEYS: [&str; 20] = [
    "frame",
    "opcode",
    "opcode_name",
    "dest_qp",
    "psn",
    "ack_req",
    "se",
    "pad_cnt",
    "pkey",
    "payload_len",
    "syndrome",
    "msn",
    "reth_va",
    "reth_rkey",
    "reth_len",
    "xrcsrq",
    "eecn",
    "qkey",
    "src_qp",
    "icrc_ok",
];

/// The tshark fields, in the column order of the committed files.
const TSHARK_FIELDS: [&str; 19] = [
    "frame.number",
    "infiniband.bth.opcode",
    "infiniband.bth.destqp",
    "infiniband.bth.psn",
    "infiniband.bth.a",
    "infiniband.bth.se",
    "infiniband.bth.padcnt",
    "infiniband.bth.p_key",
    "infiniband.aeth.syndrome",
    "infiniband.aeth.msn",
    "infiniband.reth.va",
    "infiniband.reth.r_key",
    "infiniband.reth.dmalen",
    "infiniband.atomiceth.swapdt",
    "infiniband.atomiceth.cmpdt",
    "infiniband.deth.q_key",
    "infiniband.deth.srcqp",
    "data.len",
    "frame.protocols",
];

fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn vectors_dir() -> PathBuf {
    manifest_dir().join("../../../shared/testvectors/rxe")
}

fn tsv_dir() -> PathBuf {
    manifest_dir().join("tests/data/tshark")
}

fn files_with_ext(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == ext))
        .collect();
    v.sort();
    v
}

fn stem(p: &Path) -> String {
    p.file_stem().unwrap().to_string_lossy().into_owned()
}

// ---------------------------------------------------------------------------------------------
// What tshark says

/// One tshark row: field name → raw text (absent fields are empty).
#[derive(Debug, Clone)]
struct TsharkRow {
    cols: BTreeMap<String, String>,
}

impl TsharkRow {
    fn raw(&self, field: &str) -> &str {
        self.cols.get(field).map(String::as_str).unwrap_or("")
    }

    /// An integer field: None when tshark printed nothing; decimal or 0x-hex otherwise.
    fn num(&self, field: &str) -> Result<Option<u64>, String> {
        let s = self.raw(field);
        if s.is_empty() {
            return Ok(None);
        }
        if s.contains(',') {
            return Err(format!("{field} occurs more than once: {s:?}"));
        }
        let v = match s.strip_prefix("0x") {
            Some(h) => u64::from_str_radix(h, 16),
            None => s.parse::<u64>(),
        };
        v.map(Some)
            .map_err(|_| format!("{field} is not a number: {s:?}"))
    }

    /// A boolean field: tshark prints 1/0 (or True/False).
    fn flag(&self, field: &str) -> Result<Option<bool>, String> {
        match self.raw(field) {
            "" => Ok(None),
            "1" | "True" => Ok(Some(true)),
            "0" | "False" => Ok(Some(false)),
            s => Err(format!("{field} is not a boolean: {s:?}")),
        }
    }
}

/// Parses tshark `-T fields -E header=y -E separator=/t` output; rows keyed by frame number.
fn parse_tshark(text: &str, what: &str) -> BTreeMap<u64, TsharkRow> {
    let mut lines = text.lines();
    let header: Vec<&str> = lines
        .next()
        .unwrap_or_else(|| panic!("{what}: empty"))
        .split('\t')
        .collect();
    for f in [
        "frame.number",
        "infiniband.bth.opcode",
        "data.len",
        "frame.protocols",
    ] {
        assert!(header.contains(&f), "{what}: no {f} column");
    }
    let mut rows = BTreeMap::new();
    for (i, line) in lines.enumerate() {
        let vals: Vec<&str> = line.split('\t').collect();
        assert_eq!(
            vals.len(),
            header.len(),
            "{what} line {}: {} columns, header has {}",
            i + 2,
            vals.len(),
            header.len()
        );
        let row = TsharkRow {
            cols: header
                .iter()
                .zip(&vals)
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        };
        let frame = row
            .num("frame.number")
            .unwrap_or_else(|e| panic!("{what} line {}: {e}", i + 2))
            .unwrap_or_else(|| panic!("{what} line {}: no frame number", i + 2));
        assert!(
            rows.insert(frame, row).is_none(),
            "{what}: frame {frame} listed twice"
        );
    }
    rows
}

// ---------------------------------------------------------------------------------------------
// What softib says

fn softib_decode(pcap: &Path) -> BTreeMap<u64, serde_json::Map<String, Value>> {
    let out = Command::new(env!("CARGO_BIN_EXE_softib"))
        .args(["pcap", "decode"])
        .arg(pcap)
        .arg("--json")
        .output()
        .expect("run softib");
    let stdout = String::from_utf8(out.stdout).expect("softib output is UTF-8");
    assert!(
        out.status.success(),
        "softib pcap decode {} --json exited with {}\nstdout:\n{stdout}\nstderr:\n{}",
        pcap.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let mut records = BTreeMap::new();
    for line in stdout.lines().filter(|l| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("{}: not a JSON line ({e}): {line}", pcap.display()));
        let Value::Object(obj) = v else {
            panic!("{}: not a JSON object: {line}", pcap.display())
        };
        let frame = obj
            .get("frame")
            .and_then(Value::as_u64)
            .unwrap_or_else(|| panic!("{}: no numeric \"frame\": {line}", pcap.display()));
        assert!(
            frame >= 1,
            "{}: frame numbers are 1-based: {line}",
            pcap.display()
        );
        assert!(
            records.insert(frame, obj).is_none(),
            "{}: frame {frame} printed twice",
            pcap.display()
        );
    }
    records
}

/// Number of records in a classic pcap file, counted here so the frame numbers softib prints
/// can be bounded without trusting softib's own reader.
fn pcap_record_count(bytes: &[u8]) -> u64 {
    assert!(bytes.len() >= 24, "pcap shorter than its global header");
    let magic = u32::from_le_bytes(bytes[0..4].try_into().unwrap());
    let big_endian = match magic {
        0xA1B2_C3D4 | 0xA1B2_3C4D => false,
        0xD4C3_B2A1 | 0x4D3C_B2A1 => true,
        m => panic!("not a classic pcap file (magic {m:#x})"),
    };
    let mut at = 24;
    let mut n = 0;
    while at < bytes.len() {
        let w: [u8; 4] = bytes[at + 8..at + 12].try_into().unwrap();
        let incl = if big_endian {
            u32::from_be_bytes(w)
        } else {
            u32::from_le_bytes(w)
        };
        at += 16 + incl as usize;
        n += 1;
    }
    assert_eq!(at, bytes.len(), "pcap ends inside a record");
    n
}

// ---------------------------------------------------------------------------------------------
// Comparison

fn json_num(obj: &serde_json::Map<String, Value>, key: &str) -> Result<Option<u64>, String> {
    match obj.get(key) {
        None => Err(format!("key {key:?} missing")),
        Some(Value::Null) => Ok(None),
        Some(v @ Value::Number(_)) => v
            .as_u64()
            .map(Some)
            .ok_or_else(|| format!("{key} = {v} is not an unsigned integer")),
        Some(v) => Err(format!("{key} = {v} is not a JSON number")),
    }
}

fn json_bool(obj: &serde_json::Map<String, Value>, key: &str) -> Result<Option<bool>, String> {
    match obj.get(key) {
        None => Err(format!("key {key:?} missing")),
        Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(v) => Err(format!("{key} = {v} is not a JSON boolean")),
    }
}

/// Compares one packet; pushes a line per disagreement onto `errs`.
fn compare_packet(
    what: &str,
    frame: u64,
    t: &TsharkRow,
    s: &serde_json::Map<String, Value>,
    errs: &mut Vec<String>,
) {
    let mut check = |name: &str,
                     theirs: Result<Option<u64>, String>,
                     ours: Result<Option<u64>, String>| match (theirs, ours) {
        (Ok(a), Ok(b)) if a == b => {}
        (Ok(a), Ok(b)) => errs.push(format!(
            "{what} frame {frame}: {name}: tshark {a:?}, softib {b:?}"
        )),
        (Err(e), _) => errs.push(format!("{what} frame {frame}: tshark {e}")),
        (_, Err(e)) => errs.push(format!("{what} frame {frame}: softib {e}")),
    };
    let flag = |r: Result<Option<bool>, String>| r.map(|o| o.map(u64::from));

    for key in JSON_KEYS {
        if !s.contains_key(key) {
            check(key, Ok(None), Err(format!("key {key:?} missing")));
        }
    }
    check(
        "opcode",
        t.num("infiniband.bth.opcode"),
        json_num(s, "opcode"),
    );
    check(
        "dest_qp",
        t.num("infiniband.bth.destqp"),
        json_num(s, "dest_qp"),
    );
    check("psn", t.num("infiniband.bth.psn"), json_num(s, "psn"));
    check(
        "ack_req",
        flag(t.flag("infiniband.bth.a")),
        flag(json_bool(s, "ack_req")),
    );
    check(
        "se",
        flag(t.flag("infiniband.bth.se")),
        flag(json_bool(s, "se")),
    );
    check(
        "pad_cnt",
        t.num("infiniband.bth.padcnt"),
        json_num(s, "pad_cnt"),
    );
    check("pkey", t.num("infiniband.bth.p_key"), json_num(s, "pkey"));
    check(
        "syndrome",
        t.num("infiniband.aeth.syndrome"),
        json_num(s, "syndrome"),
    );
    check("msn", t.num("infiniband.aeth.msn"), json_num(s, "msn"));

    // Wireshark shows an AtomicETH's VA and R_Key under the RETH field names: a packet with an
    // AtomicETH (and so no RETH) has no reth_* in softib's output.
    let atomic = !t.raw("infiniband.atomiceth.swapdt").is_empty();
    let reth = |f: &str| if atomic { Ok(None) } else { t.num(f) };
    check(
        "reth_va",
        reth("infiniband.reth.va"),
        json_num(s, "reth_va"),
    );
    check(
        "reth_rkey",
        reth("infiniband.reth.r_key"),
        json_num(s, "reth_rkey"),
    );
    check(
        "reth_len",
        t.num("infiniband.reth.dmalen"),
        json_num(s, "reth_len"),
    );

    check("qkey", t.num("infiniband.deth.q_key"), json_num(s, "qkey"));
    check(
        "src_qp",
        t.num("infiniband.deth.srcqp"),
        json_num(s, "src_qp"),
    );

    // tshark hands the bytes between the headers and the ICRC, pad included, to its `data`
    // dissector; no data layer means none. softib's payload_len excludes the pad.
    let protocols = t.raw("frame.protocols");
    let data_len = match t.num("data.len") {
        Ok(None) if protocols.ends_with(":infiniband") => Ok(Some(0)),
        Ok(None) => Err(format!(
            "has no data.len but frame.protocols is {protocols:?}"
        )),
        other => other,
    };
    let ours = match (json_num(s, "payload_len"), json_num(s, "pad_cnt")) {
        (Ok(Some(len)), Ok(Some(pad))) => Ok(Some(len + pad)),
        (Ok(None), _) => Err("payload_len is null".to_string()),
        (Err(e), _) | (_, Err(e)) => Err(e),
        (_, Ok(None)) => Err("pad_cnt is null".to_string()),
    };
    check("payload_len + pad_cnt (data.len)", data_len, ours);

    match s.get("opcode_name") {
        Some(Value::String(n)) if !n.is_empty() => {}
        other => errs.push(format!(
            "{what} frame {frame}: softib opcode_name is {other:?}"
        )),
    }
}

/// Compares softib's decode of `pcap` with tshark's rows; returns the disagreements.
fn compare_capture(
    what: &str,
    pcap: &Path,
    tshark: &BTreeMap<u64, TsharkRow>,
    expect_icrc_ok: bool,
) -> Vec<String> {
    let bytes = std::fs::read(pcap).unwrap_or_else(|e| panic!("read {}: {e}", pcap.display()));
    let records = pcap_record_count(&bytes);
    let softib = softib_decode(pcap);
    let mut errs = Vec::new();

    for (frame, obj) in &softib {
        if *frame > records {
            errs.push(format!(
                "{what}: softib printed frame {frame}, the file has {records} records"
            ));
        }
        if let Some(e) = obj.get("error") {
            errs.push(format!(
                "{what} frame {frame}: softib reports an error: {e}"
            ));
        }
    }
    let is_bth = |o: &serde_json::Map<String, Value>| o.get("opcode").is_some_and(|v| !v.is_null());
    let ours: BTreeSet<u64> = softib
        .iter()
        .filter(|(_, o)| is_bth(o))
        .map(|(f, _)| *f)
        .collect();
    let theirs: BTreeSet<u64> = tshark.keys().copied().collect();
    let only_tshark: Vec<_> = theirs.difference(&ours).collect();
    let only_softib: Vec<_> = ours.difference(&theirs).collect();
    if !only_tshark.is_empty() {
        errs.push(format!(
            "{what}: BTH frames tshark decodes but softib does not: {only_tshark:?}"
        ));
    }
    if !only_softib.is_empty() {
        errs.push(format!(
            "{what}: BTH frames softib decodes but tshark does not: {only_softib:?}"
        ));
    }
    for (frame, row) in tshark {
        let Some(obj) = softib.get(frame) else {
            continue;
        };
        compare_packet(what, *frame, row, obj, &mut errs);
        if expect_icrc_ok && obj.get("icrc_ok") != Some(&Value::Bool(true)) {
            errs.push(format!(
                "{what} frame {frame}: icrc_ok is {:?}, the ICRC is valid",
                obj.get("icrc_ok")
            ));
        }
    }
    errs
}

fn fail_on(errs: Vec<String>, summary: &str) {
    if errs.is_empty() {
        return;
    }
    let mut msg = format!("{} disagreement(s) {summary}:\n", errs.len());
    for e in errs.iter().take(60) {
        let _ = writeln!(msg, "  {e}");
    }
    if errs.len() > 60 {
        let _ = writeln!(msg, "  … and {} more", errs.len() - 60);
    }
    panic!("{msg}");
}

#[test]
fn decode_agrees_with_committed_tshark_output() {
    let vectors = files_with_ext(&vectors_dir(), "pcap");
    let tsvs = files_with_ext(&tsv_dir(), "tsv");
    assert!(
        !vectors.is_empty(),
        "no test vectors in {}",
        vectors_dir().display()
    );
    let vnames: Vec<String> = vectors.iter().map(|p| stem(p)).collect();
    let tnames: Vec<String> = tsvs.iter().map(|p| stem(p)).collect();
    assert_eq!(
        vnames, tnames,
        "every vector needs a tshark file (run scripts/tshark-expected.sh)"
    );

    let mut errs = Vec::new();
    let mut packets = 0;
    for (pcap, tsv) in vectors.iter().zip(&tsvs) {
        let name = stem(pcap);
        let text = std::fs::read_to_string(tsv).unwrap();
        let rows = parse_tshark(&text, &name);
        assert!(!rows.is_empty(), "{name}: tshark found no BTH frame");
        packets += rows.len();
        // The vectors' README: every RoCEv2 packet in them has a valid ICRC.
        errs.extend(compare_capture(&name, pcap, &rows, true));
    }
    fail_on(errs, "between softib and the committed tshark output");
    println!(
        "{packets} packets in {} vectors agree with tshark",
        vectors.len()
    );
}

// ---------------------------------------------------------------------------------------------
// With tshark installed

fn tshark_available() -> bool {
    Command::new("tshark")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn run_tshark(args: &[&str], pcap: &Path) -> String {
    let out = Command::new("tshark")
        .args(["--disable-protocol", "rpcordma", "-r"])
        .arg(pcap)
        .args(args)
        .output()
        .expect("run tshark");
    assert!(
        out.status.success(),
        "tshark on {} failed: {}",
        pcap.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("tshark output is UTF-8")
}

fn tshark_fields(pcap: &Path) -> String {
    let mut args = vec![
        "-Y",
        "infiniband.bth",
        "-T",
        "fields",
        "-E",
        "separator=/t",
        "-E",
        "header=y",
        "-E",
        "occurrence=a",
        "-E",
        "aggregator=,",
    ];
    for f in TSHARK_FIELDS {
        args.extend(["-e", f]);
    }
    run_tshark(&args, pcap)
}

fn malformed_frames(pcap: &Path) -> usize {
    run_tshark(&["-Y", "_ws.malformed"], pcap).lines().count()
}

#[test]
fn installed_tshark_matches_committed_output() {
    if !tshark_available() {
        println!("SKIPPED: tshark is not installed (scripts/install-deps.sh installs it)");
        return;
    }
    for pcap in files_with_ext(&vectors_dir(), "pcap") {
        let name = stem(&pcap);
        let committed = std::fs::read_to_string(tsv_dir().join(format!("{name}.tsv"))).unwrap();
        assert_eq!(
            tshark_fields(&pcap),
            committed,
            "{name}: tshark now says otherwise (rerun scripts/tshark-expected.sh and review)"
        );
        assert_eq!(
            malformed_frames(&pcap),
            0,
            "{name}: tshark reports malformed packets"
        );
    }
}

/// Packets the vectors do not hold: every opcode family with its extension headers, payloads
/// of 1–4 bytes (PadCnt 3..0), NAK syndromes and a RETH with every byte set.
fn synthetic_packets() -> Vec<Vec<u8>> {
    use softib_wire::aeth::Aeth;
    use softib_wire::atomic_ack_eth::AtomicAckEth;
    use softib_wire::atomic_eth::AtomicEth;
    use softib_wire::bth::Bth;
    use softib_wire::deth::Deth;
    use softib_wire::ethernet::Ethernet;
    use softib_wire::feth::Feth;
    use softib_wire::grh::Grh;
    use softib_wire::ieth::Ieth;
    use softib_wire::immdt::ImmDt;
    use softib_wire::ipv4::Ipv4;
    use softib_wire::reth::Reth;
    use softib_wire::roce::{build, IpHeader};
    use softib_wire::transport::{TransportHeaders, TransportPacket};
    use softib_wire::{Msn, Opcode, Psn, Qpn};

    let eth = Ethernet {
        dst: [0x52, 0x54, 0, 0x62, 0, 0x11],
        src: [0x52, 0x54, 0, 0x61, 0, 0x11],
        ..Default::default()
    };
    let v4 = IpHeader::V4(Ipv4 {
        ttl: 64,
        flags: 0x2,
        src: [10, 99, 0, 2],
        dst: [10, 99, 0, 3],
        ..Default::default()
    });
    let v6 = IpHeader::V6(Grh {
        hop_lmt: 64,
        sgid: [
            0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x50, 0x54, 0, 0xff, 0xfe, 0x61, 0, 0x11,
        ],
        dgid: [
            0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x50, 0x54, 0, 0xff, 0xfe, 0x62, 0, 0x11,
        ],
        ..Default::default()
    });
    let payloads: [&[u8]; 5] = [b"", b"a", b"ab", b"abc", b"abcd"];

    let mut frames = Vec::new();
    let mut psn = 0x00ff_fff0u32;
    for op in 0u8..=0xff {
        let op = Opcode(op);
        let Some(info) = op.info() else { continue };
        // Only what RoCEv2 carries and Wireshark 4.0 dissects: RC, UC, UD, without the IBA 1.5
        // FLUSH and ATOMIC WRITE, which Wireshark 4.0 does not know.
        if !matches!(
            info.service,
            softib_wire::Service::Rc | softib_wire::Service::Uc | softib_wire::Service::Ud
        ) || op == Opcode::RC_FLUSH
            || op == Opcode::RC_ATOMIC_WRITE
        {
            continue;
        }
        // An empty UD payload sets off Wireshark's EoIB heuristic, which then calls it malformed.
        let sizes: &[&[u8]] = match (info.payload, info.service) {
            (false, _) => &payloads[..1],
            (true, softib_wire::Service::Ud) => &payloads[1..],
            (true, _) => &payloads,
        };
        for (i, payload) in sizes.iter().enumerate() {
            let bth = Bth {
                opcode: op,
                solicited: i % 2 == 1,
                pkey: 0xffff - i as u16,
                dest_qp: Qpn::new(0x00ab_cdef >> i),
                ack_req: i % 2 == 0,
                psn: Psn::new(psn & 0x00ff_ffff),
                ..Default::default()
            };
            psn = psn.wrapping_add(1);
            let mut h = TransportHeaders::new(bth);
            use softib_wire::ExtHeaders as X;
            if info.headers.contains(X::DETH) {
                h.deth = Some(Deth {
                    qkey: 0x8001_0000,
                    src_qp: Qpn::new(0x11),
                    ..Default::default()
                });
            }
            if info.headers.contains(X::FETH) {
                h.feth = Some(Feth {
                    sel: 1,
                    plt: 1,
                    ..Default::default()
                });
            }
            if info.headers.contains(X::RETH) {
                h.reth = Some(Reth {
                    va: 0xffff_ffff_ffff_fff0 | i as u64,
                    rkey: 0xdead_beef,
                    dma_len: 4 * i as u32 + 1,
                });
            }
            if info.headers.contains(X::AETH) {
                // ACK with credits, RNR NAK (timer 12), NAK PSN sequence error.
                let syndrome = [0x1f, 0x2c, 0x60, 0x03, 0x61][i % 5];
                h.aeth = Some(Aeth {
                    syndrome,
                    msn: Msn::new((0x00ff_fffe + i as u32) & 0x00ff_ffff),
                });
            }
            if info.headers.contains(X::ATOMIC_ETH) {
                h.atomic_eth = Some(AtomicEth {
                    va: 0x5654_684e_1000,
                    rkey: 0x1239,
                    swap_add: 1,
                    compare: 0x1234_5678_9abc_def0,
                });
            }
            if info.headers.contains(X::ATOMIC_ACK_ETH) {
                h.atomic_ack_eth = Some(AtomicAckEth {
                    orig_remote_data: 0x0102_0304_0506_0708,
                });
            }
            if info.headers.contains(X::IMMDT) {
                h.immdt = Some(ImmDt { imm: 0xcafe_f00d });
            }
            if info.headers.contains(X::IETH) {
                h.ieth = Some(Ieth { rkey: 0x0bad_cafe });
            }
            let t = TransportPacket::new(h, payload);
            let ip = if frames.len() % 3 == 2 { &v6 } else { &v4 };
            let mut buf = vec![0u8; 2048];
            let n = build(
                &eth,
                ip,
                0xc000 | (frames.len() as u16 & 0x3fff),
                &t,
                &mut buf,
            )
            .unwrap_or_else(|e| panic!("build {op:?} with {} payload bytes: {e}", payload.len()));
            buf.truncate(n);
            frames.push(buf);
        }
    }
    frames
}

#[test]
fn softib_written_capture_agrees_with_tshark() {
    use softib_wire::pcap::{PcapWriter, LINKTYPE_ETHERNET};

    let frames = synthetic_packets();
    assert!(frames.len() > 40, "only {} synthetic packets", frames.len());
    let dir = std::env::temp_dir().join(format!("softib-tshark-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pcap = dir.join("synthetic.pcap");
    let mut w = PcapWriter::new(Vec::new(), LINKTYPE_ETHERNET).unwrap();
    for (i, f) in frames.iter().enumerate() {
        w.write_record(1_795_363_968_000_000_000 + i as u64 * 1_000, f)
            .unwrap();
    }
    std::fs::write(&pcap, w.into_inner()).unwrap();

    if !tshark_available() {
        println!("SKIPPED tshark comparison of a softib-written capture: tshark is not installed (scripts/install-deps.sh installs it)");
        let _ = std::fs::remove_dir_all(&dir);
        return;
    }
    let malformed = malformed_frames(&pcap);
    let rows = parse_tshark(&tshark_fields(&pcap), "synthetic.pcap");
    let mut errs = compare_capture("synthetic.pcap", &pcap, &rows, true);
    if malformed != 0 {
        errs.push(format!(
            "synthetic.pcap: tshark reports {malformed} malformed packet(s)"
        ));
    }
    if rows.len() != frames.len() {
        errs.push(format!(
            "synthetic.pcap: tshark decodes {} of {} packets as InfiniBand",
            rows.len(),
            frames.len()
        ));
    }
    let keep = !errs.is_empty();
    if keep {
        println!("capture kept at {}", pcap.display());
    } else {
        let _ = std::fs::remove_dir_all(&dir);
    }
    fail_on(
        errs,
        "between softib and tshark on a softib-written capture",
    );
}

/// Compares the BTH fields of softib's decode with tshark's for a capture whose headers after
/// the BTH tshark 4.0 does not dissect as IBA defines them (XRC, RD); `what` names the capture.
fn bth_agreement(what: &str, pcap: &Path, decoded: &BTreeMap<u64, serde_json::Map<String, Value>>) {
    if !tshark_available() {
        println!("SKIPPED tshark comparison of {what}: tshark is not installed (scripts/install-deps.sh installs it)");
        return;
    }
    let rows = parse_tshark(&tshark_fields(pcap), what);
    assert_eq!(rows.len(), decoded.len(), "{what}: tshark rows");
    let mut errs = Vec::new();
    for (frame, p) in decoded {
        let Some(t) = rows.get(frame) else {
            errs.push(format!("{what} frame {frame}: not decoded by tshark"));
            continue;
        };
        for (field, key) in [
            ("infiniband.bth.opcode", "opcode"),
            ("infiniband.bth.destqp", "dest_qp"),
            ("infiniband.bth.psn", "psn"),
            ("infiniband.bth.padcnt", "pad_cnt"),
            ("infiniband.bth.p_key", "pkey"),
        ] {
            let (theirs, ours) = (t.num(field), json_num(p, key));
            if theirs != ours {
                errs.push(format!(
                    "{what} frame {frame}: {key}: tshark {theirs:?}, softib {ours:?}"
                ));
            }
        }
        let (theirs, ours) = (t.flag("infiniband.bth.a"), json_bool(p, "ack_req"));
        if theirs != ours {
            errs.push(format!(
                "{what} frame {frame}: ack_req: tshark {theirs:?}, softib {ours:?}"
            ));
        }
    }
    fail_on(errs, &format!("between softib and tshark on {what}"));
}

/// Runs `softib sim` with `args` writing `pcap`, checks that it verified its data, and returns
/// softib's decode of the capture (every packet's ICRC good).
fn sim_capture(args: &[&str], pcap: &Path) -> BTreeMap<u64, serde_json::Map<String, Value>> {
    let out = Command::new(env!("CARGO_BIN_EXE_softib"))
        .arg("sim")
        .args(args)
        .arg("--pcap")
        .arg(pcap)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("result:      verified"),
        "{text}"
    );
    let decoded = softib_decode(pcap);
    for (frame, p) in &decoded {
        assert_eq!(p.get("icrc_ok"), Some(&Value::Bool(true)), "frame {frame}");
    }
    decoded
}

/// An XRC simulation (initiators sending to several XRC SRQs of one domain, every operation)
/// writes a capture whose every packet passes softib's checker, whose requests all carry an
/// XRCETH naming one of the SRQs (softib's decoder shows it as `xrcsrq`), and which tshark
/// decodes as softib does in every BTH field (tshark 4.0 knows the XRC opcodes only by
/// number: it dissects their BTH but not the headers after it, XRCETH, RETH or AETH).
#[test]
fn xrc_simulation_capture_agrees_with_tshark() {
    let dir = std::env::temp_dir().join(format!("softib-xrc-pcap-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for op in ["send", "write", "read", "faa"] {
        let pcap = dir.join(format!("xrc-{op}.pcap"));
        let decoded = sim_capture(
            &[
                "--service",
                "xrc",
                "--qps",
                "2",
                "--srqs",
                "3",
                "--op",
                op,
                "--size",
                "3000",
                "--ops",
                "12",
                "--mtu",
                "1024",
                "--loss",
                "0.02",
                "--seed",
                "5",
            ],
            &pcap,
        );
        assert!(decoded.len() > 12, "{op}: {} packets", decoded.len());
        for (frame, p) in &decoded {
            let opcode = json_num(p, "opcode").unwrap().unwrap();
            assert_eq!(opcode & 0xe0, 0xa0, "{op} frame {frame}: not XRC");
            let srq = json_num(p, "xrcsrq").unwrap();
            let is_request = !(0xad..=0xb2).contains(&opcode);
            assert_eq!(srq.is_some(), is_request, "{op} frame {frame}: {p:?}");
            if let Some(n) = srq {
                // Node B's three SRQs: its node number (2) x 2^16 + 1, 2, 3.
                assert!(
                    (0x02_0001..=0x02_0003).contains(&n),
                    "{op} frame {frame}: xrcsrq {n:#x}"
                );
            }
        }
        bth_agreement(&format!("xrc-{op}"), &pcap, &decoded);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// An RD simulation (three QP pairs over two EE context pairs, every operation) writes a
/// capture whose every packet passes softib's checker and carries an RDETH naming one of the
/// two EE contexts of the node it goes to (`eecn`); every request also carries a DETH with the
/// simulator's Q_Key and one of node A's QPs as its source (`qkey`, `src_qp`), responses none;
/// tshark agrees on every BTH field. tshark 4.0 names opcodes 0x40-0x55 "DC" (Mellanox's
/// dynamically connected transport reuses them) and reads its RDETH 8 bytes after where IBA
/// puts it, so its RDETH and DETH fields are not compared.
#[test]
fn rd_simulation_capture_agrees_with_tshark() {
    let dir = std::env::temp_dir().join(format!("softib-rd-pcap-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for op in ["send", "write", "read", "cas"] {
        let pcap = dir.join(format!("rd-{op}.pcap"));
        let decoded = sim_capture(
            &[
                "--service",
                "rd",
                "--qps",
                "3",
                "--eecs",
                "2",
                "--op",
                op,
                "--size",
                "3000",
                "--ops",
                "12",
                "--mtu",
                "1024",
                "--loss",
                "0.02",
                "--seed",
                "5",
            ],
            &pcap,
        );
        assert!(decoded.len() > 12, "{op}: {} packets", decoded.len());
        let (mut requests, mut responses) = (0, 0);
        for (frame, p) in &decoded {
            let opcode = json_num(p, "opcode").unwrap().unwrap();
            assert!(
                (0x40..=0x55).contains(&opcode),
                "{op} frame {frame}: not RD"
            );
            let eecn = json_num(p, "eecn").unwrap();
            assert!(
                matches!(eecn, Some(1..=2)),
                "{op} frame {frame}: eecn {eecn:?}"
            );
            let is_response = (0x4d..=0x52).contains(&opcode);
            let (qkey, src) = (json_num(p, "qkey").unwrap(), json_num(p, "src_qp").unwrap());
            if is_response {
                responses += 1;
                assert_eq!((qkey, src), (None, None), "{op} frame {frame}: {p:?}");
            } else {
                requests += 1;
                assert_eq!(qkey, Some(0x0052_0000), "{op} frame {frame}");
                assert!(
                    matches!(src, Some(0x11..=0x13)),
                    "{op} frame {frame}: src_qp {src:?}"
                );
            }
        }
        assert!(
            requests > 0 && responses > 0,
            "{op}: {requests} requests, {responses} responses"
        );
        bth_agreement(&format!("rd-{op}"), &pcap, &decoded);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
