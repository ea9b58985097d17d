"""Packaging for tfsched.

The compiled gate op and Grappler pass (``cc/``) are built against the installed
TensorFlow by ``tfsched.enforce`` (see that package); this file installs the Python side.
"""

from setuptools import find_packages, setup

setup(
    name="tfsched",
    version="0.1.0",
    description="Communication scheduling for parameter-server TensorFlow training (TicTac, ByteScheduler).",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["tfsched", "tfsched.*"]),
    install_requires=[
        # tf_keras depends on the `tensorflow` wheel: depending on tensorflow-cpu would install both.
        "tensorflow>=2.21,<2.22",
        "tf_keras>=2.21,<2.22",
        "networkx>=3.2",
        "numpy>=1.26",
        "click>=8.1",
        "rich>=13",
        "matplotlib>=3.8",
    ],
    extras_require={"test": ["pytest>=8", "ruff>=0.5"]},
    entry_points={"console_scripts": ["tfsched=tfsched.cli:main"]},
)
