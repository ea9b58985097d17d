"""benchmarks/repredict.py: which what-ifs a re-prediction runs."""

import argparse

import pytest

from tests.helpers import benchmark_script


def test_what_ifs_are_chosen_by_name_and_an_unknown_one_is_refused():
    module = benchmark_script("repredict")
    chosen = module.what_ifs("gates_uncharged,even_links")
    assert list(chosen) == ["gates_uncharged", "even_links"]
    assert chosen["gates_uncharged"][0] == {"gate_ops": False}
    for bad in ("nope", "even_links,nope", ","):
        with pytest.raises(argparse.ArgumentTypeError, match="no what-if .*; there are serial_channel"):
            module.what_ifs(bad)
