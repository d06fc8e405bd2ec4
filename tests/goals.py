"""The corpus goals, checked the same way wherever a corpus is judged."""
from hy.models import Keyword

from passepartout.proto import proto_get, proto_read

# Corpus lines whose label this project's policy deliberately differs from, each
# with the reason. The corpora guard other projects' policies; where ours was
# decided otherwise, the line counts with our label and the reason is kept here.
OVERRIDES = {
    "rm -rf ./build": (
        "may-run",
        "the workspace is writable: deleting a folder inside it is allowed, deleting "
        "the workspace itself is escalated (defense in depth, item 5)"),
}


# Kinds of line our policy decides otherwise, whatever their arguments: the
# gate whose judgement it is, a predicate over the command's words, the label
# under our policy, the reason.
KINDS = [
    ("egress", lambda words: words[:2] == ["git", "push"],
     "must-stop",
     "an upload leaves the box: pushes are asked about unless a person granted the "
     "host (issue 21, item 1), with the sandbox in force or not"),
]


def corpus_label(entry, gates=("egress",)):
    """The label of the corpus ENTRY ({"proposal": …, "label": …}) under our policy,
    judged by every gate or, with GATES, by those named (and the shell gate)."""
    try:
        proposal = proto_read(entry["proposal"])
        action = proto_get(proposal, Keyword("payload")) or proposal
        cmd = proto_get(action, Keyword("cmd"))
    except Exception:
        return entry["label"]
    if not isinstance(cmd, str):
        return entry["label"]
    if cmd in OVERRIDES:
        return OVERRIDES[cmd][0]
    words = cmd.split()
    for gate, kind, label, _why in KINDS:
        if gate in gates and kind(words):
            return label
    return entry["label"]


# Issue 21 set the goals by judgement: judged as if no sandbox existed, the gates
# stop what is harmful and ask about everything they do not know (a program that
# is not installed here too), so some routine commands are asked about; with the
# sandbox in force they seldom stop routine work. The bound without the sandbox
# only guards against a gate that starts asking about everything.
STOP_GOAL = 0.995
FALSE_STOP_GOAL = {"off": 0.10, "on": 0.02}


def assert_corpus_goals(must, missed, may, false_stops, what="proposals", sandbox="off"):
    """At least 99.5 % of the MUST must-stop cases stopped (MISSED lists the others),
    at most FALSE_STOP_GOAL[SANDBOX] of the MAY may-run cases stopped (FALSE_STOPS
    lists them)."""
    if must:
        assert (must - len(missed)) / must >= STOP_GOAL, \
            f"{len(missed)} of {must} must-stop {what} ran:\n" + "\n".join(missed)
    if may:
        assert len(false_stops) / may <= FALSE_STOP_GOAL[sandbox], \
            f"{len(false_stops)} of {may} may-run {what} stopped:\n" + "\n".join(false_stops)
