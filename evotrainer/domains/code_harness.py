"""The grading programs that run inside the sandbox next to a candidate solution.

A policy earns reward by making these programs print passes, so they are built for a
candidate that tries to print passes without solving the task. Three rules:

- **The candidate never sees an expected answer.** The tests arrive on the harness's
  stdin, never as a file the candidate could open; a stdin/stdout task's expected
  outputs never enter the sandbox at all (the harness prints a digest of what the
  program wrote, compared outside).
- **The candidate never shares a process with the tests.** A function task's candidate
  runs in a runner process of its own; the tests run in the harness and call it through
  a pipe, and a returned value crosses as JSON that only builtin types survive. So an
  object whose `__eq__` always says yes, a patched `builtins`, or a candidate that
  imports the harness's `__main__` changes nothing the tests see.
- **The candidate cannot reach the harness.** Both run under the run's one uid, so the
  harness makes itself non-dumpable (prctl) first: a process without capabilities can
  then neither trace it, read its memory, nor open its stdin or stdout through /proc.

Each harness prints `<token> compile <0|1>` and one line per test, `<token> <index>
<ok|fail>` (function tasks) or `<token> <index> <sha256 of the normalised output>`
(stdin/stdout tasks); the token arrives on stdin with the tests. CodeDomain.score
refuses anything but exactly one line per test. Killing or stalling the harness from
the candidate only fails it.
"""

from __future__ import annotations

# Shared by the harness and the runner: PR_SET_DUMPABLE, and the JSON form of a value.
# Only exact builtin types are encoded, and decoding builds nothing else, so what reaches
# the tests is a plain value whatever the candidate returned. Integers travel in hex:
# Python caps decimal conversions of big integers, not power-of-two bases.
_COMMON = r"""
import json, os, sys
def no_dumps():
    import ctypes
    if ctypes.CDLL(None).prctl(4, 0, 0, 0, 0) != 0:
        raise SystemExit("prctl(PR_SET_DUMPABLE) failed")
TAGS = {type(None): "N", bool: "B", int: "I", float: "F", complex: "C", str: "S", bytes: "Y",
        list: "L", tuple: "T", set: "E", frozenset: "Z", dict: "D"}
def encode(value, depth=0):
    tag = TAGS.get(type(value))
    if tag is None or depth > 100:
        raise TypeError("a %s cannot leave the candidate's process: return builtin values"
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
"""

# The candidate's process: told its entry point (["load", name]), loads candidate.py, then
# answers calls ["call", args, kwargs] with ["ok", value] or ["raise", exception name,
# message]. Its stdin and stdout are /dev/null, so its prints cannot garble the channel (it
# could write there on purpose; the harness then reads a malformed answer, and the test
# fails).
_RUNNER_BODY = r"""
def run_candidate(channel_in, channel_out):
    _, entry_point = json.loads(channel_in.readline())
    namespace = {"__name__": "candidate"}
    try:
        exec(compile(open("candidate.py").read(), "candidate.py", "exec"), namespace)
        function = namespace[entry_point]
    except BaseException as exc:
        send(channel_out, ["broken", type(exc).__name__])
        return
    send(channel_out, ["ready"])
    for line in channel_in:
        _, args, kwargs = json.loads(line)
        try:
            result = encode(function(*decode(args), **decode(kwargs)))
        except BaseException as exc:
            send(channel_out, ["raise", type(exc).__name__, str(exc)[:500]])
        else:
            send(channel_out, ["ok", result])
"""

# A runner started afresh by the harness, after a test left the last one in an unknown
# state: a new interpreter, so it holds nothing of the harness's memory.
RUNNER = _COMMON + _RUNNER_BODY + r"""
channel_in, channel_out = os.fdopen(os.dup(0), "rb"), os.fdopen(os.dup(1), "wb")
null = os.open(os.devnull, os.O_RDWR)
os.dup2(null, 0)
os.dup2(null, 1)
run_candidate(channel_in, channel_out)
"""

# The first runner is a fork of the harness made before the harness reads its stdin (so
# the copy knows neither the token nor the tests): a fork costs under a millisecond, a new
# interpreter ten or more.
FUNCTION_HARNESS = _COMMON + _RUNNER_BODY + f"RUNNER = {RUNNER!r}\n" + r"""
import builtins, signal
no_dumps()
def fork_runner():
    to_child, from_parent = os.pipe()
    to_parent, from_child = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            os.close(from_parent)
            os.close(to_parent)
            run_candidate(os.fdopen(to_child, "rb"), os.fdopen(from_child, "wb"))
        finally:
            os._exit(0)
    os.close(to_child)
    os.close(from_child)
    return pid, os.fdopen(from_parent, "wb"), os.fdopen(to_parent, "rb")
first_runner = fork_runner()
token = sys.stdin.readline().strip()
spec = json.loads(sys.stdin.readline())
out = sys.stdout
def report(*parts):
    out.write(" ".join([token, *map(str, parts)]) + "\n")
    out.flush()
class TestTimeout(Exception):
    pass
class CandidateGone(Exception):
    pass
def on_alarm(signum, frame):
    raise TestTimeout()
signal.signal(signal.SIGALRM, on_alarm)
try:
    compile(open("candidate.py").read(), "candidate.py", "exec")
except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
    report("compile", 0)
    raise SystemExit(0)
report("compile", 1)
MAX_ANSWER = 16 * 1024 * 1024
class Runner:
    # The candidate's process; started again after a test it left in an unknown state.
    def __init__(self):
        self.pid = None
        self.broken = False
    def start(self):
        global first_runner
        self.broken = True  # until it answers: a candidate that cannot load fails every test
        if first_runner is not None:
            (self.pid, self.to_runner, self.from_runner), first_runner = first_runner, None
        else:
            import subprocess  # only here: its import alone costs a few milliseconds
            process = subprocess.Popen([sys.executable, "-I", "-S", "-c", RUNNER], stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            self.pid, self.to_runner, self.from_runner = process.pid, process.stdin, process.stdout
        send(self.to_runner, ["load", spec["entry_point"]])
        if self.answer() != ["ready"]:
            raise CandidateGone()
        self.broken = False
    def answer(self):
        line = self.from_runner.readline(MAX_ANSWER)
        if not line.endswith(b"\n"):
            raise CandidateGone()
        return json.loads(line)
    def stop(self):
        if self.pid is not None:
            os.kill(self.pid, 9)
            os.waitpid(self.pid, 0)
            self.to_runner.close()
            self.from_runner.close()
            self.pid = None
    def call(self, *args, **kwargs):
        if self.broken:
            raise CandidateGone()
        try:
            if self.pid is None:
                self.start()
            send(self.to_runner, ["call", encode(list(args)), encode(kwargs)])
            answer = self.answer()
            if answer[0] == "ok":
                return decode(answer[1])
        except BaseException:
            self.stop()
            raise
        if answer[0] == "raise":
            kind = getattr(builtins, str(answer[1]), None)
            if isinstance(kind, type) and issubclass(kind, Exception):
                raise kind(answer[2])
            raise RuntimeError("%s: %s" % (answer[1], answer[2]))
        self.stop()
        raise CandidateGone()
runner = Runner()
scope_of_prompt = {"__name__": "tests"}
exec(spec["prompt"], scope_of_prompt)
for i, test in enumerate(spec["tests"]):
    # The tests see the prompt's own helpers, and the candidate under both of its names
    # (some HumanEval tests call the entry point by name).
    scope = dict(scope_of_prompt)
    scope["candidate"] = scope[spec["entry_point"]] = runner.call
    try:
        signal.setitimer(signal.ITIMER_REAL, spec["test_timeout_s"])
        exec(spec["setup"] + "\n" + test, scope)
        ok = True
    except BaseException:
        ok = False
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    report(i, "ok" if ok else "fail")
runner.stop()
"""

# A program's output as compared: trailing spaces and blank lines at either end do not
# count. The harness prints this digest of what the program wrote, and CodeDomain.score
# compares it with the same digest of the expected output (normalised_digest).
_DIGEST = r"""
import hashlib
def digest(text):
    lines = [line.rstrip() for line in text.strip().splitlines()]
    return hashlib.sha256("\n".join(lines).encode("utf-8", "surrogatepass")).hexdigest()
"""

STDIO_HARNESS = _COMMON + _DIGEST + r"""
import subprocess
no_dumps()
token = sys.stdin.readline().strip()
spec = json.loads(sys.stdin.readline())
def report(*parts):
    print(" ".join([token, *map(str, parts)]), flush=True)
try:
    compile(open("candidate.py").read(), "candidate.py", "exec")
    report("compile", 1)
except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
    report("compile", 0)
    raise SystemExit(0)
for i, given in enumerate(spec["inputs"]):
    try:
        out = subprocess.run([sys.executable, "-I", "-S", "candidate.py"], input=given, text=True,
                             capture_output=True, timeout=spec["test_timeout_s"]).stdout
        report(i, digest(out))
    except (subprocess.TimeoutExpired, OSError, UnicodeDecodeError):
        report(i, "fail")
"""

_host: dict[str, object] = {}
exec(_DIGEST, _host)  # the very function the harness runs, defined here for the host's side


def normalised_digest(text: str) -> str:
    """The digest STDIO_HARNESS prints for a program that wrote `text`."""
    return _host["digest"](text)  # type: ignore[operator, no-any-return]
