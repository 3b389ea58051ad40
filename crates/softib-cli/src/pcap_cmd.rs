//! `softib pcap check` and `softib pcap decode`.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Subcommand;
use serde_json::{json, Value};
use softib_wire::aeth::Aeth;
use softib_wire::native::{NativeBody, NativePacket};
use softib_wire::pcap::{PcapReader, LINKTYPE_ETHERNET, LINKTYPE_USER0};
use softib_wire::roce::{self, FrameClass, RocePacket};
use softib_wire::transport::TransportPacket;

#[derive(Subcommand)]
pub enum PcapCommand {
    /// Verify every RoCEv2 / IB packet (parse + ICRC, and VCRC for native IB). Prints
    /// `N packets, M icrc ok, K bad` per file; exits non-zero if any packet is bad.
    Check {
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Write a capture with one packet of every opcode softib knows, built by softib's encoder.
    Synth {
        /// Output pcap file.
        out: PathBuf,
        #[arg(long, value_enum, default_value = "ipv4")]
        framing: crate::synth::Framing,
    },
    /// Print one line per transport packet.
    Decode {
        file: PathBuf,
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
    },
}

pub fn run(cmd: PcapCommand) -> ExitCode {
    match cmd {
        PcapCommand::Check { files } => {
            let mut failed = false;
            for f in &files {
                match check_file(f) {
                    Ok(s) => {
                        println!(
                            "{}: {} packets, {} icrc ok, {} bad ({} other frames skipped)",
                            f.display(),
                            s.packets,
                            s.icrc_ok,
                            s.bad,
                            s.skipped
                        );
                        for e in &s.errors {
                            println!("  {e}");
                        }
                        failed |= s.bad > 0;
                    }
                    Err(e) => {
                        println!("{}: cannot read: {e}", f.display());
                        failed = true;
                    }
                }
            }
            if failed {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            }
        }
        PcapCommand::Synth { out, framing } => match crate::synth::write(&out, framing) {
            Ok(n) => {
                println!("{}: wrote {n} packets", out.display());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("{}: {e}", out.display());
                ExitCode::FAILURE
            }
        },
        PcapCommand::Decode { file, json } => match decode_file(&file, json) {
            Ok(true) => ExitCode::SUCCESS,
            Ok(false) => ExitCode::FAILURE,
            Err(e) => {
                eprintln!("{}: {e}", file.display());
                ExitCode::FAILURE
            }
        },
    }
}

/// One frame of a capture, as softib sees it.
enum Frame<'a> {
    Roce(RocePacket<'a>),
    Native(NativePacket<'a>),
    /// Not RoCE / IB traffic (ARP, TCP, ...).
    Other,
    Bad(softib_wire::Error),
}

impl Frame<'_> {
    fn transport(&self) -> Option<&TransportPacket<'_>> {
        match self {
            Frame::Roce(p) => Some(&p.transport),
            Frame::Native(NativePacket {
                body: NativeBody::Iba { transport, .. },
                ..
            }) => Some(transport),
            _ => None,
        }
    }

    /// Whether every CRC of the packet checks out.
    fn crc_ok(&self) -> bool {
        match self {
            Frame::Roce(p) => p.icrc_ok(),
            Frame::Native(p) => p.icrc_ok() && p.vcrc_ok(),
            _ => false,
        }
    }
}

fn classify(link_type: u32, data: &[u8]) -> Frame<'_> {
    match link_type {
        LINKTYPE_ETHERNET => match roce::classify(data) {
            FrameClass::Other => Frame::Other,
            FrameClass::RoceV2 => match RocePacket::parse(data) {
                Ok(p) => Frame::Roce(p),
                Err(e) => Frame::Bad(e),
            },
        },
        _ => match NativePacket::parse(data) {
            Ok(p) => Frame::Native(p),
            Err(e) => Frame::Bad(e),
        },
    }
}

fn open(path: &Path) -> io::Result<Vec<u8>> {
    std::fs::read(path)
}

fn reader(bytes: &[u8]) -> io::Result<PcapReader<'_>> {
    let r = PcapReader::new(bytes).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    match r.link_type() {
        LINKTYPE_ETHERNET | LINKTYPE_USER0 => Ok(r),
        other => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("link type {other} is not Ethernet (1) or native IB as DLT_USER0 (147)"),
        )),
    }
}

#[derive(Default)]
struct CheckSummary {
    packets: u64,
    icrc_ok: u64,
    bad: u64,
    skipped: u64,
    errors: Vec<String>,
}

fn check_file(path: &Path) -> io::Result<CheckSummary> {
    let bytes = open(path)?;
    let r = reader(&bytes)?;
    let lt = r.link_type();
    let mut s = CheckSummary::default();
    for (i, rec) in r.enumerate() {
        let frame = i + 1;
        let rec = match rec {
            Ok(rec) => rec,
            Err(e) => {
                s.bad += 1;
                s.errors.push(format!("record {frame}: {e}"));
                break;
            }
        };
        match classify(lt, rec.data) {
            Frame::Other => s.skipped += 1,
            Frame::Bad(e) => {
                s.packets += 1;
                s.bad += 1;
                s.errors.push(format!("frame {frame}: {e}"));
            }
            f => {
                s.packets += 1;
                if f.crc_ok() {
                    s.icrc_ok += 1;
                } else {
                    s.bad += 1;
                    s.errors.push(format!("frame {frame}: CRC mismatch"));
                }
            }
        }
    }
    Ok(s)
}

fn hex(v: u64, width: usize) -> String {
    format!("{v:#0width$x}", width = width + 2)
}

/// The decode record of one transport packet, as JSON (absent fields null).
fn record(frame: usize, t: &TransportPacket<'_>, crc_ok: bool) -> Value {
    let h = &t.headers;
    let aeth: Option<&Aeth> = h.aeth.as_ref();
    let reth = h.reth.as_ref();
    json!({
        "frame": frame,
        "opcode": h.bth.opcode.0,
        "opcode_name": h.bth.opcode.name(),
        "dest_qp": h.bth.dest_qp.value(),
        "psn": h.bth.psn.value(),
        "ack_req": h.bth.ack_req,
        "se": h.bth.solicited,
        "pad_cnt": h.bth.pad_cnt,
        "pkey": h.bth.pkey,
        "payload_len": t.payload.len(),
        "syndrome": aeth.map(|a| a.syndrome),
        "msn": aeth.map(|a| a.msn.value()),
        "reth_va": reth.map(|r| r.va),
        "reth_rkey": reth.map(|r| r.rkey),
        "reth_len": reth.map(|r| r.dma_len),
        "xrcsrq": h.xrceth.map(|x| x.xrcsrq.value()),
        "eecn": h.rdeth.map(|r| r.eecn.value()),
        "qkey": h.deth.map(|d| d.qkey),
        "src_qp": h.deth.map(|d| d.src_qp.value()),
        "icrc_ok": crc_ok,
    })
}

fn text_line(frame: usize, t: &TransportPacket<'_>, crc_ok: bool) -> String {
    let h = &t.headers;
    let b = &h.bth;
    let mut line = format!(
        "{frame:>5} {} {:<34} qp={} psn={} A={} SE={} pad={} pkey={} len={}",
        hex(b.opcode.0.into(), 2),
        b.opcode.name(),
        hex(b.dest_qp.value().into(), 6),
        hex(b.psn.value().into(), 6),
        u8::from(b.ack_req),
        u8::from(b.solicited),
        b.pad_cnt,
        hex(b.pkey.into(), 4),
        t.payload.len()
    );
    if let Some(a) = &h.aeth {
        line += &format!(
            " syndrome={} ({}) msn={}",
            hex(a.syndrome.into(), 2),
            a.decoded(),
            hex(a.msn.value().into(), 6)
        );
    }
    if let Some(x) = &h.xrceth {
        line += &format!(" xrcsrq={}", hex(x.xrcsrq.value().into(), 6));
    }
    if let Some(r) = &h.rdeth {
        line += &format!(" eecn={}", hex(r.eecn.value().into(), 6));
    }
    if let Some(d) = &h.deth {
        line += &format!(
            " qkey={} srcqp={}",
            hex(d.qkey.into(), 8),
            hex(d.src_qp.value().into(), 6)
        );
    }
    if let Some(r) = &h.reth {
        line += &format!(
            " va={} rkey={} dmalen={}",
            hex(r.va, 16),
            hex(r.rkey.into(), 8),
            r.dma_len
        );
    }
    line += if crc_ok { " icrc=ok" } else { " icrc=BAD" };
    line
}

/// Decodes a capture; returns Ok(false) when some packet could not be parsed.
fn decode_file(path: &Path, as_json: bool) -> io::Result<bool> {
    let bytes = open(path)?;
    let r = reader(&bytes)?;
    let lt = r.link_type();
    let out = io::stdout();
    let mut out = io::BufWriter::new(out.lock());
    let mut all_ok = true;
    for (i, rec) in r.enumerate() {
        let frame = i + 1;
        let rec = match rec {
            Ok(rec) => rec,
            Err(e) => {
                all_ok = false;
                emit_error(&mut out, as_json, frame, &e.to_string())?;
                break;
            }
        };
        let f = classify(lt, rec.data);
        if let Frame::Bad(e) = &f {
            all_ok = false;
            emit_error(&mut out, as_json, frame, &e.to_string())?;
            continue;
        }
        let crc_ok = f.crc_ok();
        match (&f, f.transport()) {
            (_, Some(t)) => {
                if as_json {
                    writeln!(out, "{}", record(frame, t, crc_ok))?;
                } else {
                    writeln!(out, "{}", text_line(frame, t, crc_ok))?;
                }
            }
            (Frame::Native(p), None) => {
                let what = match &p.body {
                    NativeBody::RawIpv6 { payload, .. } => {
                        format!("raw IPv6, {} bytes", payload.len())
                    }
                    NativeBody::RawEthertype { rwh, payload } => format!(
                        "raw EtherType {}, {} bytes",
                        hex(rwh.ether_type.into(), 4),
                        payload.len()
                    ),
                    NativeBody::Iba { .. } => unreachable!("IBA packets have a transport"),
                };
                if as_json {
                    writeln!(
                        out,
                        "{}",
                        json!({"frame": frame, "raw": what, "vcrc_ok": p.vcrc_ok()})
                    )?;
                } else {
                    writeln!(
                        out,
                        "{frame:>5} {what} vcrc={}",
                        if p.vcrc_ok() { "ok" } else { "BAD" }
                    )?;
                }
            }
            _ => {}
        }
    }
    out.flush()?;
    Ok(all_ok)
}

fn emit_error(out: &mut impl Write, as_json: bool, frame: usize, msg: &str) -> io::Result<()> {
    if as_json {
        writeln!(out, "{}", json!({"frame": frame, "error": msg}))
    } else {
        writeln!(out, "{frame:>5} error: {msg}")
    }
}
