import pytest

from tfsched.errors import TfschedError

pytestmark = pytest.mark.tf


def test_load_failure_names_both_versions(tmp_path, monkeypatch):
    """A library that does not load says which TensorFlow it was built for and which one is here."""
    import tensorflow as tf

    from tfsched.enforce import _loader, build

    bogus = tmp_path / "libtfsched-tf2.99.0-0000000000000000.so"
    bogus.write_bytes(b"not a shared library")
    monkeypatch.setattr(build, "build", lambda force=False: str(bogus))
    monkeypatch.setattr(_loader, "_ops", None)
    with pytest.raises(TfschedError) as e:
        _loader.load_ops()
    msg = str(e.value)
    assert "built for TensorFlow 2.99.0" in msg and f"found TensorFlow {tf.__version__}" in msg
    assert "python -m tfsched.enforce.build --force" in msg


def test_library_is_keyed_by_tensorflow_version_and_sources(monkeypatch, tmp_path):
    from tfsched.enforce import build

    monkeypatch.setenv("TFSCHED_CACHE_DIR", str(tmp_path))
    path, version = build.library_path()
    assert path.startswith(str(tmp_path)) and f"-tf{version}-" in path
