"""One function per claim of Niu et al. (2024): in-memory inputs in, one check row (dict) out
(:func:`.base.check_row`). Split by claim family: energy bounds, partition function and Prop. 4, the radius,
loss and scaling, literature and parameters. The paper's words for each row live in report.quotes.
"""

from assocmem.report.claims.base import HOWS, PAPER, VERDICTS, check_row
from assocmem.report.claims.energy import eq8, fig1, prop1, prop2, prop3, synthetic_pattern_sets
from assocmem.report.claims.literature import literature, params, read_literature_csv
from assocmem.report.claims.loss import loss_floor, overfit, scaling, scaling_sweep
from assocmem.report.claims.partition import eq12, lemma5, prop4
from assocmem.report.claims.radius import nn_trend, radius

__all__ = ["HOWS", "PAPER", "VERDICTS", "check_row", "eq12", "eq8", "fig1", "lemma5", "literature", "loss_floor",
           "nn_trend", "overfit", "params", "prop1", "prop2", "prop3", "prop4", "radius", "read_literature_csv",
           "scaling", "scaling_sweep", "synthetic_pattern_sets"]
