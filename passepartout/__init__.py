"""Passepartout: the language model proposes, deterministic code decides,
and only the act stage touches the world.

The core is written in Hy; importing hy here registers the .hy loader so the
rest of the package imports like any Python package.

Hy compiles a module the first time it is imported and keeps the bytecode.
Where no bytecode may be written beside the sources (PYTHONDONTWRITEBYTECODE,
set in most container images), every start would compile the whole package
again, several seconds; so then the bytecode is kept in a cache of our own
(PASSEPARTOUT_CACHE_DIR, by default ~/.cache/passepartout/pycache), and the
source tree stays as it was. The first start, which compiles, says so on a
terminal rather than keeping silent for its fifteen seconds.
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


def _say_first_compile():
    """Say so on a terminal when the Hy modules have no bytecode yet: the
    first start compiles them, which takes a while and would be silent."""
    import importlib.util
    try:
        if not sys.stderr.isatty():
            return
        here = os.path.dirname(os.path.abspath(__file__))
        if not os.path.exists(importlib.util.cache_from_source(os.path.join(here, "tools", "cli.hy"))):
            sys.stderr.write("passepartout: compiling its Hy modules, once (about 15 s)…\n")
            sys.stderr.flush()
    except Exception:
        pass


if not sys.dont_write_bytecode:
    _say_first_compile()

import hy  # noqa: E402,F401

__version__ = "0.1.0"
