"""Memorisation data (issue 25): D random facts, key -> value token sequences drawn from a fixed seed, whose only
learnable content is the table itself. The generator (:mod:`.generate`) draws the keys, optionally at a minimum
Hamming distance from one another (:mod:`.separation` decides which requests are possible), and i.i.d. uniform
values; :mod:`.information` gives the exact information content the report states as the floor; :mod:`.tokenize`
writes the facts into the token store.
"""
