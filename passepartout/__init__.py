"""Passepartout: the language model proposes, deterministic code decides,
and only the act stage touches the world.

The core is written in Hy; importing hy here registers the .hy loader so the
rest of the package imports like any Python package.

Hy compiles a module the first time it is imported and keeps the bytecode.
Where no bytecode may be written beside the sources (PYTHONDONTWRITEBYTECODE,
set in most container images), every start would compile the whole package
again, several seconds; so then the bytecode is kept in a cache of our own
(PASSEPARTOUT_CACHE_DIR, by default ~/.cache/passepartout/pycache), and the
source tree stays as it was.
"""
import os
import sys


def _own_bytecode_cache():
    if not sys.dont_write_bytecode or sys.pycache_prefix is not None:
        return
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    folder = os.environ.get("PASSEPARTOUT_CACHE_DIR") or os.path.join(base, "passepartout", "pycache")
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
    except OSError:
        return
    sys.pycache_prefix = folder
    sys.dont_write_bytecode = False


_own_bytecode_cache()

import hy  # noqa: E402,F401

__version__ = "0.1.0"
