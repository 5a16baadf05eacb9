"""Deterministic synthetic microdata for tests and benchmarks."""

import numpy as np
import pandas as pd


def clustered(n, d=13, clusters=20, seed=0):
    """``(n, d)`` float64: a mixture of ``clusters`` correlated Gaussian clusters (the same for a seed)."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(0, 4, size=(clusters, d))
    mixing = rng.normal(0, 1, size=(clusters, d, d)) / np.sqrt(d)
    which = rng.integers(0, clusters, size=n)
    noise = rng.normal(size=(n, d))
    return np.ascontiguousarray(centers[which] + np.einsum("nd,nde->ne", noise, mixing[which]))


def extract(n, d=13, seed=0):
    """A microdata extract: ``person_id``, ``d`` QIs ``q0..``, a categorical ``region`` and an integer
    ``flag`` (16 columns for d=13)."""
    X = clustered(n, d, seed=seed)
    df = pd.DataFrame(X, columns=[f"q{j}" for j in range(d)])
    df.insert(0, "person_id", np.arange(n, dtype=np.int64) * 7 + 1000)
    rng = np.random.default_rng(seed + 1)
    df["region"] = pd.Categorical(np.array(["north", "south", "east", "west"])[rng.integers(0, 4, n)])
    df["flag"] = rng.integers(0, 3, n).astype(np.int64)
    return df


QI = [f"q{j}" for j in range(13)]
