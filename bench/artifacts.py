"""Benchmark: a 50 MB checkpoint written to and read back from the S3 artifact store,
against s3fs's own put/get of the same files, and against the local store; same run.

The server is moto's, on loopback, started here (tests/s3server.py). Each round stores the
checkpoint under a fresh prefix (nothing is there yet, so every byte goes over the wire)
and reads it into a fresh directory:
  s3 store:  store.put_dir(ckpt), then store.checkout(sha, dest)  (hashes everything it fetches)
  s3fs:      fs.put(ckpt, prefix, recursive=True), then fs.get(prefix, dest, recursive=True)
  local:     the same two calls on a local directory store
Target: s3fs's time over the S3 store's, the median round, at least 0.8 (the store's
hashing, atomicity and verification cost at most a quarter more than a bare copy).

    .venv/bin/python bench/artifacts.py [--mb 50] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import LoadWatch, paired_rounds, ratios, report_ratio, spread  # noqa: E402
from evotrainer.artifacts import open_store  # noqa: E402
from evotrainer.artifacts.s3 import s3_filesystem  # noqa: E402
from tests.s3server import s3_server  # noqa: E402


def make_checkpoint(root: Path, mb: int) -> Path:
    ckpt = root / "ckpt"
    ckpt.mkdir()
    (ckpt / "model.safetensors").write_bytes(os.urandom(mb * 1_000_000))
    (ckpt / "config.json").write_text('{"architectures": ["LlamaForCausalLM"], "hidden_size": 64}')
    (ckpt / "tokenizer.json").write_bytes(os.urandom(200_000))
    return ckpt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="evobench-arts-") as tmp_name, s3_server() as s3:
        tmp = Path(tmp_name)
        os.environ.update(s3.env)
        ckpt = make_checkpoint(tmp, args.mb)
        write: dict[str, list[float]] = {}
        read: dict[str, list[float]] = {}

        def timed(side: str, location: str | None) -> float:
            """One write and one read of the checkpoint; returns their total seconds."""
            dest = tmp / f"read-{uuid.uuid4().hex[:8]}"
            prefix = f"{s3.bucket}/{side.replace(' ', '-')}-{uuid.uuid4().hex[:8]}"
            start = time.perf_counter()
            if location is None:
                fs = s3_filesystem()
                fs.put(str(ckpt), prefix, recursive=True)
                wrote = time.perf_counter()
                fs.get(prefix, str(dest), recursive=True)
            else:
                store = open_store(location.replace("PREFIX", prefix))
                sha = store.put_dir(ckpt)
                wrote = time.perf_counter()
                store.checkout(sha, dest)
            done = time.perf_counter()
            assert (dest / "model.safetensors").stat().st_size == args.mb * 1_000_000
            shutil.rmtree(dest)
            write.setdefault(side, []).append(wrote - start)
            read.setdefault(side, []).append(done - wrote)
            return done - start

        sides = {
            "s3 store": lambda: timed("s3 store", "s3://PREFIX"),
            "s3fs": lambda: timed("s3fs", None),
            "local store": lambda: timed("local store", str(tmp / "PREFIX")),
        }
        with LoadWatch() as load:
            total = paired_rounds(sides, args.rounds)

    print(f"{args.mb} MB checkpoint, moto S3 server on loopback, {args.rounds} rounds (median (lowest-highest))")
    for side in sides:
        print(f"  {side:12s} write {spread(write[side])} s   read {spread(read[side])} s")
    report_ratio("s3fs put+get / s3 store write+read", ratios(total["s3fs"], total["s3 store"]), 0.8)
    print(f"{'  write: s3fs / s3 store':44s} {spread(ratios(write['s3fs'], write['s3 store']))}")
    print(f"{'  read:  s3fs / s3 store':44s} {spread(ratios(read['s3fs'], read['s3 store']))}")
    print(f"{'s3 store / local store (time, for scale)':44s} {spread(ratios(total['s3 store'], total['local store']))}")
    print(load.line())


if __name__ == "__main__":
    main()
