"""Completions that try to earn the code reward without solving the task.

Each hostile completion below is what a policy could write to pass `add(a, b)` without
adding: an object equal to everything, a patched builtin, forged result lines, the test
file read back, the harness's memory or output reached through /proc. The grading
harness (code_harness.py) must give every one of them nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evotrainer.domains.code import CodeConfig, CodeDomain, _harness_lines
from evotrainer.domains.code_problems import load_stdio_jsonl
from evotrainer.sandbox.namespaces import available
from tests.conftest import IN_CI
from tests.domains.test_code import ADD

pytestmark = pytest.mark.skipif(bool(available()) and not IN_CI, reason=available() or "sandbox available")

# Each returns the right sum only where the attack worked (and -999, never a right sum,
# where it did not), so a harness that let one through would score it 1.
HOSTILE = {
    "an object equal to everything": (
        "    class Equal:\n        def __eq__(self, other): return True\n        def __ne__(self, other): return False\n"
        "    return Equal()\n"
    ),
    "an int subclass equal to everything": (
        "    class Equal(int):\n        def __eq__(self, other): return True\n        __hash__ = int.__hash__\n"
        "    return Equal(0)\n"
    ),
    "a patched str that turns fail into ok": (
        "    import builtins\n    plain = builtins.str\n"
        "    builtins.str = lambda x, plain=plain: 'ok' if x == 'fail' else plain(x)\n    return -999\n"
    ),
    "result lines forged with the harness's token": (
        "    import __main__, sys\n    token = getattr(__main__, 'token', None)\n"
        "    if token:\n        for i in range(3): sys.__stdout__.write(f'{token} {i} ok\\n')\n"
        "        sys.__stdout__.flush()\n    return -999\n"
    ),
    "the tests read back from the sandbox's files": (
        "    import glob, re\n    for name in glob.glob('*') + glob.glob('/work/*'):\n"
        "        text = open(name).read()\n"
        "        found = re.search(r'candidate\\(%d, %d\\) == (-?\\d+)' % (a, b), text)\n"
        "        if found: return int(found.group(1))\n    return -999\n"
    ),
    "the harness's memory or output through /proc": (
        "    import os\n    parent = os.getppid()\n"
        "    for path in (f'/proc/{parent}/mem', f'/proc/{parent}/fd/1', f'/proc/{parent}/fd/0', f'/proc/{parent}/environ'):\n"
        "        try:\n            open(path, 'rb').close()\n            return a + b\n        except OSError:\n            pass\n"
        "    return -999\n"
    ),
    "the harness killed": "    import os, signal\n    os.kill(os.getppid(), signal.SIGKILL)\n    return a + b\n",
    "exit 0 before any test fails": "    import os\n    os._exit(0)\n",
}


@pytest.mark.parametrize("attack", sorted(HOSTILE))
def test_a_hostile_completion_earns_nothing(attack: str) -> None:
    rewards = CodeDomain(CodeConfig(test_timeout_s=1.0)).score(ADD, HOSTILE[attack])
    assert rewards["correctness"] == 0.0 and rewards["pass_fraction"] == 0.0, rewards


def test_an_honest_candidate_that_prints_and_keeps_state_still_passes() -> None:
    completion = "    global calls\n    calls = globals().get('calls', 0) + 1\n    print('debug', a, b)\n    return a + b\n"
    assert CodeDomain().score(ADD, completion)["correctness"] == 1.0


def test_a_test_that_times_out_fails_alone() -> None:
    # The runner stuck in the loop is killed; the next test gets a fresh one.
    completion = "    while a == 0:\n        pass\n    return a + b\n"
    rewards = CodeDomain(CodeConfig(test_timeout_s=0.5)).score(ADD, completion)
    assert rewards["pass_fraction"] == pytest.approx(2 / 3) and rewards["correctness"] == 0.0


def test_exceptions_reach_the_tests_as_builtin_exceptions() -> None:
    divide = ADD.__class__(
        task_id="t/div", domain="code", prompt='def div(a, b):\n    """a / b; ValueError when b is 0."""\n',
        metadata={"kind": "function", "entry_point": "div", "setup": "", "tests": (
            "assert candidate(6, 3) == 2",
            "try:\n    candidate(1, 0)\n    assert False\nexcept ValueError:\n    pass",
        )},
    )  # fmt: skip
    honest = "    if b == 0:\n        raise ValueError('b is 0')\n    return a // b\n"
    assert CodeDomain().score(divide, honest)["correctness"] == 1.0
    assert CodeDomain().score(divide, "    return a // b\n")["pass_fraction"] == 0.5  # ZeroDivisionError


def test_forged_or_repeated_result_lines_count_for_nothing() -> None:
    assert _harness_lines("t compile 1\nt 0 ok\nt 1 ok\n", "t", 2) == (1.0, {0: "ok", 1: "ok"})
    assert _harness_lines("t compile 1\nt 0 ok\nt 0 fail\nt 1 ok\n", "t", 2) == (1.0, {})
    assert _harness_lines("t compile 1\nt 0 ok\nt 7 ok\n", "t", 2) == (1.0, {})
    assert _harness_lines("x 0 ok\nt 0 ok extra\nt 0 fail\n", "t", 1) == (0.0, {0: "fail"})
    assert _harness_lines("t \u00b2 ok\n", "t", 1) == (0.0, {})  # a digit int() refuses: forged too


def test_a_program_cannot_read_its_expected_output(tmp_path: Path) -> None:
    apps = {"problem_id": 1, "question": "Print the sum.",
            "input_output": json.dumps({"inputs": ["1 2\n", "5 5\n"], "outputs": ["3\n", "10\n"]}),
            "solutions": json.dumps(["a, b = map(int, input().split())\nprint(a + b)\n"])}  # fmt: skip
    path = tmp_path / "apps.jsonl"
    path.write_text(json.dumps(apps) + "\n")
    task = load_stdio_jsonl(path)[0]
    domain = CodeDomain(CodeConfig(source="file", jsonl=path))
    # Look for the answers in every readable file of the sandbox, and in the parent's memory.
    snoop = (
        "import glob, os, re, sys\ngiven = sys.stdin.read()\nseen = ''\n"
        "for name in glob.glob('/work/*') + [f'/proc/{os.getppid()}/mem', f'/proc/{os.getppid()}/fd/0']:\n"
        "    try:\n        seen += open(name, errors='replace').read(100000)\n    except OSError:\n        pass\n"
        "found = re.findall(r'outputs.*?(\\d+)', seen)\nprint(found[0] if found else 0)\n"
    )
    assert domain.score(task, snoop)["pass_fraction"] == 0.0
    assert domain.score(task, task.reference)["correctness"] == 1.0


def test_a_completion_with_a_lone_surrogate_scores_zero_instead_of_failing() -> None:
    # JSON can spell one (`"\udccb"`); no source file can hold it.
    rewards = CodeDomain().score(ADD, "    return a + b  # \udccb\n")
    assert rewards == {"correctness": 0.0, "pass_fraction": 0.0, "compile": 0.0, "format": 1.0}
