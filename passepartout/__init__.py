"""Passepartout: the language model proposes, deterministic code decides,
and only the act stage touches the world.

The core is written in Hy; importing hy here registers the .hy loader so the
rest of the package imports like any Python package.
"""
import hy  # noqa: F401

__version__ = "0.1.0"
