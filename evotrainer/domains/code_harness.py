"""The grading programs that run inside the sandbox next to a candidate solution.

A policy earns reward by making these programs print passes, so they are built for a
candidate that tries to print passes without solving the task:

- **The candidate never sees an expected answer.** The tests arrive on the harness's
  stdin, never as a file the candidate could open; a stdin/stdout task's expected
  outputs never enter the sandbox at all (the harness prints a digest of what the
  program wrote, compared outside).
- **The candidate never shares a process with the tests, nor reaches the harness**
  (isolation.py): a function task's candidate runs in a runner process that the tests
  call through a pipe only builtin values cross, and the harness is non-dumpable.

Each harness prints `<token> compile <0|1>` and one line per test, `<token> <index>
<ok|fail>` (function tasks) or `<token> <index> <sha256 of the normalised output>`
(stdin/stdout tasks); the token arrives on stdin with the tests. CodeDomain.score
refuses anything but exactly one line per test. Killing or stalling the harness from
the candidate only fails it.
"""

from __future__ import annotations

from evotrainer.domains.isolation import GUARD, SPLIT

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
        send(channel_out, answer_of(function, *decode(args), **decode(kwargs)))
"""

# A runner started afresh by the harness, after a test left the last one in an unknown
# state: a new interpreter, so it holds nothing of the harness's memory.
RUNNER = SPLIT + _RUNNER_BODY + r"""
channel_in, channel_out = os.fdopen(os.dup(0), "rb"), os.fdopen(os.dup(1), "wb")
null = os.open(os.devnull, os.O_RDWR)
os.dup2(null, 0)
os.dup2(null, 1)
run_candidate(channel_in, channel_out)
"""

# The first runner is forked before the harness reads its stdin (isolation.py); one
# started after a test left the last in an unknown state is a new interpreter (RUNNER),
# which holds nothing of the harness's memory: a fork costs under a millisecond, a new
# interpreter ten or more.
FUNCTION_HARNESS = SPLIT + _RUNNER_BODY + f"RUNNER = {RUNNER!r}\n" + r"""
import signal
no_dumps()
first_runner = fork_runner(run_candidate, prints_to_stderr=False)
token = sys.stdin.readline().strip()
spec = json.loads(sys.stdin.readline())
out = sys.stdout
def report(*parts):
    out.write(" ".join([token, *map(str, parts)]) + "\n")
    out.flush()
class TestTimeout(Exception):
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
        if read_answer(self.from_runner) != ["ready"]:
            raise RunnerGone()
        self.broken = False
    def stop(self):
        if self.pid is not None:
            end_runner(self.pid, self.to_runner, grace_s=0)  # its state is unknown: killed
            self.from_runner.close()
            self.pid = None
    def call(self, *args, **kwargs):
        if self.broken:
            raise RunnerGone()
        try:
            if self.pid is None:
                self.start()
            send(self.to_runner, ["call", encode(list(args)), encode(kwargs)])
            answer = read_answer(self.from_runner)
        except BaseException:
            self.stop()
            raise
        if answer[0] not in ("ok", "raise"):
            self.stop()
        return value_of(answer)
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

STDIO_HARNESS = GUARD + _DIGEST + r"""
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
