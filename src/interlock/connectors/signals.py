"""Preemption signals, Ctrl-C and stop requests: the handler only records the signal; the chart acts on it.

During fit the first Ctrl-C (SIGINT) is a preemption signal too: the run is saved at the
next checkpointable state and ends as interrupted (``Interrupted``, a ``KeyboardInterrupt``).
The handler gives SIGINT back to its previous handler at once, so a second Ctrl-C raises
``KeyboardInterrupt`` where the program is, without saving.

Agreement is on the chart, as entry actions placed before the guards that read it:
``signals.vote`` at each training batch end agrees, across processes and without
blocking, on whether to stop or save-and-exit; ``signals.agree_preempted`` (at
validation batch ends and epoch ends) and ``dist.agree_stop`` (at the end of
validation and of an epoch) agree with a blocking collective. Each returns what was
agreed (:class:`~interlock.core.updates.Agree`, into ``state.agreed``); the guards
``signals.preempted`` and ``limits.*`` only read it.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterable, Mapping
from types import FrameType
from typing import Any

import attrs

from interlock.connectors.hardware_slot import HardwareSlot
from interlock.core.registry import Action, Guard, Registry
from interlock.core.run import Run
from interlock.core.step import Facts
from interlock.core.updates import Agree

__all__ = ["PreemptionFlag", "SignalsSlot", "register"]


class PreemptionFlag:
    """Installs handlers for ``signals``; ``received`` holds the first one caught.

    The handler does no buffered I/O and takes no lock: it stores an int. The chart
    reads the flag at the next batch boundary, saves and moves to ``interrupted``.
    For SIGINT it also puts the previous handler back (a second Ctrl-C stops at once)
    and writes ``notice`` to stderr with one ``os.write``. SIGINT is caught only while
    it has Python's default handler: an ignored Ctrl-C, or a program's own handler,
    is left alone. A process forked while the handlers are installed (a DataLoader
    worker) inherits them and ignores the signals: the process that installed them decides.
    """

    def __init__(self, signals: Iterable[int] = (signal.SIGTERM,)) -> None:
        self.signals = tuple(signals)
        self.received: int | None = None
        #: one line written to stderr at the first Ctrl-C (what happens next, how to resume)
        self.notice = ""
        self._previous: dict[int, Any] = {}
        self._pid = os.getpid()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if os.getpid() != self._pid:  # a forked child: the process that installed the handler decides
            return
        if self.received is None:
            self.received = signum
        if signum == signal.SIGINT:
            signal.signal(signal.SIGINT, self._previous.get(signal.SIGINT, signal.default_int_handler))
            if self.notice:
                os.write(2, self.notice.encode(errors="replace"))

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        self._pid = os.getpid()
        for sig in self.signals:
            if sig == signal.SIGINT and signal.getsignal(sig) is not signal.default_int_handler:
                continue
            self._previous[sig] = signal.signal(sig, self._handle)

    def uninstall(self) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous.clear()


@attrs.define(slots=True, eq=False)
class SignalsSlot:
    """The run's preemption flag (owner: ``signals``); what the processes agreed is in ``state.agreed``.

    Filled when the run is made: fit catches the preemption signals and the first Ctrl-C, other stages none.
    """

    flag: PreemptionFlag = attrs.field(factory=lambda: PreemptionFlag(()))

    @property
    def signum(self) -> int:
        return self.flag.received if self.flag.received is not None else int(signal.SIGTERM)


def _changed(run: Run, fact: str, value: bool) -> Agree | None:
    """The agreement as an update, or ``None`` when the state already says so (no update per batch)."""
    return None if run.facts.agreed.get(fact) is value else Agree({fact: value})


def register(reg: Registry) -> None:
    """``signals.*`` actions and guards."""
    reg.slot("signals", SignalsSlot, owner=__name__)

    @reg.action("signals.install", reads=("hardware", "signals"))
    def install(run: Run, params: Mapping[str, Any]) -> Action:
        """Catch preemption signals (SIGTERM; SIGUSR1 under SLURM) and the first Ctrl-C: a save and an exit follow."""
        flag = run.slot(SignalsSlot).flag

        def act() -> None:
            if run.slot(HardwareSlot).strategy.is_global_zero and signal.SIGINT in flag.signals:
                last = os.path.join(run.state.run_dir or run.plan.run_dir, "checkpoints", "last.ckpt")
                flag.notice = (
                    f"\ninterlock: Ctrl-C: saving {last} at the next batch boundary, then stopping "
                    f"(Ctrl-C again stops at once, without saving); resume with fit(..., ckpt_path={last!r})\n"
                )
            flag.install()

        return act

    @reg.action("signals.uninstall", reads=("signals",))
    def uninstall(run: Run, params: Mapping[str, Any]) -> Action:
        """Give the signals back to their previous handlers."""
        return run.slot(SignalsSlot).flag.uninstall

    @reg.action("signals.vote", agrees=("stop", "preempted"), reads=("hardware", "signals"))
    def vote(run: Run, params: Mapping[str, Any]) -> Action:
        """Agree across processes, without blocking, whether to stop or to save and exit."""
        counters, flag, facts = run.counters, run.slot(SignalsSlot).flag, run.facts_ref

        agreed: Any = None  # the state last found agreed with no signal received: unchanged, it still is

        def alone() -> Agree | None:  # one process: the flags as they are
            nonlocal agreed
            state = facts()
            if state is agreed and flag.received is None:
                return None
            stop, preempted, now = state.should_stop, flag.received is not None, state.agreed
            if now.get("stop") is stop and now.get("preempted") is preempted:
                agreed = None if preempted else state
                return None  # unchanged: no update on the per-batch path
            return Agree({"stop": stop, "preempted": preempted})

        def act() -> Agree | None:
            state = facts()
            stop, preempted = state.should_stop, flag.received is not None
            vote = run.dist.vote if run.dist is not None else None
            if vote is not None:
                stop, preempted = vote(counters.train_batches, stop, preempted)
            stop, preempted, now = bool(stop), bool(preempted), state.agreed
            if now.get("stop") is stop and now.get("preempted") is preempted:
                return None
            return Agree({"stop": stop, "preempted": preempted})

        return alone if run.slot(HardwareSlot).strategy.world_size == 1 else act

    @reg.action("signals.agree_preempted", agrees=("preempted",), reads=("signals",))
    def agree_preempted(run: Run, params: Mapping[str, Any]) -> Action:
        """Agree across processes (blocking) whether a preemption signal arrived in any of them."""
        flag = run.slot(SignalsSlot).flag

        def act() -> Agree | None:
            received = flag.received is not None
            agree = run.dist.agree if run.dist is not None else None
            return _changed(run, "preempted", bool(agree(received)) if agree is not None else received)

        return act

    @reg.action("dist.agree_stop", agrees=("stop",))
    def agree_stop(run: Run, params: Mapping[str, Any]) -> Action:
        """Agree across processes (blocking) whether a stop was asked for in any of them."""

        def act() -> Agree | None:
            asked = run.facts.should_stop
            agree = run.dist.agree if run.dist is not None else None
            return _changed(run, "stop", bool(agree(asked)) if agree is not None else asked)

        return act

    @reg.action("signals.drain")
    def drain(run: Run, params: Mapping[str, Any]) -> Action:
        """Wait for the vote in flight: no collective is left running."""

        def act() -> None:
            vote = run.dist.vote if run.dist is not None else None
            if vote is not None:
                vote.drain()

        return act

    @reg.guard("signals.preempted", agreed=("preempted",))
    def preempted(params: Mapping[str, Any]) -> Guard:
        """The processes agreed that a preemption signal arrived (``signals.vote`` or ``signals.agree_preempted``)."""

        def agreed(facts: Facts) -> bool:
            return bool(facts.state.agreed.get("preempted", False))

        return agreed
