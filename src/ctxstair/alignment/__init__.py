"""Similarity and alignment between embedding and signature geometry (SPEC §3)."""
