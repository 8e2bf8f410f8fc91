"""A real S3-compatible server for tests and benchmarks: moto's server mode, in its own
process on a loopback port, with one bucket.

    with s3_server() as s3:
        os.environ.update(s3.env)          # AWS_* variables that point s3fs at it
        store = open_store(s3.url("run1")) # s3://bucket/run1

The server is stopped by its PID when the block ends; everything it held was in its memory.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.processes import end_process


@dataclass(frozen=True)
class S3Server:
    endpoint: str
    bucket: str
    proc: subprocess.Popen[bytes]

    @property
    def env(self) -> dict[str, str]:
        """The variables a client (s3fs, boto3) needs to reach this server."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": "evotrainer-test",
            "AWS_SECRET_ACCESS_KEY": "evotrainer-test",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_REGION": "us-east-1",
        }

    def url(self, prefix: str = "") -> str:
        return f"s3://{self.bucket}/{prefix}".rstrip("/")

    def client(self) -> object:
        import boto3

        env = self.env
        return boto3.client("s3", endpoint_url=self.endpoint, region_name=env["AWS_REGION"],
                            aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                            aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"])


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@contextmanager
def s3_server(host: str = "127.0.0.1", log: Path | None = None) -> Iterator[S3Server]:
    """Start moto's server on `host` (a free port), create a bucket, stop it afterwards."""
    port = free_port(host)
    out = open(log, "wb") if log else subprocess.DEVNULL  # noqa: SIM115 (closed below)
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", host, "-p", str(port)],
                            stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection((host, port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"moto server did not start on {host}:{port} (exit {proc.poll()})") from None
                time.sleep(0.1)
        server = S3Server(f"http://{host}:{port}", f"evotrainer-{uuid.uuid4().hex[:8]}", proc)
        server.client().create_bucket(Bucket=server.bucket)  # type: ignore[attr-defined]
        yield server
    finally:
        end_process(proc, timeout=10)
        if log:
            out.close()  # type: ignore[union-attr]
