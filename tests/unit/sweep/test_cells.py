"""A sweep's cells as the sweep stage reads them: which runs the step budget cut short, and the noise of a cell's
CE."""

import pandas as pd
import pytest

from assocmem.sweep.cells import budget_limited, measured_noise


def test_a_run_is_budget_limited_until_its_early_stopping_rule_is_met():
    assert budget_limited({"steps": 6000, "best_step": 6000}, 4, 200)
    assert budget_limited({"steps": 6000, "best_step": 5400}, 4, 200)  # 3 evaluations without a new best
    assert not budget_limited({"steps": 6000, "best_step": 5200}, 4, 200)  # the rule is met at the budget
    assert not budget_limited({"steps": 2200, "best_step": 1400}, 4, 200)  # stopped early
    assert budget_limited({"steps": 100, "best_step": 100}, None, 200)  # no rule: still improving at the end
    assert not budget_limited({"steps": 100, "best_step": 60}, None, 200)


def test_noise_is_measured_per_training_set_size():
    cells = pd.DataFrame({"n_tokens": [10, 10, 10, 10, 20, 20, 20, 20], "n_params": [1, 1, 2, 2, 1, 1, 2, 2],
                          "seed": [0, 1] * 4, "val_ce": [1.0, 1.2, 2.0, 2.2, 1.0, 1.02, 2.0, 2.02],
                          "late_spread": [0.3, 0.3, 0.3, 0.3, 0.01, 0.01, 0.02, 0.02]})
    noise, source = measured_noise(cells)
    assert noise == pytest.approx({10: 0.1 * 2**0.5, 20: 0.01 * 2**0.5}) and "each D" in source
    single, source = measured_noise(cells[cells["seed"] == 0])
    assert single == pytest.approx({10: 0.3, 20: 0.015}) and "last" in source
    # a cell with a budget-limited run does not count where the D has cells without one
    cells["budget_limited"] = [False, False, True, False, True, False, True, True]
    noise, _ = measured_noise(cells)
    assert noise == pytest.approx({10: 0.1 * 2**0.5, 20: 0.01 * 2**0.5})
    cells["val_ce"] = [1.0, 1.2, 2.0, 2.6, 1.0, 1.02, 2.0, 2.02]
    assert measured_noise(cells)[0][10] == pytest.approx(0.1 * 2**0.5)  # the open cell's 0.6 spread is left out
