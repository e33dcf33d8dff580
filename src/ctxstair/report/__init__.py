"""Figures and reports built from computed arrays (the last stage of the data flow)."""
