"""Generate ``proto/kafka/messages.py`` from the schema files ``proto/kafka/schemas/*.json``.

Run by ``./dev proto`` (``proto/generate.py`` calls ``main``); ``python -m proto.kafka.generate``
works too. The format of the schema files is ``proto/kafka/SCHEMA.md``.

What comes out, per API:
- one ``@dataclass(slots=True)`` per request, response and struct, every field with its default, so
  ``FetchResponse(responses=[...])`` works. A nested struct is named after its message plus its type
  name (``ProduceRequest`` + ``TopicProduceData`` -> ``ProduceRequestTopicProduceData``), unless the
  type name already starts with the message name (``MetadataRequestTopic``); a common struct is named
  after its API (``Produce`` + ``NodeEndpoint``) with the same exception.
- one straight-line decoder and encoder per struct and version (``_d_<Class>_<v>`` /
  ``_e_<Class>_<v>``): no per-field interpretation at run time. Runs of consecutive fixed-size fields
  become one precompiled ``struct.Struct``; versions whose code is identical share one function.
- tables indexed by API key then version: ``REQUEST_DECODERS``, ``REQUEST_ENCODERS``,
  ``RESPONSE_DECODERS``, ``RESPONSE_ENCODERS``, plus ``VALID_VERSIONS``, ``FLEXIBLE_MIN_VERSION``,
  ``API_NAMES``, ``REQUEST_CLASSES`` and ``RESPONSE_CLASSES``.

The schema model and its checks are ``proto/kafka/schema.py``; a schema mistake stops the generator
with ``SchemaError`` naming the file and field.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path

from proto.kafka.schema import (
    FIXED,
    INT_RANGES,
    KAFKA_DIR,
    OPEN_END,
    SCHEMA_DIR,
    VARIABLE,
    Api,
    Field,
    Message,
    SchemaError,
    Struct,
    Versions,
    all_structs,
    load_apis,
)

OUTPUT = KAFKA_DIR / "messages.py"

# ---------------------------------------------------------------------------------------------
# code generation


@dataclass
class Emitter:
    structs_fmt: dict[str, str] = field(default_factory=dict)  # format -> variable name
    funcs: dict[str, str] = field(default_factory=dict)  # function body (name-free) -> canonical name
    canonical: dict[str, str] = field(default_factory=dict)  # versioned name -> canonical name
    lines: list[str] = field(default_factory=list)
    defaults: set[str] = field(default_factory=set)  # classes whose default instance tagged fields use

    def struct_var(self, fmt: str) -> str:
        if fmt not in self.structs_fmt:
            # struct format chars -> identifier chars: '?' (bool) -> 'o', '16s' (uuid) -> 'u'
            self.structs_fmt[fmt] = "_S_" + fmt.replace("16s", "u").replace("?", "o")
        return self.structs_fmt[fmt]

    def add_function(self, name: str, body: list[str], signature: str) -> str:
        """Emit ``def name(signature)`` unless an identical body exists; return the name to call."""
        key = signature + "\n" + "\n".join(body)
        if key in self.funcs:
            self.canonical[name] = self.funcs[key]
            return self.funcs[key]
        self.funcs[key] = name
        self.canonical[name] = name
        self.lines.append(f"def {name}({signature}):")
        self.lines.extend("    " + line if line else "" for line in body)
        self.lines.append("")
        self.lines.append("")
        return name


def py_default(f: Field) -> str:
    """The dataclass default of a field (``field(default_factory=...)`` for mutable ones).

    Without a schema default: an empty list for arrays; None for strings, bytes, records and structs
    that are nullable in every version they exist in (records always); else the type's zero value.
    """
    if f.has_default:
        return repr(f.default)
    if f.is_array:
        return "field(default_factory=list)"
    nullable_only = f.nullable is not None and f.nullable.low <= f.versions.low
    if f.element == "records" or (nullable_only and f.element in ("string", "bytes")):
        return "None"
    if f.struct is not None:
        return "None" if nullable_only else f"field(default_factory={f.struct.class_name})"
    if f.element in FIXED:
        return FIXED[f.element][3]
    return {"string": '""', "bytes": 'b""'}[f.element]


def py_type(f: Field) -> str:
    element = f.element
    if f.struct is not None:
        base = f.struct.class_name
    elif element in FIXED:
        base = FIXED[element][2]
    else:
        base = VARIABLE[element]
    t = f"list[{base}]" if f.is_array else base
    if f.nullable is not None or element == "records":
        t += " | None"
    return t


def tag_default_expr(f: Field, em: Emitter) -> str:
    """The value a tagged field is left out at (Kafka writes a tagged field only when it differs)."""
    if f.has_default:
        return repr(f.default)
    if f.is_array:
        return "[]"
    if f.struct is not None:
        if py_default(f) == "None":
            return "None"
        em.defaults.add(f.struct.class_name)
        return f"_DEFAULT_{f.struct.class_name}"
    return py_default(f)


def emit_class(struct_: Struct, em: Emitter, api_key: int | None, valid: Versions) -> list[str]:
    out = ["@dataclass(slots=True)", f"class {struct_.class_name}:"]
    doc = struct_.doc or f"Struct of {struct_.where.split(' ', 1)[-1]}"
    out.append(f'    """{doc}, versions {valid.low}-{valid.high}."""')
    out.append("")
    if api_key is not None:
        out.append(f"    API_KEY: ClassVar[int] = {api_key}")
    for f in struct_.fields:
        out.append(f"    {f.name}: {py_type(f)} = {py_default(f)}")
    if not struct_.fields and api_key is None:
        out.append("    pass")
    return out


def split_fields(s: Struct, v: int) -> tuple[list[Field], list[Field]]:
    """The fields of version ``v`` in wire order, and its tagged fields in tag order."""
    present = [f for f in s.fields if f.present(v) and not f.is_tagged(v)]
    tagged = sorted((f for f in s.fields if f.present(v) and f.is_tagged(v)), key=lambda f: f.tag or 0)
    return present, tagged


def wire_items(fields: list[Field]) -> list[list[Field] | Field]:
    """Runs of consecutive fixed-size fields (one ``struct.Struct`` each) and single other fields."""
    items: list[list[Field] | Field] = []
    for f in fields:
        if f.element in FIXED and not f.is_array:
            if items and isinstance(items[-1], list):
                items[-1].append(f)
            else:
                items.append([f])
        else:
            items.append(f)
    return items


class CodeGen:
    """Decoder and encoder bodies for one message side."""

    def __init__(self, message: Message, em: Emitter) -> None:
        self.message = message
        self.em = em

    # -- decoding ------------------------------------------------------------------------------

    def min_size(self, s: Struct, v: int) -> int:
        flexible = self.message.is_flexible(v)
        total = 1 if flexible else 0
        for f in s.fields:
            if not f.present(v) or f.is_tagged(v):
                continue
            total += self.field_min_size(f, v, flexible)
        return total

    def field_min_size(self, f: Field, v: int, flexible: bool) -> int:
        if f.is_array:
            return 1 if flexible else 4
        if f.struct is not None:
            return 1 if f.is_nullable(v) else self.min_size(f.struct, v)
        if f.element in FIXED:
            return FIXED[f.element][1]
        if f.element == "string":
            return 1 if flexible else 2
        return 1 if flexible else 4

    def decoder(self, s: Struct, v: int) -> str:
        name = f"_d_{s.class_name}_{v}"
        if name in self.em.canonical:
            return self.em.canonical[name]
        flexible = self.message.is_flexible(v)
        body: list[str] = []
        present, tagged = split_fields(s, v)
        for item in wire_items(present):
            if isinstance(item, list):
                self.decode_fixed_run(item, body)
            else:
                self.decode_field(s.class_name, item, v, flexible, f"f_{item.name}", body, "end")
        kwargs = ", ".join(f"{f.name}=f_{f.name}" for f in present)
        if flexible and tagged:
            tag_fn = self.tag_decoder(s, v, tagged)
            body.append("if buf[pos] == 0:")
            body.append(f"    return {s.class_name}({kwargs}), pos + 1")
            body.append(f"tagged, pos = {tag_fn}(buf, pos, end)")
            sep = ", " if kwargs else ""
            body.append(f"return {s.class_name}({kwargs}{sep}**tagged), pos")
        else:
            if flexible:
                body.append("if buf[pos] == 0:")
                body.append("    pos += 1")
                body.append("else:")
                body.append("    pos = skip_tagged_fields(buf, pos, end)")
            body.append(f"return {s.class_name}({kwargs}), pos")
        return self.em.add_function(name, body, "buf, pos, end")

    def decode_fixed_run(self, run: list[Field], body: list[str]) -> None:
        fmt = "".join(FIXED[f.element][0] for f in run)
        size = sum(FIXED[f.element][1] for f in run)
        var = self.em.struct_var(fmt)
        targets = ", ".join(f"f_{f.name}" for f in run)
        body.append(f"{targets}{',' if len(run) == 1 else ''} = {var}.unpack_from(buf, pos)")
        body.append(f"pos += {size}")
        for f in run:
            if f.element == "uuid":
                body.append(f"f_{f.name} = uuid.UUID(bytes=f_{f.name})")

    def decode_field(
        self, owner: str, f: Field, v: int, flexible: bool, target: str, body: list[str], end: str
    ) -> None:
        nullable = f.is_nullable(v)
        label = f"{owner}.{f.name}"
        if f.element in FIXED and not f.is_array:
            self.decode_fixed_run([f], body)
            if target != f"f_{f.name}":
                body.append(f"{target} = f_{f.name}")
            return
        if not f.is_array and f.struct is None:
            reader = {
                "string": "string",
                "bytes": "bytes",
                "records": "records",
            }[f.element]
            compact = "compact_" if flexible else ""
            if f.element == "records" or nullable:
                fn = f"read_nullable_{compact}{reader}"
                body.append(f"{target}, pos = {fn}(buf, pos, {end})")
                if f.element == "records" and not nullable:
                    body.append(f"if {target} is None:")
                    body.append(f"    raise null_error({label!r}, pos)")
            else:
                body.append(f"{target}, pos = read_{compact}{reader}(buf, pos, {end})")
            return
        if not f.is_array:
            assert f.struct is not None
            fn = self.decoder(f.struct, v)
            if nullable:
                body.append("(marker,) = S_INT8.unpack_from(buf, pos)")
                body.append("pos += 1")
                body.append("if marker < 0:")
                body.append(f"    {target} = None")
                body.append("else:")
                body.append(f"    {target}, pos = {fn}(buf, pos, {end})")
            else:
                body.append(f"{target}, pos = {fn}(buf, pos, {end})")
            return
        self.decode_array(f, v, flexible, target, body, end, nullable, label)

    def decode_array(
        self,
        f: Field,
        v: int,
        flexible: bool,
        target: str,
        body: list[str],
        end: str,
        nullable: bool,
        label: str,
    ) -> None:
        element = f.element
        if f.struct is not None:
            min_size = max(1, self.min_size(f.struct, v))
        elif element in FIXED:
            min_size = FIXED[element][1]
        else:
            min_size = 1 if flexible else (2 if element == "string" else 4)
        counter = "read_compact_count" if flexible else "read_count"
        body.append(f"n, pos = {counter}(buf, pos, {end}, {min_size})")
        body.append("if n < 0:")
        body.append(f"    {target} = None" if nullable else f"    raise null_error({label!r}, pos)")
        if f.struct is not None:
            fn = self.decoder(f.struct, v)
            body.append("else:")
            body.append(f"    {target} = []")
            body.append(f"    append = {target}.append")
            body.append("    for _ in range(n):")
            body.append(f"        item, pos = {fn}(buf, pos, {end})")
            body.append("        append(item)")
        elif element in FIXED:
            fmt, size = FIXED[element][0], FIXED[element][1]
            body.append("else:")
            body.append(f"    {target}, pos = read_fixed_array(buf, pos, {end}, n, {fmt!r}, {size})")
            if element == "uuid":
                body.append(f"    {target} = [uuid.UUID(bytes=b) for b in {target}]")
        elif element == "string":
            body.append("else:")
            body.append(f"    {target}, pos = read_string_array(buf, pos, {end}, n, {flexible})")
        else:
            raise SchemaError(f"{f.where}: arrays of {element} are not supported")

    def tag_decoder(self, s: Struct, v: int, tagged: list[Field]) -> str:
        body = [
            "n, pos = read_uvarint(buf, pos)",
            "check_tag_count(n, pos, end)",
            "tagged = {}",
            "for _ in range(n):",
            "    tag, pos, e = read_tag_header(buf, pos, end)",
        ]
        for j, f in enumerate(tagged):
            body.append(f"    {'if' if j == 0 else 'elif'} tag == {f.tag}:")
            inner: list[str] = []
            self.decode_field(s.class_name, f, v, True, "value", inner, "e")
            inner.append("if pos != e:")
            inner.append(f"    raise tag_size_error({s.class_name + '.' + f.name!r}, tag, pos, e)")
            inner.append(f"tagged[{f.name!r}] = value")
            body.extend("        " + line for line in inner)
        body.append("    pos = e")
        body.append("return tagged, pos")
        return self.em.add_function(f"_dt_{s.class_name}_{v}", body, "buf, pos, end")

    # -- encoding ------------------------------------------------------------------------------

    def encoder(self, s: Struct, v: int) -> str:
        name = f"_e_{s.class_name}_{v}"
        if name in self.em.canonical:
            return self.em.canonical[name]
        flexible = self.message.is_flexible(v)
        body: list[str] = []
        present, tagged = split_fields(s, v)
        for item in wire_items(present):
            if isinstance(item, list):
                self.encode_fixed_run(item, body, "out", "o")
            else:
                self.encode_field(item, v, flexible, f"o.{item.name}", body, "out")
        if flexible and tagged:
            body.append("tags = []")
            for f in tagged:
                body.append(f"if o.{f.name} != {tag_default_expr(f, self.em)}:")
                body.append("    t = bytearray()")
                inner: list[str] = []
                self.encode_field(f, v, True, f"o.{f.name}", inner, "t")
                body.extend("    " + line for line in inner)
                body.append(f"    tags.append(({f.tag}, t))")
            body.append("write_tagged_fields(out, tags)")
        elif flexible:
            body.append("out.append(0)")
        if not body:
            body.append("pass")
        return self.em.add_function(name, body, "out, o")

    def encode_fixed_run(self, run: list[Field], body: list[str], out: str, obj: str) -> None:
        fmt = "".join(FIXED[f.element][0] for f in run)
        var = self.em.struct_var(fmt)
        args = ", ".join(f"{obj}.{f.name}.bytes" if f.element == "uuid" else f"{obj}.{f.name}" for f in run)
        body.append(f"{out} += {var}.pack({args})")

    def encode_field(self, f: Field, v: int, flexible: bool, value: str, body: list[str], out: str) -> None:
        nullable = f.is_nullable(v)
        if f.element in FIXED and not f.is_array:
            fmt = FIXED[f.element][0]
            var = self.em.struct_var(fmt)
            arg = f"{value}.bytes" if f.element == "uuid" else value
            body.append(f"{out} += {var}.pack({arg})")
            return
        compact = "compact_" if flexible else ""
        if not f.is_array and f.struct is None:
            kind = {"bytes": "bytes", "records": "records"}.get(f.element, "string")
            prefix = "nullable_" if nullable or f.element == "records" else ""
            body.append(f"write_{prefix}{compact}{kind}({out}, {value})")
            return
        if not f.is_array:
            assert f.struct is not None
            fn = self.encoder(f.struct, v)
            if nullable:
                body.append(f"if {value} is None:")
                body.append(f"    {out}.append(0xFF)")
                body.append("else:")
                body.append(f"    {out}.append(1)")
                body.append(f"    {fn}({out}, {value})")
            else:
                body.append(f"{fn}({out}, {value})")
            return
        lines: list[str] = []
        if f.struct is not None:
            fn = self.encoder(f.struct, v)
            lines.append(f"write_count({out}, len({value}), {flexible})")
            lines.append(f"for item in {value}:")
            lines.append(f"    {fn}({out}, item)")
        elif f.element in FIXED:
            fmt = FIXED[f.element][0]
            if f.element == "uuid":
                lines.append(f"write_fixed_array({out}, [u.bytes for u in {value}], {fmt!r}, {flexible})")
            else:
                lines.append(f"write_fixed_array({out}, {value}, {fmt!r}, {flexible})")
        else:
            lines.append(f"write_string_array({out}, {value}, {flexible})")
        if nullable:
            body.append(f"if {value} is None:")
            body.append(f"    {out}.append(0)" if flexible else f"    {out} += NULL_INT32")
            body.append("else:")
            body.extend("    " + line for line in lines)
        else:
            body.extend(lines)


# ---------------------------------------------------------------------------------------------
# the module


HEADER = '''\
# Generated from proto/kafka/schemas/*.json by `./dev proto` (proto/kafka/generate.py). DO NOT EDIT.
# ruff: noqa
"""Kafka protocol messages: dataclasses and per-version decoders/encoders.

Generated by ``proto/kafka/generate.py`` from ``proto/kafka/schemas/*.json``; the runtime helpers
live in ``proto/kafka/codec.py`` and the request/response entry points in ``proto/kafka/api.py``.
Decoders are ``(buf, pos, end) -> (value, pos)``, encoders ``(out: bytearray, value) -> None``.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass, field
from typing import ClassVar, Union

from proto.kafka.codec import (
    NULL_INT32,
    S_INT8,
    FileRegion,
    check_tag_count,
    null_error,
    read_bytes,
    read_compact_bytes,
    read_compact_count,
    read_compact_string,
    read_count,
    read_fixed_array,
    read_nullable_bytes,
    read_nullable_compact_bytes,
    read_nullable_compact_records,
    read_nullable_compact_string,
    read_nullable_records,
    read_nullable_string,
    read_string,
    read_string_array,
    read_tag_header,
    read_uvarint,
    skip_tagged_fields,
    tag_size_error,
    write_bytes,
    write_compact_bytes,
    write_compact_string,
    write_count,
    write_fixed_array,
    write_nullable_bytes,
    write_nullable_compact_bytes,
    write_nullable_compact_records,
    write_nullable_compact_string,
    write_nullable_records,
    write_nullable_string,
    write_string,
    write_string_array,
    write_tagged_fields,
)

Records = Union[bytes, bytearray, memoryview, FileRegion]  # a FileRegion: records sent from a file
ZERO_UUID = uuid.UUID(int=0)
'''


def render(apis: list[Api]) -> str:
    em = Emitter()
    classes: list[str] = []
    tables: dict[str, dict[int, list[str]]] = {
        "REQUEST_DECODERS": {},
        "REQUEST_ENCODERS": {},
        "RESPONSE_DECODERS": {},
        "RESPONSE_ENCODERS": {},
    }
    for api in apis:
        for message in (api.request, api.response):
            for struct_ in all_structs(message.root):
                is_root = struct_ is message.root
                classes.extend(emit_class(struct_, em, api.api_key if is_root else None, message.valid))
                classes.append("")
                classes.append("")
            gen = CodeGen(message, em)
            dec: list[str] = []
            enc: list[str] = []
            for v in range(message.valid.high + 1):
                if v < message.valid.low:
                    dec.append("None")
                    enc.append("None")
                    continue
                dec.append(gen.decoder(message.root, v))
                enc.append(gen.encoder(message.root, v))
            side = message.side.upper()
            tables[f"{side}_DECODERS"][api.api_key] = dec
            tables[f"{side}_ENCODERS"][api.api_key] = enc
    parts = [HEADER, ""]
    parts.extend(
        f"{var} = struct.Struct('>{fmt}')" for fmt, var in sorted(em.structs_fmt.items(), key=lambda i: i[1])
    )
    parts.append("")
    parts.append("")
    parts.extend(classes)
    parts.extend(f"_DEFAULT_{cls} = {cls}()" for cls in sorted(em.defaults))
    parts.append("")
    parts.append("")
    parts.extend(em.lines)
    parts.append(render_tables(apis, tables))
    return "\n".join(parts).rstrip() + "\n"


def render_tables(apis: list[Api], tables: dict[str, dict[int, list[str]]]) -> str:
    out = []
    out.append("API_NAMES: dict[int, str] = {")
    out.extend(f"    {a.api_key}: {a.name!r}," for a in apis)
    out.append("}")
    out.append("VALID_VERSIONS: dict[int, tuple[int, int]] = {")
    for a in apis:
        if (a.request.valid.low, a.request.valid.high) != (a.response.valid.low, a.response.valid.high):
            raise SchemaError(f"{a.path.name}: request and response valid_versions differ")
        out.append(f"    {a.api_key}: ({a.request.valid.low}, {a.request.valid.high}),")
    out.append("}")
    out.append("# the first flexible version of each API (None: no flexible version in the range)")
    out.append("FLEXIBLE_MIN_VERSION: dict[int, int | None] = {")
    for a in apis:
        if a.request.flexible != a.response.flexible:
            raise SchemaError(f"{a.path.name}: request and response flexible_versions differ")
        low = a.request.flexible.low if a.request.flexible is not None else None
        out.append(f"    {a.api_key}: {low},")
    out.append("}")
    out.append("REQUEST_CLASSES: dict[int, type] = {")
    out.extend(f"    {a.api_key}: {a.request.root.class_name}," for a in apis)
    out.append("}")
    out.append("RESPONSE_CLASSES: dict[int, type] = {")
    out.extend(f"    {a.api_key}: {a.response.root.class_name}," for a in apis)
    out.append("}")
    for name, table in tables.items():
        out.append("")
        out.append("# api key -> functions indexed by version (None below the lowest valid version)")
        out.append(f"{name}: dict[int, tuple] = {{")
        for key, funcs in table.items():
            out.append(f"    {key}: (")
            out.extend(f"        {fn}," for fn in funcs)
            out.append("    ),")
        out.append("}")
    return "\n".join(out)


def generate_text(schema_dir: Path = SCHEMA_DIR) -> str:
    return render(load_apis(schema_dir))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.parse_args(argv)
    try:
        text = generate_text()
    except SchemaError as exc:
        print(f"schema error: {exc}", file=sys.stderr)
        return 1
    OUTPUT.write_text(text)
    print(f"wrote {OUTPUT.relative_to(KAFKA_DIR.parent.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = [
    "FIXED",
    "INT_RANGES",
    "OPEN_END",
    "Api",
    "Field",
    "Message",
    "SchemaError",
    "Struct",
    "Versions",
    "all_structs",
    "generate_text",
    "load_apis",
    "main",
    "render",
]
