"""Where a process's Kafka-named settings come from: a properties file, the environment, flags.

Both processes (``pykraft controller``, ``pykraft broker``) take settings by Kafka's names, e.g.
``replica.lag.time.max.ms``, from three sources; a later source wins:

1. ``--config-file server.properties``: Kafka's format, one ``key=value`` (or ``key: value``) a
   line, ``#`` or ``!`` starts a comment line, blank lines ignored;
2. environment variables ``PYKRAFT_<NAME>``: the name upper-cased with dots as underscores,
   ``replica.lag.time.max.ms`` -> ``PYKRAFT_REPLICA_LAG_TIME_MAX_MS`` (``env_name``); only names of
   known settings are read, other ``PYKRAFT_*`` variables are left alone;
3. ``--override KEY=VALUE`` flags (repeatable).

``collect_overrides`` returns the merged ``KEY=VALUE`` items in that order; the process's own parser
(``broker.config.parse_overrides``, ``metadata.server.parse_overrides``) validates names and values
and, since the last item for a key wins, applies the precedence. Defaults are the parser's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

ENV_PREFIX = "PYKRAFT_"
COMMENT_MARKERS = ("#", "!")


class SettingsError(ValueError):
    """A properties file that cannot be read or parsed; the message names the file and line."""


def env_name(key: str) -> str:
    """``replica.lag.time.max.ms`` -> ``PYKRAFT_REPLICA_LAG_TIME_MAX_MS``."""
    return ENV_PREFIX + key.upper().replace(".", "_").replace("-", "_")


def read_properties(path: Path) -> list[tuple[str, str]]:
    """``(key, value)`` pairs of a Kafka ``.properties`` file, in file order."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsError(f"--config-file {path}: cannot read: {exc}") from None
    pairs = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith(COMMENT_MARKERS):
            continue
        cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        key = line[:cut].strip() if cut >= 0 else ""
        if not key:
            raise SettingsError(f"{path}:{number}: expected key=value, got {raw!r}")
        pairs.append((key, line[cut + 1 :].strip()))
    return pairs


def collect_overrides(
    flags: Iterable[str], known: Iterable[str], env: Mapping[str, str], config_file: Path | None = None
) -> list[str]:
    """Merged ``KEY=VALUE`` items: file, then environment (known names only), then flags."""
    items = [f"{key}={value}" for key, value in read_properties(config_file)] if config_file else []
    items += [f"{key}={env[env_name(key)]}" for key in sorted(known) if env_name(key) in env]
    items += list(flags)
    return items
