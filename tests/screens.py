"""What a person sees in the terminal chat, screen by screen, in a real terminal.

    python tests/screens.py [OUT]

starts `passepartout chat` in a tmux pane (120 columns) on a fresh data dir, with a
scripted model (tests/openai_server.py) that answers "loop" by reading the same
missing file again and again (a fixed point) and "clean" by proposing `rm -rf ~`
(refused three times), and types, as a person would:

    !ls notes.txt nonexistent          a failed command and its output
    !git push --force origin main, y   an approval answered with one key
    !git push --force origin main, n   a denial
    loop                               a fixed-point stop
    clean                              a refusal after three attempts
    /pending, /status, /help

The whole pane (its history too) is written to OUT (default screens.txt) and printed.
Exit status 1 when any screen holds plist text, `(:`, which no person asked for here.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from openai_server import ScriptedOpenAIServer  # noqa: E402

BIN = Path(sys.executable).parent
SESSION = "pp-screens"


def responder(body):
    """Propose by the last of the person's words "loop" and "clean" in the conversation."""
    text = json.dumps(body["messages"])
    at = {w: text.rfind(f'"{w}') for w in ("loop", "clean")}
    word = max(at, key=at.get)
    if at[word] < 0:
        return '(:action :message :text "I can help with that.")'
    if word == "loop":
        return '(:action :shell :cmd "cat missing.txt" :explanation "read the file again")'
    return '(:action :shell :cmd "rm -rf ~" :explanation "clean up the home folder")'


def tmux(*args):
    return subprocess.run(["tmux", *args], capture_output=True, text=True, check=False)


def pane():
    return tmux("capture-pane", "-p", "-J", "-t", SESSION, "-S", "-").stdout


def wait_for(pattern, seconds=90.0, after=0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        text = pane()
        if re.search(pattern, text[after:]):
            return text
        time.sleep(0.1)
    raise SystemExit(f"timed out waiting for {pattern!r}:\n{pane()}")


def idle(seconds=60.0):
    """Wait until the toolbar no longer says thinking."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if "thinking…" not in tmux("capture-pane", "-p", "-t", SESSION).stdout:
            time.sleep(0.3)
            if "thinking…" not in tmux("capture-pane", "-p", "-t", SESSION).stdout:
                return
        time.sleep(0.1)
    raise SystemExit(f"still thinking:\n{pane()}")


def type_line(text, then=None, seconds=90.0):
    before = len(pane())
    tmux("send-keys", "-t", SESSION, "-l", text)
    tmux("send-keys", "-t", SESSION, "Enter")
    if then:
        wait_for(then, seconds, after=max(0, before - 200))
    idle()


def press(key, then, seconds=90.0):
    before = len(pane())
    tmux("send-keys", "-t", SESSION, "-l", key)
    wait_for(then, seconds, after=max(0, before - 200))
    idle()


def main(out):
    server = ScriptedOpenAIServer()
    server.responder = responder
    folder = Path(tempfile.mkdtemp(prefix="passepartout-screens-"))
    try:
        config = folder / "config.toml"
        config.write_text(f'[[providers]]\nname = "scripted"\nmodel = "openai/scripted"\n'
                          f'api_base = "{server.url("ok")}"\napi_key_env = "SCREENS_KEY"\n')
        env = {k: v for k, v in os.environ.items() if not k.startswith("PASSEPARTOUT_")}
        env.update(PASSEPARTOUT_DATA_DIR=str(folder / "data"), PASSEPARTOUT_CONFIG=str(config),
                   HOME=str(folder), SCREENS_KEY="scripted-key", TERM="xterm-256color")
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        tmux("kill-session", "-t", SESSION)
        command = " ".join([f"{k}='{v}'" for k, v in env.items() if k.startswith(("PASSEPARTOUT_", "SCREENS_"))]
                           + ["HOME=" + str(folder), str(BIN / "passepartout"), "chat"])
        tmux("new-session", "-d", "-s", SESSION, "-x", "120", "-y", "50", "env -u PYTHONDONTWRITEBYTECODE " + command)
        tmux("set-option", "-t", SESSION, "history-limit", "20000")
        wait_for(r"you>", 120)
        type_line("!ls notes.txt nonexistent", r"failed with exit status 2")
        type_line("!git push --force origin main", r"Or press y")
        press("y", r"failed with exit status 128:")
        type_line("!git push --force origin main", r"Or press y")
        press("n", r"denied")
        type_line("loop", r"Stopped")
        type_line("clean", r"could not find an action|did not")
        type_line("/pending", r"approvals are pending|Pending approvals")
        type_line("/status", r"Protection:|Workspace:")
        type_line("/help", r"Anything else goes to the model")
        text = pane().rstrip() + "\n"
        tmux("send-keys", "-t", SESSION, "C-d")
        time.sleep(1)
    finally:
        tmux("kill-session", "-t", SESSION)
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)
    Path(out).write_text(text)
    print(text)
    plists = [line for line in text.splitlines() if "(:" in line]
    if plists:
        print("plist text shown:", *plists, sep="\n  ", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "screens.txt"))
