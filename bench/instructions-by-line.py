#!/usr/bin/env python3
"""Where the instructions of one message go, by source line.

Runs `softib bench OP -s 64 -e` over loopback with both sides under callgrind
(`--dump-instr=yes`) at two run lengths, as bench/instructions.sh does, takes the marginal
cost of every instruction address of the softib binary per message, and charges each to the
innermost line of softib's own source in the address's inline chain (`addr2line -i`): the
standard library's and the dependencies' code inlined into softib's is charged to the
softib line that used it, so `sq.push_back(..)` shows what the push costs where it is
written. Lines outside softib's crates keep their own name (crc32fast's passes, say).

Usage: bench/instructions-by-line.py OP [requester|responder] [TOP]
  OP    send, write, read or atomic
  side  the requester (the client) by default
  TOP   how many lines to print (default 40), most costly first; with a file name fragment
        instead of a number (e.g. requester.rs), that file's lines in line order
Env: SOFTIB (binary, default target/release/softib), N1 / N2 (run lengths, 10000 / 30000),
     PORT (first UDP port, default 19900), TRANSPORT (udp, the default, or shm: the
     shared-memory path between the two processes, as bench/instructions.sh takes it).

The figures are the marginal instructions per message, as bench/instructions.sh counts them;
the sum printed last covers the softib binary only (libc's `memcpy` and the kernel are not in
it). Needs valgrind and addr2line (binutils).
"""

import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_pair(binary, op, n, port, out_dir):
    """Both sides of one run under callgrind; returns (server profile, client profile)."""
    env = dict(os.environ, SOFTIB_CRC=os.environ.get("SOFTIB_CRC", "clmul"))
    common = ["bench", op, "-s", "64", "-n", str(n), "-e", "-p", str(port), "--timeout", "600",
              "--transport", os.environ.get("TRANSPORT", "udp")]
    vg = ["valgrind", "--tool=callgrind", "--dump-instr=yes"]
    srv_out = os.path.join(out_dir, f"srv.{n}.out")
    cli_out = os.path.join(out_dir, f"cli.{n}.out")
    with open(os.devnull, "w") as null:
        srv = subprocess.Popen(vg + [f"--callgrind-out-file={srv_out}", binary] + common
                               + ["--bind", "127.0.0.61"], stdout=null, stderr=null, env=env)
        for _ in range(100):
            ss = subprocess.run(["ss", "-ltn"], capture_output=True, text=True).stdout
            if f":{port} " in ss:
                break
            time.sleep(0.1)
        cli = subprocess.run(vg + [f"--callgrind-out-file={cli_out}", binary] + common
                             + ["--bind", "127.0.0.62", "127.0.0.61"], stdout=null, stderr=null,
                             env=env)
        if srv.wait() != 0 or cli.returncode != 0:
            sys.exit(f"instructions-by-line: the {op} run of {n} messages failed")
    return srv_out, cli_out


def costs(profile, binary):
    """Exclusive instructions per address of `binary` in a callgrind profile."""
    names, cur, skip, addr = {}, None, False, 0
    cost = collections.Counter()
    for line in open(profile):
        if line.startswith(("ob=", "cob=")):
            m = re.match(r"c?ob=\((\d+)\)\s*(.*)", line)
            if m.group(2).strip():
                names[m.group(1)] = m.group(2).strip()
            if line.startswith("ob="):
                cur = names.get(m.group(1))
            continue
        if line.startswith("calls="):
            skip = True  # the next cost line is the call's, inclusive: not this address's
            continue
        if not line or line[0] not in "0123456789+-*":
            continue
        parts = line.split()
        a = parts[0]
        if a.startswith("0x"):
            addr = int(a, 16)
        elif a[0] in "+-":
            addr += int(a)
        if skip:
            skip = False
            continue
        if cur == binary and len(parts) >= 3:
            cost[addr] += int(parts[2])
    return cost


def chains(binary, addrs):
    """The inline chain (innermost first) of each address: [(function, file:line)]."""
    out = subprocess.run(["addr2line", "-a", "-i", "-f", "-C", "-e", binary]
                         + [hex(a) for a in addrs], capture_output=True, text=True).stdout
    result, cur, lines, i = {}, None, out.splitlines(), 0
    while i < len(lines):
        if lines[i].startswith("0x"):
            cur = int(lines[i], 16)
            result[cur] = []
            i += 1
            continue
        result[cur].append((lines[i], lines[i + 1] if i + 1 < len(lines) else "?"))
        i += 2
    return result


def main():
    args = sys.argv[1:]
    if not args or args[0] not in ("send", "write", "read", "atomic"):
        sys.exit(__doc__)
    op = args[0]
    side = args[1] if len(args) > 1 and args[1] in ("requester", "responder") else "requester"
    rest = [a for a in args[1:] if a not in ("requester", "responder")]
    top = rest[0] if rest else "40"
    for tool in ("valgrind", "addr2line"):
        if not shutil.which(tool):
            sys.exit(f"instructions-by-line: {tool} is not installed")
    binary = os.path.realpath(os.environ.get("SOFTIB", os.path.join(REPO, "target/release/softib")))
    n1, n2 = int(os.environ.get("N1", "10000")), int(os.environ.get("N2", "30000"))
    port = int(os.environ.get("PORT", "19900"))
    with tempfile.TemporaryDirectory() as work:
        short = run_pair(binary, op, n1, port, work)
        long = run_pair(binary, op, n2, port + 1, work)
        k = 1 if side == "requester" else 0
        a, b = costs(short[k], binary), costs(long[k], binary)
    per = {x: (b.get(x, 0) - a.get(x, 0)) / (n2 - n1) for x in set(a) | set(b)}
    per = {x: v for x, v in per.items() if abs(v) >= 0.05}
    where = chains(binary, sorted(per))
    by_line = collections.Counter()
    for x, v in per.items():
        chain = where.get(x, [])
        own = next((loc for _, loc in chain if REPO + "/crates/" in loc),
                   chain[0][1] if chain else "?")
        loc = own.split(" (")[0].replace(REPO + "/crates/", "")
        # The standard library's and the registry's paths, shortened.
        loc = re.sub(r"^/rustc/[0-9a-f]+/library/(core/src/\.\./\.\./stdarch/crates/)?", "std:", loc)
        loc = re.sub(r"^.*/registry/src/[^/]+/", "", loc)
        by_line[loc] += v
    if top.isdigit():
        rows = by_line.most_common(int(top))
    else:
        def line_no(loc):
            tail = loc.rsplit(":", 1)[-1]
            return int(tail) if tail.isdigit() else 0
        rows = sorted(((k, v) for k, v in by_line.items() if top in k and abs(v) >= 0.5),
                      key=lambda kv: line_no(kv[0]))
    for loc, v in rows:
        text = ""
        path, _, num = loc.rpartition(":")
        src = os.path.join(REPO, "crates", path)
        if num.isdigit() and os.path.isfile(src):
            with open(src) as f:
                for i, t in enumerate(f, 1):
                    if i == int(num):
                        text = t.strip()[:90]
                        break
        print(f"{v:8.1f}  {loc:<45} {text}")
    print(f"{sum(by_line.values()):8.1f}  all of softib's {op} {side} per message")


if __name__ == "__main__":
    main()
