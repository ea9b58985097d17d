"""Benchmark bookkeeping: modes, and TicTac's straggler effect from synchronized steps."""

import pytest

from tfsched.bench.run import ModeResult, parse_mode, parse_modes
from tfsched.errors import TfschedError


def test_straggler_is_the_longest_wait_over_the_iteration():
    r = ModeResult("baseline", iterations=[[1.0, 0.5], [2.0, 2.0], [1.0, 0.9, 0.8]])
    # waits: 0.5 of 1.0, 0 of 2.0, 0.2 of 1.0
    assert r.straggler == pytest.approx((0.5 + 0.0 + 0.2) / 3)
    assert ModeResult("x").straggler == 0.0


def test_mode_grammar():
    assert parse_mode("baseline").algorithm is None
    m = parse_mode("tao+pc")
    assert (m.algorithm, m.partition, m.credit) == ("tao", 1_000_000, 4_000_000)
    m = parse_mode("tio+p500000+c2000000")
    assert (m.algorithm, m.partition, m.credit) == ("tio", 500_000, 2_000_000)
    for bad in ("fifo", "tio+q3", "tio+p0", "tio+p-1", "tio+pc5"):
        with pytest.raises(TfschedError):
            parse_mode(bad)
    with pytest.raises(TfschedError, match="baseline"):
        parse_modes("tio,tao")
    with pytest.raises(TfschedError, match="twice"):
        parse_modes("baseline,tio,tio")
