"""Kafka's error codes as Python values and exceptions.

``ErrorCode`` is common.proto's enum as an ``IntEnum`` (Kafka's names and numbers, never
renumbered), which ``./dev proto`` writes out into ``proto/error_codes.py``; a unit test keeps it
equal to ``common_pb2.ErrorCode``. ``RETRIABLE`` lists the codes that Kafka's clients retry. Every
code has one exception class, ``KafkaError`` subclasses named in Kafka's style
(``NOT_LEADER_OR_FOLLOWER`` -> ``NotLeaderOrFollowerError``); ``error_for(code, message)`` builds
the right one, so callers can ``except errors.NotLeaderOrFollowerError``.

``ApiError(code, message)`` is the one value type an error code travels as between modules (a
controller's per-item result, a group request's answer, a handler's outcome); ``OK`` is success.
"""

from __future__ import annotations

from dataclasses import dataclass

from proto.error_codes import ErrorCode

RETRIABLE: frozenset[int] = frozenset(
    ErrorCode[name]
    for name in (
        "CORRUPT_MESSAGE",
        "UNKNOWN_TOPIC_OR_PARTITION",
        "LEADER_NOT_AVAILABLE",
        "NOT_LEADER_OR_FOLLOWER",
        "REQUEST_TIMED_OUT",
        "REPLICA_NOT_AVAILABLE",
        "NETWORK_EXCEPTION",
        "COORDINATOR_LOAD_IN_PROGRESS",
        "COORDINATOR_NOT_AVAILABLE",
        "NOT_COORDINATOR",
        "NOT_ENOUGH_REPLICAS",
        "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
        "NOT_CONTROLLER",
        "CONCURRENT_TRANSACTIONS",
        "KAFKA_STORAGE_ERROR",
        "FETCH_SESSION_ID_NOT_FOUND",
        "INVALID_FETCH_SESSION_EPOCH",
        "LISTENER_NOT_FOUND",
        "FENCED_LEADER_EPOCH",
        "UNKNOWN_LEADER_EPOCH",
        "OFFSET_NOT_AVAILABLE",
        "PREFERRED_LEADER_NOT_AVAILABLE",
        "ELIGIBLE_LEADERS_NOT_AVAILABLE",
        "ELECTION_NOT_NEEDED",
        "UNSTABLE_OFFSET_COMMIT",
        "THROTTLING_QUOTA_EXCEEDED",
        "UNKNOWN_TOPIC_ID",
        "INCONSISTENT_TOPIC_ID",
        "FETCH_SESSION_TOPIC_ID_ERROR",
    )
)


def is_retriable(code: int) -> bool:
    return code in RETRIABLE


@dataclass(frozen=True, slots=True)
class ApiError:
    """A Kafka error code and a message a person can act on (``OK`` when it succeeded)."""

    code: ErrorCode
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.code == ErrorCode.NONE


OK = ApiError(ErrorCode.NONE)


class KafkaError(Exception):
    """An error with a Kafka error code and a message a person can act on."""

    code: int = ErrorCode.UNKNOWN_SERVER_ERROR
    retriable: bool = False

    def __init__(self, message: str = "") -> None:
        self.message = message
        super().__init__(f"{ErrorCode(self.code).name}: {message}" if message else ErrorCode(self.code).name)


def _class_name(code_name: str) -> str:
    base = "".join(part.capitalize() for part in code_name.split("_"))
    return base if base.endswith(("Error", "Exception")) else base + "Error"


_BY_CODE: dict[int, type[KafkaError]] = {}
for _code in ErrorCode:
    if _code == ErrorCode.NONE:
        continue
    _cls = type(
        _class_name(_code.name),
        (KafkaError,),
        {"code": int(_code), "retriable": int(_code) in RETRIABLE, "__module__": __name__},
    )
    _BY_CODE[int(_code)] = _cls
    globals()[_cls.__name__] = _cls


def exception_class(code: int) -> type[KafkaError]:
    """The exception class of a code; an unknown number maps to UnknownServerError."""
    return _BY_CODE.get(code, _BY_CODE[ErrorCode.UNKNOWN_SERVER_ERROR])


def error_for(code: int, message: str = "") -> KafkaError:
    if code == ErrorCode.NONE:
        raise ValueError("NONE is not an error")
    return exception_class(code)(message)


def raise_for(code: int, message: str = "") -> None:
    """Raise the exception of ``code`` unless it is NONE."""
    if code != ErrorCode.NONE:
        raise error_for(code, message)


def __getattr__(name: str) -> type[KafkaError]:  # for type checkers and a clear AttributeError
    raise AttributeError(f"proto.errors has no error class {name!r}")
