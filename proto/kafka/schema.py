"""The schema files of the Kafka protocol (``proto/kafka/schemas/*.json``) as a checked model.

``load_apis()`` reads every file, checks it (format in ``proto/kafka/SCHEMA.md``) and returns one
``Api`` per file: its request and response ``Message``, each a tree of ``Struct`` and ``Field``.
``proto/kafka/generate.py`` turns the model into code; tests build sample messages from it. A schema
mistake (unknown type or key, bad version range, duplicate tag, a tagged field outside the flexible
versions, a default that does not fit its type, two structs with one class name) raises
``SchemaError`` naming the file and the field path.
"""

from __future__ import annotations

import json
import keyword
import re
from dataclasses import dataclass, field
from pathlib import Path

KAFKA_DIR = Path(__file__).resolve().parent
SCHEMA_DIR = KAFKA_DIR / "schemas"
OPEN_END = 1 << 15  # "N+" ranges run to here; no Kafka version comes close

FIXED = {  # type -> (struct format char, size, python type, default)
    "bool": ("?", 1, "bool", "False"),
    "int8": ("b", 1, "int", "0"),
    "int16": ("h", 2, "int", "0"),
    "uint16": ("H", 2, "int", "0"),
    "int32": ("i", 4, "int", "0"),
    "int64": ("q", 8, "int", "0"),
    "float64": ("d", 8, "float", "0.0"),
    "uuid": ("16s", 16, "uuid.UUID", "ZERO_UUID"),
}
VARIABLE = {"string": "str", "bytes": "bytes", "records": "Records"}
INT_RANGES = {
    "int8": (-(1 << 7), (1 << 7) - 1),
    "int16": (-(1 << 15), (1 << 15) - 1),
    "uint16": (0, (1 << 16) - 1),
    "int32": (-(1 << 31), (1 << 31) - 1),
    "int64": (-(1 << 63), (1 << 63) - 1),
}
SNAKE = re.compile(r"^[a-z][a-z0-9_]*$")
STRUCT_NAME = re.compile(r"^[A-Z][A-Za-z0-9]*$")


class SchemaError(Exception):
    """A schema file that the generator cannot turn into code; the message names file and field."""


# ---------------------------------------------------------------------------------------------
# the model


@dataclass(frozen=True)
class Versions:
    low: int
    high: int

    @classmethod
    def parse(cls, text: str, where: str) -> Versions | None:
        if text == "none":
            return None
        m = re.fullmatch(r"(\d+)\+|(\d+)-(\d+)|(\d+)", text)
        if not m:
            raise SchemaError(f"{where}: version range {text!r} is not 'N+', 'N-M', 'N' or 'none'")
        if m.group(1) is not None:
            return cls(int(m.group(1)), OPEN_END)
        if m.group(4) is not None:
            return cls(int(m.group(4)), int(m.group(4)))
        low, high = int(m.group(2)), int(m.group(3))
        if low > high:
            raise SchemaError(f"{where}: version range {text!r} is empty")
        return cls(low, high)

    def __contains__(self, version: int) -> bool:
        return self.low <= version <= self.high


@dataclass
class Field:
    name: str
    type: str  # as written: "int32", "[]int32", "[]TopicData", "LeaderIdAndEpoch"
    versions: Versions
    nullable: Versions | None
    tagged: Versions | None
    tag: int | None
    default: object
    has_default: bool
    where: str
    struct: Struct | None = None  # resolved struct for struct and struct-array types

    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")

    @property
    def element(self) -> str:
        return self.type[2:] if self.is_array else self.type

    def present(self, v: int) -> bool:
        return v in self.versions

    def is_tagged(self, v: int) -> bool:
        return self.tagged is not None and v in self.tagged

    def is_nullable(self, v: int) -> bool:
        return self.nullable is not None and v in self.nullable


@dataclass
class Struct:
    class_name: str
    fields: list[Field]
    where: str
    doc: str = ""
    children: list[Struct] = field(default_factory=list)


@dataclass
class Message:
    api_key: int
    api_name: str
    side: str  # "Request" / "Response"
    valid: Versions
    flexible: Versions | None
    root: Struct

    @property
    def versions(self) -> range:
        return range(self.valid.low, self.valid.high + 1)

    def is_flexible(self, v: int) -> bool:
        return self.flexible is not None and v in self.flexible


@dataclass
class Api:
    api_key: int
    name: str
    path: Path
    request: Message
    response: Message


# ---------------------------------------------------------------------------------------------
# loading and checking


def load_apis(schema_dir: Path = SCHEMA_DIR) -> list[Api]:
    apis = [load_api(path) for path in sorted(schema_dir.glob("*.json"))]
    seen: dict[int, Path] = {}
    classes: dict[str, str] = {}
    for api in apis:
        if api.api_key in seen:
            raise SchemaError(
                f"{api.path.name}: api_key {api.api_key} is also defined in {seen[api.api_key].name}"
            )
        seen[api.api_key] = api.path
        for message in (api.request, api.response):
            for struct_ in all_structs(message.root):
                if struct_.class_name in classes:
                    raise SchemaError(
                        f"{struct_.where}: class name {struct_.class_name} is also generated by "
                        f"{classes[struct_.class_name]}"
                    )
                classes[struct_.class_name] = struct_.where
    return sorted(apis, key=lambda a: a.api_key)


def load_api(path: Path) -> Api:
    try:
        doc = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise SchemaError(f"{path.name}: not valid JSON ({exc})") from None
    where = path.name
    for key in ("api_key", "name", "request", "response"):
        if key not in doc:
            raise SchemaError(f"{where}: missing top-level key {key!r}")
    name = doc["name"]
    if not isinstance(name, str) or not STRUCT_NAME.match(name):
        raise SchemaError(f"{where}: name {name!r} must be CamelCase (e.g. 'Produce')")
    if not isinstance(doc["api_key"], int) or not 0 <= doc["api_key"] < OPEN_END:
        raise SchemaError(f"{where}: api_key {doc['api_key']!r} must be a non-negative integer")
    common = {c["name"]: c for c in doc.get("common_structs", [])}
    built_common: dict[str, Struct] = {}
    messages = []
    for side in ("Request", "Response"):
        messages.append(load_message(doc, side, where, common, built_common))
    request, response = messages
    return Api(doc["api_key"], name, path, request, response)


def load_message(doc: dict, side: str, where: str, common: dict, built_common: dict[str, Struct]) -> Message:
    spec = doc[side.lower()]
    at = f"{where} {side.lower()}"
    valid = Versions.parse(spec.get("valid_versions", ""), at)
    if valid is None or valid.high == OPEN_END:
        raise SchemaError(f"{at}: valid_versions must be a closed range 'N-M'")
    flexible = Versions.parse(spec.get("flexible_versions", "none"), at)
    if flexible is not None and flexible.high != OPEN_END:
        raise SchemaError(f"{at}: flexible_versions must be 'N+' or 'none'")
    class_name = doc["name"] + side
    ctx = _Context(class_name, doc["name"], where, common, built_common, {}, valid, flexible)
    root = Struct(class_name, [], at, doc=f"{doc['name']} {side.lower()} (api key {doc['api_key']})")
    root.fields = [ctx.load_field(f, f"{at}.{f.get('name')}", root) for f in spec.get("fields", [])]
    ctx.check_struct(root)
    return Message(doc["api_key"], doc["name"], side, valid, flexible, root)


@dataclass
class _Context:
    message_name: str
    api_name: str
    where: str
    common: dict
    built_common: dict[str, Struct]
    local: dict[str, Struct]
    valid: Versions
    flexible: Versions | None

    def struct_class(self, type_name: str, prefix: str) -> str:
        return type_name if type_name.startswith(prefix) else prefix + type_name

    def load_field(self, spec: dict, at: str, parent: Struct) -> Field:
        for key in ("name", "type", "versions"):
            if key not in spec:
                raise SchemaError(f"{at}: missing key {key!r}")
        unknown = set(spec) - {
            "name",
            "type",
            "versions",
            "nullable_versions",
            "tagged_versions",
            "tag",
            "default",
            "fields",
            "about",
        }
        if unknown:
            raise SchemaError(f"{at}: unknown keys {sorted(unknown)}")
        name = spec["name"]
        if not SNAKE.match(name) or keyword.iskeyword(name):
            raise SchemaError(f"{at}: field name {name!r} must be snake_case and not a Python keyword")
        versions = Versions.parse(spec["versions"], at)
        if versions is None:
            raise SchemaError(f"{at}: versions must not be 'none'")
        nullable = Versions.parse(spec.get("nullable_versions", "none"), at)
        tagged = Versions.parse(spec.get("tagged_versions", "none"), at)
        f = Field(
            name,
            spec["type"],
            versions,
            nullable,
            tagged,
            spec.get("tag"),
            spec.get("default"),
            "default" in spec,
            at,
        )
        self.check_field_versions(f)
        self.resolve_type(f, spec, at, parent)
        self.check_default(f)
        return f

    def check_field_versions(self, f: Field) -> None:
        if f.tagged is not None:
            if not isinstance(f.tag, int) or f.tag < 0:
                raise SchemaError(f"{f.where}: a tagged field needs a non-negative integer 'tag'")
            for v in range(max(f.tagged.low, self.valid.low), min(f.tagged.high, self.valid.high) + 1):
                if self.flexible is None or v not in self.flexible:
                    raise SchemaError(f"{f.where}: tagged in version {v}, which is not flexible")
                if v not in f.versions:
                    raise SchemaError(f"{f.where}: tagged in version {v}, outside its versions")
        elif f.tag is not None:
            raise SchemaError(f"{f.where}: 'tag' without 'tagged_versions'")

    def resolve_type(self, f: Field, spec: dict, at: str, parent: Struct) -> None:
        element = f.element
        if element in FIXED or element in VARIABLE:
            if "fields" in spec:
                raise SchemaError(f"{at}: a {f.type} field cannot have 'fields'")
            if f.is_array and element == "records":
                raise SchemaError(f"{at}: arrays of records are not a Kafka type")
            if f.nullable is not None and not f.is_array and element in FIXED:
                raise SchemaError(f"{at}: a {f.type} field cannot be nullable")
            return
        if not STRUCT_NAME.match(element):
            raise SchemaError(f"{at}: unknown type {f.type!r}")
        if "fields" in spec:
            if element in self.local or element in self.common:
                raise SchemaError(f"{at}: struct type {element} is defined twice")
            struct_ = Struct(self.struct_class(element, self.message_name), [], at)
            self.local[element] = struct_
            struct_.fields = [self.load_field(s, f"{at}.{s.get('name')}", struct_) for s in spec["fields"]]
            self.check_struct(struct_)
            parent.children.append(struct_)
        elif element in self.local:
            struct_ = self.local[element]
        elif element in self.common:
            struct_ = self.load_common(element, parent)
        else:
            raise SchemaError(f"{at}: struct type {element} has no 'fields' and is not a common struct")
        f.struct = struct_

    def load_common(self, element: str, parent: Struct) -> Struct:
        if element not in self.built_common:
            spec = self.common[element]
            at = f"{self.where} common_structs.{element}"
            struct_ = Struct(self.struct_class(element, self.api_name), [], at)
            self.built_common[element] = struct_
            struct_.fields = [
                self.load_field(s, f"{at}.{s.get('name')}", struct_) for s in spec.get("fields", [])
            ]
            self.check_struct(struct_)
            parent.children.append(struct_)
        return self.built_common[element]

    def check_default(self, f: Field) -> None:
        if not f.has_default:
            return
        d, t = f.default, f.type
        if d is None:
            if f.nullable is None:
                raise SchemaError(f"{f.where}: default null on a field that is never nullable")
            return
        if f.is_array or f.struct is not None:
            raise SchemaError(f"{f.where}: arrays and structs take no default but null")
        ok = {
            "bool": isinstance(d, bool),
            "float64": isinstance(d, int | float) and not isinstance(d, bool),
            "string": isinstance(d, str),
        }.get(t)
        if t in INT_RANGES:
            low, high = INT_RANGES[t]
            ok = isinstance(d, int) and not isinstance(d, bool) and low <= d <= high
        if t in ("uuid", "bytes", "records"):
            ok = False
        if not ok:
            raise SchemaError(f"{f.where}: default {d!r} does not fit type {t}")

    def check_struct(self, struct_: Struct) -> None:
        names = [f.name for f in struct_.fields]
        dupes = {n for n in names if names.count(n) > 1}
        if dupes:
            raise SchemaError(f"{struct_.where}: duplicate field names {sorted(dupes)}")
        for v in range(self.valid.low, self.valid.high + 1):
            # check_field_versions gave every tagged field its tag
            tags = [f.tag for f in struct_.fields if f.is_tagged(v) and f.tag is not None]
            if len(tags) != len(set(tags)):
                raise SchemaError(f"{struct_.where}: duplicate tags {sorted(tags)} in version {v}")


def all_structs(root: Struct) -> list[Struct]:
    """Post-order: every struct after the structs it contains."""
    out: list[Struct] = []
    seen: set[int] = set()

    def visit(s: Struct) -> None:
        if id(s) in seen:
            return
        seen.add(id(s))
        for child in s.children:
            visit(child)
        out.append(s)

    visit(root)
    return out
