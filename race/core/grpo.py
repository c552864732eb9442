"""Pure GRPO tensor maths: group advantages, the clipped policy loss, the k3 KL estimate.

No IO, no models, no optimiser: functions of tensors only, so every number can be
checked by hand (tests/test_grpo.py).

Notation (one GRPO step): ``B`` completions (``num_prompts * group_size``, prompt-major),
``T`` completion positions, ``V`` vocabulary entries. Log-probabilities are natural
logs (nats) of the sampled token under a policy.

Sources:

* GRPO: Shao et al. 2024, "DeepSeekMath", eq. 3 (clipped objective, k3 KL term) and
  section 4.1.2 (outcome supervision: normalised group advantages).
* Clipping: Schulman et al. 2017, "Proximal Policy Optimization", eq. 7.
* Decoupled clip range (``clip_eps_high``) and token-level aggregation: Yu et al. 2025,
  "DAPO", eqs. 8-10.
* Mean-only advantages: Liu et al. 2025, "Understanding R1-Zero-Like Training"
  (Dr. GRPO), section 3.1.
* k3 estimator: J. Schulman 2020, "Approximating KL Divergence",
  http://joschu.net/blog/kl-approx.html
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from race.core.tensor_checks import check_2d, check_aggregation, check_mask, check_same_shape

# --------------------------------------------------------------------------- dtypes


def float_dtype(x: Tensor) -> torch.dtype:
    # At least float32: ratios exp(logp - old) and k3 in bf16 lose the small differences
    # that matter (bf16 has 8 mantissa bits); float64 inputs stay float64.
    return torch.promote_types(x.dtype, torch.float32)


# --------------------------------------------------------------------------- advantages


def group_advantages(rewards: Tensor, group_size: int, *, scale: bool = True,
                     eps: float = 1e-6) -> Tensor:
    """Group-relative advantages of GRPO outcome supervision (DeepSeekMath sec. 4.1.2).

    For completion ``i`` of a group (the ``group_size`` completions of one prompt)::

        scale=True:   A_i = (r_i - mean(r)) / (std(r) + eps)     (GRPO)
        scale=False:  A_i =  r_i - mean(r)                       (Dr. GRPO, mean only)

    ``std`` is the *unbiased* (Bessel-corrected, divide by ``G - 1``) sample standard
    deviation, ``torch.std``'s default, as in TRL's ``GRPOTrainer`` and verl's
    ``compute_grpo_outcome_advantage``; DeepSeekMath does not say which. It is
    ``sqrt(G / (G - 1))`` times the population std, so advantages are that factor
    smaller: rewards ``[1, 0, 0]`` give ``A_0 = 2/sqrt(3) = 1.155`` (population std:
    ``sqrt(2) = 1.414``).

    A group whose rewards are all equal carries no learning signal; its advantages are
    exactly 0 in both modes. (Computed naively, the float rounding of the mean leaves
    residuals such as 3e-8 that ``/ (0 + eps)`` would turn into advantages of 0.03.)

    Args:
        rewards: ``[num_prompts * group_size]`` scalar rewards, prompt-major: the
            ``group_size`` completions of prompt 0 first, then prompt 1, ...
        group_size: completions per prompt ``G``; >= 2 and divides ``len(rewards)``.
        scale: divide by the group std (GRPO) or not (Dr. GRPO).
        eps: added to the std before dividing (reward units); >= 0.

    Returns:
        ``[num_prompts * group_size]`` advantages in the same order, float (the rewards'
        float dtype, float32 for integer or bool rewards), no gradient.

    Raises:
        ValueError: ``rewards`` is not 1-D or not finite, ``group_size`` is < 2 or does
            not divide ``len(rewards)``, or ``eps`` < 0.
    """
    if rewards.dim() != 1:
        raise ValueError(f"rewards.shape={tuple(rewards.shape)}: must be 1-D "
                         f"[num_prompts * group_size], prompt-major; flatten it with "
                         f"rewards.reshape(-1)")
    if not isinstance(group_size, int) or group_size < 2:
        raise ValueError(f"group_size={group_size!r}: GRPO needs >= 2 completions per "
                         f"prompt for a group baseline; use e.g. group_size=4 or 8")
    if len(rewards) == 0 or len(rewards) % group_size != 0:
        raise ValueError(f"group_size={group_size}: must divide len(rewards)="
                         f"{len(rewards)} (rewards are num_prompts * group_size, "
                         f"prompt-major); pass the group size the completions were "
                         f"sampled with")
    if not eps >= 0:
        raise ValueError(f"eps={eps!r}: must be >= 0 (it keeps the division finite); "
                         f"use e.g. eps=1e-6")
    r = rewards.detach()
    r = r.to(torch.promote_types(r.dtype, torch.float32) if r.is_floating_point()
             else torch.float32)
    if not bool(torch.isfinite(r).all()):
        raise ValueError("rewards: contains NaN or inf; every completion needs a finite "
                         "reward (score failed verifications as 0, not NaN)")

    groups = r.view(-1, group_size)  # [num_prompts, G]
    centred = groups - groups.mean(dim=1, keepdim=True)
    if scale:
        centred = centred / (groups.std(dim=1, unbiased=True, keepdim=True) + eps)
    flat = (groups.amax(dim=1, keepdim=True) == groups.amin(dim=1, keepdim=True))
    return torch.where(flat, torch.zeros_like(centred), centred).reshape(-1)


# --------------------------------------------------------------------------- aggregation


def masked_mean(x: Tensor, mask: Tensor, aggregation: str = "token") -> Tensor:
    """Fold per-token values into one scalar over the completion tokens.

    ``m`` is the mask, ``L_b = sum_t m[b, t]`` the length of completion ``b``::

        "token":    sum_{b,t} m x / sum_b L_b             (DAPO eq. 10, token-level)
        "sequence": 1/B sum_b (sum_t m[b,t] x[b,t] / L_b) (GRPO eq. 3, sequence-level)

    Token-level weights every token alike, so long completions weigh more;
    sequence-level weights every completion alike. A completion with ``L_b = 0``
    contributes 0 to "sequence" but still counts in ``B``.

    Positions where ``mask`` is 0 are never read into the sum (``torch.where``, not a
    product), so NaN or inf there cannot leak into the value or its gradient.

    Args:
        x: ``[B, T]`` per-token values.
        mask: ``[B, T]``, bool or 0/1, 1 on real completion tokens; at least one 1.
        aggregation: ``"token"`` or ``"sequence"``.

    Returns:
        A 0-d tensor in ``x``'s units, differentiable in ``x``.

    Raises:
        ValueError: unknown ``aggregation``, ``x`` not 2-D, ``mask`` of another shape,
            with values other than 0/1, or with no 1.
    """
    check_aggregation(aggregation)
    check_2d("x", x)
    check_mask(mask, x)
    return _masked_mean(x, mask.bool(), aggregation)


def _masked_mean(x: Tensor, mask: Tensor, aggregation: str) -> Tensor:
    # Inputs already checked; mask is bool.
    summed = torch.where(mask, x, torch.zeros_like(x))
    lengths = mask.sum(dim=1).to(x.dtype)  # [B]
    if aggregation == "token":
        return summed.sum() / lengths.sum()
    return (summed.sum(dim=1) / lengths.clamp(min=1)).mean()


# --------------------------------------------------------------------------- policy loss


def clipped_policy_loss(logprobs: Tensor, old_logprobs: Tensor, advantages: Tensor,
                        mask: Tensor, *, clip_eps: float = 0.2,
                        clip_eps_high: float | None = None,
                        aggregation: str = "token") -> tuple[Tensor, dict[str, float]]:
    """The PPO/GRPO clipped surrogate loss (PPO eq. 7, GRPO eq. 3, DAPO eq. 8).

    Per completion token, with ``rho = exp(logprobs - old_logprobs)`` and the
    completion's advantage ``A``::

        objective = min(rho * A, clip(rho, 1 - clip_eps, 1 + clip_eps_high) * A)
        loss      = -masked_mean(objective, mask, aggregation)

    Where the clipped term is the smaller one (``rho > 1 + clip_eps_high`` with
    ``A > 0``, or ``rho < 1 - clip_eps`` with ``A < 0``) it is constant in
    ``logprobs``, so that token gets no gradient. With ``rho = 1`` (first update on
    fresh samples) the loss is ``-mean(A)`` and its gradient the REINFORCE one.

    ``old_logprobs`` and ``advantages`` are constants of the step and are detached.
    The maths runs in at least float32.

    Args:
        logprobs: ``[B, T]`` log-probs (nats) of the sampled completion tokens under
            the policy being trained; carries the gradient.
        old_logprobs: ``[B, T]`` log-probs of the same tokens under the policy that
            sampled them.
        advantages: ``[B]`` one advantage per completion (see ``group_advantages``).
        mask: ``[B, T]``, bool or 0/1, 1 on real completion tokens; at least one 1.
        clip_eps: lower clip range, ``rho >= 1 - clip_eps``; in (0, 1).
        clip_eps_high: upper clip range, ``rho <= 1 + clip_eps_high``; > 0. ``None``
            uses ``clip_eps`` (symmetric PPO clip); DAPO uses 0.28 with 0.2.
        aggregation: ``"token"`` (DAPO) or ``"sequence"`` (GRPO); see ``masked_mean``.

    Returns:
        ``(loss, stats)``: ``loss`` a 0-d tensor to minimise; ``stats`` floats over the
        masked tokens (token-weighted whatever the aggregation): ``policy_loss``,
        ``clip_fraction`` (tokens whose clipped term was selected and differs from the
        unclipped one) = ``clip_fraction_low`` (``A < 0``, ``rho < 1 - clip_eps``) +
        ``clip_fraction_high`` (``A > 0``, ``rho > 1 + clip_eps_high``),
        ``ratio_mean``, ``ratio_min``, ``ratio_max``, ``num_tokens``.

    Raises:
        ValueError: shapes that disagree, a bad mask, clip ranges out of range, or an
            unknown ``aggregation``.
    """
    loss, stats, _ = _policy_loss(logprobs, old_logprobs, advantages, mask,
                                  clip_eps=clip_eps, clip_eps_high=clip_eps_high,
                                  aggregation=aggregation)
    return loss, stats


def _check_policy_inputs(logprobs: Tensor, old_logprobs: Tensor, advantages: Tensor,
                         mask: Tensor, clip_eps: float, clip_eps_high: float | None,
                         aggregation: str) -> None:
    check_aggregation(aggregation)
    check_2d("logprobs", logprobs)
    check_same_shape("old_logprobs", old_logprobs, "logprobs", logprobs)
    if advantages.shape != logprobs.shape[:1]:
        raise ValueError(f"advantages.shape={tuple(advantages.shape)}: must be "
                         f"[B]=({logprobs.shape[0]},), one advantage per completion "
                         f"row of logprobs [B, T]={tuple(logprobs.shape)}")
    check_mask(mask, logprobs)
    if not 0 < clip_eps < 1:
        raise ValueError(f"clip_eps={clip_eps!r}: must be in (0, 1) so that the lower "
                         f"bound 1 - clip_eps stays positive; use e.g. clip_eps=0.2")
    if clip_eps_high is not None and not clip_eps_high > 0:
        raise ValueError(f"clip_eps_high={clip_eps_high!r}: must be > 0; use None for "
                         f"clip_eps_high = clip_eps, or e.g. 0.28 (DAPO clip-higher)")


def truncated_is_weights(old_logprobs: Tensor, sampler_logprobs: Tensor, mask: Tensor, *,
                         cap: float) -> Tensor:
    """Truncated importance weights ``min(pi_old / pi_sampler, cap)`` per token (1 on
    padding), for rollouts sampled by another engine than the learner (vLLM's kernels and
    precision): the learner's old-policy log-probs over the sampler's own. Detached."""
    m = mask.bool()
    log_ratio = (old_logprobs.detach().float() - sampler_logprobs.detach().float())
    log_ratio = torch.where(m, log_ratio, torch.zeros_like(log_ratio))
    return torch.exp(log_ratio).clamp(max=cap)


def _policy_loss(logprobs: Tensor, old_logprobs: Tensor, advantages: Tensor, mask: Tensor,
                 *, clip_eps: float, clip_eps_high: float | None,
                 aggregation: str, token_weights: Tensor | None = None
                 ) -> tuple[Tensor, dict[str, float], Tensor]:
    """clipped_policy_loss, also returning the bool mask for grpo_loss's KL term.
    ``token_weights`` (detached) scale each token's objective: truncated importance
    sampling (:func:`truncated_is_weights`)."""
    _check_policy_inputs(logprobs, old_logprobs, advantages, mask, clip_eps,
                         clip_eps_high, aggregation)
    high = clip_eps if clip_eps_high is None else clip_eps_high
    dtype = float_dtype(logprobs)
    m = mask.bool()
    # Zero the log-ratio on padding before exp: garbage there (e.g. a difference of
    # 100 nats) would overflow to inf, and inf * 0 in the backward pass is NaN.
    log_ratio = logprobs.to(dtype) - old_logprobs.detach().to(dtype)
    log_ratio = torch.where(m, log_ratio, torch.zeros_like(log_ratio))
    ratio = torch.exp(log_ratio)  # [B, T]
    adv = advantages.detach().to(dtype).unsqueeze(1)  # [B, 1]
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - clip_eps, 1.0 + high) * adv
    objective = torch.minimum(unclipped, clipped)
    if token_weights is not None:
        objective = objective * token_weights.detach().to(dtype)
    loss = -_masked_mean(objective, m, aggregation)

    with torch.no_grad():
        n = m.sum()
        low_hit = m & (clipped < unclipped) & (adv < 0)
        high_hit = m & (clipped < unclipped) & (adv > 0)
        r = ratio[m]
        stats = {
            "policy_loss": loss.item(),
            "clip_fraction": ((low_hit | high_hit).sum() / n).item(),
            "clip_fraction_low": (low_hit.sum() / n).item(),
            "clip_fraction_high": (high_hit.sum() / n).item(),
            "ratio_mean": r.mean().item(),
            "ratio_min": r.min().item(),
            "ratio_max": r.max().item(),
            "num_tokens": float(n.item()),
        }
        if token_weights is not None:
            stats["is_weight_mean"] = token_weights[m].float().mean().item()
    return loss, stats, m


# --------------------------------------------------------------------------- KL


def kl_k3(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """Per-token k3 estimate of KL(pi || pi_ref) on tokens sampled from pi.

    With ``x = ref_logprobs - logprobs = log(pi_ref / pi)`` (Schulman 2020; GRPO eq. 4)::

        k3 = exp(x) - x - 1 = expm1(x) - x   >= 0

    Unbiased for KL(pi || pi_ref) under sampling from pi, non-negative because
    ``exp(x) >= 1 + x``, and 0 exactly when the log-probs are equal. It is evaluated as
    ``expm1(x) - x``: ``exp(x) - x - 1`` in float32 cancels catastrophically for the
    small ``x`` a policy near its reference has (relative error 20% at ``|x| = 1e-3``,
    negative values at ``|x| = 1e-4``); ``expm1(x) - x`` is off by 1e-4 at
    ``|x| = 1e-3`` and is never negative. Not clamped: a large ``x`` gives a large
    value.

    Args:
        logprobs: ``[B, T]`` (any shape) log-probs (nats) of the sampled tokens under
            the policy; carries the gradient.
        ref_logprobs: same shape, under the frozen reference policy; detached.

    Returns:
        Same shape as ``logprobs``, per-token KL estimates in nats, at least float32.
        Fold with ``masked_mean`` over the completion mask.

    Raises:
        ValueError: the shapes differ.
    """
    if ref_logprobs.shape != logprobs.shape:
        raise ValueError(f"ref_logprobs.shape={tuple(ref_logprobs.shape)}: must equal "
                         f"logprobs.shape={tuple(logprobs.shape)}; pass the reference "
                         f"log-probs of the same tokens")
    dtype = float_dtype(logprobs)
    x = ref_logprobs.detach().to(dtype) - logprobs.to(dtype)
    return torch.expm1(x) - x


def grpo_loss(logprobs: Tensor, old_logprobs: Tensor, ref_logprobs: Tensor | None,
              advantages: Tensor, mask: Tensor, *, clip_eps: float = 0.2,
              clip_eps_high: float | None = None, kl_coef: float = 0.0,
              aggregation: str = "token", token_weights: Tensor | None = None
              ) -> tuple[Tensor, dict[str, float]]:
    """The GRPO loss: clipped surrogate plus ``kl_coef`` times the k3 KL (GRPO eq. 3).

    ::

        loss = clipped_policy_loss(...) + kl_coef * masked_mean(kl_k3(logprobs, ref),
                                                                mask, aggregation)

    The KL term is folded with the same ``aggregation`` as the policy term. It is left
    out of the loss when ``kl_coef == 0`` or ``ref_logprobs is None``; note that the
    latter silently drops a non-zero ``kl_coef``. When ``ref_logprobs`` is given,
    ``stats["kl"]`` is reported even with ``kl_coef == 0`` (monitoring only);
    without it, ``stats["kl"]`` is NaN.

    Args:
        logprobs: ``[B, T]`` policy log-probs (nats) of the completion tokens.
        old_logprobs: ``[B, T]`` log-probs under the sampling policy.
        ref_logprobs: ``[B, T]`` log-probs under the reference policy, or None.
        advantages: ``[B]`` one advantage per completion.
        mask: ``[B, T]``, bool or 0/1, 1 on real completion tokens.
        clip_eps: lower clip range; see ``clipped_policy_loss``.
        clip_eps_high: upper clip range, None for ``clip_eps``.
        kl_coef: weight of the KL term (beta; DeepSeekMath uses 0.04); >= 0.
        aggregation: ``"token"`` or ``"sequence"``.
        token_weights: ``[B, T]`` weights of each token's surrogate (truncated importance
            sampling; None: 1), reported as ``stats["is_weight_mean"]``.

    Returns:
        ``(loss, stats)``: ``stats`` holds ``clipped_policy_loss``'s stats plus ``kl``
        (nats per token, aggregated like the loss), ``kl_loss`` (``kl_coef * kl``, 0
        when the term is skipped) and ``loss``.

    Raises:
        ValueError: as ``clipped_policy_loss``, a ``ref_logprobs`` of another shape, or
            ``kl_coef`` negative or not finite.
    """
    if not (math.isfinite(kl_coef) and kl_coef >= 0):
        raise ValueError(f"kl_coef={kl_coef!r}: must be a finite number >= 0; use 0 to "
                         f"drop the KL term or e.g. kl_coef=0.04 (DeepSeekMath)")
    if ref_logprobs is not None:
        check_same_shape("ref_logprobs", ref_logprobs, "logprobs", logprobs)
    loss, stats, m = _policy_loss(logprobs, old_logprobs, advantages, mask,
                                  clip_eps=clip_eps, clip_eps_high=clip_eps_high,
                                  aggregation=aggregation, token_weights=token_weights)
    kl_value = math.nan
    kl_loss = 0.0
    if ref_logprobs is not None:
        # Zero both log-probs on padding so garbage there cannot reach exp (see
        # _policy_loss); masked_mean then ignores those positions.
        zero = torch.zeros((), dtype=logprobs.dtype, device=logprobs.device)
        kl = kl_k3(torch.where(m, logprobs, zero),
                   torch.where(m, ref_logprobs.detach(), zero.to(ref_logprobs.dtype)))
        kl_mean = _masked_mean(kl, m, aggregation)
        kl_value = kl_mean.item()
        if kl_coef != 0:
            loss = loss + kl_coef * kl_mean
            kl_loss = kl_coef * kl_value
    stats = {**stats, "kl": kl_value, "kl_loss": kl_loss, "loss": loss.item()}
    return loss, stats
