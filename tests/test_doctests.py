"""The examples in tfsched's docstrings run and say what they show."""

import doctest
import importlib
import pkgutil

import pytest

import tfsched


@pytest.mark.tf
def test_every_docstring_example_holds():
    failed, tried = [], 0
    for info in pkgutil.walk_packages(tfsched.__path__, "tfsched."):
        module = importlib.import_module(info.name)
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS, verbose=False, report=False)
        tried += result.attempted
        if result.failed:
            failed.append(f"{info.name}: {result.failed} of {result.attempted}")
    assert not failed, failed
    assert tried >= 15  # the examples were found: a walk that missed the modules would pass empty
