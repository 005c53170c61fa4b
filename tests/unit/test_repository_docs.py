"""The repository explains itself: docs/architecture.md names only files and modules that exist, and no
file cites design documents kept outside the repository."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
# Names of documents that lived beside the repository, never in it.
OUTSIDE_DOCUMENTS = re.compile(r"\b(DESIGN|STYLE|NOTES|DOCKER)\.md\b|\.\./shared\b")
TEXT_SUFFIXES = {".py", ".md", ".toml", ".yaml", ".yml", ".txt", ".cfg", ".json", ".sh", ".pyx", ".proto", ""}


def tracked_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=False)
    if out.returncode != 0:  # not a git checkout (an sdist): walk the tree
        skip = {".venv", ".git"}
        return [p for p in ROOT.rglob("*") if p.is_file() and not skip & set(p.parts)]
    return [ROOT / line for line in out.stdout.splitlines()]


def test_no_file_cites_documents_outside_the_repository() -> None:
    offenders = []
    for path in tracked_files():
        if path.suffix not in TEXT_SUFFIXES or not path.is_file() or path == Path(__file__):
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        offenders += [
            f"{path.relative_to(ROOT)}:{number}: {line.strip()[:100]}"
            for number, line in enumerate(text.splitlines(), start=1)
            if OUTSIDE_DOCUMENTS.search(line)
        ]
    assert not offenders, "cite docs/architecture.md instead:\n" + "\n".join(offenders)


def referenced_paths() -> list[str]:
    """Every `folder/file.ext` or `folder/` named in backticks in docs/architecture.md."""
    names = re.findall(r"`([a-z_]+(?:/[A-Za-z_.*]+)*/?)`", ARCHITECTURE.read_text())
    return sorted({n for n in names if "/" in n and "*" not in n})


@pytest.mark.parametrize("name", referenced_paths())
def test_architecture_names_paths_that_exist(name: str) -> None:
    assert (ROOT / name).exists(), f"docs/architecture.md names {name}, which does not exist"


def test_architecture_names_every_broker_wing() -> None:
    text = ARCHITECTURE.read_text()
    wings = sorted(p.name for p in (ROOT / "broker").iterdir() if (p / "__init__.py").exists())
    missing = [w for w in wings if f"`broker/{w}/`" not in text]
    assert not missing, f"docs/architecture.md does not describe the broker wings {missing}"
