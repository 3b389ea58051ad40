//! softib-wire throughput, as ratios against baselines measured in the same run.
//!
//! Wall time on a shared machine drifts by tens of percent between runs, so no bare time is the
//! result here: every subject is paired with a baseline doing comparable raw work on the same
//! bytes (`crc32fast::hash`, a `memcpy`), the two are timed in alternating rounds, and the
//! result is the median of the per-round ratios `baseline ns/op / subject ns/op` (1.0 = as fast
//! as the baseline, 0.5 = twice its time). Million operations per second are printed as well,
//! since the parse target is stated that way; that column is informational only.
//!
//! Workloads (all RoCEv2 over IPv4, no VLAN, built with `roce::build` and checked before timing):
//!
//! * `write4k`: RC_RDMA_WRITE_MIDDLE with a 4096-byte payload, a 4154-byte frame; the ICRC
//!   covers 4144 bytes (8 LRH stand-in + 20 IPv4 + 8 UDP + 12 BTH + 4096 payload).
//! * `send64`: RC_SEND_ONLY with a 64-byte payload, a 122-byte frame; its transport part
//!   (BTH + payload, ICRC excluded) is 76 bytes.
//! * `ack`: RC_ACKNOWLEDGE (BTH + AETH, no payload), a 62-byte frame: the extension-header
//!   path.
//!
//! Usage (`cargo bench -p softib-wire --bench wire -- [OPTIONS] [FILTER...]`, or
//! `scripts/bench.sh [OPTIONS]`):
//!
//! * `--quick`: 3 rounds of 2 ms per side (CI smoke); also the mode when run without `--bench`,
//!   as `cargo test --benches` does.
//! * `--rounds N`, `--round-ms MS`: override the defaults (15 rounds of 20 ms per side).
//! * `--json`: one JSON object per result line instead of the table.
//! * `--callgrind N`: no timing; runs each subject and each baseline N times, each inside its
//!   own `#[inline(never)]` loop function, and prints one `row` line per result naming the
//!   operations and their loop functions. `--op NAME` (repeatable) runs only those operations.
//!   `scripts/callgrind.sh` runs one operation per callgrind run, collecting only inside its
//!   loop function, and divides the instruction count by N.
//! * `FILTER`: only results whose name contains one of the given strings.

use std::hint::black_box;
use std::time::Instant;

use softib_wire::aeth::Aeth;
use softib_wire::bth::Bth;
use softib_wire::ethernet::Ethernet;
use softib_wire::icrc;
use softib_wire::ipv4::Ipv4;
use softib_wire::opcode::Opcode;
use softib_wire::psn::{Msn, Psn, Qpn};
use softib_wire::roce::{self, IpHeader, RocePacket};
use softib_wire::transport::{TransportHeaders, TransportPacket};

/// Ethernet + IPv4 + UDP header bytes in front of the BTH.
const L2_L4_LEN: usize = 14 + 20 + 8;
/// Offset of the IPv4 header in the frame.
const IP_AT: usize = 14;
/// Offset of the UDP header in the frame.
const UDP_AT: usize = IP_AT + 20;
/// Bytes the ICRC covers in front of the transport: LRH stand-in + IPv4 + UDP.
const ICRC_PREFIX: usize = 8 + 20 + 8;

/// One RoCEv2/IPv4 packet: what `roce::build` takes, and the frame it built.
struct Packet<'a> {
    eth: Ethernet,
    ip: IpHeader,
    udp_src_port: u16,
    transport: TransportPacket<'a>,
    frame: Vec<u8>,
}

impl<'a> Packet<'a> {
    fn new(opcode: Opcode, payload: &'a [u8]) -> Packet<'a> {
        Self::with_headers(opcode, |_| {}, payload)
    }

    /// A packet whose extension headers `ext` fills in.
    fn with_headers(
        opcode: Opcode,
        ext: impl FnOnce(&mut TransportHeaders),
        payload: &'a [u8],
    ) -> Packet<'a> {
        let eth = Ethernet {
            dst: [0x02, 0x00, 0x00, 0x00, 0x00, 0x02],
            src: [0x02, 0x00, 0x00, 0x00, 0x00, 0x01],
            ..Ethernet::default()
        };
        let ip = IpHeader::V4(Ipv4 {
            flags: 0x2,
            ttl: 64,
            src: [192, 168, 122, 1],
            dst: [192, 168, 122, 2],
            ..Ipv4::default()
        });
        let bth = Bth {
            opcode,
            pkey: 0xffff,
            dest_qp: Qpn::new(0x11),
            ack_req: true,
            psn: Psn::new(0x00_1234),
            ..Bth::default()
        };
        let mut headers = TransportHeaders::new(bth);
        ext(&mut headers);
        let transport = TransportPacket::new(headers, payload);
        let mut frame = vec![0u8; 9000];
        let n = roce::build(&eth, &ip, 49152, &transport, &mut frame).expect("build");
        frame.truncate(n);
        let p = RocePacket::parse(&frame).expect("built frame parses");
        assert!(p.icrc_ok(), "built frame has a bad ICRC");
        assert_eq!(p.transport, transport);
        Packet {
            eth,
            ip,
            udp_src_port: 49152,
            transport,
            frame,
        }
    }

    fn ip_hdr(&self) -> &[u8] {
        &self.frame[IP_AT..UDP_AT]
    }
    fn udp_hdr(&self) -> &[u8] {
        &self.frame[UDP_AT..L2_L4_LEN]
    }
    /// BTH through pad (ICRC excluded).
    fn transport_bytes(&self) -> &[u8] {
        &self.frame[L2_L4_LEN..self.frame.len() - roce::ICRC_LEN]
    }
    /// Number of bytes the ICRC covers.
    fn icrc_covered_len(&self) -> usize {
        ICRC_PREFIX + self.transport_bytes().len()
    }
}

/// Everything the timed operations read, plus a scratch buffer they write.
struct Fixture<'a> {
    write4k: Packet<'a>,
    send64: Packet<'a>,
    ack: Packet<'a>,
    /// Source bytes for the baselines (as many as the longest baseline needs).
    src: Vec<u8>,
    scratch: Vec<u8>,
}

/// Defines one timed operation and the `#[inline(never)]` loop that runs it `n` times; the
/// loop function's name is what callgrind reports.
macro_rules! ops {
    ($( $name:ident / $loop_fn:ident = |$fx:ident| $body:block ; )*) => {
        /// Every operation: name, loop function name (for callgrind), loop function.
        const OPS: &[(&str, &str, fn(&mut Fixture<'_>, u64))] = &[
            $( (stringify!($name), stringify!($loop_fn), $loop_fn), )*
        ];
        $(
            #[inline(never)]
            fn $loop_fn($fx: &mut Fixture<'_>, n: u64) {
                for _ in 0..n {
                    $body
                }
            }
        )*
    };
}

ops! {
    // --- 1. ICRC of the 4 KiB WRITE ---
    icrc4k_parse_computed / loop_icrc4k_parse_computed = |fx| {
        let f = black_box(&fx.write4k.frame[..]);
        // By reference: moving the parsed packet would time a copy softib does not make.
        let r = RocePacket::parse(f);
        black_box(r.as_ref().map(|p| p.computed_icrc()).ok());
    };
    icrc4k_parse_verified / loop_icrc4k_parse_verified = |fx| {
        let r = RocePacket::parse_verified(black_box(&fx.write4k.frame[..]));
        black_box(&r);
    };
    icrc4k_roce_v4 / loop_icrc4k_roce_v4 = |fx| {
        let p = &fx.write4k;
        black_box(icrc::roce_v4(
            black_box(p.ip_hdr()),
            black_box(p.udp_hdr()),
            black_box(p.transport_bytes()),
        ));
    };
    crc32fast_4144 / loop_crc32fast_4144 = |fx| {
        let n = fx.write4k.icrc_covered_len();
        black_box(crc32fast::hash(black_box(&fx.src[..n])));
    };
    // --- 2. parse of the 64-byte SEND ---
    parse_roce_send64 / loop_parse_roce_send64 = |fx| {
        let r = RocePacket::parse(black_box(&fx.send64.frame[..]));
        black_box(&r);
    };
    parse_transport_send64 / loop_parse_transport_send64 = |fx| {
        let r = TransportPacket::parse(black_box(fx.send64.transport_bytes()));
        black_box(&r);
    };
    memcpy_122 / loop_memcpy_122 = |fx| {
        let n = fx.send64.frame.len();
        fx.scratch[..n].copy_from_slice(black_box(&fx.src[..n]));
        black_box(&mut fx.scratch);
    };
    parse_roce_ack / loop_parse_roce_ack = |fx| {
        let r = RocePacket::parse(black_box(&fx.ack.frame[..]));
        black_box(&r);
    };
    memcpy_62 / loop_memcpy_62 = |fx| {
        let n = fx.ack.frame.len();
        fx.scratch[..n].copy_from_slice(black_box(&fx.src[..n]));
        black_box(&mut fx.scratch);
    };
    memcpy_76 / loop_memcpy_76 = |fx| {
        let n = fx.send64.transport_bytes().len();
        fx.scratch[..n].copy_from_slice(black_box(&fx.src[..n]));
        black_box(&mut fx.scratch);
    };
    // --- 3. build ---
    build_send64 / loop_build_send64 = |fx| {
        let p = &fx.send64;
        let r = roce::build(
            black_box(&p.eth),
            black_box(&p.ip),
            black_box(p.udp_src_port),
            black_box(&p.transport),
            &mut fx.scratch,
        );
        black_box(&r);
        black_box(&mut fx.scratch);
    };
    build_ack / loop_build_ack = |fx| {
        let p = &fx.ack;
        let r = roce::build(
            black_box(&p.eth),
            black_box(&p.ip),
            black_box(p.udp_src_port),
            black_box(&p.transport),
            &mut fx.scratch,
        );
        black_box(&r);
        black_box(&mut fx.scratch);
    };
    build_write4k / loop_build_write4k = |fx| {
        let p = &fx.write4k;
        let r = roce::build(
            black_box(&p.eth),
            black_box(&p.ip),
            black_box(p.udp_src_port),
            black_box(&p.transport),
            &mut fx.scratch,
        );
        black_box(&r);
        black_box(&mut fx.scratch);
    };
    memcpy_4154 / loop_memcpy_4154 = |fx| {
        let n = fx.write4k.frame.len();
        fx.scratch[..n].copy_from_slice(black_box(&fx.src[..n]));
        black_box(&mut fx.scratch);
    };
    memcpy_4154_crc32fast_4144 / loop_memcpy_4154_crc32fast_4144 = |fx| {
        let n = fx.write4k.frame.len();
        fx.scratch[..n].copy_from_slice(black_box(&fx.src[..n]));
        let c = fx.write4k.icrc_covered_len();
        black_box(crc32fast::hash(black_box(&fx.scratch[..c])));
        black_box(&mut fx.scratch);
    };
}

/// One reported result: a subject against a baseline.
struct Row {
    name: &'static str,
    subject: &'static str,
    baseline: &'static str,
    /// Bytes the subject handles per operation (frame, transport or ICRC-covered bytes).
    bytes: usize,
    target: Target,
    what: &'static str,
}

#[derive(Clone, Copy)]
enum Target {
    None,
    /// ratio (baseline / subject) at least this.
    Ratio(f64),
    /// at least this many million operations per second (wall time: informational).
    Mops(f64),
}

fn rows(fx: &Fixture<'_>) -> Vec<Row> {
    let covered = fx.write4k.icrc_covered_len();
    let send_frame = fx.send64.frame.len();
    let send_tr = fx.send64.transport_bytes().len();
    let write_frame = fx.write4k.frame.len();
    let ack_frame = fx.ack.frame.len();
    vec![
        Row {
            name: "icrc4k.parse+computed_icrc",
            subject: "icrc4k_parse_computed",
            baseline: "crc32fast_4144",
            bytes: covered,
            target: Target::Ratio(0.8),
            what: "RocePacket::parse + computed_icrc, 4 KiB WRITE_MIDDLE vs crc32fast::hash of as many bytes as the ICRC covers",
        },
        Row {
            name: "icrc4k.parse_verified",
            subject: "icrc4k_parse_verified",
            baseline: "crc32fast_4144",
            bytes: covered,
            target: Target::None,
            what: "RocePacket::parse_verified (the receive path: parse, compute, compare), 4 KiB WRITE_MIDDLE vs crc32fast::hash of as many bytes",
        },
        Row {
            name: "icrc4k.roce_v4",
            subject: "icrc4k_roce_v4",
            baseline: "crc32fast_4144",
            bytes: covered,
            target: Target::Ratio(0.8),
            what: "icrc::roce_v4 alone, 4 KiB WRITE_MIDDLE vs crc32fast::hash of as many bytes",
        },
        Row {
            name: "parse.roce_send64",
            subject: "parse_roce_send64",
            baseline: "memcpy_122",
            bytes: send_frame,
            target: Target::None,
            what: "RocePacket::parse (no ICRC check) of the 122-byte RC_SEND_ONLY/64 B frame vs memcpy of 122 bytes",
        },
        Row {
            name: "parse.transport_send64",
            subject: "parse_transport_send64",
            baseline: "memcpy_76",
            bytes: send_tr,
            target: Target::Mops(50.0),
            what: "TransportPacket::parse of its 76 transport bytes (BTH + 64 B payload) vs memcpy of 76 bytes",
        },
        Row {
            name: "parse.roce_ack",
            subject: "parse_roce_ack",
            baseline: "memcpy_62",
            bytes: ack_frame,
            target: Target::None,
            what: "RocePacket::parse (no ICRC check) of the 62-byte RC_ACKNOWLEDGE frame (BTH + AETH) vs memcpy of 62 bytes",
        },
        Row {
            name: "build.send64",
            subject: "build_send64",
            baseline: "memcpy_122",
            bytes: send_frame,
            target: Target::None,
            what: "roce::build (headers, IPv4 checksum, ICRC, padding) of the 122-byte SEND frame vs memcpy of 122 bytes",
        },
        Row {
            name: "build.ack",
            subject: "build_ack",
            baseline: "memcpy_62",
            bytes: ack_frame,
            target: Target::None,
            what: "roce::build of the 62-byte ACK frame (BTH + AETH) vs memcpy of 62 bytes",
        },
        Row {
            name: "build.write4k",
            subject: "build_write4k",
            baseline: "memcpy_4154",
            bytes: write_frame,
            target: Target::None,
            what: "roce::build of the 4154-byte WRITE_MIDDLE frame vs memcpy of 4154 bytes",
        },
        Row {
            name: "build.write4k/copy+crc",
            subject: "build_write4k",
            baseline: "memcpy_4154_crc32fast_4144",
            bytes: write_frame,
            target: Target::None,
            what: "roce::build of the 4 KiB WRITE vs memcpy of the frame + crc32fast::hash of the covered bytes (the floor for any builder)",
        },
    ]
}

fn op(name: &str) -> fn(&mut Fixture<'_>, u64) {
    OPS.iter()
        .find(|(n, _, _)| *n == name)
        .map(|&(_, _, f)| f)
        .unwrap_or_else(|| panic!("no operation {name}"))
}

fn loop_fn_name(name: &str) -> &'static str {
    OPS.iter()
        .find(|(n, _, _)| *n == name)
        .map(|&(_, l, _)| l)
        .unwrap_or_else(|| panic!("no operation {name}"))
}

/// Nanoseconds per operation over one batch of `iters`.
fn time_batch(f: fn(&mut Fixture<'_>, u64), fx: &mut Fixture<'_>, iters: u64) -> f64 {
    let t = Instant::now();
    f(fx, iters);
    t.elapsed().as_nanos() as f64 / iters as f64
}

/// Iterations that take about `ms` milliseconds.
fn calibrate(f: fn(&mut Fixture<'_>, u64), fx: &mut Fixture<'_>, ms: f64) -> u64 {
    let goal = ms * 1e6;
    let mut iters = 1u64;
    loop {
        let t = Instant::now();
        f(fx, iters);
        let ns = t.elapsed().as_nanos() as f64;
        if ns >= goal / 8.0 || iters >= 1 << 40 {
            let per = ns.max(1.0) / iters as f64;
            return ((goal / per).ceil() as u64).max(1);
        }
        iters *= 4;
    }
}

fn median(v: &mut [f64]) -> f64 {
    quantile(v, 0.5)
}

fn quantile(v: &mut [f64], q: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    let pos = q * (v.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    v[lo] + (v[hi] - v[lo]) * (pos - lo as f64)
}

struct Measured {
    subject_ns: f64,
    baseline_ns: f64,
    ratio: f64,
    ratio_p25: f64,
    ratio_p75: f64,
    rounds: usize,
}

/// Alternates baseline and subject batches (ABBA order, so a drift in machine speed hits both
/// alike); returns the medians.
fn measure(row: &Row, fx: &mut Fixture<'_>, rounds: usize, round_ms: f64) -> Measured {
    let s = op(row.subject);
    let b = op(row.baseline);
    // Warm up caches, branch predictors and CPU frequency before calibrating.
    let warm = calibrate(s, fx, round_ms / 4.0);
    s(fx, warm);
    let warm = calibrate(b, fx, round_ms / 4.0);
    b(fx, warm);
    let si = calibrate(s, fx, round_ms);
    let bi = calibrate(b, fx, round_ms);
    let mut sv = Vec::with_capacity(rounds);
    let mut bv = Vec::with_capacity(rounds);
    let mut rv = Vec::with_capacity(rounds);
    for r in 0..rounds {
        let (sn, bn) = if r % 2 == 0 {
            let bn = time_batch(b, fx, bi);
            (time_batch(s, fx, si), bn)
        } else {
            let sn = time_batch(s, fx, si);
            (sn, time_batch(b, fx, bi))
        };
        sv.push(sn);
        bv.push(bn);
        rv.push(bn / sn);
    }
    Measured {
        subject_ns: median(&mut sv),
        baseline_ns: median(&mut bv),
        ratio: median(&mut rv),
        ratio_p25: quantile(&mut rv, 0.25),
        ratio_p75: quantile(&mut rv, 0.75),
        rounds,
    }
}

fn verdict(target: Target, m: &Measured) -> (String, &'static str) {
    match target {
        Target::None => ("-".into(), "-"),
        Target::Ratio(t) => (
            format!(">= {t:.2}x"),
            if m.ratio >= t { "PASS" } else { "FAIL" },
        ),
        Target::Mops(t) => (
            format!(">= {t:.0} Mop/s"),
            if 1e3 / m.subject_ns >= t {
                "PASS*"
            } else {
                "FAIL*"
            },
        ),
    }
}

fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

struct Options {
    quick: bool,
    json: bool,
    callgrind: Option<u64>,
    rounds: Option<usize>,
    round_ms: Option<f64>,
    filters: Vec<String>,
    /// `--op NAME` (callgrind mode): run only these operations.
    ops: Vec<String>,
    bench: bool,
}

fn parse_args() -> Options {
    let mut o = Options {
        quick: false,
        json: false,
        callgrind: None,
        rounds: None,
        round_ms: None,
        filters: Vec::new(),
        ops: Vec::new(),
        bench: false,
    };
    let mut args = std::env::args().skip(1);
    let usage = "usage: wire [--quick] [--json] [--rounds N] [--round-ms MS] \
                 [--callgrind N [--op NAME]...] [FILTER...]";
    while let Some(a) = args.next() {
        let mut value = |what: &str| {
            args.next()
                .unwrap_or_else(|| panic!("{a} needs {what}\n{usage}"))
        };
        match a.as_str() {
            "--bench" => o.bench = true,
            "--quick" => o.quick = true,
            "--json" => o.json = true,
            "--callgrind" => o.callgrind = Some(value("N").parse().expect(usage)),
            "--rounds" => o.rounds = Some(value("N").parse().expect(usage)),
            "--round-ms" => o.round_ms = Some(value("MS").parse().expect(usage)),
            "--op" => o.ops.push(value("NAME")),
            "-h" | "--help" => {
                println!("{usage}");
                std::process::exit(0);
            }
            s if s.starts_with('-') => panic!("unknown option {s}\n{usage}"),
            s => o.filters.push(s.to_string()),
        }
    }
    o
}

fn main() {
    let opts = parse_args();
    let payload4k: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
    let payload64: Vec<u8> = (0..64u32).map(|i| (i * 13 + 1) as u8).collect();
    let write4k = Packet::new(Opcode::RC_RDMA_WRITE_MIDDLE, &payload4k);
    let send64 = Packet::new(Opcode::RC_SEND_ONLY, &payload64);
    let ack = Packet::with_headers(
        Opcode::RC_ACKNOWLEDGE,
        |h| {
            h.aeth = Some(Aeth {
                syndrome: 0x1f,
                msn: Msn::new(0x42),
            })
        },
        &[],
    );
    assert_eq!(ack.frame.len(), L2_L4_LEN + 12 + 4 + 4);
    assert_eq!(write4k.frame.len(), L2_L4_LEN + 12 + 4096 + 4);
    assert_eq!(send64.frame.len(), L2_L4_LEN + 12 + 64 + 4);
    let src = write4k.frame.clone();
    let mut fx = Fixture {
        write4k,
        send64,
        ack,
        src,
        scratch: vec![0u8; 9000],
    };
    // The subjects compute what they claim to: the ICRC paths agree with the frame, and the
    // build operations reproduce the frames.
    {
        let w = &fx.write4k;
        let found = icrc::get(&w.frame[w.frame.len() - roce::ICRC_LEN..]).unwrap();
        assert_eq!(
            icrc::roce_v4(w.ip_hdr(), w.udp_hdr(), w.transport_bytes()),
            found
        );
        assert_eq!(fx.src.len(), fx.write4k.frame.len());
        loop_build_send64(&mut fx, 1);
        let n = fx.send64.frame.len();
        assert_eq!(
            fx.scratch[..n],
            fx.send64.frame[..],
            "build reproduces the SEND"
        );
        loop_build_ack(&mut fx, 1);
        let n = fx.ack.frame.len();
        assert_eq!(
            fx.scratch[..n],
            fx.ack.frame[..],
            "build reproduces the ACK"
        );
        loop_build_write4k(&mut fx, 1);
        let n = fx.write4k.frame.len();
        assert_eq!(
            fx.scratch[..n],
            fx.write4k.frame[..],
            "build reproduces the WRITE"
        );
        assert!(TransportPacket::parse(fx.send64.transport_bytes()).is_ok());
    }

    let all = rows(&fx);
    let selected: Vec<&Row> = all
        .iter()
        .filter(|r| opts.filters.is_empty() || opts.filters.iter().any(|f| r.name.contains(f)))
        .collect();

    if let Some(n) = opts.callgrind {
        // No timing: each distinct operation runs once for n iterations in its own loop function.
        let mut done: Vec<&str> = Vec::new();
        for o in &opts.ops {
            assert!(OPS.iter().any(|(name, _, _)| name == o), "no operation {o}");
        }
        for r in &selected {
            for name in [r.subject, r.baseline] {
                let wanted = opts.ops.is_empty() || opts.ops.iter().any(|o| o == name);
                if wanted && !done.contains(&name) {
                    op(name)(&mut fx, n);
                    done.push(name);
                }
            }
        }
        for r in &selected {
            let target = match r.target {
                Target::Ratio(t) => format!("ratio>={t}"),
                Target::Mops(t) => format!("mops>={t}"),
                Target::None => "-".into(),
            };
            println!(
                "row {} {} {} {} {} {} {}",
                r.name,
                r.subject,
                loop_fn_name(r.subject),
                r.baseline,
                loop_fn_name(r.baseline),
                n,
                target
            );
        }
        return;
    }

    // Without --bench (cargo test --benches) this is a smoke run.
    let quick = opts.quick || !opts.bench;
    let rounds = opts.rounds.unwrap_or(if quick { 3 } else { 15 });
    let round_ms = opts.round_ms.unwrap_or(if quick { 2.0 } else { 20.0 });
    assert!(
        rounds >= 1 && round_ms > 0.0,
        "need rounds >= 1 and round-ms > 0"
    );

    if !opts.bench && cfg!(debug_assertions) {
        eprintln!("note: smoke run of a debug build; the figures below say nothing about speed");
    }
    if !opts.json {
        println!(
            "softib-wire bench: {rounds} alternating rounds of {round_ms} ms per side; \
             ratio = baseline ns / subject ns (median of per-round ratios, [p25, p75]); \
             Mop/s is wall time, informational (*)"
        );
        println!(
            "{:<28} {:>12} {:<27} {:>12} {:>7} {:>15} {:>9} {:>14} {:>6}",
            "name",
            "subject ns",
            "baseline",
            "baseline ns",
            "ratio",
            "[p25, p75]",
            "Mop/s",
            "target",
            "result"
        );
    }
    let mut fails = 0;
    for r in &selected {
        let m = measure(r, &mut fx, rounds, round_ms);
        let (target, result) = verdict(r.target, &m);
        if result.starts_with("FAIL") {
            fails += 1;
        }
        let mops = 1e3 / m.subject_ns;
        let (target_kind, target_value) = match r.target {
            Target::None => ("none", "null".to_string()),
            Target::Ratio(t) => ("ratio", t.to_string()),
            Target::Mops(t) => ("mops", t.to_string()),
        };
        if opts.json {
            println!(
                "{{\"name\":{},\"subject\":{},\"baseline\":{},\"bytes\":{},\"subject_ns\":{:.3},\
                 \"baseline_ns\":{:.3},\"ratio\":{:.4},\"ratio_p25\":{:.4},\"ratio_p75\":{:.4},\
                 \"mops\":{:.3},\"target\":{},\"target_kind\":{},\"target_value\":{},\
                 \"result\":{},\"rounds\":{},\"round_ms\":{},\"what\":{}}}",
                json_str(r.name),
                json_str(r.subject),
                json_str(r.baseline),
                r.bytes,
                m.subject_ns,
                m.baseline_ns,
                m.ratio,
                m.ratio_p25,
                m.ratio_p75,
                mops,
                json_str(&target),
                json_str(target_kind),
                target_value,
                json_str(result),
                m.rounds,
                round_ms,
                json_str(r.what)
            );
        } else {
            println!(
                "{:<28} {:>12.2} {:<27} {:>12.2} {:>7.3} {:>15} {:>9.1} {:>14} {:>6}",
                r.name,
                m.subject_ns,
                r.baseline,
                m.baseline_ns,
                m.ratio,
                format!("[{:.3}, {:.3}]", m.ratio_p25, m.ratio_p75),
                mops,
                target,
                result
            );
        }
    }
    if !opts.json {
        println!();
        for r in &selected {
            println!("  {:<28} {}", r.name, r.what);
        }
        println!(
            "{fails} of {} targets missed (informational; * = wall-time target)",
            selected
                .iter()
                .filter(|r| !matches!(r.target, Target::None))
                .count()
        );
    }
}
