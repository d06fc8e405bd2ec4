"""Approvals: an escalated action asked about, bound, answered, and the grants
answers make."""
