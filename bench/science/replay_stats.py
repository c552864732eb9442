"""Rank agreement for ``bench/selection_replay.py``: Kendall's tau-b and Spearman's rho
between a policy's ranking and the truth's within each policy size, and their bootstrap
over resamples of the configs."""

from __future__ import annotations

import math

import numpy as np
from scipy import stats


def kendall(x, y) -> float:
    """Kendall's tau-b of two sequences (nan when either is constant)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    dx = np.sign(x[:, None] - x[None, :])[np.triu_indices(len(x), 1)]
    dy = np.sign(y[:, None] - y[None, :])[np.triu_indices(len(y), 1)]
    norm = math.sqrt(np.sum(dx != 0) * np.sum(dy != 0))
    return float(np.sum(dx * dy) / norm) if norm else math.nan


def spearman(x, y) -> float:
    """Spearman's rho: Pearson's r of the average ranks (nan when either is constant)."""
    rx, ry = stats.rankdata(x), stats.rankdata(y)
    sx, sy = rx - rx.mean(), ry - ry.mean()
    norm = math.sqrt(np.sum(sx ** 2) * np.sum(sy ** 2))
    return float(np.sum(sx * sy) / norm) if norm else math.nan


def _within_size(configs, ranking, method) -> float | None:
    values = []
    for size in sorted({c["model"] for c in configs.values()}):
        members = [c for c in ranking if configs[c]["model"] == size]
        if len(members) < 3:
            continue
        policy_rank = list(range(len(members)))  # 0 = the policy's best
        value = method(policy_rank, [-configs[c]["truth"] for c in members])
        if not math.isnan(value):
            values.append(value)
    return float(np.mean(values)) if values else None


def within_size_counts(configs: dict, rankings: list[list[str]],
                       counts: np.ndarray) -> dict[str, np.ndarray]:
    """``_within_size`` Kendall and Spearman of resamples of the configs, given as counts.

    A resample holds ``counts[s, i]`` copies of config ``list(configs)[i]`` (each with its
    truth); a ranking orders the copies of a config together, where the config stands.
    Per resample: the mean over ``rankings`` of ``_within_size`` (nan where it is None for
    every ranking); the same numbers as building each resample and ranking it, computed
    from pair counts: copies of one config tie on the truth, so only pairs of configs
    ``a`` before ``b`` count, ``counts[a] * counts[b]`` times.

    Args:
        counts: (resamples, configs) copies of each config.

    Returns:
        {"kendall": (resamples,), "spearman": (resamples,)}.
    """
    ids = list(configs)
    truth = np.array([configs[c]["truth"] for c in ids])
    sizes = sorted({configs[c]["model"] for c in ids})
    totals = {key: np.zeros(len(counts)) for key in ("kendall", "spearman")}
    seen = {key: np.zeros(len(counts)) for key in totals}
    for ranking in rankings:
        position = {c: i for i, c in enumerate(ranking)}
        order = sorted(range(len(ids)), key=lambda i: position[ids[i]])
        values = {key: [] for key in totals}
        for size in sizes:
            members = [i for i in order if configs[ids[i]]["model"] == size]
            k, y = counts[:, members], -truth[members]  # y: as _within_size ranks the truth
            m = k.sum(axis=1)
            before = np.triu(np.ones((len(members), len(members))), 1)  # a before b
            # Kendall's tau-b: the policy's ranks never tie; sign(x_a - x_b) = -1
            concordant = np.einsum("sa,ab,sb->s", k, -np.sign(y[:, None] - y[None, :])
                                   * before, k)
            untied = np.einsum("sa,ab,sb->s", k, (y[:, None] != y[None, :]) * before, k)
            norm = np.sqrt(m * (m - 1) / 2 * untied)
            tau = np.divide(concordant, norm, out=np.full(len(k), np.nan), where=norm > 0)
            # Spearman: the copies of a config take consecutive policy ranks; average ranks
            # of y (ties: the copies, and configs of equal truth)
            start = np.cumsum(k, axis=1) - k
            x_sum = k * start + k * (k + 1) / 2
            rank_y = (k @ (y[:, None] < y[None, :]) + (k @ (y[:, None] == y[None, :]) + 1) / 2)
            mean = (m + 1) / 2
            cov = np.sum(x_sum * rank_y, axis=1) - m * mean ** 2
            var_x = m * (m + 1) * (2 * m + 1) / 6 - m * mean ** 2
            var_y = np.sum(k * rank_y ** 2, axis=1) - m * mean ** 2
            norm = np.sqrt(np.clip(var_x * var_y, 0, None))
            rho = np.divide(cov, norm, out=np.full(len(k), np.nan),
                            where=norm > 1e-9 * (m + 1) ** 3)
            for key, value in (("kendall", tau), ("spearman", rho)):
                values[key].append(np.where(m >= 3, value, np.nan))
        for key, per_size in values.items():
            per_size = np.array(per_size)
            n = np.sum(~np.isnan(per_size), axis=0)
            mean_of_sizes = np.divide(np.nansum(per_size, axis=0), n,
                                      out=np.full(len(counts), np.nan), where=n > 0)
            totals[key] += np.nan_to_num(mean_of_sizes)
            seen[key] += n > 0
    return {key: np.divide(totals[key], seen[key], out=np.full(len(counts), np.nan),
                           where=seen[key] > 0) for key in totals}


def resample_counts(n: int, boot: int, seed: int = 0) -> np.ndarray:
    """(boot, n) copies of each of ``n`` configs in ``boot`` resamples with replacement."""
    rng = np.random.default_rng(seed)
    counts = np.zeros((boot, n))
    for row in counts:
        np.add.at(row, rng.integers(0, n, n), 1)
    return counts


def bootstrap_within_size(configs: dict, rankings: list[list[str]], boot: int,
                          seed: int = 0) -> dict[str, list[float]]:
    """``within_size_counts`` on ``boot`` resamples of the configs (with replacement, each
    with its curves' truth; the replicates' rankings kept), the resamples with a value."""
    values = within_size_counts(configs, rankings, resample_counts(len(configs), boot, seed))
    return {key: [float(v) for v in value if not np.isnan(v)] for key, value in values.items()}



def cluster_bootstrap_se(matrices, boot: int = 2000, seed: int = 0) -> np.ndarray:
    """Standard errors of the means of (read seeds x grids) matrices by a two-way cluster
    bootstrap: each of ``boot`` draws resamples the rows (seeds) with replacement and,
    independently, the columns (grids) with replacement, and takes the mean over the
    resampled cells (a row drawn twice counts twice); the SE is the standard deviation of
    those means. Replicates that share a seed, or a grid, are not independent: resampling
    the replicates alone would treat the bank's few seeds as fixed (Cameron, Gelbach and
    Miller 2011, multiway clustering; Owen 2007, the pigeonhole bootstrap). Every matrix
    of the stack is resampled with the same draws, so a stack of paired differences
    gets the paired SE. A single seed or grid contributes no spread of its own.

    Args:
        matrices: (seeds, grids) or (k, seeds, grids) values, one per replicate.
        boot: bootstrap draws. seed: the draws' RNG seed (fixed: the same draws per shape).

    Returns:
        () or (k,) standard errors.
    """
    values = np.asarray(matrices, float)
    stack = values[None] if values.ndim == 2 else values
    n_seeds, n_grids = stack.shape[-2:]
    rng = np.random.default_rng(seed)
    rows = np.arange(boot)[:, None]
    seed_counts, grid_counts = np.zeros((boot, n_seeds)), np.zeros((boot, n_grids))
    np.add.at(seed_counts, (rows, rng.integers(0, n_seeds, (boot, n_seeds))), 1)
    np.add.at(grid_counts, (rows, rng.integers(0, n_grids, (boot, n_grids))), 1)
    means = np.einsum("bs,ksg,bg->kb", seed_counts, stack, grid_counts) / (n_seeds * n_grids)
    se = means.std(axis=1, ddof=1)
    return se[0] if values.ndim == 2 else se


def cell_matrix(values, draws: list[dict]) -> np.ndarray:
    """Per-replicate ``values`` as a (read seeds x grids) matrix: a leave-one-seed-out
    replicate (``replay_bank.loso_replicates``) reads one seed for every config of its
    grid; seeds sorted, grids in the order they first appear."""
    seeds, grids = [], []
    for draw in draws:
        read = set(draw.values())
        assert len(read) == 1, f"not a one-seed replicate: reads seeds {sorted(read)}"
        seeds += [s for s in read if s not in seeds]
        grids += [g for g in [tuple(sorted(draw))] if g not in grids]
    seeds.sort()
    matrix = np.full((len(seeds), len(grids)), np.nan)
    for value, draw in zip(values, draws):
        i, j = seeds.index(next(iter(draw.values()))), grids.index(tuple(sorted(draw)))
        assert np.isnan(matrix[i, j]), "two replicates of one (seed, grid) cell"
        matrix[i, j] = value
    assert not np.isnan(matrix).any(), "a (seed, grid) cell without a replicate"
    return matrix
