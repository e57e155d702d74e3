"""Cluster environments: where a process learns its ranks and the rendezvous address.

Every environment reads a ``Mapping[str, str]`` (``os.environ`` unless one is
passed), so each can be tested with a fabricated environment. Bad values raise a
``ValueError`` naming the variable and its value.
"""

from __future__ import annotations

import itertools
import os
import re
import signal
import socket
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import ClassVar

__all__ = [
    "ClusterEnvironment",
    "EnvVarEnvironment",
    "LocalEnvironment",
    "SLURMEnvironment",
    "TorchElasticEnvironment",
    "detect_environment",
    "expand_nodelist",
    "first_host",
]

_MAX_PORT = 65535


def _read_int(environ: Mapping[str, str], name: str, default: int | None = None) -> int:
    raw = environ.get(name)
    if raw is None:
        if default is None:
            raise ValueError(f"{name} is not set; the launcher must export {name} for this cluster environment")
        return default
    try:
        return int(raw.strip())
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not an integer; set {name} to a whole number") from None


def _check_size(name: str, value: int) -> int:
    if value < 1:
        raise ValueError(f"{name}={value!r} must be at least 1; set {name} to the number of processes")
    return value


def _check_rank(name: str, value: int, size_name: str | None = None, size: int | None = None) -> int:
    if value < 0:
        raise ValueError(f"{name}={value!r} is negative; ranks start at 0")
    if size is not None and value >= size:
        raise ValueError(
            f"{name}={value!r} is out of range for {size_name}={size!r}; ranks run from 0 to {size - 1}. "
            f"Check the launcher's {name} and {size_name}"
        )
    return value


def _check_port(name: str, value: int) -> int:
    if not 1 <= value <= _MAX_PORT:
        raise ValueError(f"{name}={value!r} is not a TCP port; choose a port between 1 and {_MAX_PORT}")
    return value


# ---------------------------------------------------------------------------------------------------------------
# SLURM host lists


def _nodelist_error(nodelist: str, why: str) -> ValueError:
    return ValueError(f"SLURM_NODELIST={nodelist!r} cannot be parsed: {why}; expected hosts like 'node1,gpu[01-03,07]'")


def _split_top_level(nodelist: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for ch in nodelist:
        if ch == "[":
            depth += 1
            if depth > 1:
                raise _nodelist_error(nodelist, "nested '['")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise _nodelist_error(nodelist, "']' without '['")
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    if depth:
        raise _nodelist_error(nodelist, "unclosed '['")
    parts.append("".join(current))
    if any(not p.strip() for p in parts):
        raise _nodelist_error(nodelist, "empty host name")
    return [p.strip() for p in parts]


_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


def _bracket_ranges(nodelist: str, body: str) -> list[tuple[int, int, int]]:
    """Parse ``01-03,07`` into ``(start, stop, width)`` triples."""
    ranges = []
    for item in body.split(","):
        match = _RANGE.match(item.strip())
        if not match:
            raise _nodelist_error(nodelist, f"bad range {item!r} in '[{body}]'")
        start_s, stop_s = match.group(1), match.group(2) or match.group(1)
        start, stop = int(start_s), int(stop_s)
        if stop < start:
            raise _nodelist_error(nodelist, f"range {item!r} runs backwards")
        ranges.append((start, stop, len(start_s)))
    return ranges


def _host_pieces(nodelist: str, host: str) -> list[str | list[tuple[int, int, int]]]:
    pieces: list[str | list[tuple[int, int, int]]] = []
    for i, chunk in enumerate(re.split(r"\[([^\]]*)\]", host)):
        pieces.append(_bracket_ranges(nodelist, chunk) if i % 2 else chunk)
    return pieces


def expand_nodelist(nodelist: str) -> list[str]:
    """Expand a SLURM host list such as ``"a1,node[01-03,07]"`` into every host name, in order."""
    hosts: list[str] = []
    for host in _split_top_level(nodelist):
        choices = [
            [piece]
            if isinstance(piece, str)
            else [f"{n:0{width}d}" for start, stop, width in piece for n in range(start, stop + 1)]
            for piece in _host_pieces(nodelist, host)
        ]
        hosts.extend("".join(combo) for combo in itertools.product(*choices))
    return hosts


def first_host(nodelist: str) -> str:
    """The first host of a SLURM host list, without expanding the rest."""
    hosts = _split_top_level(nodelist)
    pieces = _host_pieces(nodelist, hosts[0])
    for host in hosts[1:]:  # validate the remainder too
        _host_pieces(nodelist, host)
    return "".join(p if isinstance(p, str) else f"{p[0][0]:0{p[0][2]}d}" for p in pieces)


# ---------------------------------------------------------------------------------------------------------------
# Environments


class ClusterEnvironment(ABC):
    """Where this process sits in the job: ranks, world size and rendezvous address."""

    name: ClassVar[str]
    #: True when a launcher outside interlock (torchrun, srun) starts the processes.
    creates_processes_externally: ClassVar[bool] = True

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self._environ = environ

    @property
    def environ(self) -> Mapping[str, str]:
        """The variables read: the mapping given, else the live ``os.environ``."""
        return os.environ if self._environ is None else self._environ

    @classmethod
    @abstractmethod
    def detect(cls, environ: Mapping[str, str] | None = None) -> bool:
        """Whether ``environ`` looks like this kind of cluster."""

    @abstractmethod
    def world_size(self) -> int: ...

    @abstractmethod
    def global_rank(self) -> int: ...

    @abstractmethod
    def local_rank(self) -> int: ...

    @abstractmethod
    def node_rank(self) -> int: ...

    @abstractmethod
    def main_address(self) -> str: ...

    @abstractmethod
    def main_port(self) -> int: ...

    def validate(self) -> None:
        """Read every value once, so a misconfigured environment fails early with a clear error."""
        self.world_size()
        self.global_rank()
        self.local_rank()
        self.node_rank()
        self.main_address()
        self.main_port()

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class _VariableEnvironment(ClusterEnvironment):
    """Shared reading of the ``RANK``/``WORLD_SIZE``/``MASTER_*`` variables."""

    def world_size(self) -> int:
        return _check_size("WORLD_SIZE", _read_int(self.environ, "WORLD_SIZE"))

    def global_rank(self) -> int:
        return _check_rank("RANK", _read_int(self.environ, "RANK"), "WORLD_SIZE", self.world_size())

    def local_rank(self) -> int:
        rank = _read_int(self.environ, "LOCAL_RANK")
        if "LOCAL_WORLD_SIZE" in self.environ:
            size = _check_size("LOCAL_WORLD_SIZE", _read_int(self.environ, "LOCAL_WORLD_SIZE"))
            return _check_rank("LOCAL_RANK", rank, "LOCAL_WORLD_SIZE", size)
        return _check_rank("LOCAL_RANK", rank, "WORLD_SIZE", self.world_size())

    def node_rank(self) -> int:
        return _check_rank("NODE_RANK", _read_int(self.environ, "NODE_RANK", 0))

    def main_address(self) -> str:
        address = self.environ.get("MASTER_ADDR", "").strip()
        if not address:
            raise ValueError(
                f"MASTER_ADDR={self.environ.get('MASTER_ADDR')!r} is not a host; set MASTER_ADDR to the main node"
            )
        return address

    def main_port(self) -> int:
        return _check_port("MASTER_PORT", _read_int(self.environ, "MASTER_PORT"))


class TorchElasticEnvironment(_VariableEnvironment):
    """Processes started by ``torchrun`` / torchelastic."""

    name = "torchelastic"
    _REQUIRED: ClassVar[frozenset[str]] = frozenset({"RANK", "GROUP_RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE"})

    @classmethod
    def detect(cls, environ: Mapping[str, str] | None = None) -> bool:
        env = os.environ if environ is None else environ
        return "TORCHELASTIC_RUN_ID" in env or cls._REQUIRED.issubset(env.keys())

    def node_rank(self) -> int:
        name = "GROUP_RANK" if "GROUP_RANK" in self.environ else "NODE_RANK"
        return _check_rank(name, _read_int(self.environ, name, 0))


class EnvVarEnvironment(_VariableEnvironment):
    """Plain ``MASTER_ADDR``/``MASTER_PORT``/``RANK``/``WORLD_SIZE`` variables set by any launcher.

    ``LOCAL_RANK`` defaults to ``RANK`` (one node) and ``NODE_RANK`` to 0.
    """

    name = "env"
    _REQUIRED: ClassVar[frozenset[str]] = frozenset({"MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE"})

    @classmethod
    def detect(cls, environ: Mapping[str, str] | None = None) -> bool:
        env = os.environ if environ is None else environ
        return cls._REQUIRED.issubset(env.keys())

    def local_rank(self) -> int:
        if "LOCAL_RANK" not in self.environ:
            return self.global_rank()
        return super().local_rank()


class SLURMEnvironment(ClusterEnvironment):
    """Processes started by ``srun`` inside a SLURM allocation."""

    name = "slurm"
    #: Signal SLURM sends before the time limit; the trainer may checkpoint and requeue on it.
    requeue_signal: ClassVar[signal.Signals | None] = getattr(signal, "SIGUSR1", None)
    _INTERACTIVE_NAMES: ClassVar[frozenset[str]] = frozenset({"bash", "interactive"})

    @classmethod
    def detect(cls, environ: Mapping[str, str] | None = None) -> bool:
        env = os.environ if environ is None else environ
        if "SLURM_NTASKS" not in env:
            return False
        interactive = env.get("SLURM_JOB_NAME", "") in cls._INTERACTIVE_NAMES
        return _read_int(env, "SLURM_NTASKS") > 1 or not interactive

    def world_size(self) -> int:
        return _check_size("SLURM_NTASKS", _read_int(self.environ, "SLURM_NTASKS"))

    def global_rank(self) -> int:
        rank = _read_int(self.environ, "SLURM_PROCID")
        return _check_rank("SLURM_PROCID", rank, "SLURM_NTASKS", self.world_size())

    def local_rank(self) -> int:
        rank = _read_int(self.environ, "SLURM_LOCALID")
        return _check_rank("SLURM_LOCALID", rank, "SLURM_NTASKS", self.world_size())

    def node_rank(self) -> int:
        rank = _read_int(self.environ, "SLURM_NODEID", 0)
        if "SLURM_NNODES" in self.environ:
            return _check_rank("SLURM_NODEID", rank, "SLURM_NNODES", _read_int(self.environ, "SLURM_NNODES"))
        return _check_rank("SLURM_NODEID", rank)

    def main_address(self) -> str:
        if self.environ.get("MASTER_ADDR", "").strip():
            return self.environ["MASTER_ADDR"].strip()
        for name in ("SLURM_NODELIST", "SLURM_JOB_NODELIST"):
            if name in self.environ:
                return first_host(self.environ[name])
        raise ValueError("SLURM_NODELIST is not set; run under srun, or set MASTER_ADDR to the main node")

    def main_port(self) -> int:
        if "MASTER_PORT" in self.environ:
            return _check_port("MASTER_PORT", _read_int(self.environ, "MASTER_PORT"))
        if "SLURM_JOB_ID" not in self.environ:
            raise ValueError("SLURM_JOB_ID is not set, so no port can be derived; set MASTER_PORT")
        return 10000 + _read_int(self.environ, "SLURM_JOB_ID") % 20000


class LocalEnvironment(ClusterEnvironment):
    """One machine: a single process, or processes interlock spawns itself.

    Ranks are set with :meth:`set_ranks`. The address is ``127.0.0.1`` and the port a
    free one chosen once, unless ``MASTER_ADDR``/``MASTER_PORT`` are set.
    """

    name = "local"
    creates_processes_externally = False

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        super().__init__(environ)
        self._world_size, self._global_rank, self._local_rank = 1, 0, 0
        self._port: int | None = None

    @classmethod
    def detect(cls, environ: Mapping[str, str] | None = None) -> bool:
        return True

    def set_ranks(self, world_size: int, global_rank: int, local_rank: int | None = None) -> None:
        """Record this process's place among the processes launched here; ``local_rank`` defaults to the global one."""
        local_rank = global_rank if local_rank is None else local_rank
        for arg, value in (("world_size", world_size), ("global_rank", global_rank), ("local_rank", local_rank)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"{arg}={value!r} is not an integer; pass a whole number")
        _check_size("world_size", world_size)
        _check_rank("global_rank", global_rank, "world_size", world_size)
        _check_rank("local_rank", local_rank, "world_size", world_size)
        self._world_size, self._global_rank, self._local_rank = world_size, global_rank, local_rank

    def world_size(self) -> int:
        return self._world_size

    def global_rank(self) -> int:
        return self._global_rank

    def local_rank(self) -> int:
        return self._local_rank

    def node_rank(self) -> int:
        return 0

    def main_address(self) -> str:
        return self.environ.get("MASTER_ADDR", "").strip() or "127.0.0.1"

    def main_port(self) -> int:
        if "MASTER_PORT" in self.environ:
            return _check_port("MASTER_PORT", _read_int(self.environ, "MASTER_PORT"))
        if self._port is None:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.bind(("127.0.0.1", 0))
                self._port = int(sock.getsockname()[1])
        return self._port


_DETECTION_ORDER: tuple[type[ClusterEnvironment], ...] = (
    TorchElasticEnvironment,
    SLURMEnvironment,
    EnvVarEnvironment,
    LocalEnvironment,
)


def detect_environment(environ: Mapping[str, str] | None = None) -> ClusterEnvironment:
    """Pick the environment: torchelastic > SLURM > plain env vars > local; validated before returning."""
    for cls in _DETECTION_ORDER:
        if cls.detect(environ):
            env = cls(environ)
            env.validate()
            return env
    raise AssertionError("LocalEnvironment always detects")  # pragma: no cover
