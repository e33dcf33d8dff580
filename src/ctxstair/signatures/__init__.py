"""Probability signatures of a dataset (SPEC §2)."""
