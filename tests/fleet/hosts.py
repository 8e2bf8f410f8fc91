"""Hosts for fleet tests: each a network namespace of its own, made by the test, so that a
dispatcher and workers run as they would on other machines.

    with Network(tmp / "net") as net:            # a bridge with the gateway at 10.213.N.1
        net.relay(5432); net.relay(6379)         # loopback services, reachable at the gateway
        a = net.host("worker-a")                 # namespace, veth on the bridge, 10.213.N.2
        proc = a.start(["python", "-m", "evotrainer", "worker"], env, log)

What a host process gets:
- its own network: only its loopback and the bridge; the machine's 127.0.0.1, where
  Postgres and the broker listen, is not reachable from it. They are reached through
  `relay`, a TCP forwarder in the root namespace listening on the gateway address, the way
  a service on another host is reached through its address;
- its own host name (a UTS namespace), so the fleet's `host:pid` worker names differ;
- no shared filesystem for data: each host's files live in `hosts/<name>/`, which its
  processes see (in a mount namespace of their own) at `own/`, while an empty tmpfs hides
  `hosts/` from them: a host sees only its own EVOTRAINER_HOME and HOME (kept between its
  processes, as a machine's disk is), never another's. The code and the virtualenv are
  shared read-only, as an image installed on every machine would be.

Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN) and `ip`/`unshare`; `netns_available()` says.
Everything is removed by `Network.close()`; processes are stopped by their PID.
"""

from __future__ import annotations

import asyncio
import random
import shutil
import subprocess
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from tests.processes import end_processes


def netns_available() -> str | None:
    """None when this process can make network namespaces; else why not."""
    if shutil.which("ip") is None or shutil.which("unshare") is None:
        return "needs iproute2's `ip` and util-linux's `unshare`"
    name = f"evprobe{uuid.uuid4().hex[:6]}"
    made = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True, check=False)
    if made.returncode != 0:
        return f"cannot create a network namespace: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", name], check=False)
    return None


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


@dataclass
class Host:
    name: str
    netns: str
    address: str
    root: Path
    """`hosts/` (every host's files, hidden from each host) and `own/` beside it."""
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def files(self) -> Path:
        """This host's disk, as the root namespace sees it."""
        return self.root / "hosts" / self.name

    @property
    def home(self) -> Path:
        """EVOTRAINER_HOME (and HOME) as this host's processes see it."""
        return self.root / "own" / "home"

    def start(self, argv: list[str], env: dict[str, str], log: IO[bytes], cwd: Path) -> subprocess.Popen[bytes]:
        """Run `argv` on this host. Each layer execs the next, so the PID is the program's."""
        script = ('hostname "$1" && mount --bind "$2/hosts/$1" "$2/own" && mount -t tmpfs tmpfs "$2/hosts"'
                  ' && mkdir -p "$2/own/home" && shift 2 && exec "$@"')
        env = {**env, "EVOTRAINER_HOME": str(self.home), "HOME": str(self.home),
               "XDG_CACHE_HOME": str(self.home / ".cache")}  # fmt: skip
        self.files.mkdir(parents=True, exist_ok=True)
        proc = subprocess.Popen(
            ["ip", "netns", "exec", self.netns, "unshare", "--uts", "--mount", "--propagation", "private",
             "sh", "-c", script, "sh", self.name, str(self.root), *argv],
            env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        self.procs.append(proc)
        return proc


class Network:
    """A bridge, the hosts on it and the relays to the root namespace's loopback services."""

    def __init__(self, root: Path) -> None:
        self.tag = uuid.uuid4().hex[:5]
        self.subnet = f"10.213.{random.randint(1, 254)}"
        self.gateway = f"{self.subnet}.1"
        self.bridge = f"evb{self.tag}"
        self.root = root
        self.hosts: list[Host] = []
        self._relays: list[asyncio.Server] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def __enter__(self) -> Network:
        (self.root / "hosts").mkdir(parents=True, exist_ok=True)
        (self.root / "own").mkdir(parents=True, exist_ok=True)
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def host(self, name: str) -> Host:
        n = len(self.hosts) + 2
        netns, outside, inside = f"evn{self.tag}{n}", f"evh{self.tag}{n}", f"evi{self.tag}{n}"
        _ip("netns", "add", netns)
        _ip("link", "add", outside, "type", "veth", "peer", "name", inside)
        _ip("link", "set", outside, "master", self.bridge)
        _ip("link", "set", outside, "up")
        _ip("link", "set", inside, "netns", netns)
        _ip("-n", netns, "addr", "add", f"{self.subnet}.{n}/24", "dev", inside)
        _ip("-n", netns, "link", "set", inside, "up")
        _ip("-n", netns, "link", "set", "lo", "up")
        host = Host(name, netns, f"{self.subnet}.{n}", self.root)
        self.hosts.append(host)
        return host

    def relay(self, port: int, target: tuple[str, int] | None = None) -> str:
        """Forward gateway:port to 127.0.0.1:port (or `target`); returns 'gateway:port'."""
        host, target_port = target or ("127.0.0.1", port)

        async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                while data := await reader.read(1 << 16):
                    writer.write(data)
                    await writer.drain()
            except ConnectionError:
                pass
            finally:
                writer.close()

        async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
            try:
                server_r, server_w = await asyncio.open_connection(host, target_port)
            except OSError:
                client_w.close()
                return
            await asyncio.gather(pipe(client_r, server_w), pipe(server_r, client_w))

        async def serve() -> asyncio.Server:
            return await asyncio.start_server(handle, self.gateway, port)

        self._relays.append(asyncio.run_coroutine_threadsafe(serve(), self._loop).result(timeout=10))
        return f"{self.gateway}:{port}"

    async def _shutdown(self) -> None:
        """Stop listening and end the connections still open (their peers are gone)."""
        for server in self._relays:
            server.close()
        current = asyncio.current_task()
        pending = [t for t in asyncio.all_tasks() if t is not current]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    def close(self) -> None:
        end_processes([proc for host in self.hosts for proc in host.procs])
        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(timeout=10)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
            self._loop.close()
        for host in self.hosts:
            subprocess.run(["ip", "netns", "del", host.netns], check=False, capture_output=True)
        subprocess.run(["ip", "link", "del", self.bridge], check=False, capture_output=True)
