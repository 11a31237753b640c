#!/usr/bin/env python3
"""Regenerates link/idle-text.ld, the list of functions an idle `peer host` runs.

A read fault on file-backed code maps up to 64 KiB of it (the kernel's fault-around), so an
idle root whose few hundred kilobytes of start-up and idle code are spread over the whole text
segment ends up with almost all of the binary resident. The linker script this tool writes
makes a release link put exactly those functions first in `.text`, next to each other;
nothing else about the code changes.

The functions are found by running a real idle root twice from a temporary home:
  1. under `valgrind --tool=callgrind` (every instruction executed, every thread), and
  2. natively under `perf record -e page-faults`, which adds what only runs on the real CPU
     (code chosen by CPU-feature detection, such as the SHA extensions, that valgrind does not
     emulate): an instruction fetch that faults names the function it lands in.
Each run is what `peer bench` measures as its idle receiver: a root started in a home where a
second root then starts, one local adapter (`peer inbox` through the root's control file)
connecting, then more than one heartbeat of quiet; shutdown is left out.

Legacy Rust symbol names end in a hash that changes with the compiler, the dependency versions
and the profile. A name that is unique in the binary once the hash is dropped is written with a
wildcard for the hash, so it keeps matching across toolchains; a generic function with several
instances keeps its exact name, so the other instances are not pulled in. A stale name only
costs locality, never correctness: the linker ignores patterns that match nothing.

Usage (release build first, then this tool; build and run it again until the number of 64 KiB
pieces it reports stops falling, usually two rounds; again after a toolchain or dependency
update, which changes the hashes):
    cargo build --release && python3 scripts/idle-layout.py [target/release/peer]
Needs valgrind and perf; run as a user allowed to record page faults (perf_event_paranoid).
"""

import bisect
import collections
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(REPO, "link", "idle-text.ld")
# Longer than one heartbeat (5 s by default) so the idle loop runs at least once; valgrind runs
# the same code 20-50 times slower.
NATIVE_IDLE_S = 8
CALLGRIND_IDLE_S = 30
READY_TIMEOUT_S = 120
HASH = re.compile(r"^(.*17h)[0-9a-f]{16}E$")
LTO_SUFFIX = re.compile(r"\.llvm\.\d+$")
NATIVE_MARK = "/* native */"


def private_home(tmp):
    home, ws = os.path.join(tmp, "home"), os.path.join(tmp, "ws")
    os.mkdir(home, 0o700)
    os.mkdir(ws, 0o700)
    cfg = os.path.join(home, "config.json")
    fd = os.open(cfg, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, b'{"sessions":{"communication":{"enabled":true}}}')
    os.close(fd)
    return home, ws


def host_argv(binary, home, ws, alias="idle-layout"):
    return [binary, "--home", home, "--json", "host", "--alias", alias, "--workspace", ws]


def company(binary, home, ws, ready, tmp):
    """What the idle root meets in `peer bench` before it goes quiet: a second root in the
    same home, and a local adapter call through its control file. Returns the second root."""
    out_path = os.path.join(tmp, "second.out")
    second = start(host_argv(binary, home, ws, "idle-layout-2"), ws, out_path)
    wait_ready(out_path, second)
    env = dict(os.environ, PEER_CONTROL=ready["control"])
    subprocess.run(
        [binary, "--home", home, "--json", "inbox"], cwd=ws, env=env, check=True,
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    return second


def stop(proc):
    proc.send_signal(signal.SIGTERM)
    proc.wait()


def wait_ready(out_path, proc):
    """Waits for the host's ready line and returns it."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        with open(out_path, "rb") as f:
            text = f.read()
        if b"\n" in text:
            return json.loads(text.split(b"\n", 1)[0])
        if proc.poll() is not None:
            sys.exit(f"idle-layout: the host exited with {proc.returncode} before it was ready")
        time.sleep(0.1)
    sys.exit("idle-layout: the host printed no ready line in time")


def start(argv, ws, out_path):
    env = {k: v for k, v in os.environ.items() if k not in ("PEER_CONTROL", "PEER_RUN")}
    with open(out_path, "wb") as out:
        return subprocess.Popen(
            argv, cwd=ws, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.DEVNULL
        )


def callgrind_addresses(binary, tmp):
    """Every instruction address of `binary` executed by an idle host under callgrind."""
    os.mkdir(os.path.join(tmp, "cg"), 0o700)
    home, ws = private_home(os.path.join(tmp, "cg"))
    cg_out = os.path.join(tmp, "callgrind.out")
    out_path = os.path.join(tmp, "cg.out")
    argv = ["valgrind", "--tool=callgrind", "--dump-instr=yes", f"--callgrind-out-file={cg_out}"]
    proc = start(argv + host_argv(binary, home, ws), ws, out_path)
    second = company(binary, home, ws, wait_ready(out_path, proc), tmp)
    time.sleep(CALLGRIND_IDLE_S)
    subprocess.run(["callgrind_control", "-d", str(proc.pid)], check=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    dump = cg_out + ".1"
    for _ in range(300):
        if os.path.exists(dump) and os.path.getsize(dump) > 0:
            break
        time.sleep(0.1)
    time.sleep(1)
    stop(proc)
    stop(second)
    return parse_callgrind(dump, os.path.realpath(binary))


def parse_callgrind(path, binary):
    names, ob, last, addrs = {}, None, 0, set()

    def name(s):
        m = re.match(r"\((\d+)\)(?: (.*))?", s)
        if not m:
            return s
        if m.group(2) is not None:
            names[m.group(1)] = m.group(2)
        return names[m.group(1)]

    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("ob="):
                ob = name(line[3:])
                continue
            if line.startswith("cob="):
                name(line[4:])
                continue
            if not line or line[0] not in "0123456789+-*":
                continue
            tok = line.split()[0]
            if tok.startswith("0x"):
                last = int(tok, 16)
            elif tok[0] in "+-":
                last += int(tok)
            elif tok != "*":
                continue
            if ob == binary:
                addrs.add(last)
    return addrs


def perf_fault_symbols(binary, tmp):
    """Functions of `binary` whose first instruction fetch faulted while a native host ran idle."""
    os.mkdir(os.path.join(tmp, "pf"), 0o700)
    home, ws = private_home(os.path.join(tmp, "pf"))
    data = os.path.join(tmp, "perf.data")
    out_path = os.path.join(tmp, "pf.out")
    argv = ["perf", "record", "-q", "-e", "page-faults", "-c", "1", "-d", "-o", data, "--"]
    proc = start(argv + host_argv(binary, home, ws), ws, out_path)
    second = company(binary, home, ws, wait_ready(out_path, proc), tmp)
    time.sleep(NATIVE_IDLE_S)
    # The host is perf's only child; SIGKILL keeps its shutdown path out of the record (the
    # temporary home it would clean up is removed with the rest).
    with open(f"/proc/{proc.pid}/task/{proc.pid}/children") as f:
        for pid in f.read().split():
            os.kill(int(pid), signal.SIGKILL)
    proc.wait()
    stop(second)
    script = subprocess.run(
        ["perf", "script", "--no-demangle", "-i", data, "-F", "ip,addr,sym,dso"],
        capture_output=True, text=True, check=True,
    ).stdout
    real = os.path.realpath(binary)
    found = set()
    for line in script.splitlines():
        f = line.split()
        # addr sym (dso) ip sym (dso): an instruction fetch has addr == ip.
        if len(f) >= 6 and f[0] == f[3] and f[2] == f"({real})" and f[1] != "[unknown]":
            found.add(f[1].split("+")[0])
    return found


def text_symbols(binary):
    out = subprocess.run(
        ["nm", "-S", "--defined-only", binary], capture_output=True, text=True, check=True
    ).stdout
    syms = []
    for line in out.splitlines():
        f = line.split()
        if len(f) == 4 and f[2] in "tTwW":
            syms.append((int(f[0], 16), int(f[1], 16), f[3]))
    syms.sort()
    return syms


def native_patterns(path):
    """The patterns an earlier round marked as found only natively, as regular expressions."""
    found = []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                if line.rstrip().endswith(NATIVE_MARK) and "*(.text." in line:
                    glob = line.split("*(.text.", 1)[1].split(" ", 1)[0]
                    found.append(re.compile(".*".join(re.escape(g) for g in glob.split("*"))))
    return found


def module_of(sym):
    """The path of a legacy-mangled function without its last component, or None."""
    m = re.match(r"^_ZN((?:\d+[^\d].*?)+)17h[0-9a-f]{16}E", LTO_SUFFIX.sub("", sym))
    if not m:
        return None
    parts, rest = [], m.group(1)
    while rest:
        n = re.match(r"\d+", rest)
        if not n:
            return None
        size = int(n.group(0))
        parts.append(rest[n.end() : n.end() + size])
        rest = rest[n.end() + size :]
    return tuple(parts[:-1]) if len(parts) > 1 else None


def windows(funcs):
    """How many 64 KiB pieces of the file the given (address, size) ranges touch."""
    w = set()
    for addr, size in funcs:
        w.update(range(addr >> 16, ((addr + max(size, 1) - 1) >> 16) + 1))
    return len(w)


def stem(sym):
    """The name without the LTO suffix and with the hash as a wildcard."""
    sym = LTO_SUFFIX.sub("", sym)
    m = HASH.match(sym)
    return m.group(1) + "*" if m else sym


def pattern(sym, stems):
    s = stem(sym)
    return s if stems[s] == 1 else LTO_SUFFIX.sub("", sym) + "*"


def main():
    binary = sys.argv[1] if len(sys.argv) > 1 else os.path.join(REPO, "target", "release", "peer")
    for tool in ("valgrind", "callgrind_control", "perf", "nm"):
        if shutil.which(tool) is None:
            sys.exit(f"idle-layout: needs {tool}")
    syms = text_symbols(binary)
    starts = [s[0] for s in syms]
    by_name = {s[2]: s for s in syms}
    stems = collections.Counter(stem(s[2]) for s in syms)
    with tempfile.TemporaryDirectory(prefix="idle-layout.") as tmp:
        os.chmod(tmp, 0o700)
        run = set()
        for a in callgrind_addresses(binary, tmp):
            i = bisect.bisect_right(starts, a) - 1
            if i >= 0 and a < syms[i][0] + max(syms[i][1], 1):
                run.add(syms[i][2])
        native = {n for n in perf_fault_symbols(binary, tmp) if n in by_name}
    # A function only the native run finds is seen there through its first page fault, which
    # packing hides in the next round: keep the ones earlier rounds found while they exist.
    native |= {n for n in by_name if any(p.fullmatch(n) for p in native_patterns(OUT))}
    # Which variant CPU-feature dispatch picks can depend on the input (crc32fast takes its
    # AVX-512 or AVX2 kernel by length): take a native-only function's module siblings along.
    # Only small modules: a large one would bring in more than it saves.
    members = collections.Counter(module_of(n) for n in by_name)
    modules = {module_of(n) for n in native - run} - {None}
    native |= {n for n in by_name if module_of(n) in modules and members[module_of(n)] <= 16}
    names = run | native
    # Identical functions are merged into one body under several names, and the input
    # section is named after only one of them: list every name at a run function's address.
    at = collections.defaultdict(list)
    for addr, _, sym in syms:
        at[addr].append(sym)
    aliases = {alias for n in names for alias in at[by_name[n][0]]}
    spread = windows(by_name[n][:2] for n in names)
    only_native = {pattern(n, stems) for n in native - run}
    pats = sorted({pattern(n, stems) for n in aliases})
    with open(OUT, "w") as f:
        f.write(HEADER)
        f.write("SECTIONS\n{\n  .text :\n  {\n")
        for p in pats:
            mark = f" {NATIVE_MARK}" if p in only_native else ""
            f.write(f"    *(.text.{p} .text.unlikely.{p}){mark}\n")
        f.write("  }\n}\nINSERT BEFORE .fini;\n")
    size = sum(by_name[n][1] for n in names)
    print(
        f"idle-layout: {len(names)} functions ({size // 1024} KiB, {len(native - run)} seen only"
        f" natively) in {spread} 64 KiB pieces of this build's text (packed: about"
        f" {size // 65536 + 1}); {len(pats)} patterns -> {os.path.relpath(OUT, REPO)}"
    )


HEADER = """\
/* The functions an idle `peer host` runs, linked next to each other in release builds (see
 * build.rs). Generated by scripts/idle-layout.py: do not edit by hand, regenerate it. A pattern
 * that matches nothing is ignored by the linker; the layout is the only thing it changes. */
"""

if __name__ == "__main__":
    main()
