"""The k smallest scores of each row of a block, selected through the minima of column groups.

At the default's dimension (d = 64) the oneDNN engine spent more time in ``torch.topk`` than in its products (the
default's neighbours job L4/pct100 on one core, mostly the radius test's two 80,000 x 80,000 self-searches: 36 s in
topk against 22 s in the products), since topk copies every score of a row to select a few. :func:`smallest_k`
reads each row's scores once for the minimum of every group of ``group`` columns (a vectorised reduction), selects
the k groups with the smallest minima, and runs topk on their ``k * group`` scores only.

Why no score is lost: let v be a row's k-th smallest score; fewer than k scores lie below v. A group whose minimum
is below v holds one of them, so fewer than k groups have a minimum below v, and each is selected: were one left
out, k selected groups would have minima no larger than its, k distinct scores below v. If every group with a minimum
<= v is selected, every score <= v is a candidate; if one is left out, each of the k selected groups has a minimum
<= v. Either way the candidates hold every score below v and at least k scores <= v, so their k smallest are the
row's k smallest values (columns left over, fewer than a group, are candidates too). Among scores tied at v the
columns returned may differ from topk's own (topk orders no ties either); the verified search of :mod:`.exact`
orders ties by row.
"""

from __future__ import annotations

import torch

# Columns a group: 32 took x0.58 / x0.64 / x0.71 of topk's time at k = 9 / 17 / 33 of 8,192 columns, groups of 16
# x0.87-1.00 and of 64 x0.51-1.00 (topk's own time at k = 33) (256 x 8,192 float32 scores, one thread, 2-core Intel
# Xeon family 6 model 167, 2026-12-07; benchmarks/bench_knn_select.py, benchmarks/README.md).
DEFAULT_GROUP = 32
# Groups pay only when the selected groups are a small share of the columns: below this many columns per selected
# score, topk runs on the whole row. At the limit (k = 64 of 8,192 columns in groups of 32) groups still took x0.75.
_MIN_COLUMNS_PER_CANDIDATE = 4


def smallest_k(scores: torch.Tensor, k: int, group: int = DEFAULT_GROUP) -> tuple[torch.Tensor, torch.Tensor]:
    """(values, columns) of the k smallest scores of each row of the 2-D ``scores``, unsorted, as
    ``torch.topk(scores, k, dim=1, largest=False, sorted=False)`` returns them (the same values; see the module
    docstring for ties). ``group`` 0 is topk itself; so is any block too narrow for groups to pay. The scores must
    hold no NaN (the searches' inputs are checked finite)."""
    rows, columns = scores.shape
    if not groups_pay(columns, k, group):
        return torch.topk(scores, k, dim=1, largest=False, sorted=False)
    grouped = columns - columns % group
    groups = scores[:, :grouped].reshape(rows, grouped // group, group)
    _, chosen = torch.topk(groups.amin(dim=2), k, dim=1, largest=False, sorted=False)  # (rows, k) group numbers
    candidates = groups[torch.arange(rows, device=scores.device)[:, None], chosen].reshape(rows, k * group)
    if grouped < columns:  # the last columns, fewer than a group, are candidates as they are
        candidates = torch.cat([candidates, scores[:, grouped:]], dim=1)
    values, picked = torch.topk(candidates, k, dim=1, largest=False, sorted=False)
    in_group = picked < k * group
    group_column = torch.gather(chosen, 1, torch.where(in_group, picked // group, 0)) * group + picked % group
    return values, torch.where(in_group, group_column, picked - k * group + grouped)


def groups_pay(columns: int, k: int, group: int) -> bool:
    """Whether :func:`smallest_k` selects through groups (else topk over the whole row): the k selected groups must
    be a small share of the row's whole groups."""
    return group > 0 and k * group * _MIN_COLUMNS_PER_CANDIDATE <= columns - columns % group
