"""repl: evaluate Hy forms in the running Passepartout daemon.

    repl '(+ 1 2)'
    echo '(skills)' | repl
    repl --socket /run/user/1000/passepartout/repl.sock --timeout 5 '(slow-thing)'

Standard library only, and outside the passepartout package (whose front door
imports Hy), so that it starts in a few tens of milliseconds. For the same
reason it imports as little as it can: no argparse (it costs more than the
rest of the client together), and tomllib only when a config file has to be
read to find the socket. bin/repl runs it with `python -S`, skipping site.

The daemon listens on a Unix socket. One request per connection: a JSON object
{"forms": TEXT, "timeout": SECONDS} on one line; one JSON object back:
{"ok": true, "value": TEXT, "output": TEXT} or
{"ok": false, "error": TEXT, "traceback": TEXT, "output": TEXT}.

Exit status: 0 on a value, 1 on an error in the forms (or a refusal), 2 when no
daemon answers or the command line is wrong.

The REPL answers people only. Run from inside one of the agent's actions (a
shell started with PASSEPARTOUT_SANDBOX set, or anything descended from one),
this client refuses before connecting; the daemon refuses such a caller too, and
its check is the one that counts, since a caller need not use this client.
"""
import json
import os
import socket
import sys

SOCKET_NAME = "repl.sock"
MAX_ANSWER = 64 * 1024 * 1024
MARKER = "PASSEPARTOUT_SANDBOX"


def _env(name):
    value = os.environ.get(name, "")
    return value if value else None


def _absolute_env(name):
    """NAME from the environment when it is an absolute path (the XDG rule)."""
    value = _env(name)
    return value if value and os.path.isabs(value) else None


def _config_dirs():
    """(data_dir, runtime_dir) as the config file names them, if it does."""
    path = _env("PASSEPARTOUT_CONFIG") or os.path.join(
        _absolute_env("XDG_CONFIG_HOME") or os.path.expanduser("~/.config"), "passepartout", "config.toml")
    if not os.path.isfile(path):
        return None, None
    import tomllib

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
                _absolute_env("XDG_DATA_HOME") or os.path.expanduser("~/.local/share"), "passepartout")
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


def inside_action():
    """Why this process runs inside an action (the marker on it or on an
    ancestor's starting environment), or None."""
    if MARKER in os.environ:
        return f"{MARKER} is set, as in every action's shell"
    key = MARKER.encode() + b"="
    pid, steps = os.getppid(), 0
    while pid > 0 and steps < 512:
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if any(e.startswith(key) for e in f.read().split(b"\0")):
                    return f"its ancestor {pid} was started with {MARKER} set"
        except OSError:
            pass
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                pid = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
        steps += 1
    return None


USAGE = """usage: repl [--socket PATH] [--timeout SECONDS] [FORMS]

Evaluate Hy forms in the running Passepartout daemon and print the value of
the last one (and anything the forms printed). With no FORMS, read them from
standard input.

  --socket PATH      the daemon's REPL socket (default: from the config)
  --timeout SECONDS  abandon the evaluation after this long (default 30)
"""


class UsageError(Exception):
    pass


def parse_args(argv):
    """(forms or None, socket or None, timeout) from the command line ARGV."""
    forms, path, timeout = None, None, 30.0
    args = list(argv)
    while args:
        arg = args.pop(0)
        if arg in ("-h", "--help"):
            sys.stdout.write(USAGE)
            sys.exit(0)
        if arg == "--":
            rest = args
            args = []
        elif arg.startswith("--socket") or arg.startswith("--timeout"):
            name, eq, value = arg.partition("=")
            if name not in ("--socket", "--timeout"):
                raise UsageError(f"unknown option {arg}")
            if not eq:
                if not args:
                    raise UsageError(f"{name} needs a value")
                value = args.pop(0)
            if name == "--socket":
                path = value
            else:
                try:
                    timeout = float(value)
                except ValueError:
                    raise UsageError(f"--timeout needs a number of seconds, not {value!r}") from None
                if not 0 < timeout < float("inf"):
                    raise UsageError("--timeout must be a positive number of seconds")
            continue
        elif arg.startswith("-") and arg != "-":
            raise UsageError(f"unknown option {arg}")
        else:
            rest = [arg]
        for a in rest:
            if forms is not None:
                raise UsageError("give the forms as one argument (quote them), or on standard input")
            forms = a
    return forms, path, timeout


def main(argv=None):
    try:
        forms, path, timeout = parse_args(sys.argv[1:] if argv is None else argv)
    except UsageError as e:
        sys.stderr.write(f"repl: {e}\n{USAGE}")
        return 2
    why = inside_action()
    if why:
        print(f"repl: refused: the REPL answers people only, and this runs inside one of "
              f"the agent's actions ({why}).", file=sys.stderr)
        return 1
    if forms is None or forms == "-":
        forms = sys.stdin.read()
    if not forms.strip():
        print("repl: no forms given", file=sys.stderr)
        return 2
    path = path or default_socket()
    try:
        answer = evaluate(forms, path, timeout)
    except (OSError, ValueError) as e:
        print(f"repl: no daemon answers at {path} ({e}).", file=sys.stderr)
        print("Start one with `passepartout daemon` (or `passepartout chat`).", file=sys.stderr)
        return 2
    if not isinstance(answer, dict):
        print(f"repl: the daemon at {path} answered something that is not an answer.", file=sys.stderr)
        return 2
    if answer.get("output"):
        sys.stdout.write(answer["output"])
        if not answer["output"].endswith("\n"):
            sys.stdout.write("\n")
    if answer.get("ok"):
        print(answer.get("value", ""))
        return 0
    error = answer.get("error", "error")
    traceback = answer.get("traceback") or ""
    if traceback:  # it ends with the error's own line: the error is said once
        sys.stderr.write(traceback)
        if not traceback.endswith("\n"):
            sys.stderr.write("\n")
    else:
        print(error, file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
