"""benchmarks/emulated_cluster.py: BENCHMARKS.md is assembled from the rows' results files,
benchmarks/targets.md and benchmarks/reading.md."""

from pathlib import Path

import pytest

from tests.helpers import benchmark_script

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cluster():
    return benchmark_script("emulated_cluster")


def _but_the_machine(text: str) -> list[str]:
    # the machine line says where the file was assembled, not what a row ran on (each row does)
    return [line for line in text.splitlines() if not line.startswith("Machine: ")]


def test_benchmarks_md_is_what_its_parts_assemble(cluster):
    """An edit made to BENCHMARKS.md alone (and not to targets.md or reading.md, or a results
    file) is lost the next time a row runs: the hundred-and-twenty-fifth session's edits to the
    targets' 10 Gbit/s lines were, until the hundred-and-twenty-sixth found them missing from
    targets.md."""
    text, tables = cluster.assembled()
    committed = (ROOT / "BENCHMARKS.md").read_text()
    mine, theirs = _but_the_machine(text), _but_the_machine(committed)
    differ = next((k for k, (a, b) in enumerate(zip(mine, theirs, strict=False)) if a != b), None)
    if differ is None and len(mine) != len(theirs):
        differ = min(len(mine), len(theirs))
    assert differ is None, (
        f"BENCHMARKS.md is not what `python benchmarks/emulated_cluster.py --assemble-only` makes "
        f"(edit benchmarks/targets.md or benchmarks/reading.md, then assemble); first at\n"
        f"  {(theirs + [''])[differ][:160]!r}, where it makes\n  {(mine + [''])[differ][:160]!r}"
    )
    # every row run so far has its table in the file, under its command, and beside its results
    assert tables and all(f"## {row}\n\n```bash\ntfsched bench " in committed for row in tables)
    for row, table in tables.items():
        assert table.strip() in committed, row
        assert (Path(cluster.RESULTS) / f"bench-{row}.md").read_text() == table, row


def test_assembling_writes_nothing_until_asked(cluster, tmp_path, monkeypatch):
    """``assembled`` only reads; ``assemble`` writes BENCHMARKS.md and each row's table beside
    its results file."""
    results = tmp_path / "results"
    results.mkdir()
    row = "seq32-train"
    (results / f"bench-{row}.json").write_text((Path(cluster.RESULTS) / f"bench-{row}.json").read_text())
    monkeypatch.setattr(cluster, "ROOT", str(tmp_path))
    monkeypatch.setattr(cluster, "RESULTS", str(results))
    text, tables = cluster.assembled()
    assert list(tables) == [row] and sorted(p.name for p in tmp_path.rglob("*")) == [
        f"bench-{row}.json",
        "results",
    ]
    cluster.assemble()
    assert (tmp_path / "BENCHMARKS.md").read_text() == text
    assert (results / f"bench-{row}.md").read_text() == tables[row]
    assert text.count("Not run yet.") == len(cluster.ROWS) - 1
