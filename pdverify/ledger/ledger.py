"""``TransferLedger``: records every host/device copy and every device operation while a target runs.

Interception uses torch's own modes (``TorchFunctionMode`` for the Python-level calls that move data,
``TorchDispatchMode`` for the aten operations that run on the device); nothing in torch is monkeypatched and
both modes are popped on exit, also after an exception.

What counts (``device`` is the measured device; the *host* is numpy and Python):

* device-to-host: ``.cpu()`` / ``.to(cpu)`` of a device tensor on CUDA; ``.numpy()``, ``.tolist()`` and
  ``.item()`` of a tensor on the measured device. On a CPU run ``.cpu()`` is a no-op and the copy is
  counted where the data leaves torch (``.numpy()``/``.tolist()``/``.item()``), so a legacy
  ``t.cpu().numpy()`` counts once, on either device.
* host-to-device: a tensor built from host data (``torch.tensor``, ``as_tensor``, ``asarray``,
  ``from_numpy``) that lands on the measured device, ``.to(device)`` / ``.cuda()`` / ``copy_`` from a host
  tensor (pinned and ``non_blocking`` recorded). On a CPU run every tensor built from host data counts as
  host-to-device, host mirrors (``seq_lens_cpu``) included: CPU counts are an upper bound of CUDA's.
* launches: every aten operation that touches a tensor on the measured device, except views, ``detach``,
  ``lift_fresh`` and bare allocations (``empty*``), which launch no kernel.

* set aside: what runs inside ``aside(name)`` is recorded in ``asides[name]``, apart from the ledger's own counts
  (a callee with a budget of its own), and still listed by ``describe()`` and counted by ``cross_check()``.
Counts are exact and deterministic on every device. On CUDA, ``TransferLedger(profile=True)`` also reads the
memcpy events from the CUDA profiler, and ``cross_check()`` says whether the two agree.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, TypeVar

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

Direction = Literal["D2H", "H2D"]
T = TypeVar("T")


class LedgerError(RuntimeError):
    """A ledger used outside its contract (nested, unknown device, CUDA profile without CUDA)."""


@dataclass(frozen=True)
class Copy:
    direction: Direction
    elements: int
    bytes: int
    dtype: str
    via: str
    non_blocking: bool = False
    pinned: bool = False


@dataclass(frozen=True)
class Launch:
    op: str


_HOST_FACTORIES = {"tensor", "as_tensor", "asarray", "from_numpy"}
_NO_KERNEL = ("aten::lift_fresh", "aten::detach", "aten::alias", "aten::empty", "aten::_local_scalar_dense")


def _device_type(device: Any) -> str:
    return torch.device(device).type


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


class _Functions(TorchFunctionMode):
    def __init__(self, ledger: TransferLedger) -> None:
        super().__init__()
        self.ledger = ledger

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        result = func(*args, **kwargs)
        led = self.ledger
        here = led.device_type
        if name in ("numpy", "tolist", "item") and args and isinstance(args[0], torch.Tensor):
            src = args[0]
            # On CUDA .numpy() of a device tensor raises, so only .item()/.tolist() cross there.
            if src.device.type == here and (here == "cpu" or name != "numpy"):
                led._copy("D2H", src.numel(), _nbytes(src), src.dtype, f".{name}()")
        elif name in ("cpu", "to", "cuda") and args and isinstance(args[0], torch.Tensor):
            src = args[0]
            if isinstance(result, torch.Tensor) and result.device.type != src.device.type:
                direction: Direction = "D2H" if result.device.type == "cpu" else "H2D"
                if here in (src.device.type, result.device.type):
                    led._copy(
                        direction,
                        src.numel(),
                        _nbytes(result),
                        result.dtype,
                        f".{name}()",
                        bool(kwargs.get("non_blocking", False)),
                        bool(src.device.type == "cpu" and src.is_pinned()),
                    )
        elif name == "copy_" and len(args) >= 2 and all(isinstance(a, torch.Tensor) for a in args[:2]):
            dst, src = args[0], args[1]
            if dst.device.type != src.device.type and here in (dst.device.type, src.device.type):
                led._copy(
                    "D2H" if dst.device.type == "cpu" else "H2D",
                    dst.numel(),
                    _nbytes(dst),
                    dst.dtype,
                    "copy_",
                    bool(kwargs.get("non_blocking", args[2] if len(args) > 2 else False)),
                    bool(src.device.type == "cpu" and src.is_pinned()),
                )
        elif name in _HOST_FACTORIES and isinstance(result, torch.Tensor):
            data = args[0] if args else kwargs.get("data")
            if not isinstance(data, torch.Tensor) and result.device.type == here:
                led._copy("H2D", result.numel(), _nbytes(result), result.dtype, f"torch.{name}()")
        return result


class _Launches(TorchDispatchMode):
    def __init__(self, ledger: TransferLedger) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.ledger = ledger

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        result = func(*args, **kwargs)
        schema = func.name()
        if not func.is_view and not schema.startswith(_NO_KERNEL):
            here = self.ledger.device_type
            tensors = [a for a in (*args, *kwargs.values(), result) if isinstance(a, torch.Tensor)]
            tensors += [t for a in args if isinstance(a, (list, tuple)) for t in a if isinstance(t, torch.Tensor)]
            if any(t.device.type == here for t in tensors):
                self.ledger.sink().launches.append(Launch(schema))
        return result


@dataclass
class TransferLedger:
    """Records copies and launches on ``device`` inside a ``with`` block. One ledger at a time per thread."""

    device: str = "cpu"
    profile: bool = False
    copies: list[Copy] = field(default_factory=list)
    launches: list[Launch] = field(default_factory=list)
    profiled: dict[str, int] | None = None
    profiled_events: int = 0
    asides: dict[str, TransferLedger] = field(default_factory=dict)
    """What ran inside ``aside(name)`` blocks, by name: kept out of this ledger's own counts, still recorded."""
    _stack: ExitStack | None = field(default=None, repr=False)
    _aside: TransferLedger | None = field(default=None, repr=False)
    _active: ClassVar[threading.local] = threading.local()

    def __post_init__(self) -> None:
        try:
            self.device_type = _device_type(self.device)
        except RuntimeError as exc:
            raise LedgerError(f"TransferLedger: unknown device {self.device!r}: {exc}") from None
        if self.device_type not in ("cpu", "cuda"):
            raise LedgerError(f"TransferLedger: device must be cpu or cuda, got {self.device!r}")
        if self.profile and (self.device_type != "cuda" or not torch.cuda.is_available()):
            raise LedgerError(
                "TransferLedger(profile=True) reads the CUDA profiler: needs device 'cuda' and CUDA present"
            )

    def _copy(
        self,
        direction: Direction,
        elements: int,
        nbytes: int,
        dtype: torch.dtype,
        via: str,
        non_blocking: bool = False,
        pinned: bool = False,
    ) -> None:
        self.sink().copies.append(
            Copy(direction, elements, nbytes, str(dtype).replace("torch.", ""), via, non_blocking, pinned)
        )

    def sink(self) -> TransferLedger:
        """Where a copy or launch seen now is recorded: the open ``aside`` block's ledger, else this one."""
        return self if self._aside is None else self._aside

    @contextmanager
    def aside(self, name: str) -> Iterator[TransferLedger]:
        """Record what runs inside the block in ``asides[name]`` instead of this ledger's own counts.

        For a callee whose copies belong to another budget (``SamplingBatchInfo.from_schedule_batch``, which
        ``prepare_for_prebuilt`` calls and whose per-request tensors are not its own metadata): nothing is lost -
        ``describe()`` lists the set-aside work and ``cross_check()`` counts it, since the CUDA profiler sees it.
        Blocks with one name accumulate; asides do not nest."""
        if self._aside is not None:
            raise LedgerError(f"aside({name!r}) inside aside block: asides do not nest")
        self._aside = self.asides.setdefault(name, TransferLedger(self.device))
        try:
            yield self._aside
        finally:
            self._aside = None

    def __enter__(self) -> TransferLedger:
        if getattr(TransferLedger._active, "on", False):
            raise LedgerError("a TransferLedger is already active on this thread: ledgers do not nest")
        stack = ExitStack()
        try:
            if self.profile:  # pragma: no cover - cuda-only
                _profile_span(stack, torch.profiler.ProfilerActivity.CUDA, self._read_profile, torch.cuda.synchronize)
            stack.enter_context(_Functions(self))
            stack.enter_context(_Launches(self))
        except BaseException:  # pragma: no cover - defensive: torch refused a mode
            stack.close()
            raise
        TransferLedger._active.on = True
        self._stack = stack
        return self

    def __exit__(self, *exc: object) -> None:
        stack, self._stack = self._stack, None
        TransferLedger._active.on = False
        if stack is not None:
            stack.close()

    def _read_profile(self, events: list[Any]) -> None:
        counts = {"D2H": 0, "H2D": 0}
        for evt in events:
            label = evt.name.replace(" ", "")
            if "MemcpyDtoH" in label:
                counts["D2H"] += 1
            elif "MemcpyHtoD" in label:
                counts["H2D"] += 1
        self.profiled = counts
        self.profiled_events = len(events)

    def cross_check(self) -> str | None:  # pragma: no cover - cuda-only
        """``None`` when the profiler's memcpy counts match the ledger's; otherwise what differs."""
        if self.profiled is None:
            raise LedgerError("cross_check needs a ledger run with profile=True")
        if self.profiled_events == 0 and self.launches:
            # an empty trace agrees with a ledger of no copies and proves nothing: say so instead of "agree"
            return f"the CUDA profiler recorded no events while the ledger saw {len(self.launches)} launches"
        everything = [self, *self.asides.values()]
        mine = {"D2H": sum(x.d2h_copies for x in everything), "H2D": sum(x.h2d_copies for x in everything)}
        return None if mine == self.profiled else f"ledger {mine} != CUDA profiler {self.profiled}"

    def _sum(self, direction: Direction, attr: str) -> int:
        return sum(getattr(c, attr) for c in self.copies if c.direction == direction)

    @property
    def d2h_elements(self) -> int:
        return self._sum("D2H", "elements")

    @property
    def d2h_bytes(self) -> int:
        return self._sum("D2H", "bytes")

    @property
    def h2d_elements(self) -> int:
        return self._sum("H2D", "elements")

    @property
    def h2d_bytes(self) -> int:
        return self._sum("H2D", "bytes")

    @property
    def d2h_copies(self) -> int:
        return sum(1 for c in self.copies if c.direction == "D2H")

    @property
    def h2d_copies(self) -> int:
        return sum(1 for c in self.copies if c.direction == "H2D")

    def describe(self) -> str:
        """A one-line account for failure messages."""
        d2h = [f"{c.elements}x{c.dtype} via {c.via}" for c in self.copies if c.direction == "D2H"]
        h2d = [f"{c.elements}x{c.dtype} via {c.via}" for c in self.copies if c.direction == "H2D"]
        return (
            f"D2H {self.d2h_copies} copies / {self.d2h_elements} elements / {self.d2h_bytes} B {d2h}; "
            f"H2D {self.h2d_copies} copies / {self.h2d_elements} elements / {self.h2d_bytes} B {h2d}; "
            f"{len(self.launches)} device launches"
            + "".join(f"; set aside, {name}: [{aside.describe()}]" for name, aside in self.asides.items())
        )


def measure(device: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> tuple[T, TransferLedger]:
    """Call ``fn(*args, **kwargs)`` under a fresh ledger on ``device``; return its result and the ledger."""
    with TransferLedger(device) as ledger:
        result = fn(*args, **kwargs)
    return result, ledger


def _profile_span(
    stack: ExitStack,
    activity: torch.profiler.ProfilerActivity,
    read: Callable[[list[Any]], None],
    synchronize: Callable[[], None],
) -> None:
    """Profile the rest of ``stack``'s span and hand ``read`` the profiler's events once it has stopped.

    ExitStack unwinds in reverse, so ``read`` is pushed before the profiler is entered and ``synchronize`` after:
    on close the device drains, the profiler stops, then the events are read. A running profiler's ``events()`` is
    empty - read inside the span, the first H200 run's cross-check saw no memcpy at all.
    """
    prof = torch.profiler.profile(activities=[activity])
    stack.callback(lambda: read(list(prof.events() or [])))  # type: ignore[no-untyped-call]
    stack.enter_context(prof)
    stack.callback(synchronize)
