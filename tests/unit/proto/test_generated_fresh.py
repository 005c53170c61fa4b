"""The committed generated protobuf code equals what ``./dev proto`` produces now."""

from __future__ import annotations

from pathlib import Path

from proto import generate


def test_generated_code_is_fresh(tmp_path: Path) -> None:
    fresh = {p.name: p.read_text() for p in generate.generate_into(tmp_path)}
    committed = {p.name: p.read_text() for p in generate.committed_generated()}
    assert sorted(fresh) == sorted(committed), "generated file set differs: run ./dev proto"
    stale = [name for name in fresh if fresh[name] != committed[name]]
    assert not stale, f"stale generated code {stale}: run ./dev proto and commit"
