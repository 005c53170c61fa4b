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

``advertised.listeners`` (``parse_listener``) is the one setting whose value is an address: the
``HOST:PORT`` others use to reach a node, which may differ from the one it listens on (a proxy, NAT,
a container name). Kafka's ``PLAINTEXT://HOST:PORT`` form is accepted; pykraft has one listener.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

ENV_PREFIX = "PYKRAFT_"
COMMENT_MARKERS = ("#", "!")
ADVERTISED_LISTENERS = "advertised.listeners"
LISTENER_NAME = "PLAINTEXT"
# Addresses that mean "every interface" to bind(), but reach nothing when another node dials them.
NON_ROUTABLE_HOSTS = frozenset({"", "0.0.0.0", "::", "[::]"})


class SettingsError(ValueError):
    """A properties file that cannot be read or parsed; the message names the file and line."""


def env_name(key: str) -> str:
    """``replica.lag.time.max.ms`` -> ``PYKRAFT_REPLICA_LAG_TIME_MAX_MS``."""
    return ENV_PREFIX + key.upper().replace(".", "_").replace("-", "_")


def parse_listener(text: str, what: str = ADVERTISED_LISTENERS) -> tuple[str, int]:
    """``HOST:PORT`` or ``PLAINTEXT://HOST:PORT`` -> ``(host, port)``; ``what`` names the source."""
    value = text.strip()
    if "," in value:
        raise SettingsError(f"{what}={text}: pykraft has one listener; give one HOST:PORT")
    name, sep, rest = value.partition("://")
    if sep:
        if name.upper() != LISTENER_NAME:
            raise SettingsError(f"{what}={text}: unknown listener {name!r}; only {LISTENER_NAME}://HOST:PORT")
        value = rest
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise SettingsError(f"{what}={text}: expected HOST:PORT, e.g. broker-1.example.com:9092")
    if host in NON_ROUTABLE_HOSTS:
        raise SettingsError(
            f"{what}={text}: {host or 'an empty host'} cannot be dialled by other nodes; "
            "advertise a routable name or IP address"
        )
    return host, int(port)


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
