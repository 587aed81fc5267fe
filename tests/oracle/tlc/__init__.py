"""Tests of the TLC runner (tpx.oracle.tlc)."""
