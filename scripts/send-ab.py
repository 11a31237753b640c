#!/usr/bin/env python3
"""Compares the MCP send latency of two `peer` builds, interleaved, on the same device moments.

On this class of guest the virtual disk switches between a fast mode and a slow one (a write-out
of 45 or 80 µs, an fdatasync of 80 or 150 µs) for minutes at a time, so two `peer bench` runs
made one after the other can differ by a third with the same binary. This tool starts, for each
build, a receiving `peer host` and a sending `peer mcp` in its own temporary home, keeps all four
running, and then makes sequential `send_peer_message` calls through A and B in alternating
rounds (A B, then B A, ...), so both builds see the same device moments. It prints, per build,
the median, mean and p90 of the client-measured latency of each send, and the median of an
fdatasync of a 200 B write in place measured between the rounds on the same filesystem.

A difference smaller than a few per cent is noise; run it twice with A and B swapped before
believing one. The first round of each build is left out (warm-up).

Usage (release builds; each binary must be a separate file):
    python3 scripts/send-ab.py A/peer B/peer [ROUNDS] [SENDS_PER_ROUND]
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

BODY = "x" * 200
CONFIG = {
    "sessions": {
        "communication": {
            "enabled": True,
            "limits": {"ratePerSecond": 1000000, "rateBurst": 1000000,
                       "inboxMessages": 1000000, "storageBytes": 1 << 30},
        }
    }
}
# Longest wait for a `peer host` to print its ready line, in seconds.
READY_S = 10


class Pair:
    """One build's receiving `peer host` and sending `peer mcp`, in a home of its own."""

    def __init__(self, exe, d, k):
        home, ws = os.path.join(d, f"home{k}"), os.path.join(d, f"ws{k}")
        os.makedirs(ws)
        os.makedirs(home, mode=0o700)
        with open(os.path.join(home, "config.json"), "w") as f:
            json.dump(CONFIG, f)
        os.chmod(os.path.join(home, "config.json"), 0o600)
        ready = os.path.join(d, f"rx{k}.out")
        with open(ready, "w") as out:
            self.rx = subprocess.Popen([exe, "--home", home, "--json", "host", "--alias", "rx",
                                        "--workspace", ws],
                                       stdout=out, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + READY_S
        while os.path.getsize(ready) == 0:
            if time.monotonic() > deadline or self.rx.poll() is not None:
                sys.exit(f"{exe}: peer host did not start")
            time.sleep(0.05)
        self.tx = subprocess.Popen([exe, "--home", home, "mcp", "--alias", "tx",
                                    "--workspace", ws],
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=ws)
        self.next_id = 1
        self.call("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                 "clientInfo": {"name": "send-ab", "version": "1"}})
        self.tx.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        self.tx.stdin.flush()

    def call(self, method, params):
        i = self.next_id
        self.next_id += 1
        msg = {"jsonrpc": "2.0", "id": i, "method": method, "params": params}
        self.tx.stdin.write((json.dumps(msg) + "\n").encode())
        self.tx.stdin.flush()
        while True:
            line = self.tx.stdout.readline()
            if not line:
                sys.exit("peer mcp ended early")
            answer = json.loads(line)
            if answer.get("id") == i:
                return answer

    def send(self):
        """One send; its client-measured latency in µs."""
        t = time.perf_counter()
        r = self.call("tools/call", {"name": "send_peer_message",
                                     "arguments": {"to": "@rx", "content": BODY}})
        us = (time.perf_counter() - t) * 1e6
        if r.get("result", {}).get("isError") or "error" in r:
            sys.exit(f"a send failed: {r}")
        return us

    def stop(self):
        self.tx.stdin.close()
        self.tx.wait()
        self.rx.terminate()
        self.rx.wait()


def describe(name, xs):
    xs = sorted(xs)
    return (f"{name}: median {statistics.median(xs):.1f} µs, mean {statistics.mean(xs):.1f}, "
            f"p90 {xs[int(len(xs) * 0.9)]:.1f}, n {len(xs)}")


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    exes = [os.path.abspath(a) for a in sys.argv[1:3]]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 20
    per = int(sys.argv[4]) if len(sys.argv) > 4 else 50
    with tempfile.TemporaryDirectory(prefix="send-ab-") as d:
        pairs = [Pair(exe, d, k) for k, exe in enumerate(exes)]
        lat = [[], []]
        floor = []
        probe = os.open(os.path.join(d, "floor"), os.O_RDWR | os.O_CREAT, 0o600)
        os.pwrite(probe, b"\0" * 4096, 0)
        os.fsync(probe)
        try:
            for r in range(rounds + 1):
                for k in ((0, 1) if r % 2 == 0 else (1, 0)):
                    samples = [pairs[k].send() for _ in range(per)]
                    if r > 0:
                        lat[k].extend(samples)
                for _ in range(max(1, per // 5)):
                    os.pwrite(probe, b"y" * 200, 0)
                    t = time.perf_counter()
                    os.fdatasync(probe)
                    floor.append((time.perf_counter() - t) * 1e6)
        finally:
            os.close(probe)
            for p in pairs:
                p.stop()
    print(describe("A " + exes[0], lat[0]))
    print(describe("B " + exes[1], lat[1]))
    print(f"B/A medians {statistics.median(lat[1]) / statistics.median(lat[0]):.3f}; "
          f"fdatasync (200 B in place) median {statistics.median(floor):.1f} µs")


if __name__ == "__main__":
    main()
