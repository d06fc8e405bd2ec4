"""The installed package, not the source tree: build a wheel, install it apart, use it."""
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_wheel_carries_every_module_and_works_from_elsewhere(tmp_path):
    wheels = tmp_path / "wheels"
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(wheels), str(ROOT)],
        capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr
    (wheel,) = wheels.glob("passepartout-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for module in (ROOT / "passepartout").rglob("*.hy"):
        name = module.relative_to(ROOT).as_posix()
        assert name in names, f"{name} is not in the wheel"
    for skill in (ROOT / "skills").glob("*.hy"):
        assert f"passepartout_skills/{skill.name}" in names, f"skill {skill.name} is not in the wheel"

    target = tmp_path / "site"
    install = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
        capture_output=True, text=True, timeout=300)
    assert install.returncode == 0, install.stderr

    config = tmp_path / "config.toml"
    config.write_text("")
    env = dict(os.environ, PYTHONPATH=str(target), PASSEPARTOUT_CONFIG=str(config),
               PASSEPARTOUT_DATA_DIR=str(tmp_path / "data"))
    code = (
        "import sys, passepartout, passepartout_skills\n"
        "print(passepartout.__file__)\n"
        "print(passepartout_skills.__file__)\n"
        "from passepartout.tools.cli import main\n"
        "main(['verify', '-', '--workspace', sys.argv[1]])\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)],
        input='(:action :read-file :path "../../../etc/shadow" :explanation "x")\n'
              '(:action :read-file :path "notes.txt" :explanation "x")\n',
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].startswith(str(target)), f"imported {lines[0]}, not the installed copy"
    assert lines[1].startswith(str(target)), f"skills from {lines[1]}, not the installed copy"
    verdicts = [json.loads(line)["verdict"] for line in lines[2:]]
    assert verdicts == ["reject", "allow"], run.stdout


def test_without_bytecode_beside_the_sources_a_cache_of_our_own_keeps_starts_fast(tmp_path):
    """PYTHONDONTWRITEBYTECODE (most container images): the first start compiles
    into our own cache, the second compiles nothing, and nothing is written
    beside the sources. The command line's own modules are what a start imports
    first; the mechanism is the package's, the same for every module."""
    cache = tmp_path / "cache"
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", PASSEPARTOUT_CACHE_DIR=str(cache),
               HY_MESSAGE_WHEN_COMPILING="1")
    code = "import passepartout.tools.cli"
    first = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    assert "Compiling" in first.stderr or any(cache.rglob("*.pyc")), "the first start compiled nothing"
    assert any(cache.rglob("cli*.pyc")), "the bytecode is not in the cache of our own"
    second = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stderr
    assert second.stderr.strip() == "", f"the second start compiled again:\n{second.stderr[:2000]}"
