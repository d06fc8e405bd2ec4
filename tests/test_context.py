"""Tests of passepartout/context.hy: the folders a context names."""
import hy  # noqa: F401  (the .hy importer)

from passepartout.context import make_context, temp_dirs
from passepartout.proto import kw, proto_get


def test_a_temp_folder_that_holds_the_home_folder_is_not_a_temp_folder(tmp_path):
    env = {"TMPDIR": str(tmp_path)}
    assert str(tmp_path.resolve()) in temp_dirs(env), "TMPDIR is a temp folder"
    kept = temp_dirs(env, [str(tmp_path.resolve() / "home")])
    assert str(tmp_path.resolve()) not in kept, f"{kept} still holds the home folder"
    assert all(not str(tmp_path.resolve() / "home").startswith(t + "/") for t in kept), kept


def test_the_context_keeps_home_and_the_daemons_files_out_of_its_temp_folders(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    ctx = make_context(workspace=str(tmp_path), env={"TMPDIR": str(tmp_path), "PATH": "/bin"},
                       config={"data_dir": str(tmp_path / "data")})
    temps = proto_get(ctx, kw("temp-dirs"))
    assert str(tmp_path.resolve()) not in temps, temps
    assert "/tmp" not in temps or not str(home.resolve()).startswith("/tmp/"), temps
    assert proto_get(ctx, kw("search-path")) == "/bin"
