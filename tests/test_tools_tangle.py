"""The org tangler, against fixtures whose output Emacs wrote.

Each directory under fixtures/tangle/ is a small project (org/*.org tangling
into folders beside org/). fixtures/tangle/expected/ holds what Emacs 28
(Org 9.5) tangles from the fixtures that have no intentional error; where
Emacs is installed the comparison is made against Emacs itself as well. Emacs
writes no outline, so the tests of its rules tangle with outline=False; the
outline has tests of its own.
"""
import importlib.util
import os
import re
import shutil
import subprocess
from pathlib import Path

import hy
import pytest

import passepartout.tools.tangle as tangle_mod
from passepartout.tools.tangle import (
    org_blocks, org_outlined_blocks, tangle, tangle_files, why_paragraph,
)

FIXTURES = Path(__file__).parent / "fixtures" / "tangle"
EXPECTED = FIXTURES / "expected"
REPO = Path(__file__).parent.parent
CLEAN = sorted(p.name for p in EXPECTED.iterdir())


def project(tmp_path, name):
    """A fresh copy of the fixture NAME; its root."""
    root = tmp_path / name
    shutil.copytree(FIXTURES / name, root)
    return root


def tree(root):
    """Every file under ROOT except the org sources, as {relative path: bytes}."""
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.suffix != ".org"
    }


def expected_tree(name):
    return tree(EXPECTED / name)


def show(a, b):
    """Both sides of a failed comparison, readable."""
    return f"\n--- got ---\n{a}\n--- expected ---\n{b}"


# * What each fixture tangles to


def test_the_clean_fixtures_are_the_ones_expected():
    assert CLEAN == [
        "block-tangle",
        "commented",
        "escapes",
        "file-property",
        "generic-header-args",
        "indented",
        "late-property",
        "multi-file",
        "other-languages",
        "quoted-values",
        "raw-blocks",
        "subtree-properties",
        "tabs",
        "tangle-yes",
    ]


def test_block_level_tangle_targets(tmp_path):
    root = project(tmp_path, "block-tangle")
    written = tangle(root)
    out = (root / "out").resolve()
    assert written == [out / "first.hy", out / "second.hy"]
    assert (out / "first.hy").read_text() == (
        '(defn first-thing []\n  "one")\n\n(setv first-again 1)\n'
    )
    assert (out / "second.hy").read_text() == '(defn second-thing []\n  "two")\n'
    assert sorted(p.name for p in out.iterdir()) == ["first.hy", "second.hy"]


def test_file_property_collects_blocks_in_order(tmp_path):
    root = project(tmp_path, "file-property")
    tangle(root, outline=False)
    text = (root / "out" / "module.hy").read_text()
    assert text == (
        "(import os)\n\n(defn one [] 1)\n\n(defn two [] 2)\n\n(defn three [] 3)\n\n"
        "(defn four [] 4)\n"
    ), show(text, "")
    assert "this-is-an-example" not in text
    assert (root / "out" / "elsewhere.hy").read_text() == "(setv elsewhere 1)\n"


def test_tangle_no_skips_and_tangle_yes_names_the_file_after_the_org_file(tmp_path):
    root = project(tmp_path, "tangle-yes")
    written = tangle(root)
    target = (root / "org" / "yes.hy").resolve()
    assert written == [target]
    assert target.read_text() == "(setv beside-the-org-file True)\n\n(setv second-block True)\n"


def test_indentation_blank_lines_and_empty_blocks(tmp_path):
    root = project(tmp_path, "indented")
    tangle(root, outline=False)
    text = (root / "out" / "indented.hy").read_text()
    want = (
        '(defn nested []\n  (when True\n    "deeper"))\n\n'
        "(setv a 1)\n\n(setv b 2)\n\n"
        '(setv tabbed\n  "tab then spaces")\n\n'
        "(setv upper-case-markers True)\n\n"
        "\n\n"
        "(setv after-an-empty-block True)\n"
    )
    assert text == want, show(text, want)


def test_comma_escapes_lose_exactly_one_comma(tmp_path):
    root = project(tmp_path, "escapes")
    tangle(root)
    lines = (root / "out" / "escapes.hy").read_text().splitlines()
    assert lines == [
        '(setv doc "',
        "* not a headline",
        "** nor this",
        "  * indented star",
        "#+begin_src not a block",
        "#+end_src",
        ",* two commas leave one",
        ", a comma before a space stays",
        ",x a comma before a letter stays",
        ',")',
    ]


def test_other_languages_are_not_tangled(tmp_path):
    root = project(tmp_path, "other-languages")
    assert tangle(root) == [(root / "out" / "mixed.hy").resolve()]
    assert (root / "out" / "mixed.hy").read_text() == "(setv from-hy 1)\n\n(setv from-hy-again 2)\n"
    assert sorted(p.name for p in (root / "out").iterdir()) == ["mixed.hy"]


def test_several_org_files_and_folders(tmp_path):
    root = project(tmp_path, "multi-file")
    written = tangle(root)
    assert [p.relative_to(root.resolve()).as_posix() for p in written] == [
        "out/alpha.hy",
        "pkg/beta.hy",
        "pkg/gamma.hy",
    ]
    assert tree(root) == expected_tree("multi-file")


def outputs(root):
    """The tangled files under ROOT/out, as {name: text}."""
    return {p.name: p.read_text() for p in sorted((root / "out").iterdir())}


def test_a_property_line_applies_to_blocks_above_it_and_the_last_one_wins(tmp_path):
    root = project(tmp_path, "late-property")
    assert tangle(root) == [(root / "out" / "late.hy").resolve()]
    assert outputs(root) == {
        "late.hy": "(setv above-the-property 1)\n\n(setv below-the-property 2)\n"
    }


def test_property_drawers_apply_to_their_subtrees(tmp_path):
    root = project(tmp_path, "subtree-properties")
    tangle(root, outline=False)
    texts = outputs(root)
    assert sorted(texts) == [
        "appended.hy", "deeper.hy", "file.hy", "first-line.hy", "own.hy",
        "planned.hy", "subtree.hy", "top-drawer.hy",
    ]
    assert texts["subtree.hy"] == "(setv in-the-subtree 2)\n\n(setv inherited 3)\n"
    assert texts["deeper.hy"] == "(setv deeper 4)\n"
    assert texts["own.hy"] == "(setv own 5)\n"
    assert texts["appended.hy"] == "(setv appended 6)\n"
    assert texts["planned.hy"] == "(setv planned 8)\n"
    assert texts["file.hy"] == (
        "(setv file-level 1)\n\n(setv file-level-again 7)\n\n(setv file-level-still 9)\n\n"
        "(setv not-from-that-drawer 10)\n\n(setv not-from-that-drawer-either 11)\n"
    )
    assert texts["top-drawer.hy"] == "(setv from-the-top-drawer 1)\n\n(setv under-a-heading 2)\n"
    assert texts["first-line.hy"] == "(setv first-line 3)\n"


def test_commented_and_archived_subtrees_are_skipped(tmp_path):
    root = project(tmp_path, "commented")
    tangle(root, outline=False)
    assert outputs(root) == {
        "commented.hy": "(setv before-any-heading 1)\n\n(setv sibling 2)\n\n"
        "(setv commentary 3)\n\n(setv lower-case 4)\n\n(setv after-the-star 5)\n"
    }


def test_quoted_values_spaces_and_the_last_of_two_tangle_arguments(tmp_path):
    root = project(tmp_path, "quoted-values")
    tangle(root)
    assert outputs(root) == {
        "bare space.hy": "(setv unquoted-with-a-space 3)\n",
        "quoted.hy": "(setv quoted 1)\n\n(setv colon-in-quotes 4)\n\n"
        "(setv colon-in-brackets 5)\n\n(setv the-last-wins 6)\n",
        "with space.hy": "(setv quoted-with-a-space 2)\n",
    }
    assert (root / "org" / "values.Hy").read_text() == "(setv capital-language 7)\n"


def test_a_tab_counts_as_eight_columns_of_indentation(tmp_path):
    root = project(tmp_path, "tabs")
    tangle(root)
    text = (root / "out" / "tabs.hy").read_text()
    want = (
        "(setv tab-then-spaces\n1)\n\n"
        "(setv kept\n\t2)\n\n"
        "(setv cut-tab\n    3)\n\n"
        "(setv cut-second-tab\n\t      4)\n\n"
        "(setv mixed 5\n  (inner)\n\t (deeper))\n\n"
        "(setv emptied 6)\n\n(setv after 7)\n\n"
        "(setv kept-blank 8)\n   \n  (setv indented 9)\n\n"
        "(setv in-an-item\n      10)\n"
    )
    assert text == want, show(text, want)


def test_a_begin_src_inside_an_example_export_comment_or_verse_is_text(tmp_path):
    root = project(tmp_path, "raw-blocks")
    tangle(root, outline=False)
    text = (root / "out" / "raw.hy").read_text()
    assert '"no"' not in text
    assert text == (
        "(setv in-a-quote 1)\n\n(setv in-a-center 2)\n\n(setv in-a-special-block 3)\n\n"
        "(setv in-a-drawer 4)\n\n(setv after-an-open-example 5)\n\n"
        "(setv after-the-stray-end 6)\n\n"
        '(setv doc "\n#+end_src is not the end\n#+end_srcx nor this")\n'
    ), show(text, "")


def test_header_args_without_language_and_the_plus_form(tmp_path):
    root = project(tmp_path, "generic-header-args")
    tangle(root, outline=False)
    assert outputs(root) == {
        "drawer-generic.hy": "(setv drawer-generic 5)\n",
        "drawer-hy.hy": "(setv drawer-hy 2)\n",
        "drawer-plus.hy": "(setv drawer-plus 3)\n",
        "file-hy.hy": "(setv file-hy 1)\n\n(setv still-file-hy 4)\n",
        "generic.hy": "(setv generic 1)\n",
        "plus.hy": "(setv plus 1)\n",
        "subtree-generic.hy": "(setv subtree-generic 2)\n",
    }


# * The outline


def test_the_headings_above_the_blocks_are_written_once_as_comment_headings(tmp_path):
    root = project(tmp_path, "file-property")
    tangle(root)
    text = (root / "out" / "module.hy").read_text()
    want = (
        ";; * Imports\n\n(import os)\n\n"
        ";; * Back to the module, in document order\n\n(defn one [] 1)\n\n"
        "(defn two [] 2)\n\n(defn three [] 3)\n\n"
        ";; ** Header arguments beside the target\n\n(defn four [] 4)\n"
    )
    assert text == want, show(text, want)
    elsewhere = (root / "out" / "elsewhere.hy").read_text()
    assert elsewhere == ";; * A block sent elsewhere\n\n(setv elsewhere 1)\n", elsewhere


def test_a_heading_is_written_with_its_parents_and_without_keyword_priority_or_tags(tmp_path):
    org = tmp_path / "org" / "outline.org"
    org.parent.mkdir()
    org.write_text(
        "#+PROPERTY: header-args:hy :tangle ../out.hy\n"
        "#+begin_src hy\n(setv before-any-heading 0)\n#+end_src\n"
        "* Parent with no block of its own\n"
        "** TODO [#A] The child :tag:other:\n"
        "#+begin_src hy\n(setv child 1)\n#+end_src\n"
        "*** \n#+begin_src hy\n(setv untitled 2)\n#+end_src\n"
        "** COMMENT Left out\n#+begin_src hy\n(setv no 3)\n#+end_src\n"
        "* Only prose\n"
        "* Only another file\n#+begin_src hy :tangle ../other.hy\n(setv other 4)\n#+end_src\n"
    )
    texts = tangle_files([org])
    out = texts[(tmp_path / "out.hy").resolve()]
    want = (
        "(setv before-any-heading 0)\n\n"
        ";; * Parent with no block of its own\n\n;; ** The child\n\n(setv child 1)\n\n"
        ";; ***\n\n(setv untitled 2)\n"
    )
    assert out == want, show(out, want)
    other = texts[(tmp_path / "other.hy").resolve()]
    assert other == ";; * Only another file\n\n(setv other 4)\n", other
    assert tangle_files([org], outline=False)[(tmp_path / "out.hy").resolve()] == (
        "(setv before-any-heading 0)\n\n(setv child 1)\n\n(setv untitled 2)\n"
    )


def test_org_outlined_blocks_carries_the_headings_above_each_block(tmp_path):
    root = project(tmp_path, "file-property")
    blocks = org_outlined_blocks(root / "org" / "module.org")
    assert [[title for _, _, title in headings] for _, _, headings in blocks] == [
        ["Imports"],
        ["A block sent elsewhere"],
        ["Back to the module, in document order"],
        ["Back to the module, in document order"],
        ["Back to the module, in document order", "Header arguments beside the target"],
    ]
    assert [level for _, level, _ in blocks[-1][2]] == [1, 2]


def test_check_compares_with_the_outline(tmp_path):
    root = project(tmp_path, "file-property")
    tangle(root, outline=False)
    out = (root / "out").resolve()
    assert tangle(root, check=True) == [out / "elsewhere.hy", out / "module.hy"]
    assert tangle(root, check=True, outline=False) == []


# * The functions under tangle


def test_org_blocks_returns_targets_and_bodies_in_document_order(tmp_path):
    root = project(tmp_path, "file-property")
    out = (root / "out").resolve()
    blocks = org_blocks(root / "org" / "module.org")
    assert [(t, b) for t, b in blocks] == [
        (out / "module.hy", "(import os)"),
        (out / "elsewhere.hy", "(setv elsewhere 1)"),
        (out / "module.hy", "(defn one [] 1)"),
        (out / "module.hy", "(defn two [] 2)\n\n(defn three [] 3)"),
        (out / "module.hy", "(defn four [] 4)"),
    ]
    assert all(t.is_absolute() for t, _ in blocks)


def test_org_blocks_of_a_file_without_hy_blocks_is_empty(tmp_path):
    org = tmp_path / "plain.org"
    org.write_text("* Only prose\n#+begin_src python :tangle x.py\npass\n#+end_src\n")
    assert org_blocks(org) == []


def test_tangle_files_writes_nothing(tmp_path):
    root = project(tmp_path, "multi-file")
    before = tree(root)
    texts = tangle_files(sorted((root / "org").glob("*.org")))
    assert tree(root) == before == {}
    assert {p.relative_to(root.resolve()).as_posix(): t for p, t in texts.items()} == {
        k: v.decode() for k, v in expected_tree("multi-file").items()
    }


def test_missing_end_src_is_an_error_naming_the_line(tmp_path):
    root = project(tmp_path, "unterminated")
    org = root / "org" / "broken.org"
    with pytest.raises(ValueError) as err:
        org_blocks(org)
    assert f"{org}:8:" in str(err.value)
    assert "#+end_src" in str(err.value)
    with pytest.raises(ValueError):
        tangle(root)
    assert not (root / "out").exists()


def test_a_heading_before_end_src_leaves_the_block_unterminated(tmp_path):
    org = tmp_path / "heading.org"
    org.write_text("#+begin_src hy :tangle x.hy\n(setv a 1)\n* A heading\n#+end_src\n")
    with pytest.raises(ValueError) as err:
        org_blocks(org)
    assert f"{org}:1:" in str(err.value) and "#+end_src" in str(err.value)


def test_a_tangle_argument_without_a_value_is_an_error(tmp_path):
    org = tmp_path / "bare.org"
    org.write_text("#+PROPERTY: header-args:hy :tangle x.hy\n\n#+begin_src hy :tangle\n(setv a 1)\n#+end_src\n")
    with pytest.raises(ValueError) as err:
        org_blocks(org)
    assert f"{org}:3: :tangle without a value" == str(err.value)


def test_crlf_line_ends_are_read_as_line_ends(tmp_path):
    org = tmp_path / "crlf.org"
    org.write_bytes(b"#+PROPERTY: header-args:hy :tangle out.hy\r\n#+begin_src hy\r\n(crlf)\r\n  (two)\r\n#+end_src\r\n")
    assert org_blocks(org) == [((tmp_path / "out.hy").resolve(), "(crlf)\n  (two)")]


def test_two_org_files_claiming_one_target_is_an_error(tmp_path):
    root = project(tmp_path, "two-owners")
    with pytest.raises(ValueError) as err:
        tangle(root)
    message = str(err.value)
    assert "shared.hy" in message
    assert "a.org" in message and "b.org" in message
    assert not (root / "out").exists()
    with pytest.raises(ValueError):
        tangle(root, check=True)


# * --check


def test_tangling_twice_writes_nothing_the_second_time(tmp_path):
    root = project(tmp_path, "file-property")
    assert len(tangle(root)) == 2
    stamps = {p: p.stat().st_mtime_ns for p in (root / "out").iterdir()}
    assert tangle(root) == []
    assert tangle(root, check=True) == []
    assert {p: p.stat().st_mtime_ns for p in (root / "out").iterdir()} == stamps


def test_check_lists_missing_targets_and_writes_nothing(tmp_path):
    root = project(tmp_path, "multi-file")
    out = root.resolve()
    assert tangle(root, check=True) == [out / "out/alpha.hy", out / "pkg/beta.hy", out / "pkg/gamma.hy"]
    assert tree(root) == {}
    assert not (root / "out").exists() and not (root / "pkg").exists()


def test_check_lists_only_the_targets_that_differ(tmp_path):
    root = project(tmp_path, "multi-file")
    tangle(root)
    beta = root / "pkg" / "beta.hy"
    beta.write_text(beta.read_text() + "(setv edited-by-hand True)\n")
    (root / "out" / "alpha.hy").unlink()
    before = tree(root)
    assert tangle(root, check=True) == [(root / "out" / "alpha.hy").resolve(), beta.resolve()]
    assert tree(root) == before
    assert tangle(root) == [(root / "out" / "alpha.hy").resolve(), beta.resolve()]
    assert tree(root) == expected_tree("multi-file")


def test_check_notices_a_lost_final_newline(tmp_path):
    root = project(tmp_path, "tangle-yes")
    tangle(root)
    target = root / "org" / "yes.hy"
    target.write_text(target.read_text().rstrip("\n"))
    assert tangle(root, check=True) == [target.resolve()]


def test_org_sources_are_the_org_files_of_the_org_folder(tmp_path):
    root = project(tmp_path, "multi-file")
    (root / "org" / "notes.txt").write_text("not org")
    assert [p.name for p in tangle_mod.org_sources(root)] == ["alpha.org", "beta.org"]


# * The docstring


def import_hy(path, name):
    """The Hy module at PATH, imported under NAME."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


WHY_ORG = (
    "#+PROPERTY: header-args:hy :tangle ../out/mod.hy\n"
    "* Why\n\n"
    "  The =mod= module says *why* a \"quoted\" ~C:\\path~ and\n"
    "  [[file:other.org][the other one]] or [[https://example.org]] differ;\n"
    "  /emphasis/ goes, but a/b/c stays.\n\n"
    "A second paragraph, not in the docstring.\n\n"
    "#+begin_src hy\n(import os)\n#+end_src\n"
    "* Code\n#+begin_src hy\n(setv answer 42)\n#+end_src\n"
    "* Elsewhere\n#+begin_src hy :tangle ../out/second.hy\n(setv second 2)\n#+end_src\n"
)

WHY_PLAIN = (
    'The mod module says why a "quoted" C:\\path and\n'
    "the other one or https://example.org differ;\n"
    "emphasis goes, but a/b/c stays."
)


def test_the_first_why_paragraph_is_the_module_docstring(tmp_path):
    org = tmp_path / "org" / "mod.org"
    org.parent.mkdir()
    org.write_text(WHY_ORG)
    assert why_paragraph(org) == WHY_PLAIN
    assert tangle(tmp_path) == [(tmp_path / "out" / n).resolve() for n in ("mod.hy", "second.hy")]
    text = (tmp_path / "out" / "mod.hy").read_text()
    want = (
        ';; * Why\n\n"The mod module says why a \\"quoted\\" C:\\\\path and\n'
        "the other one or https://example.org differ;\n"
        'emphasis goes, but a/b/c stays."\n\n(import os)\n\n;; * Code\n\n(setv answer 42)\n'
    )
    assert text == want, show(text, want)
    module = import_hy(tmp_path / "out" / "mod.hy", "tangled_mod")
    assert module.__doc__ == WHY_PLAIN, module.__doc__
    assert module.answer == 42
    second = import_hy(tmp_path / "out" / "second.hy", "tangled_second")
    assert second.__doc__ == WHY_PLAIN, "every file an org file tangles to carries its Why"
    assert tangle_files([org], outline=False)[(tmp_path / "out" / "mod.hy").resolve()] == (
        "(import os)\n\n(setv answer 42)\n"
    ), "with the outline left out the text is what Emacs writes, with no docstring"


def test_a_why_without_prose_lends_its_first_subsection(tmp_path):
    org = tmp_path / "org" / "sub.org"
    org.parent.mkdir()
    org.write_text(
        "#+PROPERTY: header-args:hy :tangle ../sub.hy\n"
        "* Why\n#+begin_src hy\n(import re)\n#+end_src\n"
        "- a list is not a paragraph\n  nor its second line\n\n"
        "| nor | a table |\n: nor fixed width\n\n"
        "** What it is for\n:PROPERTIES:\n:CUSTOM_ID: for\n:END:\n"
        "It is for this.\nAnd that.\n\nNot this.\n"
        "* Code\n#+begin_src hy\n(setv x 1)\n#+end_src\n"
    )
    assert why_paragraph(org) == "It is for this.\nAnd that."
    text = tangle_files([org])[(tmp_path / "sub.hy").resolve()]
    want = (
        ';; * Why\n\n;; ** What it is for\n\n"It is for this.\nAnd that."\n\n'
        "(import re)\n\n;; * Code\n\n(setv x 1)\n"
    )
    assert text == want, show(text, want)


def test_no_why_means_no_docstring(tmp_path):
    org = tmp_path / "none.org"
    org.write_text(
        "#+PROPERTY: header-args:hy :tangle none.hy\n"
        "* Why\n#+begin_src hy\n(setv x 1)\n#+end_src\n* Other\nProse.\n"
    )
    assert why_paragraph(org) is None
    assert tangle_files([org])[(tmp_path / "none.hy").resolve()] == ";; * Why\n\n(setv x 1)\n"
    bare = tmp_path / "bare.org"
    bare.write_text("#+PROPERTY: header-args:hy :tangle bare.hy\n#+begin_src hy\n(setv y 2)\n#+end_src\n")
    assert why_paragraph(bare) is None
    keyword = tmp_path / "keyword.org"
    keyword.write_text("* Why\n:memory-add gives the model a notebook.\n")
    assert why_paragraph(keyword) == ":memory-add gives the model a notebook.", "a keyword is prose"
    assert tangle_files([bare])[(tmp_path / "bare.hy").resolve()] == "(setv y 2)\n"


def test_check_notices_an_edited_docstring(tmp_path):
    org = tmp_path / "org" / "mod.org"
    org.parent.mkdir()
    org.write_text(WHY_ORG)
    tangle(tmp_path)
    target = tmp_path / "out" / "mod.hy"
    target.write_text(target.read_text().replace("differ;", "agree;"))
    assert tangle(tmp_path, check=True) == [target.resolve()]


# * Agreement with Emacs


def emacs_tangle(roots, home):
    """Tangle every org file under each of ROOTS with one Emacs, which creates
    the target folders itself (so it does not depend on our reading of them)."""
    files = " ".join(f'"{p}"' for root in roots for p in sorted((root / "org").glob("*.org")))
    subprocess.run(
        [
            "emacs", "-Q", "--batch",
            "--eval", "(require 'ob-tangle)",
            "--eval", "(push '(:mkdirp . \"yes\") org-babel-default-header-args)",
            "--eval", f"(dolist (f (list {files})) (org-babel-tangle-file f))",
        ],
        check=True, capture_output=True, timeout=120,
        env={**os.environ, "HOME": str(home)},
    )


def test_output_agrees_byte_for_byte_with_emacs(tmp_path):
    """With Emacs installed, tangle each clean fixture with Emacs and with us and
    compare the trees, and check that the recorded expected files are still what
    Emacs writes. Without Emacs, compare with those recorded files."""
    ours = {name: project(tmp_path / "ours", name) for name in CLEAN}
    for root in ours.values():
        tangle(root, outline=False)
    if shutil.which("emacs"):
        theirs = {name: project(tmp_path / "emacs", name) for name in CLEAN}
        emacs_tangle(theirs.values(), tmp_path)
        reference = {name: tree(root) for name, root in theirs.items()}
        for name in CLEAN:
            assert reference[name] == expected_tree(name), (
                f"{name}: Emacs no longer writes what expected/{name} holds"
            )
    else:
        reference = {name: expected_tree(name) for name in CLEAN}
    for name in CLEAN:
        got = tree(ours[name])
        assert reference[name], f"{name}: nothing tangled"
        assert got == reference[name], f"{name}:" + show(got, reference[name])


# * The project's own sources


def test_the_committed_modules_agree_with_their_org_sources():
    assert tangle(REPO, check=True) == []


def tangled_targets():
    """Every file the project's org sources tangle to, with its org file."""
    return sorted(
        (target, org)
        for org in tangle_mod.org_sources(REPO)
        for target in {t for t, _ in org_blocks(org)}
    )


def test_every_org_source_opens_with_a_why_paragraph():
    missing = [org.name for org in tangle_mod.org_sources(REPO) if not why_paragraph(org)]
    assert missing == [], f"org files with no paragraph under * Why: {missing}"


def test_every_tangled_module_has_its_why_paragraph_as_docstring():
    targets = tangled_targets()
    assert len(targets) > 60
    for target, org in targets:
        first = next(iter(hy.read_many(target.read_text(encoding="utf-8"))))
        assert isinstance(first, hy.models.String) and str(first).strip(), (
            f"{target.relative_to(REPO)} does not open with a docstring"
        )
        assert str(first) == why_paragraph(org), f"{target.relative_to(REPO)}: not {org.name}'s Why"
    import passepartout.proto as proto

    for module, org in [(proto, "proto.org"), (tangle_mod, "tangle.org")]:
        assert module.__doc__ == why_paragraph(REPO / "org" / org), module.__doc__


def test_no_module_is_over_600_lines():
    targets = tangled_targets()
    assert len(targets) > 60
    long = {str(t.relative_to(REPO)): n for t, _ in targets
            if (n := len(t.read_text(encoding="utf-8").splitlines())) > 600}
    assert long == {}, f"modules over 600 lines: {long}"


def test_the_tangled_files_and_only_they_are_marked_generated():
    tangled = {t.relative_to(REPO.resolve()).as_posix() for t, _ in tangled_targets()}
    hy_files = subprocess.run(
        ["git", "ls-files", "--", "*.hy"], cwd=REPO, capture_output=True, text=True, check=True,
    ).stdout.split()
    paths = sorted(tangled | set(hy_files))
    out = subprocess.run(
        ["git", "check-attr", "linguist-generated", "--", *paths],
        cwd=REPO, capture_output=True, text=True, check=True,
    ).stdout
    marked = {line.split(": ")[0] for line in out.splitlines() if line.endswith(": true")}
    assert sorted(tangled - marked) == [], "tangled but not marked generated in .gitattributes"
    assert sorted(marked - tangled) == [], "marked generated but tangled from no org file"


def test_the_readme_reading_order_names_org_files_that_exist():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    order = readme.split("## Reading order", 1)[1].split("\n## ", 1)[0]
    named = re.findall(r"`(org/[\w-]+\.org)`", order)
    assert len(named) >= 14, named
    assert [n for n in named if not (REPO / n).exists()] == [], "the reading order names a missing org file"
