"""benchmarks/crossing_agreement.py: two runs' values compared against how far each moved."""

import math

import numpy as np
import pytest

from tests.helpers import benchmark_script


@pytest.fixture(scope="module")
def agreement():
    return benchmark_script("crossing_agreement")


def test_a_variable_apart_is_measured_against_its_movement_and_one_within_the_tolerance_is_not(agreement):
    initial = [
        np.zeros(4, np.float32),
        np.ones([2, 2], np.float32),
        np.zeros(3, np.float32),
        np.array([], np.float32),
    ]
    first = [
        np.array([3, 0, 4, 0], np.float32),
        np.ones([2, 2], np.float32) + 1e-7,
        np.zeros(3, np.float32),
        initial[3],
    ]
    second = [np.array([3, 0, 4, 0.5], np.float32), first[1], np.array([0, 2e-6, 0], np.float32), initial[3]]
    got = agreement.compare(["moved", "within", "still", "empty"], first, second, initial, atol=1e-6)
    assert set(got["apart"]) == {"moved", "still"}
    moved = got["apart"]["moved"]
    # the difference's norm (0.5) over the movement's (5)
    assert moved["share_of_movement"] == pytest.approx(0.1)
    assert (moved["elements"], moved["of"], moved["first_axis"], moved["max_abs"]) == (1, 4, [3], 0.5)
    assert math.isinf(got["apart"]["still"]["share_of_movement"])  # apart, not moved at all
    assert got["max_abs"] == 0.5
    same = agreement.compare(["moved"], first[:1], first[:1], initial[:1], atol=1e-6)
    assert same == {"max_abs": 0.0, "apart": {}}
