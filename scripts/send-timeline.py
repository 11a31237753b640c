#!/usr/bin/env python3
"""Splits one MCP send's wall time into its steps, from the kernel's own timestamps.

`peer bench` reports what a send costs against its floors; this tool says where the time
between them goes. It starts a receiving `peer host` and a sending `peer mcp` in a temporary
home, drives sequential `send_peer_message` calls over the MCP server's stdin, and records every
system call entry and exit of the machine with `perf record -a -e raw_syscalls:*` while it
does. Each send is then a fixed sequence of calls in the two roots:

  sender:   read(stdin) .. pwrite(intent) sync_file_range .. sendto(request)
  receiver: recvfrom(request) .. pwrite(inbox) fdatasync .. sendto(answer)
  sender:   recvfrom(answer) .. write(stdout, tool result)

and the tool prints the median of each step over the measured sends (the first WARMUP are left
out): the CPU work between the calls, the write-out and fdatasync themselves, and the two
socket hops. Kernel timestamps have no user-space instrumentation in the way; tracing every
system call still adds about a microsecond per call, so the total reads a little above
`peer bench`'s `mcpSend` on a quiet machine.

Usage (release build first; needs perf and permission to trace system-wide, e.g. root):
    cargo build --release && python3 scripts/send-timeline.py [target/release/peer] [SENDS]
"""

import bisect
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

WARMUP = 200
BODY = "x" * 200
CONFIG = {
    "sessions": {
        "communication": {
            "enabled": True,
            "limits": {"ratePerSecond": 1000000, "rateBurst": 1000000, "inboxMessages": 100000},
        }
    }
}
# x86_64 system call numbers of the calls a send makes.
NAMES = {0: "read", 1: "write", 18: "pwrite", 44: "sendto", 45: "recvfrom",
         75: "fdatasync", 277: "sync_file_range"}
LINE = re.compile(r"\s*\S+\s+(\d+)/(\d+)\s+\[\d+\]\s+([\d.]+):\s+raw_syscalls:sys_(enter|exit):\s+NR (\d+)(.*)")


def drive(exe, home, ws, n):
    """Runs `peer mcp` and makes n sends to @rx, one at a time; returns its pid."""
    p = subprocess.Popen([exe, "--home", home, "mcp", "--alias", "tx", "--workspace", ws],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=ws)

    def call(i, method, params):
        msg = {"jsonrpc": "2.0", "id": i, "method": method, "params": params}
        p.stdin.write((json.dumps(msg) + "\n").encode())
        p.stdin.flush()
        while True:
            line = p.stdout.readline()
            if not line:
                sys.exit("peer mcp ended early")
            answer = json.loads(line)
            if answer.get("id") == i:
                return answer

    call(1, "initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                           "clientInfo": {"name": "send-timeline", "version": "1"}})
    p.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
    p.stdin.flush()
    for i in range(n):
        r = call(10 + i, "tools/call",
                 {"name": "send_peer_message", "arguments": {"to": "@rx", "content": BODY}})
        if r.get("result", {}).get("isError"):
            sys.exit(f"send {i} failed: {r}")
    p.stdin.close()
    p.wait()
    return p.pid


def calls(trace, pid):
    """The (time, tid, name, enter|exit, first argument) of one process's traced calls."""
    out = []
    for line in trace.splitlines():
        m = LINE.match(line)
        if not m or int(m.group(1)) != pid:
            continue
        nr = int(m.group(5))
        if nr not in NAMES:
            continue
        arg = m.group(6).strip().lstrip("(").split(",")[0] if m.group(4) == "enter" else ""
        out.append((float(m.group(3)), int(m.group(2)), NAMES[nr], m.group(4), arg))
    out.sort()
    return out


def find(seq, i, tid, name, kind, arg=None, step=1):
    """Index of the nearest call from i on (step 1) or back (step -1) of that thread, name and
    kind (and first argument); None when there is none."""
    j = i
    while 0 <= j < len(seq):
        _, th, nm, k, a = seq[j]
        if th == tid and nm == name and k == kind and (arg is None or a == arg):
            return j
        j += step
    return None


def chain(seq, i, tid, *steps):
    """The indexes of calls found one after another from i: each step is (name, kind[, arg])
    searched forward from the previous find; None when one is missing."""
    found = []
    for step in steps:
        i = find(seq, i, tid, *step)
        if i is None:
            return None
        found.append(i)
    return found


def steps(seq, key, before, after):
    """The times of one sequence of calls per entry of the `key` call, all in its thread: the
    calls `before` it (each (name, kind) searched back from it), the key call, then the calls
    `after` it (searched forward one after another). Incomplete sequences are left out."""
    out = []
    for i, (t, tid, name, kind, _) in enumerate(seq):
        if name != key or kind != "enter":
            continue
        back = [find(seq, i, tid, *call, step=-1) for call in before]
        forward = chain(seq, i, tid, *after)
        if None in back or forward is None:
            continue
        out.append([seq[j][0] for j in back] + [t] + [seq[j][0] for j in forward])
    return out


def sends(tx):
    """Sender steps, keyed on each intent's sync_file_range."""
    names = ("request", "pwrite", "sfr", "sfr_end", "send", "answer", "reply")
    found = steps(tx, "sync_file_range", [("read", "exit"), ("pwrite", "enter")],
                  [("sync_file_range", "exit"), ("sendto", "enter"), ("recvfrom", "exit"),
                   ("write", "enter", "1")])
    return [dict(zip(names, times)) for times in found]


def accepts(rx):
    """Receiver steps, keyed on each accept's fdatasync."""
    names = ("recv", "pwrite", "sync", "sync_end", "send")
    found = steps(rx, "fdatasync", [("recvfrom", "exit"), ("pwrite", "enter")],
                  [("fdatasync", "exit"), ("sendto", "enter")])
    return [dict(zip(names, times)) for times in found]


def main():
    exe = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "target/release/peer")
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 1500
    with tempfile.TemporaryDirectory(prefix="send-timeline-") as d:
        home, ws = os.path.join(d, "home"), os.path.join(d, "ws")
        os.makedirs(ws)
        os.makedirs(home, mode=0o700)
        with open(os.path.join(home, "config.json"), "w") as f:
            json.dump(CONFIG, f)
        os.chmod(os.path.join(home, "config.json"), 0o600)
        ready = os.path.join(d, "rx.out")
        with open(ready, "w") as out:
            rx = subprocess.Popen([exe, "--home", home, "--json", "host", "--alias", "rx",
                                   "--workspace", ws], stdout=out, stderr=subprocess.DEVNULL)
        for _ in range(200):
            if os.path.getsize(ready) > 0:
                break
            time.sleep(0.05)
        data = os.path.join(d, "perf.data")
        perf = subprocess.Popen(["perf", "record", "-q", "-a", "-o", data,
                                 "-e", "raw_syscalls:sys_enter,raw_syscalls:sys_exit"],
                                stderr=subprocess.DEVNULL)
        time.sleep(0.5)
        try:
            tx_pid = drive(exe, home, ws, n)
        finally:
            perf.send_signal(2)
            perf.wait()
            rx.send_signal(15)
            rx.wait()
        trace = subprocess.run(["perf", "script", "--ns", "-i", data,
                                "-F", "comm,pid,tid,cpu,time,event,trace"],
                               capture_output=True, text=True).stdout
    tx_steps, rx_steps = sends(calls(trace, tx_pid))[WARMUP:], accepts(calls(trace, rx.pid))
    starts = [a["recv"] for a in rx_steps]
    pairs = []
    for s in tx_steps:
        # The accept whose request arrived after this send went out and answered before the
        # sender read its answer.
        i = bisect.bisect_left(starts, s["send"])
        if i < len(rx_steps) and rx_steps[i]["send"] <= s["answer"]:
            pairs.append((s, rx_steps[i]))
    if not pairs:
        sys.exit("no send matched an accept: is perf allowed to trace system calls?")
    rows = [
        ("sender: request read -> intent pwrite (CPU)", lambda s, a: s["pwrite"] - s["request"]),
        ("sender: intent pwrite", lambda s, a: s["sfr"] - s["pwrite"]),
        ("sender: intent write-out (sync_file_range)", lambda s, a: s["sfr_end"] - s["sfr"]),
        ("sender: write-out -> request sendto (CPU)", lambda s, a: s["send"] - s["sfr_end"]),
        ("hop: request sendto -> receiver recvfrom", lambda s, a: a["recv"] - s["send"]),
        ("receiver: request -> inbox pwrite (CPU)", lambda s, a: a["pwrite"] - a["recv"]),
        ("receiver: inbox pwrite", lambda s, a: a["sync"] - a["pwrite"]),
        ("receiver: fdatasync", lambda s, a: a["sync_end"] - a["sync"]),
        ("receiver: fdatasync -> answer sendto (CPU)", lambda s, a: a["send"] - a["sync_end"]),
        ("hop: answer sendto -> sender recvfrom", lambda s, a: s["answer"] - a["send"]),
        ("sender: answer -> tool result write (CPU)", lambda s, a: s["reply"] - s["answer"]),
    ]
    print(f"{len(pairs)} sends (of {n}, the first {WARMUP} left out); median µs per step")
    for label, f in rows:
        print(f"  {statistics.median(f(s, a) for s, a in pairs) * 1e6:7.1f}  {label}")
    total = statistics.median((s["reply"] - s["request"]) for s, _ in pairs) * 1e6
    print(f"  {total:7.1f}  request read -> tool result write, whole")


if __name__ == "__main__":
    main()
