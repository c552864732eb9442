"""PASHA (Bohdal, Balles, Wistuba, Ermis, Archambeau, Zappella 2023, "PASHA: Efficient
HPO and NAS with Progressive Resource Allocation") on Syne Tune 0.16's scheduler API.

Syne Tune shipped PASHA as ``HyperbandScheduler(type="pasha")`` up to 0.14.2, which needs
numpy < 1.27; 0.16, the release that installs beside numpy 2, removed it with the rest of
the legacy Hyperband code. This is 0.14.2's ``PASHARungSystem`` (on its
``PromotionRungSystem``) ported onto 0.16's ``TrialScheduler``: ``suggest`` returns a
paused trial to resume or the next config, ``on_trial_result`` pauses a trial at each
rung level. Needs the ``bench`` extra (syne-tune, imported lazily).
"""

from __future__ import annotations

import itertools

import numpy as np


def pasha_scheduler(points: list[dict], *, levels: list[int], max_t: int, reduction: float,
                    seed: int, metric: str, time_attr: str):
    """PASHA on Syne Tune 0.16's ``TrialScheduler`` API (see ``PASHA``), maximizing
    ``metric``, over the configs ``points`` (started in that order, none sampled), with
    rung ``levels`` (ascending, below ``max_t``) of the resource ``time_attr``."""
    from syne_tune.optimizer.scheduler import (
        SchedulerDecision,
        TrialScheduler,
        TrialSuggestion,
    )

    class PASHA(TrialScheduler):
        """Promotion-type ASHA with PASHA's progressive maximum resource, ported from
        Syne Tune 0.14.2 (``legacy_hyperband_promotion.PromotionRungSystem`` and
        ``legacy_hyperband_pasha.PASHARungSystem``): a trial pauses at each rung level; a
        free worker resumes the best paused trial in the top 1/eta of its rung (numpy's
        linear quantile) below the current maximum, else starts a new config. The
        maximum starts at the second rung (0.14.2: the second, or the first of two) and
        moves up one rung, then to ``max_t``, whenever the top rung's
        order differs from the previous rung's beyond epsilon, the 90th percentile of the
        gaps of pairs that swapped and swapped back (0.14.2's ``_update_epsilon``, its
        epochs read as the bank's checkpoints)."""

        def __init__(self):
            super().__init__(random_seed=seed)
            self.points = list(points)
            self.rungs = {level: {} for level in levels}  # level -> {trial: [value, promoted]}
            self.milestone: dict[int, int] = {}
            self.index = 2  # the current top rung, 1 = the lowest: at first the second
            self.current_max_t = levels[self.index - 1]
            self.epsilon = 0.0
            self.per_epoch: dict[int, dict[int, float]] = {}
            self.epoch_trials: dict[int, set[int]] = {}
            self.max_epoch = -1

        def suggest(self):
            for level in reversed(levels):
                if level >= self.current_max_t:
                    continue
                rung = self.rungs[level]
                values = [v for v, _ in rung.values()]
                if len(values) < 2:
                    continue
                cutoff = np.quantile(values, 1 - 1 / reduction)
                waiting = [(v, t) for t, (v, promoted) in rung.items() if not promoted]
                if waiting:
                    value, trial = max(waiting, key=lambda x: (x[0], -x[1]))
                    if value >= cutoff:
                        rung[trial][1] = True
                        above = [lv for lv in levels if lv > level]
                        self.milestone[trial] = above[0] if above else max_t
                        return TrialSuggestion.resume_suggestion(trial)
            if self.points:
                return TrialSuggestion.start_suggestion(self.points.pop(0))
            return None

        def on_trial_add(self, trial):
            self.milestone[trial.trial_id] = levels[0]

        def on_trial_result(self, trial, result):
            tid, resource, value = trial.trial_id, result[time_attr], result[metric]
            decision = SchedulerDecision.CONTINUE
            if resource >= self.milestone[tid]:
                if resource in self.rungs:
                    self.rungs[resource][tid] = [value, False]
                decision = SchedulerDecision.PAUSE
            self.per_epoch.setdefault(tid, {})[resource] = value
            self.epoch_trials.setdefault(resource, set()).add(tid)
            self.max_epoch = max(self.max_epoch, resource)
            self._update_epsilon()
            if self._ranking_changed():
                if self.index < len(levels):
                    self.index += 1
                    self.current_max_t = levels[self.index - 1]
                else:
                    self.current_max_t = max_t
            return decision

        def on_trial_complete(self, trial, result):
            pass

        def _top_two(self):
            return levels[self.index - 1], levels[self.index - 2]

        def _ranking_changed(self) -> bool:
            top, previous = (self.rungs[lv] for lv in self._top_two())
            if not top or not previous:
                return False
            top_sorted = sorted(top, key=lambda t: -top[t][0])
            prev_sorted = sorted((t for t in previous if t in top),
                                 key=lambda t: -previous[t][0])
            epsilon = self.epsilon if len(prev_sorted) >= 2 else 0.0
            groups = []
            for i, t in enumerate(prev_sorted):
                group = {t}
                for u in prev_sorted[i + 1:]:
                    if previous[u][0] < previous[t][0] - epsilon:
                        break
                    group.add(u)
                for u in reversed(prev_sorted[:i]):
                    if previous[u][0] > previous[t][0] + epsilon:
                        break
                    group.add(u)
                groups.append(group)
            return any(t not in groups[i] for i, t in enumerate(top_sorted))

        def _update_epsilon(self):
            top, bottom = (min(self.max_epoch, lv) for lv in self._top_two())
            epochs = sorted(self.epoch_trials)
            gaps, seen = [], set()
            for epoch in reversed([e for e in epochs if bottom < e <= top]):
                if len(self.epoch_trials[epoch]) < 2:
                    continue
                for c1, c2 in itertools.combinations(sorted(self.epoch_trials[epoch]), 2):
                    if (c1, c2) in seen:
                        continue
                    seen.add((c1, c2))
                    p1, p2 = self.per_epoch[c1][epoch], self.per_epoch[c2][epoch]
                    opposite = again = False
                    for prev in reversed([e for e in epochs if e < epoch]):
                        order = self.per_epoch[c1][prev] > self.per_epoch[c2][prev]
                        if order == (not p1 > p2):
                            opposite = True
                        if opposite and order == (p1 > p2):
                            again = True
                            break
                    if opposite and again:
                        gaps.append(abs(p1 - p2))
            if gaps:
                self.epsilon = float(np.percentile(gaps, 90))

        def metric_names(self):
            return [metric]

        def metric_mode(self):
            return "max"

    return PASHA()
