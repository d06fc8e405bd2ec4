"""Test collection for Hy modules, and the fixtures every test shares."""
import os
import sys
from pathlib import Path

import hy  # noqa: F401  (registers the .hy importer)
import pytest

sys.path.insert(0, str(Path(__file__).parent))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


def pytest_collect_file(file_path, parent):
    if file_path.suffix == ".hy" and file_path.name.startswith("test_"):
        return pytest.Module.from_parent(parent, path=file_path)
