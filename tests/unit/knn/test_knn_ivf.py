"""IVF option of the neighbours stage: results and measured recall; the stage's refusal of non-finite inputs."""

import json

import numpy as np
import pandas as pd
import pytest

from assocmem import stages
from assocmem.errors import AssocmemError
from assocmem.knn import Engine, ivf_heldout_search, ivf_self_search, self_search

CPU = Engine("faiss")


def data(n=400, d=16, seed=0):
    return np.random.default_rng(seed).normal(size=(n, d)).astype(np.float32)


def test_ivf_with_all_lists_probed_equals_exact():
    x = data()
    frame, recalls = ivf_self_search(x, 5, (0.5, 1.0), nlist=8, nprobe=8, sample=50, seed=1, engine=CPU)
    exact = self_search(x, 5, fractions=(0.5, 1.0), seed=1, engine=CPU)
    assert recalls == {0.5: 1.0, 1.0: 1.0}
    merged = frame.merge(exact, on=["fraction", "query_row", "rank"], suffixes=("_ivf", "_exact"))
    assert len(merged) == len(exact)
    np.testing.assert_allclose(merged["distance_ivf"], merged["distance_exact"], rtol=1e-4, atol=1e-4)
    assert (frame["neighbour_row"] != frame["query_row"]).all()  # self match removed by id


def test_ivf_recall_drops_when_few_lists_are_probed():
    x = data(2000, 32)
    _, recall = ivf_heldout_search(x[:1500], x[1500:], 10, nlist=64, nprobe=1, sample=200, seed=0, engine=CPU)
    assert 0 < recall < 1


def test_stage_reports_recall(tmp_path):
    acts = tmp_path / "acts"
    acts.mkdir()
    np.save(acts / "train.npy", data(300, 8)[None])
    np.save(acts / "heldout.npy", data(100, 8, seed=2)[None])
    np.save(acts / "radius.npy", data(300, 8)[None])
    meta = {"layers": ["final_ln"], "d_model": 8, "splits": {"train": {"n_chunks": 300}, "heldout": {"n_chunks": 100}},
            "radius": {"n_chunks": 300}}
    (acts / "meta.json").write_text(json.dumps(meta))
    cfg = {"k": 3, "fractions": [1.0], "device": "cpu", "method": "ivf", "nlist": 4, "nprobe": 4,
           "recall_sample": 50}
    stages.neighbours({"neighbours": cfg, "seed": 0, "threads": 1}, acts, tmp_path / "out")
    summary = pd.read_csv(tmp_path / "out" / "summary.csv")
    assert set(summary["protocol"]) == {"self", "heldout"}
    assert (summary["recall_at_k"] == 1.0).all() and (summary["method"] == "ivf").all()
    assert (tmp_path / "out" / "radius.parquet").exists()  # the radius test's searches are always exact
    timing = json.loads((tmp_path / "out" / "timing.json").read_text())  # the engine, and why it was chosen
    assert timing["engine"]["kind"] == "faiss" and timing["engine"]["reason"].startswith("cpu requested; cpu_engine ")
    assert timing["threads"] == 1 and timing["cpu_engine"]["value"] == "faiss"


def test_stage_refuses_non_finite_activations_naming_the_file(tmp_path):
    acts = tmp_path / "qf" / "activations" / "tiny" / "pct100"
    acts.mkdir(parents=True)
    train = data(300, 8)[None]
    train[0, 17, 3] = np.nan
    np.save(acts / "train.npy", train)
    np.save(acts / "heldout.npy", data(100, 8, seed=2)[None])
    np.save(acts / "radius.npy", train)
    meta = {"layers": ["final_ln"], "d_model": 8, "splits": {"train": {"n_chunks": 300}, "heldout": {"n_chunks": 100}},
            "radius": {"n_chunks": 300}}
    (acts / "meta.json").write_text(json.dumps(meta))
    cfg = {"k": 3, "fractions": [1.0], "device": "cpu", "method": "exact"}
    with pytest.raises(AssocmemError) as err:
        stages.neighbours({"neighbours": cfg, "seed": 0, "threads": 1}, acts, tmp_path / "out")
    assert str(err.value).startswith(f"{acts / 'train.npy'}: 1 of 2400 values are not finite (NaN or inf); a diverged "
                                     f"model or a damaged file: delete {acts / 'train.npy'} and rerun")
    assert not (tmp_path / "out").exists()
