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

A node's identity — what the flags ``--node-id``, ``--listen``, ``--voters``, ``--controllers``,
``--data-dir`` and ``--rack`` give — may come from the same sources under Kafka's names
(``IDENTITY_FLAGS``: ``node.id``, ``listeners``, ...), so a Kafka-style per-node ``server.properties``
or ``PYKRAFT_NODE_ID``-style variables describe a whole node. ``fill_identity`` takes them out of the
merged items and sets each flag that was not given (a flag still wins).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
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


def parse_listener(text: str, what: str = ADVERTISED_LISTENERS, routable: bool = True) -> tuple[str, int]:
    """``HOST:PORT`` or ``PLAINTEXT://HOST:PORT`` -> ``(host, port)``; ``what`` names the source.
    ``routable=False`` for an address to bind (``listeners``), where 0.0.0.0 is fine."""
    value = text.strip()
    if "," in value:
        raise SettingsError(f"{what}={text}: pykraft has one listener; give one HOST:PORT")
    name, sep, rest = value.partition("://")
    if sep:
        if name.upper() != LISTENER_NAME:
            raise SettingsError(f"{what}={text}: unknown listener {name!r}; only {LISTENER_NAME}://HOST:PORT")
        value = rest
    host, sep, port = value.rpartition(":")
    lowest = 1 if routable else 0  # a listener may bind port 0 (the kernel picks); nobody dials it
    if not sep or not port.isdigit() or not lowest <= int(port) < 65536:
        raise SettingsError(f"{what}={text}: expected HOST:PORT, e.g. broker-1.example.com:9092")
    if routable and host in NON_ROUTABLE_HOSTS:
        raise SettingsError(
            f"{what}={text}: {host or 'an empty host'} cannot be dialled by other nodes; "
            "advertise a routable name or IP address"
        )
    return host, int(port)


# Kafka's name -> the argparse attribute of the flag it stands for (each process uses the ones it has).
IDENTITY_FLAGS: dict[str, str] = {
    "node.id": "node_id",
    "listeners": "listen",
    "controller.quorum.voters": "voters",
    "controller.quorum.bootstrap.servers": "controllers",
    "log.dirs": "data_dir",
    "broker.rack": "rack",
}


Converters = Mapping[str, Callable[[str], object]]


def fill_identity(args: object, items: list[str], converters: Converters) -> list[str]:
    """Set each identity flag of ``args`` that is None from the items (the last value of its Kafka
    name wins), converted by ``converters[attribute]`` (a ValueError names the setting); return the
    items that are not identity settings. Identity names a process does not use are dropped."""
    rest, found = [], {}
    for item in items:
        key, _, value = item.partition("=")
        key = key.strip()
        if key in IDENTITY_FLAGS:
            found[key] = value.strip()
        else:
            rest.append(item)
    for key, value in found.items():
        attribute = IDENTITY_FLAGS[key]
        if attribute not in converters or getattr(args, attribute, None) is not None:
            continue
        try:
            setattr(args, attribute, converters[attribute](value))
        except SettingsError:
            raise
        except ValueError as exc:
            raise SettingsError(f"setting {key}={value}: {exc}") from None
    return rest


def listen_address(value: str) -> str:
    """A ``listeners`` value (``PLAINTEXT://HOST:PORT`` or ``HOST:PORT``) -> ``HOST:PORT``."""
    host, port = parse_listener(value, "listeners", routable=False)
    return f"{host}:{port}"


def one_dir(value: str) -> Path:
    """A ``log.dirs`` value -> its one directory (pykraft keeps every log of a node in one)."""
    if "," in value:
        raise ValueError("pykraft uses one data directory per node; give one path")
    return Path(value)


def check_data_dir(path: Path) -> None:
    """A SettingsError when ``--data-dir`` names something that is not a directory (a file): said in
    one line before anything starts, instead of an errno from deep inside the start-up."""
    if path.exists() and not path.is_dir():
        raise SettingsError(
            f"--data-dir {path}: is a file, not a directory; give a directory (created if missing)"
        )


def require(args: object, *attributes: str) -> None:
    """A SettingsError naming every way to give the first of ``attributes`` that is still missing."""
    for attribute in attributes:
        if getattr(args, attribute, None) is None:
            key = next(k for k, a in IDENTITY_FLAGS.items() if a == attribute)
            flag = "--" + attribute.replace("_", "-")
            raise SettingsError(f"{flag} is required (or {key} in --config-file, or {env_name(key)})")


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
