"""The grading programs that run inside the sandbox next to a candidate solution.

Both print one line per test, `<token> <index> <ok|fail>`, plus `<token> compile <0|1>`;
the token arrives on stdin so that a candidate's own prints cannot pass for results by
accident. A candidate that deliberately inspects the harness (it shares the function
harness's interpreter, and the uid of the stdio harness) can forge them: the sandbox
contains such code, it does not make grading tamper-proof.
"""

from __future__ import annotations

FUNCTION_HARNESS = r"""
import json, signal, sys
token = sys.stdin.readline().strip()
spec = json.load(open("spec.json"))
source = open("candidate.py").read()
def report(*parts):
    sys.__stdout__.write(" ".join([token, *map(str, parts)]) + "\n")
    sys.__stdout__.flush()
class TestTimeout(Exception):
    pass
def on_alarm(signum, frame):
    raise TestTimeout()
signal.signal(signal.SIGALRM, on_alarm)
try:
    code = compile(source, "candidate.py", "exec")
except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
    report("compile", 0)
    raise SystemExit(0)
report("compile", 1)
namespace = {"__name__": "candidate"}
try:
    signal.setitimer(signal.ITIMER_REAL, spec["test_timeout_s"])
    exec(code, namespace)
    signal.setitimer(signal.ITIMER_REAL, 0)
    candidate = namespace[spec["entry_point"]]
except BaseException:
    signal.setitimer(signal.ITIMER_REAL, 0)
    for i in range(len(spec["tests"])):
        report(i, "fail")
    raise SystemExit(0)
for i, test in enumerate(spec["tests"]):
    scope = dict(namespace)
    scope["candidate"] = candidate
    try:
        signal.setitimer(signal.ITIMER_REAL, spec["test_timeout_s"])
        exec(spec["setup"] + "\n" + test, scope)
        ok = True
    except BaseException:
        ok = False
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    report(i, "ok" if ok else "fail")
"""

STDIO_HARNESS = r"""
import json, subprocess, sys
token = sys.stdin.readline().strip()
spec = json.load(open("spec.json"))
def report(*parts):
    print(" ".join([token, *map(str, parts)]), flush=True)
try:
    compile(open("candidate.py").read(), "candidate.py", "exec")
    report("compile", 1)
except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
    report("compile", 0)
    raise SystemExit(0)
def normal(text):
    return [line.rstrip() for line in text.strip().splitlines()]
for i, (given, expected) in enumerate(spec["tests"]):
    try:
        out = subprocess.run([sys.executable, "-I", "-S", "candidate.py"], input=given, text=True,
                             capture_output=True, timeout=spec["test_timeout_s"]).stdout
        ok = normal(out) == normal(expected)
    except (subprocess.TimeoutExpired, OSError, UnicodeDecodeError):
        ok = False
    report(i, "ok" if ok else "fail")
"""
