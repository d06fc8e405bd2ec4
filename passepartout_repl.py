"""repl: evaluate Hy forms in the running Passepartout daemon.

    repl '(+ 1 2)'
    echo '(skills)' | repl
    repl --socket /run/user/1000/passepartout/repl.sock --timeout 5 '(slow-thing)'

Standard library only, and outside the passepartout package (whose front door
imports Hy), so that it starts in a few tens of milliseconds.

The daemon listens on a Unix socket. One request per connection: a JSON object
{"forms": TEXT, "timeout": SECONDS} on one line; one JSON object back:
{"ok": true, "value": TEXT, "output": TEXT} or
{"ok": false, "error": TEXT, "traceback": TEXT, "output": TEXT}.

Exit status: 0 on a value, 1 on an error in the forms, 2 when no daemon answers.
"""
import argparse
import json
import os
import socket
import sys
from pathlib import Path

try:
    import tomllib
except ImportError:  # pragma: no cover - Python < 3.11 is not supported
    tomllib = None

SOCKET_NAME = "repl.sock"
MAX_ANSWER = 64 * 1024 * 1024


def _env(name):
    value = os.environ.get(name, "")
    return value if value else None


def _config_dirs():
    """(data_dir, runtime_dir) as the config file names them, if it does."""
    path = _env("PASSEPARTOUT_CONFIG") or os.path.join(
        _env("XDG_CONFIG_HOME") or os.path.expanduser("~/.config"), "passepartout", "config.toml")
    if tomllib is None or not os.path.isfile(path):
        return None, None
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except (OSError, ValueError):
        return None, None
    base = os.path.dirname(path)

    def resolve(value):
        if not isinstance(value, str):
            return None
        return os.path.join(base, os.path.expanduser(value))

    return resolve(data.get("data_dir")), resolve(data.get("runtime_dir"))


def default_socket():
    """Where the daemon's REPL socket is, by the same rules as the daemon's config."""
    data_dir, runtime_dir = _config_dirs()
    runtime = _env("PASSEPARTOUT_RUNTIME_DIR") or runtime_dir
    if not runtime:
        xdg = _env("XDG_RUNTIME_DIR")
        if xdg and os.path.isabs(xdg):
            runtime = os.path.join(xdg, "passepartout")
        else:
            data = _env("PASSEPARTOUT_DATA_DIR") or data_dir or os.path.join(
                _env("XDG_DATA_HOME") or os.path.expanduser("~/.local/share"), "passepartout")
            runtime = os.path.join(data, "run")
    return os.path.join(os.path.abspath(os.path.expanduser(runtime)), SOCKET_NAME)


def evaluate(forms, socket_path, timeout):
    """The daemon's answer (a dict) to FORMS. Raises OSError when no daemon answers."""
    request = json.dumps({"forms": forms, "timeout": timeout}) + "\n"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout + 5)
        s.connect(socket_path)
        s.sendall(request.encode("utf-8"))
        s.shutdown(socket.SHUT_WR)
        chunks, size = [], 0
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > MAX_ANSWER:
                raise OSError("the daemon's answer is too large")
    answer = b"".join(chunks).decode("utf-8", "replace")
    if not answer.strip():
        raise OSError("the daemon closed the connection without answering")
    return json.loads(answer)


def main(argv=None):
    p = argparse.ArgumentParser(prog="repl", description="Evaluate Hy forms in the running Passepartout daemon.")
    p.add_argument("forms", nargs="?", help="the forms to evaluate (default: read standard input)")
    p.add_argument("--socket", help="the daemon's REPL socket (default: from the config)")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds before the evaluation is abandoned")
    args = p.parse_args(argv)
    forms = args.forms if args.forms is not None else sys.stdin.read()
    if not forms.strip():
        print("repl: no forms given", file=sys.stderr)
        return 2
    path = args.socket or default_socket()
    try:
        answer = evaluate(forms, path, args.timeout)
    except (OSError, ValueError) as e:
        print(f"repl: no daemon answers at {path} ({e}).", file=sys.stderr)
        print("Start one with `passepartout daemon` (or `passepartout chat`).", file=sys.stderr)
        return 2
    if answer.get("output"):
        sys.stdout.write(answer["output"])
        if not answer["output"].endswith("\n"):
            sys.stdout.write("\n")
    if answer.get("ok"):
        print(answer.get("value", ""))
        return 0
    if answer.get("traceback"):
        sys.stderr.write(answer["traceback"])
    print(answer.get("error", "error"), file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
