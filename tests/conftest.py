"""Shared test configuration: refuse ``python -O`` (the cores' invariants are assertions)."""

from __future__ import annotations

import sys

if not __debug__ or sys.flags.optimize:
    raise SystemExit("the test suite refuses to run under python -O: invariants are assertions")
