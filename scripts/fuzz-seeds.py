#!/usr/bin/env python3
"""Writes starting corpora for softib's fuzz targets from the RoCEv2 test vectors.

Usage: fuzz-seeds.py VECTOR_DIR OUT_DIR

For each fuzz target, OUT_DIR/<target>/ receives real bytes that start where that target's
parser starts: whole pcap files (small ones) and their first records, Ethernet frames, the
IPv4 / IPv6 / UDP headers, BTH-onward transport packets, the extension headers found after the
BTH, and native IB packets made by putting an LRH (and a GRH) in front of the transport packets.
Seeds of the same kind (target, opcode, length) are written once.
"""

import hashlib
import os
import struct
import sys
from pathlib import Path

ROCE_PORT = 4791
# Extension headers right after the BTH (offset 12) for the opcodes the vectors hold, and where
# a second one starts. Opcodes not listed carry none (sends) or are not in the vectors.
EXT = {
    0x06: [("reth", 12)], 0x0A: [("reth", 12)], 0x0C: [("reth", 12)],
    0x0B: [("reth", 12), ("immdt", 28)],
    0x0D: [("aeth", 12)], 0x0F: [("aeth", 12)], 0x10: [("aeth", 12)], 0x11: [("aeth", 12)],
    0x12: [("aeth", 12), ("atomic_ack_eth", 16)],
    0x13: [("atomic_eth", 12)], 0x14: [("atomic_eth", 12)],
    0x26: [("reth", 12)], 0x2A: [("reth", 12)],
    0x64: [("deth", 12)], 0x65: [("deth", 12), ("immdt", 20)],
}
HEADER_SEED_LEN = 64
SMALL_PCAP = 16 * 1024
FIRST_RECORDS = 6


def records(data):
    """Yields (record header + data bytes, frame) for each record of a classic pcap file."""
    magic = data[:4]
    endian = "<" if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    at = 24
    while at + 16 <= len(data):
        incl = struct.unpack_from(endian + "I", data, at + 8)[0]
        yield data[at:at + 16 + incl], data[at + 16:at + 16 + incl]
        at += 16 + incl


def lrh(lnh, words):
    """An LRH: VL 0, LVer 0, SL 0, the given LNH, DLID 1, PktLen, SLID 2."""
    return bytes([0x00, lnh & 3]) + struct.pack(">HHH", 1, words & 0x7FF, 2)


class Seeds:
    def __init__(self, out):
        self.out = Path(out)
        self.seen = set()
        self.count = {}

    def add(self, target, data, kind=None):
        key = (target, kind) if kind is not None else (target, hashlib.sha1(data).digest())
        if key in self.seen or not data:
            return
        self.seen.add(key)
        d = self.out / target
        d.mkdir(parents=True, exist_ok=True)
        (d / ("seed-" + hashlib.sha1(data).hexdigest()[:16])).write_bytes(data)
        self.count[target] = self.count.get(target, 0) + 1


def main():
    vectors, out = Path(sys.argv[1]), Path(sys.argv[2])
    s = Seeds(out)
    for pcap in sorted(vectors.glob("*.pcap")):
        data = pcap.read_bytes()
        if len(data) <= SMALL_PCAP:
            s.add("pcap", data)
        recs = list(records(data))
        s.add("pcap", data[:24] + b"".join(r for r, _ in recs[:FIRST_RECORDS]))
        for _, frame in recs:
            seed_frame(s, frame)
    seed_cm(s)
    for t in sorted(s.count):
        print(f"  {t}: {s.count[t]} seeds")


def seed_cm(s):
    """One CM MAD per attribute (no vector carries CM traffic): the common header of a CM
    Send (BaseVersion 1, class 0x07, ClassVersion 2) and data with every bit set, so the
    fuzzer starts past the header checks."""
    for attr in [0x0001] + list(range(0x0010, 0x001B)):
        hdr = bytes([1, 0x07, 2, 0x03, 0, 0, 0, 0]) + bytes(range(1, 9))
        hdr += attr.to_bytes(2, "big") + bytes(6)
        s.add("cm", hdr + b"\xff" * 232)


def seed_frame(s, frame):
    if len(frame) < 14:
        return
    ethertype = struct.unpack_from(">H", frame, 12)[0]
    s.add("ethernet", frame[:HEADER_SEED_LEN], ("ethertype", ethertype))
    l3 = frame[14:]
    if ethertype == 0x0800 and len(l3) >= 20:
        ihl = (l3[0] & 0x0F) * 4
        total = struct.unpack_from(">H", l3, 2)[0]
        s.add("ipv4", l3[:HEADER_SEED_LEN], ("proto", l3[9], ihl))
        if l3[9] != 17:
            return
        l4 = l3[ihl:total]
    elif ethertype == 0x86DD and len(l3) >= 40:
        s.add("grh", l3[:HEADER_SEED_LEN], ("nh", l3[6]))
        if l3[6] != 17:
            return
        l4 = l3[40:40 + struct.unpack_from(">H", l3, 4)[0]]
    else:
        return
    if len(l4) < 8:
        return
    dport = struct.unpack_from(">H", l4, 2)[0]
    s.add("udp", l4[:HEADER_SEED_LEN], ("dport", dport))
    if dport != ROCE_PORT or len(l4) < 8 + 12 + 4:
        return
    transport, icrc = l4[8:-4], l4[-4:]
    opcode = transport[0]
    kind = (opcode, len(transport))
    s.add("roce", frame, (ethertype,) + kind)
    if ethertype == 0x0800:
        s.add("icrc_ident", frame, kind)
    s.add("transport", transport, kind)
    s.add("bth", transport[:HEADER_SEED_LEN], ("opcode", opcode))
    for name, off in EXT.get(opcode, []):
        s.add(name, transport[off:off + HEADER_SEED_LEN], ("opcode", opcode))
    # Native IB: LRH + [GRH] + transport + ICRC + VCRC (CRCs not recomputed: the parser reports
    # them, the fuzzer mutates them).
    local = transport + icrc
    s.add("native", lrh(2, (8 + len(local)) // 4) + local + b"\0\0", ("local",) + kind)
    grh = struct.pack(">IHBB", 0x60000000, len(local), 0x1B, 64) + bytes(16) + bytes(15) + b"\1"
    s.add("native", lrh(3, (8 + 40 + len(local)) // 4) + grh + local + b"\0\0", ("global",) + kind)
    s.add("lrh", lrh(2, (8 + len(local)) // 4), ("lnh", 2))
    s.add("lrh", lrh(3, (8 + 40 + len(local)) // 4), ("lnh", 3))


if __name__ == "__main__":
    main()
