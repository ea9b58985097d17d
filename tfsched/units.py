"""Parsing the quantities users type: bandwidths and durations."""

from __future__ import annotations

import math
import operator
import re

from tfsched.errors import TfschedError

_BW = {
    "": 1.0,
    "bit": 1.0,
    "bps": 1.0,
    "kbit": 1e3,
    "mbit": 1e6,
    "gbit": 1e9,
    "kbps": 1e3,
    "mbps": 1e6,
    "gbps": 1e9,
}
_TIME = {"": 1.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


# the largest count a proto's int64 (an attribute of the pass, a RunOptions field) holds
INT64_MAX = 2**63 - 1
# and an int32's (ConfigProto's inter_op_parallelism_threads)
INT32_MAX = 2**31 - 1

# What a prediction's link can be (a bandwidth typed, a per-message overhead, a latency, a queue):
# a bit a second at the least, a day at the most. Past them the simulator's sums of a step's
# transfers overflowed (``analyze --bandwidth 1e-300bit`` was an OverflowError), and no link
# is either.
MIN_BANDWIDTH_BPS = 1.0
MAX_DURATION_S = 86400.0


def check_link_times(bandwidth_bps: float | None = None, overhead_s: float | None = None) -> None:
    """One error unless ``bandwidth_bps`` (None: not given) is at least ``MIN_BANDWIDTH_BPS``
    and ``overhead_s`` from 0 to ``MAX_DURATION_S``.

    >>> check_link_times(1e9, 300e-6), check_link_times(1.0, 86400.0)
    (None, None)
    >>> check_link_times(1e-300)
    Traceback (most recent call last):
    ...
    tfsched.errors.TfschedError: a bandwidth must be at least 1 bit/s, got 1e-300
    """
    if bandwidth_bps is not None and not bandwidth_bps >= MIN_BANDWIDTH_BPS:
        raise TfschedError(f"a bandwidth must be at least 1 bit/s, got {bandwidth_bps!r}")
    if overhead_s is not None and not 0 <= overhead_s <= MAX_DURATION_S:
        raise TfschedError(f"an overhead must be from 0 to a day (86400 s), got {overhead_s!r} s")


def is_count(x, least: int = 0, most: int = INT64_MAX) -> bool:
    """Whether ``x`` is a whole number (an int, not a bool) from ``least`` to ``most``: what a
    number of parameters, bytes, workers or milliseconds given in Python or JSON must be. The
    default ``most`` is what an int64 holds: protobuf refuses more with a ValueError.

    >>> is_count(3), is_count(0), is_count(True), is_count(2.0), is_count(0, least=1), is_count(2**63)
    (True, True, False, False, False, False)
    """
    return isinstance(x, int) and not isinstance(x, bool) and least <= x <= most


def is_number(x, least: float = -math.inf, most: float = math.inf) -> bool:
    """Whether ``x`` is a finite number (an int or a float, not a bool) from ``least`` to
    ``most``: what a time, a size or a share read from Python or JSON must be. Python's JSON
    reads ``NaN`` and ``Infinity``, which every comparison would let through or stop at once.

    >>> is_number(1.5), is_number(0, least=0), is_number(True), is_number(float("nan")), is_number(math.inf)
    (True, True, False, False, False)
    >>> is_number(-1, least=0), is_number("1"), is_number(2, most=1)
    (False, False, False)
    """
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and least <= x <= most


def check_seconds(x, what: str, *, zero: bool = False) -> float:
    """``x`` if it is a number of seconds above 0 (or 0 with ``zero``), at most a day
    (``MAX_DURATION_S``): a timeout or a wait given in Python; else one error naming ``what``.
    A day at the most: TensorFlow takes a deadline in milliseconds in an int64, and a wait
    longer than a day is a wait forever by another name.

    >>> check_seconds(30, "timeout_s"), check_seconds(0, "wait_s", zero=True)
    (30, 0)
    >>> check_seconds(0, "timeout_s")
    Traceback (most recent call last):
    ...
    tfsched.errors.TfschedError: timeout_s must be a number of seconds, above 0, at most a day (86400), got 0
    >>> check_seconds(float("inf"), "wait_s", zero=True)
    Traceback (most recent call last):
    ...
    tfsched.errors.TfschedError: wait_s must be a number of seconds, 0 or more, at most a day (86400), got inf
    """
    if is_number(x, 0.0, MAX_DURATION_S) and (zero or x > 0):
        return x
    least = "0 or more" if zero else "above 0"
    raise TfschedError(f"{what} must be a number of seconds, {least}, at most a day (86400), got {x!r}")


def is_steps(x, least: int = 1) -> bool:
    """Whether ``x`` is a whole number of steps of at least ``least``: an int or what indexes as
    one (numpy's, as a loop over ``np.arange`` gives), not a bool or a float. Only for counts
    that go no further than this process (``range``, a modulo); what goes into JSON or a proto
    is an ``is_count``.

    >>> import numpy as np
    >>> is_steps(3), is_steps(np.int64(3)), is_steps(0), is_steps(True), is_steps(3.0), is_steps("3")
    (True, True, False, False, False, False)
    """
    if isinstance(x, bool):
        return False
    try:
        return operator.index(x) >= least
    except TypeError:
        return False


_NUM = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([a-zA-Zµ/]*)\s*$")


def _parse(text: str, units: dict[str, float], what: str, example: str) -> float:
    m = _NUM.match(str(text))
    unit = m.group(2).lower().replace("/s", "") if m else None
    if not m or unit not in units:
        raise TfschedError(f"cannot read {what} {text!r}; write it like {example}")
    value = float(m.group(1)) * units[unit]
    if not math.isfinite(value):
        raise TfschedError(f"{what} {text!r} is not finite")
    return value


def parse_bandwidth(text: str) -> float:
    """Bits per second from ``1Gbit``, ``100mbit``, ``2.5gbps`` or a plain number of bits/s.

    >>> parse_bandwidth("1Gbit"), parse_bandwidth("100mbit")
    (1000000000.0, 100000000.0)
    """
    value = _parse(text, _BW, "bandwidth", "1Gbit or 100Mbit")
    if value < MIN_BANDWIDTH_BPS:
        raise TfschedError(f"bandwidth {text!r} must be at least 1 bit/s")
    return value


# What an emulated host's link can be shaped to, in bits/s. tc's tbf (``bench.netns.shape``) keeps
# its burst (4 ms of the rate, at least 32 KiB) from a kilobit a second up; below, its clock no
# longer holds the burst's time, and it came out at 1,981 bytes at 64 bit/s and 57 at 8 (less than
# a packet: a link that passes nothing), and a rate under a byte a second is refused. Above
# 8 Tbit/s the burst no longer fits tbf's 32 bits. The relays (``bench.relay``) take the same.
LINK_BPS_RANGE = (1e3, 8e12)


def check_link_bandwidth(bps: float) -> float:
    """``bps``, if an emulated link can be shaped to it (``LINK_BPS_RANGE``); else one error.
    Only where a link is shaped: a prediction takes any bandwidth above 0.

    >>> check_link_bandwidth(1e9)
    1000000000.0
    >>> check_link_bandwidth(1.0)
    Traceback (most recent call last):
    ...
    tfsched.errors.TfschedError: an emulated link is shaped to 1 kbit/s to 8 Tbit/s, got 1 bit/s
    """
    lo, hi = LINK_BPS_RANGE
    if not lo <= bps <= hi:
        raise TfschedError(f"an emulated link is shaped to 1 kbit/s to 8 Tbit/s, got {bps:g} bit/s")
    return bps


def parse_duration(text: str) -> float:
    """Seconds from ``300us``, ``1.5ms``, ``0.002`` (seconds).

    >>> parse_duration("300us")
    0.0003
    """
    value = _parse(text, _TIME, "duration", "300us or 1ms")
    if not 0 <= value <= MAX_DURATION_S:
        raise TfschedError(f"duration {text!r} must be from 0 to a day (86400s)")
    return value
