"""Test collection for Hy modules, and the fixtures every test shares."""
import os
import sys
import time
from pathlib import Path

import hy  # noqa: F401  (registers the .hy importer)
import pytest

sys.path.insert(0, str(Path(__file__).parent))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
# Every real deployment holds a secret (a provider's key, a bot token): the whole
# suite runs with one in the environment, so every daemon, chat and command line
# the tests start treats it as one of its own secrets.
os.environ.setdefault("PASSEPARTOUT_TEST_API_KEY", "pp-test-key-7f3a9c2e51b84d06")

# Where no bytecode may be written beside the sources (PYTHONDONTWRITEBYTECODE),
# the package keeps its bytecode in a cache of its own, found from HOME; the
# daemons and commands the tests start have a HOME of their own, and each would
# compile the whole package again. They share the suite's cache instead.
import passepartout  # noqa: E402,F401  (chooses the cache, as every start does)

if sys.pycache_prefix and "PASSEPARTOUT_CACHE_DIR" not in os.environ:
    os.environ["PASSEPARTOUT_CACHE_DIR"] = sys.pycache_prefix

def pytest_configure(config):
    """Compile the Hy modules and skills once, before the workers start: on a
    fresh checkout each worker, and each process a test starts, would otherwise
    compile the same modules at the same time."""
    if hasattr(config, "workerinput"):
        return
    import importlib
    import pkgutil
    from passepartout.skills import Registry, load_skills
    for m in pkgutil.walk_packages(passepartout.__path__, "passepartout."):
        if not m.name.endswith("__main__"):
            try:
                importlib.import_module(m.name)
            except Exception:  # a module that does not compile is reported by the tests that import it
                pass
    try:
        load_skills(Registry())
    except Exception:
        pass


class HyModule(pytest.Module):
    """A test module written in Hy, loaded by Hy's own loader: pytest's
    assertion rewriting, which would take any test file named on the command
    line, reads Python only."""

    def _getobj(self):
        import importlib.util
        from hy.importer import HyLoader
        name = self.path.stem
        loader = HyLoader(name, str(self.path))
        spec = importlib.util.spec_from_file_location(name, self.path, loader=loader)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        loader.exec_module(module)
        return module


def pytest_collect_file(file_path, parent):
    if file_path.suffix == ".hy" and file_path.name.startswith("test_"):
        return HyModule.from_parent(parent, path=file_path)


@pytest.fixture
def booted(tmp_path):
    """A function that boots a daemon on TMP_PATH with the symbolic provider
    (CONFIG is the config file's text, ENVIRON extra variables) and returns its
    services; every one it booted is shut down afterwards."""
    from passepartout.providers import make_provider
    from passepartout.daemon import boot, shutdown

    envs = []

    def make(config="", environ=None):
        path = tmp_path / "config.toml"
        path.write_text(config)
        env = boot(config_path=str(path),
                   environ={"PASSEPARTOUT_DATA_DIR": str(tmp_path / "data"), "HOME": str(tmp_path),
                            **(environ or {})},
                   providers=[make_provider("symbolic")])
        envs.append(env)
        return env

    yield make
    for env in envs:
        shutdown(env)


@pytest.fixture(scope="module")
def registry():
    """The built-in skills, as a daemon loads them, in a registry of the module's own."""
    from passepartout.skills import Registry, load_skills
    reg = Registry()
    load_skills(reg)
    return reg


@pytest.fixture(scope="module")
def outside_temp():
    """A fresh folder outside /tmp and /var/tmp, for a home folder or a data dir
    laid out as on a person's machine: a temp folder that holds the home folder
    or the daemon's files is not a temp folder to the gates."""
    import shutil
    import tempfile
    for root in ("/dev/shm", str(Path.home() / ".cache")):
        try:
            Path(root).mkdir(parents=True, exist_ok=True)
            base = Path(tempfile.mkdtemp(prefix="passepartout-test-", dir=root))
            break
        except OSError:
            continue
    else:
        pytest.fail("no folder outside the temp folders is writable for the test's home")
    yield base
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def openai_server():
    """A scripted OpenAI-compatible server (tests/openai_server.py) on 127.0.0.1,
    stopped after the test."""
    from openai_server import ScriptedOpenAIServer
    server = ScriptedOpenAIServer()
    try:
        yield server
    finally:
        server.stop()


def need_bwrap():
    """The sandbox status when bubblewrap works here; else the test is skipped,
    or fails under CI, which installs bubblewrap so that the sandbox is tested."""
    from hy.models import Keyword
    from passepartout.proto import proto_get
    from passepartout.sandbox import sandbox_status
    status = sandbox_status({})
    if proto_get(status, Keyword("kind")) != "bubblewrap":
        why = f"bubblewrap does not work here: {proto_get(status, Keyword('why'))}"
        if os.environ.get("CI"):
            pytest.fail(f"{why}; CI installs it, so the sandbox must be tested")
        pytest.skip(why)
    return status


def run_python(code):
    """The JSON printed last by CODE (dedented), run by a Python of its own in the checkout."""
    import json
    import subprocess
    import textwrap
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)],
                         cwd=Path(__file__).resolve().parent.parent,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def write_rules(tmp_path, text):
    """A shell rules file holding TEXT, in TMP_PATH."""
    path = tmp_path / "rules.toml"
    path.write_text(text)
    return path


def wait_until(predicate, seconds=60.0):
    """True once PREDICATE holds, checked every 20 ms; its last answer after SECONDS."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


@pytest.fixture(scope="session")
def killed_while_acting():
    """One run of the daemon as a process, killed (-9) half-way through twenty
    messages each noted by a shell action, then started again (run_killed in
    tests/bot_api_server.py): what it counted, its log and its data folder. The
    tests that judge this run are marked xdist_group("killed-while-acting"), so
    the run is made once, on one worker."""
    from bot_api_server import run_killed
    return run_killed(chats=5, per_chat=4, kill_at=0.5, acting=True, timeout=90)


@pytest.fixture(params=["bubblewrap", "off"])
def box(request):
    """The [sandbox] mode line a test's commands run under: bubblewrap (skipped
    where it does not work) or none, on purpose."""
    if request.param == "bubblewrap":
        need_bwrap()
        return 'mode = "auto"'
    return 'mode = "off"'


# * A daemon with its REPL socket (tests/test_repl.py, tests/test_console.py)

BIN_REPL = Path(__file__).resolve().parent.parent / "bin" / "repl"


@pytest.fixture
def runtime():
    """A short runtime dir: a Unix socket path must fit in 108 bytes."""
    import shutil
    import tempfile
    d = tempfile.mkdtemp(prefix="pp-")
    yield Path(d)
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def model_calls():
    """The requests the model was asked, which no test here wants."""
    return []


def make_env(booted, runtime, calls, config_text=""):
    """The services of a daemon whose runtime dir is in RUNTIME and whose model
    records each request in CALLS and fails the test."""
    env = booted(config_text, {"PASSEPARTOUT_RUNTIME_DIR": str(runtime / "run")})

    def complete(request):
        calls.append(request)
        raise AssertionError("the model was asked")

    env.complete = complete
    return env


@pytest.fixture
def env(booted, runtime, model_calls):
    return make_env(booted, runtime, model_calls)


@pytest.fixture
def server(env):
    from passepartout.console import ReplThread
    s = ReplThread(env)
    yield s
    s.stop()


def ask(server, forms, timeout=10.0):
    """What the REPL of SERVER answers FORMS, asked as bin/repl asks."""
    import passepartout_repl
    return passepartout_repl.evaluate(forms, server.path, timeout)


def repl(*args, input=None, command=None):
    """bin/repl as a process."""
    import subprocess
    command = command or [sys.executable, "-S", str(BIN_REPL)]
    return subprocess.run(command + list(args), input=input, capture_output=True, text=True, timeout=60)
