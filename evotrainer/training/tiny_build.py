"""Build the tiny policy's warm start in a process of its own, on ATen's portable kernels.

    python -m evotrainer.training.tiny_build DOMAIN DATA_SEED OUT_DIR RECIPE_JSON

The warm start's SFT steps at a high rate are chaotic: the bits of each step decide
where it lands, and ATen's kernels for each instruction-set level compute other bits.
Measured for math:column_add on an AMD machine: its AVX2 kernels gave a policy that
answers 0.80 of 40 held-out sums greedily (0.79 Avg@32 on 100), the portable (DEFAULT)
kernels one at 0.48 greedily, and an Intel machine's AVX512 kernels had given one at 0.20
Avg@32 (the README's compare figures). So a machine's own kernels would give every
machine another starting policy, and the fixed recipes' premise (a start with room to
climb) would hold on some machines only. ATEN_CPU_CAPABILITY is read when torch is
imported, so the build runs in a child process; training afterwards uses the machine's
own, faster kernels (they change the bits of training, which replay already records).
MKL's matrix kernels chose their code by CPU too, and that was not enough to leave free:
on an Intel machine (AVX512, 12-05) the same build gave a start at 0.74 Avg@32 where the
AMD machine's had been below 0.6, and the recipe's test (tests/training/test_learning.py)
failed there. So MKL is pinned as well, to the code path it keeps for every x86 processor
(MKL_CBWR=COMPATIBLE: Intel's conditional numerical reproducibility, documented to give
the same results on Intel and other processors). 300 steps built that way start at 0.85
Avg@32 on the Intel machine, as the AMD one had measured 0.85 greedily with the same
setting. Too good to leave room to climb: the recipe now stops at 225 steps
(tiny.TinyRecipe.sft_steps has the measurements, from the Intel machine).

The pins make every Intel machine build the same policy, whatever its instruction set
(tests/training/test_tiny_build.py), but not every machine: an AMD EPYC (AVX2, 12-05)
built another 225-step policy, which starts math-tiny at 0.576 Avg@32 on 100 held-out
problems against the Intel machine's 0.42. The cause is not known: on the AMD machine,
capping oneDNN (ONEDNN_MAX_CPU_ISA=SSE41) or turning it off, MKL's strict mode
(COMPATIBLE,STRICT) and MKL_ENABLE_INSTRUCTIONS=SSE4_2 all leave the build's bytes as
they are, while ATen's level or MKL's own path (MKL_CBWR=AVX2) change them.

The cache key names the recipe, not the machine: a shared cache (EVOTRAINER_TINY_CACHE)
hands every host the policy the first one built; a host without one builds its own, and
on another processor model that is other bytes. The fingerprint names the processor
(environment.cpu_model), so a replay there compares figures within tolerances instead
of calling the difference a fault.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from evotrainer.training.tiny import TinyRecipe

WARM_START_CPU_CAPABILITY = "default"
WARM_START_MKL_PATH = "COMPATIBLE"


def build_portably(domain_spec: str, recipe: TinyRecipe, data_seed: int, out_dir: Path, threads: int) -> dict[str, Any]:
    """Run the warm start in a child process on the portable kernels; its description."""
    env = {**os.environ, "ATEN_CPU_CAPABILITY": WARM_START_CPU_CAPABILITY, "MKL_CBWR": WARM_START_MKL_PATH}
    argv = [sys.executable, "-m", "evotrainer.training.tiny_build", domain_spec, str(data_seed), str(out_dir),
            json.dumps(asdict(recipe)), str(threads)]  # fmt: skip
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"building the tiny warm start failed: {tail}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main(argv: list[str]) -> None:
    from evotrainer.domains import get_domain
    from evotrainer.training.environment import deterministic, offline
    from evotrainer.training.tiny import warm_start

    domain_spec, data_seed, out_dir, recipe_json, threads = argv
    offline()
    recipe = TinyRecipe(**json.loads(recipe_json))
    deterministic(recipe.seed, int(threads))
    info = warm_start(get_domain(domain_spec), recipe, int(data_seed), Path(out_dir))
    print(json.dumps(info, sort_keys=True))


if __name__ == "__main__":
    main(sys.argv[1:])
