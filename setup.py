"""Builds the one compiled module, ``spark._decode`` (the Spark reader's decoder), at install time.

Everything else about the package is in pyproject.toml. ``pip install -e .`` (what ``./dev`` runs)
and ``pip install .`` run Cython (pinned in pyproject's build-system requires) and the C compiler.

The build is required by default: a development machine or CI without a compiler fails here,
loudly, instead of running the slower Python decoder unnoticed. With ``PYKRAFT_OPTIONAL_EXTENSIONS=1``
(the Docker images, which carry no compiler) a failed build prints one line and the package installs
without it; ``spark.arrow`` then uses the pure-Python decoder and logs that once per worker.
"""

from __future__ import annotations

import os
import sys

from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

OPTIONAL = os.environ.get("PYKRAFT_OPTIONAL_EXTENSIONS", "") == "1"


class OptionalBuildExt(build_ext):
    """build_ext that, with PYKRAFT_OPTIONAL_EXTENSIONS=1, leaves out a module that does not compile."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:
            if not OPTIONAL:
                raise
            self._skipped(exc)

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:
            if not OPTIONAL:
                raise
            self._skipped(exc)

    @staticmethod
    def _skipped(exc: Exception) -> None:
        print(
            f"pykraft: the compiled Spark decoder (spark._decode) was not built ({type(exc).__name__}: "
            f"{exc}); the pure-Python decoder will be used",
            file=sys.stderr,
        )


setup(
    ext_modules=cythonize(
        [Extension("spark._decode", ["spark/_decode.pyx"], extra_compile_args=["-O2"])],
        compiler_directives={"language_level": "3"},
    ),
    cmdclass={"build_ext": OptionalBuildExt},
)
