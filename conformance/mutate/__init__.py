"""Mutation testing with the conformance suite as the judge (``make mutate``)."""
