"""Guards against late failure: what a pilot's own curve shows, never a fitted curve.

A monotone curve model (a sigmoid, LC-PFN's prior) cannot see a late collapse, and RL
curves do collapse: a learning rate or epoch count that overshoots, or a policy that
learns to please its reward model instead of solving the task (Gao et al. 2022: the proxy
reward keeps rising while the gold score peaks and falls). So a cell is not extrapolated,
and not preferred for validation, when

- **drawdown**: its held-out accuracy at the last checkpoint lies below its running best
  by more than ``max(floor, z x SE_diff)``, where ``SE_diff = sqrt(SE_best^2 + SE_last^2)``
  is the standard error of the difference of the two scores (``SE = sqrt(p (1 - p) / n)``
  at each one's accuracy on its ``n`` problems): a drop the evaluation noise cannot
  explain. Checkpoints score the same problems, so the pair is compared like for like;
  the best of several noisy checkpoints sits above the truth, which is why ``z`` is large
  (3.5: on flat curves with binomial noise at the default sweep's checkpoints, problem
  counts and 16 configs, it fires in about 1% of sweeps, ``tests/test_guards.py``);
- **reward hacking**: the proxy reward on held-out prompts (the reward system's own score,
  e.g. a PRM's) rose by at least ``reward_rise`` while the verifier's accuracy on the same
  prompts fell by more than the drawdown margin, from ``window`` checkpoints before the
  last or from the checkpoint of best accuracy (a collapse that came earlier and stayed);
- **entropy collapse** (a precursor): the mean negative log-likelihood of the sampled
  tokens, an estimate of the policy's entropy, fell below ``entropy_floor`` of its value
  at the first step (both precursors read the steps at the full generation cap:
  :func:`at_full_cap`);
- **truncation** (a precursor): more than ``max_truncation`` of the last step's
  completions hit the generation cap.

Each check returns a :class:`Verdict` whose ``evidence`` quotes the numbers it read.
Pure: no torch, no IO.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from race.core.stats import binomial_se


@dataclass(frozen=True, slots=True)
class GuardThresholds:
    """When each guard fires (``selection.guards.*`` in the config)."""

    # drawdown: the smallest drop that counts, accuracy points
    floor: float = 0.03
    # drawdown: the drop must also exceed this many standard errors of the difference
    z: float = 3.5
    # reward hacking: the proxy reward's rise over the window, reward points
    reward_rise: float = 0.05
    # reward hacking: the last checkpoint is compared with this many before it (and with
    # the checkpoint of best accuracy)
    window: int = 2
    # entropy collapse: last step's sampled-token NLL below this share of the first step's
    entropy_floor: float = 0.2
    # truncation: share of the last step's completions cut at the cap
    max_truncation: float = 0.5


DEFAULT = GuardThresholds()


@dataclass(frozen=True, slots=True)
class Verdict:
    """One guard on one cell: whether it fired, and the numbers that say so."""

    guard: str
    fired: bool
    evidence: str


def _margin(before: float, n_before: int, after: float, n_after: int,
            t: GuardThresholds) -> float:
    """``max(floor, z x SE)`` of the difference of two checkpoints' accuracies."""
    se = math.hypot(binomial_se(before, n_before, floor=False),
                    binomial_se(after, n_after, floor=False))
    return max(t.floor, t.z * se)


def _n_at(n_problems: int | Sequence[int], index: int) -> int:
    """Problems checkpoint ``index`` was scored on (one count for all, or one each)."""
    return n_problems if isinstance(n_problems, int) else int(n_problems[index])


def drawdown(accuracy: Sequence[float], n_problems: int | Sequence[int],
             t: GuardThresholds = DEFAULT) -> Verdict:
    """Fires when the last checkpoint fell below the running best by more than the margin.

    Args:
        accuracy: held-out accuracy at each checkpoint, in FLOP order.
        n_problems: problems each checkpoint was scored on (one count, or one per
            checkpoint).
    """
    if len(accuracy) < 2:
        return Verdict("drawdown", False, "fewer than 2 checkpoints")
    best_at = max(range(len(accuracy)), key=lambda i: (accuracy[i], -i))
    best, last = accuracy[best_at], accuracy[-1]
    n_best = _n_at(n_problems, best_at)
    margin = _margin(best, n_best, last, _n_at(n_problems, len(accuracy) - 1), t)
    drop = best - last
    return Verdict("drawdown", drop > margin,
                   f"accuracy {last:.3f} at the last checkpoint vs best {best:.3f} at "
                   f"checkpoint {best_at}: drop {drop:.3f} {'>' if drop > margin else '<='} "
                   f"margin {margin:.3f} (max({t.floor}, {t.z} SE of the difference), "
                   f"n={n_best})")


def reward_hacking(proxy_reward: Sequence[float], accuracy: Sequence[float],
                   n_problems: int | Sequence[int], t: GuardThresholds = DEFAULT) -> Verdict:
    """Fires when the proxy reward rose while the verifier's accuracy fell (same prompts).

    The last checkpoint is compared with two earlier ones: ``window`` checkpoints before it
    (a slide under way), and the one where accuracy was best (a collapse that happened
    before the window and then stayed: the proxy is flat and the accuracy at 0 over the
    window itself). It fires when either shows a proxy rise of at least ``reward_rise``
    and an accuracy fall beyond the drawdown margin; the evidence quotes the one that fired
    (else the window's).

    Args:
        proxy_reward: the reward system's mean score on the held-out prompts, per
            checkpoint (for a rule reward it is the accuracy itself: never fires).
        accuracy: the verifier's accuracy on those prompts, per checkpoint.
        n_problems: problems each checkpoint was scored on.
    """
    if len(accuracy) < 2 or len(proxy_reward) != len(accuracy):
        return Verdict("reward_hacking", False, "fewer than 2 checkpoints")
    last = len(accuracy) - 1
    best_at = max(range(last), key=lambda i: (accuracy[i], -i))
    anchors = [(max(0, last - t.window), f"over the last {min(t.window, last)} checkpoints"),
               (best_at, f"from its best accuracy (checkpoint {best_at})")]
    verdicts = []
    for at, span in anchors:
        rise = proxy_reward[last] - proxy_reward[at]
        fall = accuracy[at] - accuracy[last]
        margin = _margin(accuracy[at], _n_at(n_problems, at), accuracy[last],
                         _n_at(n_problems, last), t)
        fired = rise >= t.reward_rise and fall > margin
        verdicts.append(Verdict(
            "reward_hacking", fired,
            f"{span} the proxy reward went {proxy_reward[at]:.3f} -> {proxy_reward[last]:.3f} "
            f"(rise {rise:+.3f}, threshold {t.reward_rise}) while accuracy went "
            f"{accuracy[at]:.3f} -> {accuracy[last]:.3f} (fall {fall:+.3f}, margin "
            f"{margin:.3f})"))
    return next((v for v in verdicts if v.fired), verdicts[0])


def entropy_collapse(entropy: Sequence[float], t: GuardThresholds = DEFAULT
                     ) -> Verdict:
    """Fires when the sampled-token NLL (per step) fell below ``entropy_floor`` of its start."""
    values = [e for e in entropy if e is not None and math.isfinite(e)]
    if len(values) < 2 or values[0] <= 0:
        return Verdict("entropy_collapse", False, "no entropy estimate logged")
    share = values[-1] / values[0]
    return Verdict("entropy_collapse", share < t.entropy_floor,
                   f"sampled-token NLL {values[0]:.3f} -> {values[-1]:.3f} nats/token "
                   f"({share:.0%} of the first step's; floor {t.entropy_floor:.0%})")


def at_full_cap(values: Sequence[float], caps: Sequence[float | None]) -> list[float]:
    """The per-step ``values`` of the steps run at the full generation cap.

    A pilot's last step may shorten its cap to fit the budget: its completions hit that
    shorter cap by design, and the few tokens it samples are the most certain ones (a
    sampled-token NLL near 0). So both precursors read the full-cap steps only. Without
    caps logged, the last step, which may be shortened, is left out.
    """
    known = [c for c in caps if c is not None and math.isfinite(c)]
    if not known:
        return list(values[:-1])
    full = max(known)
    return [v for v, c in zip(values, caps) if c == full]


def truncation(truncation_rate: Sequence[float], t: GuardThresholds = DEFAULT
               ) -> Verdict:
    """Fires when more than ``max_truncation`` of the last step's completions hit the cap."""
    values = [r for r in truncation_rate if r is not None and math.isfinite(r)]
    if not values:
        return Verdict("truncation", False, "no truncation rate logged")
    return Verdict("truncation", values[-1] > t.max_truncation,
                   f"{values[-1]:.0%} of the last step's completions hit the cap "
                   f"(threshold {t.max_truncation:.0%})")


def check_cell(accuracy: Sequence[float], proxy_reward: Sequence[float],
               n_problems: int | Sequence[int],
               entropy: Sequence[float] = (), truncation_rate: Sequence[float] = (),
               t: GuardThresholds = DEFAULT) -> list[Verdict]:
    """Every guard on one cell's curve on one target (checkpoints in FLOP order)."""
    return [drawdown(accuracy, n_problems, t),
            reward_hacking(proxy_reward, accuracy, n_problems, t),
            entropy_collapse(entropy, t), truncation(truncation_rate, t)]
