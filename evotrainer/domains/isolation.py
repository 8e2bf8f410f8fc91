"""Source shared by the grading programs that keep tests and the code under test apart.

A policy earns reward by making a grading program report passes, so the grader must
hold when the code it grades tries to report passes without doing the work. Where the
tests can run apart from that code (a function's tests, the generated repositories'
tests), they do: the grading program (the harness) runs the tests, and the code under
test runs in a runner process of its own that answers calls through a pipe. Only plain
values cross, as JSON that builds nothing but builtin types, so an object whose
`__eq__` always says yes, a patched `builtins` or a forged report changes nothing the
tests see.

The runner is forked before the harness reads its stdin (the token that marks its
reports, and the tests): the copy knows neither. Both run under the run's one uid, so
the harness makes itself non-dumpable first: a process without capabilities can then
neither trace it, read its memory, nor open its stdin or stdout through /proc. The
runner's stdin is /dev/null and its prints go to the run's stderr or nowhere, so they
cannot reach the channel or the harness's report by accident; on purpose it can
only garble its own answers, which fails the test.

Used by code_harness.py (function tasks) and swe/env.py (generated repositories).
"""

from __future__ import annotations

# What every grading program starts with, a runner or not.
GUARD = r"""
import builtins, json, os, sys
def no_dumps():
    import ctypes
    if ctypes.CDLL(None).prctl(4, 0, 0, 0, 0) != 0:  # PR_SET_DUMPABLE
        raise SystemExit("prctl(PR_SET_DUMPABLE) failed")
"""

# The channel between a grader and its runner. Integers travel in hex: Python caps
# decimal conversions of big integers, not power-of-two bases. Builtin exceptions raised
# by the code under test are raised again in the harness under their own type, so a test
# that expects one still passes.
SPLIT = GUARD + r"""
TAGS = {type(None): "N", bool: "B", int: "I", float: "F", complex: "C", str: "S", bytes: "Y",
        list: "L", tuple: "T", set: "E", frozenset: "Z", dict: "D"}
def encode(value, depth=0):
    tag = TAGS.get(type(value))
    if tag is None or depth > 100:
        raise TypeError("a %s cannot leave the process of the code under test: only builtin values can"
                        % type(value).__name__)
    if tag == "N":
        return [tag]
    if tag in "BI":
        return [tag, hex(value)]
    if tag == "F":
        return [tag, repr(value)]
    if tag == "C":
        return [tag, repr(value.real), repr(value.imag)]
    if tag == "S":
        return [tag, value]
    if tag == "Y":
        return [tag, value.hex()]
    if tag == "D":
        return [tag, [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in value.items()]]
    return [tag, [encode(item, depth + 1) for item in value]]
BUILDERS = {"L": list, "T": tuple, "E": set, "Z": frozenset}
def decode(data, depth=0):
    tag = data[0]
    if depth > 100:
        raise ValueError("nested too deep")
    if tag == "N":
        return None
    if tag == "B":
        return bool(int(data[1], 16))
    if tag == "I":
        return int(data[1], 16)
    if tag == "F":
        return float(data[1])
    if tag == "C":
        return complex(float(data[1]), float(data[2]))
    if tag == "S" and type(data[1]) is str:
        return data[1]
    if tag == "Y":
        return bytes.fromhex(data[1])
    if tag == "D":
        return {decode(k, depth + 1): decode(v, depth + 1) for k, v in data[1]}
    return BUILDERS[tag](decode(item, depth + 1) for item in data[1])
def send(stream, message):
    stream.write(json.dumps(message).encode() + b"\n")
    stream.flush()
def answer_of(function, *args, **kwargs):
    # In the runner: the answer to one call of the code under test.
    try:
        return ["ok", encode(function(*args, **kwargs))]
    except BaseException as exc:
        return ["raise", type(exc).__name__, str(exc)[:500]]
class RunnerGone(Exception):
    pass
MAX_ANSWER = 16 * 1024 * 1024
def read_answer(stream):
    # In the harness: one answer, or RunnerGone when the runner died or garbled it.
    line = stream.readline(MAX_ANSWER)
    if not line.endswith(b"\n"):
        raise RunnerGone()
    try:
        return json.loads(line)
    except ValueError:
        raise RunnerGone() from None
def value_of(answer):
    # In the harness: what a call returned, as a plain value, or its exception raised here.
    if answer[0] == "ok":
        return decode(answer[1])
    if answer[0] == "raise":
        kind = getattr(builtins, str(answer[1]), None)
        if isinstance(kind, type) and issubclass(kind, Exception):
            raise kind(answer[2])
        raise RuntimeError("%s: %s" % (answer[1], answer[2]))
    raise RunnerGone()
def fork_runner(serve, prints_to_stderr):
    # Before the harness reads its stdin. serve(channel_in, channel_out) runs in the child,
    # whose prints go to the run's stderr (shown, never parsed) or nowhere.
    to_child, from_parent = os.pipe()
    to_parent, from_child = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            null = os.open(os.devnull, os.O_RDWR)
            os.dup2(null, 0)
            os.dup2(2 if prints_to_stderr else null, 1)
            if not prints_to_stderr:
                os.dup2(null, 2)
            os.close(from_parent)
            os.close(to_parent)
            serve(os.fdopen(to_child, "rb"), os.fdopen(from_child, "wb"))
        finally:
            try:
                sys.stdout.flush()
            finally:
                os._exit(0)
    os.close(to_child)
    os.close(from_child)
    return pid, os.fdopen(from_parent, "wb"), os.fdopen(to_parent, "rb")
def end_runner(pid, to_runner, grace_s):
    # Closing the channel ends a runner that serves; one that does not is killed.
    import time
    to_runner.close()
    deadline = time.monotonic() + grace_s
    while os.waitpid(pid, os.WNOHANG) == (0, 0):
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            return
        time.sleep(0.001)
"""
