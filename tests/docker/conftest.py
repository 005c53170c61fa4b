"""Fixtures of the Docker tests: a Docker engine (started by scripts/docker-engine.sh when none answers,
stopped at the end if this run started it) and the ``pykraft:local`` image on the debootstrap base. Both
are session-scoped: every module of tests/docker shares one engine and one build. A machine where no
engine can start skips these tests with the script's reason."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest

from tests.docker.docker_env import (
    BASE_IMAGE,
    BASE_IMAGE_SCRIPT,
    BASE_IMAGE_TIMEOUT_S,
    BUILD_TIMEOUT_S,
    ENGINE_SCRIPT,
    ENGINE_TIMEOUT_S,
    EXIT_CANNOT_START,
    IMAGE,
    last_line,
    run,
)


@pytest.fixture(scope="session")
def docker_host() -> Iterator[str]:
    """A Docker engine's DOCKER_HOST, started by scripts/docker-engine.sh if none answers."""
    was_running = run([str(ENGINE_SCRIPT), "status"], 30).returncode == 0
    started = time.monotonic()
    result = run([str(ENGINE_SCRIPT), "start"], ENGINE_TIMEOUT_S)
    if result.returncode == EXIT_CANNOT_START:
        pytest.skip(f"no Docker engine: {last_line(result.stderr)}")
    assert result.returncode == 0, f"docker-engine.sh start failed: {result.stderr[-2000:]}"
    host = last_line(result.stdout).removeprefix("DOCKER_HOST=")
    print(f"docker engine {host} ready in {time.monotonic() - started:.1f} s (was running: {was_running})")
    previous = os.environ.get("DOCKER_HOST")
    os.environ["DOCKER_HOST"] = host  # testcontainers and `docker compose` read it
    try:
        yield host
    finally:
        if previous is None:
            os.environ.pop("DOCKER_HOST", None)
        else:
            os.environ["DOCKER_HOST"] = previous
        if not was_running:  # our private engine: drop superseded image layers, then stop it
            run(["docker", "image", "prune", "--force"], 120, DOCKER_HOST=host)
            stop = run([str(ENGINE_SCRIPT), "stop"], 90)
            assert stop.returncode == 0, f"docker-engine.sh stop failed: {stop.stderr[-1000:]}"


@pytest.fixture(scope="session")
def image(docker_host: str) -> str:
    """pykraft:local built on the debootstrap base (both cached between runs on one machine)."""
    started = time.monotonic()
    base = run([str(BASE_IMAGE_SCRIPT), BASE_IMAGE], BASE_IMAGE_TIMEOUT_S)
    if base.returncode == EXIT_CANNOT_START:
        pytest.skip(f"cannot make the base image: {last_line(base.stderr)}")
    assert base.returncode == 0, f"docker-base-image.sh failed: {base.stderr[-3000:]}"
    built_base = time.monotonic()
    build = run(
        ["docker", "build", "--network", "host", "--build-arg", f"BASE={BASE_IMAGE}", "--target", "runtime",
         "-t", IMAGE, "."],
        BUILD_TIMEOUT_S,
    )  # fmt: skip
    assert build.returncode == 0, f"docker build failed:\n{build.stdout[-3000:]}\n{build.stderr[-3000:]}"
    print(f"base image {built_base - started:.1f} s, docker build {time.monotonic() - built_base:.1f} s")
    return IMAGE
