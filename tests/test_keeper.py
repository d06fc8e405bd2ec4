"""Tests of passepartout/keeper.hy: the checkpoints of a workspace, kept on disk."""
import os

import hy  # noqa: F401
import pytest

from passepartout.keeper import Keeper


def test_a_checkpoint_that_could_not_be_finished_leaves_the_next_ones_working(tmp_path):
    import resource
    import signal
    ws, root = tmp_path / "ws", tmp_path / "checkpoints"
    ws.mkdir()
    (ws / "a.txt").write_text("a\n")
    keeper = Keeper(str(ws), str(root), watch=False)
    keeper.begin()
    (ws / "big.bin").write_bytes(b"b" * (2 << 20))
    # writes fail as on a full disk: files may not grow past 16 bytes here
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    old = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (16, hard))
    try:
        with pytest.raises(OSError):
            keeper.end(":shell make big", "s")
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, old)
    assert not [n for n in os.listdir(root / "kept") if not (root / "kept" / n / "manifest.json").exists()], \
        "an unfinished checkpoint's folder is left"
    keeper.begin()
    (ws / "a.txt").write_text("changed\n")
    m = keeper.end(":shell echo changed > a.txt", "s")
    assert m is not None and "a.txt" in {c[0] for c in m["changes"]}, m
    assert sorted(os.listdir(root / "kept")) == [f"{m['id']:08d}"], os.listdir(root / "kept")
    keeper.close()
