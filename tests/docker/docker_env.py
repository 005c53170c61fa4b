"""What the Docker tests share: the engine and base-image scripts, image names, timeouts and a command
runner. The fixtures that use them (a running engine, ``pykraft:local``) are in conftest.py, session-scoped,
so one engine and one image build serve every module of tests/docker."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENGINE_SCRIPT = ROOT / "scripts" / "docker-engine.sh"
BASE_IMAGE_SCRIPT = ROOT / "scripts" / "docker-base-image.sh"
EXIT_CANNOT_START = 3  # both scripts: "no engine / no base image can be made here"
IMAGE = "pykraft:local"
BASE_IMAGE = "pykraft-base:local"
ENGINE_TIMEOUT_S = 900  # may apt-get install docker.io on a fresh machine
BASE_IMAGE_TIMEOUT_S = 600  # debootstrap: 1-4 minutes
BUILD_TIMEOUT_S = 900  # first build ~2-5 minutes (pip downloads wheels); cached: seconds


def run(cmd: list[str], timeout_s: float, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        cwd=ROOT,
        env={**os.environ, **env},
        check=False,
    )


def last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "(no output)"
