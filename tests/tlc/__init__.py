"""Tests of the TLC runner (tpx.tlc)."""
