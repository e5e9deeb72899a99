"""Fault injection for tests (``odradek.testing.faults.enable``): which requests to answer
with an error, late or not at all, the journal of requests seen, and its admin endpoint."""
