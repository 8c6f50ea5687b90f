#!/usr/bin/env python3
"""Interrupts a Kiln tool in the middle of its work, for the output-safety
tests (test/Tools/output-signals.test, docs/artifact.md).

    interrupt.py --signal INT|TERM|HUP|KILL --when GLOB [--when GLOB...]
                 [--fake-cxx DIR [--real-cxx]] -- COMMAND...

Starts COMMAND, waits until a GLOB matches a path (the tool reached the stage
to interrupt: its scratch directory, weights.bin, the compiler running...),
sends the signal to COMMAND's process only (not its group, as `kill PID`
would), waits for it to end and checks that it died of that signal.

--fake-cxx DIR writes DIR/cxx, a stand-in host compiler that records its pid
in DIR/cxx.pid and then sleeps, and passes it to COMMAND as KILN_HOST_CXX:
the compile cannot finish before the signal comes, so the test does not
depend on timing, and the helper can check that the tool stopped its child
(for every signal but KILL, which the tool cannot catch). With --real-cxx
the stand-in first runs the real host compiler ($KILN_HOST_CXX, else c++),
then touches DIR/cxx.done and sleeps: give --when the compiler's temporary
files and DIR/cxx.done, and the signal lands while the real compiler runs or,
if that was too quick to see, just after, never after the tool finished.

No timing assertions: the generous time limits only turn a hang into a
failure.
"""

import argparse
import glob
import os
import shutil
import signal
import subprocess
import sys
import time

LIMIT_S = 300


def fail(message):
    print("interrupt.py: error: " + message, file=sys.stderr)
    sys.exit(1)


def alive(pid):
    """True while `pid` exists and is not a zombie."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--signal", required=True,
                        choices=["INT", "TERM", "HUP", "KILL"])
    parser.add_argument("--when", required=True, action="append")
    parser.add_argument("--fake-cxx")
    parser.add_argument("--real-cxx", action="store_true")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        fail("no command")
    sig = getattr(signal, "SIG" + args.signal)

    env = dict(os.environ)
    pidfile = None
    if args.fake_cxx:
        os.makedirs(args.fake_cxx, exist_ok=True)
        cxx = os.path.join(args.fake_cxx, "cxx")
        pidfile = cxx + ".pid"
        if os.path.exists(pidfile):
            os.remove(pidfile)
        real = ""
        if args.real_cxx:
            found = shutil.which(env.get("KILN_HOST_CXX", "c++"))
            if not found:
                fail("no host C++ compiler for --real-cxx")
            real = "'%s' \"$@\"\ntouch '%s.done'\n" % (found, cxx)
            if os.path.exists(cxx + ".done"):
                os.remove(cxx + ".done")
        with open(cxx, "w") as f:
            f.write("#!/bin/sh\necho $$ > '%s'\n%sexec sleep %d\n" %
                    (pidfile, real, LIMIT_S))
        os.chmod(cxx, 0o755)
        env["KILN_HOST_CXX"] = cxx

    # As a foreground command in a terminal: the signal's default action
    # (test runners start their commands with SIGINT ignored, which a tool
    # rightly keeps ignoring).
    def default_signals():
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(s, signal.SIG_DFL)

    proc = subprocess.Popen(command, env=env, preexec_fn=default_signals)
    deadline = time.monotonic() + LIMIT_S
    while not any(glob.glob(pattern) for pattern in args.when):
        if proc.poll() is not None:
            fail("%s exited (status %d) before any of %s appeared" %
                 (command[0], proc.returncode, args.when))
        if time.monotonic() > deadline:
            proc.kill()
            fail("none of %s appeared within %d s" % (args.when, LIMIT_S))
        time.sleep(0.01)
    child = None
    if pidfile and os.path.exists(pidfile):
        with open(pidfile) as f:
            text = f.read().strip()
        child = int(text) if text else None

    proc.send_signal(sig)
    try:
        proc.wait(timeout=LIMIT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        fail("%s did not exit within %d s of SIG%s" %
             (command[0], LIMIT_S, args.signal))
    if proc.returncode != -sig:
        fail("%s exited with status %d, expected death by SIG%s" %
             (command[0], proc.returncode, args.signal))
    print("%s: killed by SIG%s" % (os.path.basename(command[0]), args.signal))

    if child is not None and sig != signal.SIGKILL:
        deadline = time.monotonic() + 30
        while alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        if alive(child):
            os.kill(child, signal.SIGKILL)
            fail("the host compiler (pid %d) outlived %s" % (child, command[0]))
        print("host compiler stopped")
    elif child is not None and alive(child):
        os.kill(child, signal.SIGKILL)  # SIGKILL cannot be forwarded


if __name__ == "__main__":
    main()
