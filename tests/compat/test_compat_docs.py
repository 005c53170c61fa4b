"""docs/compatibility.md's table of served APIs is the code's: the keys the Kafka listener has a
handler for (``broker.kafka.handlers.processor.HANDLER_MODULES``, what ApiVersions advertises) with the
codec's version range (``proto.kafka.api.SUPPORTED_VERSIONS``) and first flexible version.

When an API or a version is added, rewrite the table with
``.venv/bin/python -m tests.compat.test_compat_docs`` (it replaces the text between the markers).
"""

from __future__ import annotations

import re
from pathlib import Path

from broker.kafka.handlers.processor import HANDLER_MODULES, api_name
from proto.kafka.api import SUPPORTED_VERSIONS, is_flexible

DOC = Path(__file__).resolve().parents[2] / "docs" / "compatibility.md"
BEGIN = "<!-- served-apis:begin (generated: tests/compat/test_compat_docs.py) -->"
END = "<!-- served-apis:end -->"


def served_api_table() -> str:
    keys = sorted({int(key) for module in HANDLER_MODULES for key in module.HANDLERS})
    lines = ["| API | key | versions | flexible from |", "|---|---|---|---|"]
    for key in keys:
        low, high = SUPPORTED_VERSIONS[key]
        flexible = next((v for v in range(low, high + 1) if is_flexible(key, v)), None)
        lines.append(f"| {api_name(key)} | {key} | {low}-{high} | {'-' if flexible is None else flexible} |")
    return "\n".join(lines)


def doc_table(text: str) -> re.Match[str]:
    match = re.search(re.escape(BEGIN) + r"\n(.*?)\n" + re.escape(END), text, re.S)
    assert match, f"{DOC} has no {BEGIN} ... {END} block"
    return match


def test_the_served_api_table_is_the_codes() -> None:
    assert doc_table(DOC.read_text()).group(1) == served_api_table(), (
        "docs/compatibility.md's API table is stale: run .venv/bin/python -m tests.compat.test_compat_docs"
    )


if __name__ == "__main__":
    text = DOC.read_text()
    table = doc_table(text).span(1)
    DOC.write_text(text[: table[0]] + served_api_table() + text[table[1] :])
    print(f"rewrote the served-API table of {DOC}")
