"""Packaging for tfsched.

The compiled gate op and Grappler pass (``cc/``) are built against the installed TensorFlow
on first use by ``tfsched.enforce.build`` (see there why not at install time).
"""

from setuptools import find_packages, setup

setup(
    name="tfsched",
    version="0.1.0",
    description="Communication scheduling for parameter-server TensorFlow training (TicTac, ByteScheduler).",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["tfsched", "tfsched.*"]) + ["tfsched._cc"],
    # The C++ sources live in cc/ (see ARCHITECTURE.md) and ship as tfsched._cc; they are
    # compiled against the installed TensorFlow on first use (tfsched/enforce/build.py).
    package_dir={"tfsched._cc": "cc"},
    package_data={"tfsched._cc": ["*.cc", "*.h"]},
    install_requires=[
        # tf_keras depends on the `tensorflow` wheel: depending on tensorflow-cpu would install both.
        "tensorflow>=2.21,<2.22",
        "tf_keras>=2.21,<2.22",
        "networkx>=3.2",
        "numpy>=1.26",
        "click>=8.1",
        "rich>=13",
        "matplotlib>=3.8",
        # Student's t for the benchmark's confidence intervals (bayesian-optimization needs it too).
        "scipy>=1.11",
        # Gaussian-process Bayesian optimization for `tfsched tune` (ByteScheduler §4.3).
        "bayesian-optimization>=2.0",
        # The tuning coordinator's service; TensorFlow depends on it too.
        "grpcio>=1.60",
        # A cluster task forked from the bench's zygote shows its command to ps (bench.zygote).
        "setproctitle>=1.3",
    ],
    # The style test runs both formatters; clang-format is pinned (its output changes by version).
    # pytest-timeout: a test that hangs fails alone, its stacks printed (pyproject.toml).
    extras_require={
        "test": ["pytest>=8", "pytest-xdist>=3.5", "pytest-timeout>=2.3", "ruff>=0.5", "clang-format==19.1.7"]
    },
    entry_points={"console_scripts": ["tfsched=tfsched.cli:run"]},
)
