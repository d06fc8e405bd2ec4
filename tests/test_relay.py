"""The relay: which command lines get a way out of the box."""
import hy  # noqa: F401

from passepartout.relay import may_reach_network


def test_which_lines_get_a_way_out():
    for cmd in ["ls -la | grep x > out", "cd sub && cat f", "/bin/ls", "mkdir -p a && echo ok > a/f"]:
        assert not may_reach_network(cmd), cmd
    for cmd in ["python3 x.py", "timeout 5 grep x f", "sh -c ls", "echo $(curl h)", "ls `curl h`",
                "a() { ls; }; a", "$X y", "if then", "", "find . -exec cat {} ;", "make"]:
        assert may_reach_network(cmd), cmd
