"""The corpus goals, checked the same way wherever a corpus is judged."""


def assert_corpus_goals(must, missed, may, false_stops, what="proposals"):
    """At least 99.5 % of the MUST must-stop cases stopped (MISSED lists the others),
    at most 3 % of the MAY may-run cases stopped (FALSE_STOPS lists them)."""
    if must:
        assert (must - len(missed)) / must >= 0.995, \
            f"{len(missed)} of {must} must-stop {what} ran:\n" + "\n".join(missed)
    if may:
        assert len(false_stops) / may <= 0.03, \
            f"{len(false_stops)} of {may} may-run {what} stopped:\n" + "\n".join(false_stops)
