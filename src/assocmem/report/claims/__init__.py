"""The claims of Niu et al. (2024), one registry record and one check function per claim (see
:mod:`.registry`): each module of this package declares the claims of one family (energy bounds, partition
function and Prop. 4, the radius, the scaling argument, the loss floor, literature and parameters) and is
imported by :func:`.registry.all_claims`. A check function takes in-memory inputs and returns one row
(:func:`.base.check_row`); the claim's ``evaluate`` builds those inputs from the loaded artifacts.
"""

from assocmem.report.claims.base import check_row
from assocmem.report.claims.registry import (
    HOWS,
    VERDICTS,
    Claim,
    Erratum,
    Untestable,
    all_claims,
    find,
    get,
    register,
)

__all__ = ["HOWS", "VERDICTS", "Claim", "Erratum", "Untestable", "all_claims", "check_row", "find", "get",
           "register"]
