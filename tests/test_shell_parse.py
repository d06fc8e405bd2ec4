"""Tests for passepartout/shell/parse.hy: sed scripts and brace expansion as the shell reads them."""
import hy  # noqa: F401  (the .hy importer)

from passepartout.shell.parse import expand_braces, sed_effects


def test_sed_scripts_are_read_command_by_command():
    assert sed_effects("s/a/b/g") == {"runs": False, "writes": [], "reads": []}
    assert sed_effects("1e id")["runs"]
    assert sed_effects("s/x/id/e")["runs"]
    assert sed_effects("s/a/b/;e date")["runs"]
    assert sed_effects("s/a/b/w out.txt")["writes"] == ["out.txt"]
    assert sed_effects("/x/w /etc/x")["writes"] == ["/etc/x"]
    assert sed_effects("1r /etc/passwd")["reads"] == ["/etc/passwd"]
    # an e or w inside a pattern or a replacement is text, not a command
    assert sed_effects("s/e/w/") == {"runs": False, "writes": [], "reads": []}
    assert sed_effects("s|/usr/e|/opt/w|g") == {"runs": False, "writes": [], "reads": []}
    assert sed_effects("/start/,/end/{s/a/b/;p}")["runs"] is False
    assert sed_effects("$!N;P;D")["runs"] is False
    assert sed_effects("s/a/b") is None
    assert sed_effects("k") is None


def test_brace_expansion():
    assert expand_braces("a{b,c}d") == ["abd", "acd"]
    assert expand_braces("/{etc,usr}/x") == ["/etc/x", "/usr/x"]
    assert expand_braces("{1..3}") == ["1", "2", "3"]
    assert expand_braces("{a..c}") == ["a", "b", "c"]
    assert expand_braces("{x}") == ["{x}"]
    assert expand_braces("${x}") == ["${x}"]
    out = {}
    assert len(expand_braces("{1..100000000}", 32, out)) == 32 and out["overflow"]
