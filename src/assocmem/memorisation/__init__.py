"""Memorisation grids: which model sizes store how many random facts, and how that boundary grows."""
