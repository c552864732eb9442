"""The pure GRPO maths (race.core.grpo): hand-worked numbers, gradients, properties, errors.

Every expected value is written out as arithmetic in the test; none is produced by the
function under test. ln 2 = 0.693147, ln 3 = 1.098612, sqrt(3) = 1.732051.

The clipped-loss example used throughout (clip_eps=0.2, clip_eps_high=0.3, so the clip
window is [0.8, 1.3]); B=2 completions, T=3 positions, the last of row 1 is padding:

    row 0, A=+1, ratios [1.5, 1.0, 0.5]
        t0: min(1.5*1, clip(1.5)=1.3 *1) = 1.3    clipped (high side), no gradient
        t1: min(1.0, 1.0)               = 1.0    unclipped
        t2: min(0.5, clip(0.5)=0.8)     = 0.5    unclipped (pessimistic: ratio wins)
        sum = 2.8, length 3
    row 1, A=-2, ratios [0.5, 1.5, pad]
        t0: min(0.5*-2=-1.0, 0.8*-2=-1.6) = -1.6  clipped (low side), no gradient
        t1: min(1.5*-2=-3.0, 1.3*-2=-2.6) = -3.0  unclipped
        sum = -4.6, length 2
    token    loss = -(2.8 - 4.6) / 5               = 0.36
    sequence loss = -(2.8/3 + -4.6/2) / 2 = 4.1/6  = 0.683333
"""

import math

import pytest
import torch

from race.core import grpo, logprobs

LN2 = math.log(2.0)
LN3 = math.log(3.0)
SQRT3 = math.sqrt(3.0)


def _example(dtype=torch.float64):
    """The 2x3 example of the module docstring; logprobs carries the gradient.

    The padded position has logprobs - old_logprobs = 1000 nats: exp(1000) is inf even
    in float64, so the loss and its gradient are finite only if padding is never read.
    """
    old = torch.tensor([[-1.0, -2.0, -0.5], [-1.5, -0.7, -1000.0]], dtype=dtype)
    ratios = torch.tensor([[1.5, 1.0, 0.5], [0.5, 1.5, 1.0]], dtype=dtype)
    logprobs = old + torch.log(ratios)
    logprobs[1, 2] = 0.0
    logprobs.requires_grad_(True)
    adv = torch.tensor([1.0, -2.0], dtype=dtype)
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    return logprobs, old, adv, mask


# --------------------------------------------------------------------------- advantages


def test_group_advantages_scaled_by_hand():
    # Group 0 = [1, 0, 0]: mean 1/3, deviations [2/3, -1/3, -1/3],
    #   sum of squares 4/9 + 1/9 + 1/9 = 2/3; unbiased var (2/3)/(G-1=2) = 1/3,
    #   std = 1/sqrt(3); A = [(2/3)*sqrt(3), -(1/3)*sqrt(3), ...] = [2/sqrt3, -1/sqrt3, ..]
    #   = [1.154701, -0.577350, -0.577350].
    # Group 1 = [1, 1, 1]: std 0 -> all 0, no NaN even with eps=0.
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0])
    expected = torch.tensor([2 / SQRT3, -1 / SQRT3, -1 / SQRT3, 0.0, 0.0, 0.0])
    torch.testing.assert_close(grpo.group_advantages(rewards, 3, eps=0.0), expected)
    # With the default eps=1e-6 the divisor is 1/sqrt3 + 1e-6: relative change 1.7e-6.
    adv = grpo.group_advantages(rewards, 3)
    torch.testing.assert_close(adv, expected, rtol=1e-5, atol=0.0)
    assert torch.isfinite(adv).all()


def test_group_advantages_use_unbiased_std_not_population():
    # The documented choice: Bessel-corrected std (torch.std default, as TRL and verl).
    # Population std of [1, 0, 0] would be sqrt((2/3)/3) = sqrt(2)/3, giving
    # A_0 = (2/3)/(sqrt2/3) = sqrt(2) = 1.414214, not 2/sqrt(3) = 1.154701.
    adv = grpo.group_advantages(torch.tensor([1.0, 0.0, 0.0]), 3, eps=0.0)
    assert adv[0].item() == pytest.approx(2 / SQRT3, rel=1e-6)
    assert adv[0].item() != pytest.approx(math.sqrt(2.0), rel=1e-3)
    # Property of the unbiased std: sum_i A_i^2 = sum d^2 / (sum d^2 / (G-1)) = G - 1,
    # here 4/3 + 1/3 + 1/3 = 2.
    assert (adv**2).sum().item() == pytest.approx(2.0, rel=1e-6)


def test_group_advantages_mean_only_by_hand():
    # Dr. GRPO (scale=False): A = r - mean: group 0 [1-1/3, 0-1/3, 0-1/3], group 1 zeros.
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0])
    expected = torch.tensor([2 / 3, -1 / 3, -1 / 3, 0.0, 0.0, 0.0])
    torch.testing.assert_close(grpo.group_advantages(rewards, 3, scale=False), expected)


def test_group_advantages_equal_rewards_are_exactly_zero():
    # float32 mean of seven 0.3s is off by one rounding step: naively 3e-8 / (0 + 1e-6)
    # would be an advantage of 0.03 from a group with no signal.
    rewards = torch.tensor([0.1] * 7 + [0.3] * 7)
    for scale in (True, False):
        adv = grpo.group_advantages(rewards, 7, scale=scale)
        assert torch.equal(adv, torch.zeros(14))


def test_group_advantages_properties():
    # Zero mean per group; order kept (prompt-major); ints become float32; no grad.
    g = torch.Generator().manual_seed(0)
    rewards = torch.rand(4 * 8, generator=g)
    adv = grpo.group_advantages(rewards, 8)
    torch.testing.assert_close(adv.view(4, 8).sum(dim=1), torch.zeros(4), atol=1e-5,
                               rtol=0)
    # Shifting one prompt's rewards changes nothing; ranks inside a group are kept.
    shifted = rewards.clone()
    shifted[:8] += 5.0
    torch.testing.assert_close(grpo.group_advantages(shifted, 8), adv, atol=1e-4, rtol=0)
    assert torch.equal(adv[:8].argsort(), rewards[:8].argsort())
    ints = grpo.group_advantages(torch.tensor([1, 0, 0, 1]), 2, scale=False)
    assert ints.dtype == torch.float32
    torch.testing.assert_close(ints, torch.tensor([0.5, -0.5, -0.5, 0.5]))
    assert not grpo.group_advantages(rewards.requires_grad_(True), 8).requires_grad


# --------------------------------------------------------------------------- aggregation


def test_masked_mean_by_hand():
    # token: (1+2+3+4+5)/5 = 3; sequence: (6/3 + 9/2)/2 = (2 + 4.5)/2 = 3.25.
    # The NaN sits on padding and must not leak.
    x = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, float("nan")]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    assert grpo.masked_mean(x, mask, "token").item() == pytest.approx(3.0)
    assert grpo.masked_mean(x, mask, "sequence").item() == pytest.approx(3.25)
    # An empty completion counts in B with 0: sequence (1.5 + 0)/2 = 0.75; token 3/2.
    x2 = torch.tensor([[1.0, 2.0], [7.0, 7.0]])
    m2 = torch.tensor([[True, True], [False, False]])
    assert grpo.masked_mean(x2, m2, "sequence").item() == pytest.approx(0.75)
    assert grpo.masked_mean(x2, m2, "token").item() == pytest.approx(1.5)


# --------------------------------------------------------------------------- policy loss


def test_clipped_loss_token_and_sequence_by_hand():
    logprobs, old, adv, mask = _example()
    tok, stats = grpo.clipped_policy_loss(logprobs, old, adv, mask, clip_eps=0.2,
                                          clip_eps_high=0.3, aggregation="token")
    seq, _ = grpo.clipped_policy_loss(logprobs, old, adv, mask, clip_eps=0.2,
                                      clip_eps_high=0.3, aggregation="sequence")
    assert tok.item() == pytest.approx(0.36, abs=1e-12)
    assert seq.item() == pytest.approx(4.1 / 6, abs=1e-12)
    # Clipped tokens: (0,0) high side, (1,0) low side, of 5 masked tokens.
    assert stats["clip_fraction"] == pytest.approx(2 / 5)
    assert stats["clip_fraction_high"] == pytest.approx(1 / 5)
    assert stats["clip_fraction_low"] == pytest.approx(1 / 5)
    # ratio over masked tokens: (1.5 + 1.0 + 0.5 + 0.5 + 1.5)/5 = 1.0; padding ignored.
    assert stats["ratio_mean"] == pytest.approx(1.0)
    assert stats["ratio_min"] == pytest.approx(0.5)
    assert stats["ratio_max"] == pytest.approx(1.5)
    assert stats["num_tokens"] == 5.0
    assert stats["policy_loss"] == pytest.approx(0.36)
    assert all(isinstance(v, float) for v in stats.values())


def test_clipped_loss_symmetric_default_clip():
    # clip_eps_high=None -> window [0.8, 1.2]: row 0 t0 becomes 1.2, the rest as before:
    # row 0 sum 1.2 + 1.0 + 0.5 = 2.7, row 1 sum -4.6; token loss -(2.7 - 4.6)/5 = 0.38.
    logprobs, old, adv, mask = _example()
    loss, _ = grpo.clipped_policy_loss(logprobs, old, adv, mask)
    assert loss.item() == pytest.approx(0.38, abs=1e-12)


def test_clipped_loss_on_policy_is_minus_mean_advantage():
    # ratio 1 everywhere: objective = A per token; token loss -(3*1 + 2*(-2))/5 = 0.2.
    logprobs, _, adv, mask = _example()
    loss, stats = grpo.clipped_policy_loss(logprobs, logprobs.detach(), adv, mask)
    assert loss.item() == pytest.approx(0.2, abs=1e-12)
    assert stats["clip_fraction"] == 0.0


def test_clipped_loss_gradient_zero_on_clipped_tokens():
    # Unclipped: objective rho*A, d(rho*A)/d logp = rho*A. Token loss = -sum/5, so
    # grad = -rho*A/5: (0,1) -1*1/5 = -0.2, (0,2) -0.5*1/5 = -0.1, (1,1) -1.5*-2/5 = 0.6.
    # Clipped (0,0), (1,0) and padding (1,2): 0.
    logprobs, old, adv, mask = _example()
    loss, _ = grpo.clipped_policy_loss(logprobs, old, adv, mask, clip_eps=0.2,
                                       clip_eps_high=0.3)
    loss.backward()
    expected = torch.tensor([[0.0, -0.2, -0.1], [0.0, 0.6, 0.0]], dtype=torch.float64)
    torch.testing.assert_close(logprobs.grad, expected)
    # Sequence loss = -(row0/3 + row1/2)/2: grads -rho*A/6 on row 0, -rho*A/4 on row 1:
    # (0,1) -1/6, (0,2) -0.5/6 = -1/12, (1,1) 3/4.
    logprobs.grad = None
    loss, _ = grpo.clipped_policy_loss(logprobs, old, adv, mask, clip_eps=0.2,
                                       clip_eps_high=0.3, aggregation="sequence")
    loss.backward()
    expected = torch.tensor([[0.0, -1 / 6, -1 / 12], [0.0, 0.75, 0.0]], dtype=torch.float64)
    torch.testing.assert_close(logprobs.grad, expected)


def test_clipped_loss_bf16_inputs_computed_in_float32():
    logprobs, old, adv, mask = _example(torch.float32)
    loss32, _ = grpo.clipped_policy_loss(logprobs, old, adv, mask)
    lp16 = logprobs.detach().bfloat16().requires_grad_(True)
    loss16, _ = grpo.clipped_policy_loss(lp16, old.bfloat16(), adv.bfloat16(), mask)
    assert loss16.dtype == torch.float32
    loss16.backward()
    assert torch.isfinite(lp16.grad.float()).all()
    assert loss16.item() == pytest.approx(loss32.item(), abs=0.05)  # bf16 rounding only


# --------------------------------------------------------------------------- KL


def test_kl_k3_by_hand():
    # x = ref - logp. x = ln2: e^x - x - 1 = 2 - 0.693147 - 1 = 0.306853.
    # x = -ln2: 0.5 + 0.693147 - 1 = 0.193147. x = 0: 1 - 0 - 1 = 0 exactly.
    logp = torch.zeros(1, 3, dtype=torch.float64, requires_grad=True)
    ref = torch.tensor([[LN2, -LN2, 0.0]], dtype=torch.float64)
    kl = grpo.kl_k3(logp, ref)
    torch.testing.assert_close(kl, torch.tensor([[1 - LN2, LN2 - 0.5, 0.0]],
                                                dtype=torch.float64))
    assert kl[0, 2].item() == 0.0
    # d k3 / d logp = -e^x + 1: [1 - 2, 1 - 0.5, 1 - 1] = [-1, 0.5, 0].
    kl.sum().backward()
    torch.testing.assert_close(logp.grad, torch.tensor([[-1.0, 0.5, 0.0]],
                                                       dtype=torch.float64))


def test_kl_k3_nonnegative_and_accurate_on_random_inputs():
    g = torch.Generator().manual_seed(0)
    for scale in (3.0, 1e-1, 1e-3, 1e-5, 1e-7):
        logp = -torch.rand(64, 32, generator=g) * 5
        ref = logp + torch.randn(64, 32, generator=g) * scale
        kl = grpo.kl_k3(logp, ref)
        assert kl.dtype == torch.float32
        assert (kl >= 0).all(), f"negative k3 at scale {scale}"
        # Against float64 on the same float32 log-ratio x (its own rounding, ~2e-7
        # absolute for log-probs near -5, belongs to the input, not to k3). expm1(x) - x
        # is off by a couple of float32 rounding steps of its operands, 2.4e-7 *
        # (|expm1 x| + |x|); e^x - x - 1 is off by steps of 1.0 (~1e-7), which is noise
        # next to k3 ~ x^2/2 = 5e-7 at x ~ 1e-3.
        x = (ref - logp).double()
        want = torch.expm1(x) - x
        bound = 2.4e-7 * (torch.expm1(x).abs() + x.abs())
        assert ((kl.double() - want).abs() <= bound).all(), f"inaccurate at {scale}"
        if scale == 1e-3:
            x32 = ref - logp
            naive = (torch.exp(x32) - x32 - 1).double()
            assert ((naive - want).abs() > bound).any()
    assert torch.equal(grpo.kl_k3(logp, logp), torch.zeros_like(logp))


# --------------------------------------------------------------------------- grpo_loss


def _ref_for_example(logprobs):
    # ref - logp = ln2 on (0,0) and (1,0) -> k3 = 1 - ln2 = 0.306853 there; 0 on the
    # other real tokens; padding holds -1e4 (k3 would be ~1e4, and e^(1e4) = inf).
    ref = logprobs.detach().clone()
    ref[0, 0] += LN2
    ref[1, 0] += LN2
    ref[1, 2] = -1e4
    return ref


def test_grpo_loss_adds_kl_by_hand():
    k = 1 - LN2  # 0.306853
    # token:    kl = 2k/5 = 0.122741;           loss = 0.36 + 0.1*0.122741 = 0.372274
    # sequence: kl = (k/3 + k/2)/2 = 5k/12 = 0.127855; loss = 4.1/6 + 0.1*0.127855
    cases = {"token": (0.36, 2 * k / 5), "sequence": (4.1 / 6, 5 * k / 12)}
    for aggregation, (policy, kl) in cases.items():
        logprobs, old, adv, mask = _example()
        ref = _ref_for_example(logprobs)
        loss, stats = grpo.grpo_loss(logprobs, old, ref, adv, mask, clip_eps=0.2,
                                     clip_eps_high=0.3, kl_coef=0.1,
                                     aggregation=aggregation)
        assert loss.item() == pytest.approx(policy + 0.1 * kl, abs=1e-12)
        assert stats["kl"] == pytest.approx(kl, abs=1e-12)
        assert stats["kl_loss"] == pytest.approx(0.1 * kl, abs=1e-12)
        assert stats["policy_loss"] == pytest.approx(policy, abs=1e-12)
        assert stats["loss"] == pytest.approx(loss.item())
        loss.backward()
        assert torch.isfinite(logprobs.grad).all()
        assert logprobs.grad[1, 2].item() == 0.0  # padding


def test_grpo_loss_kl_term_skipped():
    # kl_coef=0: loss is the policy loss 0.36; kl is still reported (2k/5).
    logprobs, old, adv, mask = _example()
    ref = _ref_for_example(logprobs)
    loss, stats = grpo.grpo_loss(logprobs, old, ref, adv, mask, clip_eps=0.2,
                                 clip_eps_high=0.3, kl_coef=0.0)
    assert loss.item() == pytest.approx(0.36, abs=1e-12)
    assert stats["kl"] == pytest.approx(2 * (1 - LN2) / 5, abs=1e-12)
    assert stats["kl_loss"] == 0.0
    # No reference: the term is skipped even with kl_coef > 0, kl reported as NaN.
    loss, stats = grpo.grpo_loss(logprobs, old, None, adv, mask, clip_eps=0.2,
                                 clip_eps_high=0.3, kl_coef=0.1)
    assert loss.item() == pytest.approx(0.36, abs=1e-12)
    assert math.isnan(stats["kl"])


# --------------------------------------------------------------------------- log-probs


def test_token_logprobs_by_hand():
    # Row 0: position 0 logits [0, 0, 0] -> p = 1/3 each; predicts ids[1]=2: -ln3.
    #        position 1 logits [0, ln2, 0] -> p = [1/4, 2/4, 1/4]; ids[2]=1: ln(1/2).
    # Row 1: position 0 logits [ln3, 0, 0] -> p = [3/5, 1/5, 1/5]; ids[1]=0: ln(3/5).
    #        position 1 logits [0, 0, ln2] -> p = [1/4, 1/4, 2/4]; ids[2]=2: ln(1/2).
    # The last position predicts nothing; its logits are never read.
    logits = torch.tensor([[[0.0, 0.0, 0.0], [0.0, LN2, 0.0], [99.0, -99.0, 5.0]],
                           [[LN3, 0.0, 0.0], [0.0, 0.0, LN2], [1.0, 2.0, 3.0]]],
                          requires_grad=True)
    ids = torch.tensor([[0, 2, 1], [1, 0, 2]])
    out = logprobs.token_logprobs(logits, ids)
    expected = torch.tensor([[-LN3, -LN2], [math.log(3 / 5), -LN2]])
    assert out.shape == (2, 2) and out.dtype == torch.float32
    torch.testing.assert_close(out, expected)
    # d log p_target / d logits = onehot(target) - softmax: row 0, position 0 (target 2)
    # [0 - 1/3, 0 - 1/3, 1 - 1/3]; the last position gets no gradient.
    out[0, 0].backward()
    torch.testing.assert_close(logits.grad[0, 0], torch.tensor([-1 / 3, -1 / 3, 2 / 3]))
    assert torch.equal(logits.grad[0, 2], torch.zeros(3))


def test_token_logprobs_bf16_returns_float32():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 5, 11, generator=g).bfloat16()
    ids = torch.randint(0, 11, (2, 5), generator=g)
    out = logprobs.token_logprobs(logits, ids)
    assert out.dtype == torch.float32
    want = torch.log_softmax(logits.float()[:, :-1], -1).gather(-1, ids[:, 1:, None])
    torch.testing.assert_close(out, want.squeeze(-1))


def test_head_token_logprobs_equal_token_logprobs_of_the_full_logits():
    """Chunks that split rows (4 positions of 3 x 7), temperature, float64: values and the
    hidden states' gradient equal log_softmax of the full ``[B, T, V]`` logits."""
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(3, 7, 5, generator=g, dtype=torch.float64)
    weight, bias = (torch.randn(11, 5, generator=g, dtype=torch.float64),
                    torch.randn(11, generator=g, dtype=torch.float64))
    ids = torch.randint(0, 11, (3, 7), generator=g)
    upstream = torch.randn(3, 6, generator=g, dtype=torch.float64)
    for tau in (1.0, 0.7):
        full_h, chunk_h = hidden.clone().requires_grad_(), hidden.clone().requires_grad_()
        full = logprobs.token_logprobs(torch.nn.functional.linear(full_h, weight, bias) / tau, ids)
        chunked = logprobs.head_token_logprobs(chunk_h, weight, ids, bias=bias, temperature=tau,
                                           chunk_positions=4)
        assert chunked.shape == (3, 6) and chunked.dtype == torch.float64
        torch.testing.assert_close(chunked, full, rtol=0, atol=1e-12)
        (full * upstream).sum().backward()
        (chunked * upstream).sum().backward()
        torch.testing.assert_close(chunk_h.grad, full_h.grad, rtol=0, atol=1e-12)
    assert torch.autograd.gradcheck(
        lambda h: logprobs.head_token_logprobs(h, weight, ids, temperature=0.5, chunk_positions=5),
        (hidden.clone().requires_grad_(),))
    # no gradient wanted: values only (the grad buffer is never built)
    with torch.no_grad():
        torch.testing.assert_close(logprobs.head_token_logprobs(hidden, weight, ids, bias=bias),
                                   logprobs.token_logprobs(hidden @ weight.T + bias, ids))


def test_head_token_logprobs_bad_inputs_name_the_argument():
    h, w, ids = torch.zeros(2, 3, 4), torch.zeros(5, 4), torch.zeros(2, 3, dtype=torch.long)
    cases = [("hidden", lambda: logprobs.head_token_logprobs(h[0], w, ids)),
             ("weight", lambda: logprobs.head_token_logprobs(h, w.T, ids)),
             ("ids", lambda: logprobs.head_token_logprobs(h, w, ids[:, :2])),
             ("ids", lambda: logprobs.head_token_logprobs(h, w, ids + 5)),
             ("weight", lambda: logprobs.head_token_logprobs(h, w.clone().requires_grad_(), ids)),
             ("temperature", lambda: logprobs.head_token_logprobs(h, w, ids, temperature=0)),
             ("chunk_positions", lambda: logprobs.head_token_logprobs(h, w, ids,
                                                                  chunk_positions=0))]
    for name, call in cases:
        with pytest.raises(ValueError, match=name):
            call()


# --------------------------------------------------------------------------- errors


def test_bad_inputs_name_the_argument():
    lp, old, adv, mask = _example()
    cases = [
        ("group_size", lambda: grpo.group_advantages(torch.ones(6), 1)),
        ("group_size", lambda: grpo.group_advantages(torch.ones(6), 4)),
        ("rewards", lambda: grpo.group_advantages(torch.ones(2, 3), 3)),
        ("rewards", lambda: grpo.group_advantages(torch.tensor([1.0, math.nan]), 2)),
        ("eps", lambda: grpo.group_advantages(torch.ones(4), 2, eps=-1.0)),
        ("did you mean 'token'",
         lambda: grpo.clipped_policy_loss(lp, old, adv, mask, aggregation="tokens")),
        ("old_logprobs", lambda: grpo.clipped_policy_loss(lp, old[:, :2], adv, mask)),
        ("advantages", lambda: grpo.clipped_policy_loss(lp, old, adv[:1], mask)),
        ("advantages", lambda: grpo.clipped_policy_loss(lp, old, adv[:, None], mask)),
        ("mask", lambda: grpo.clipped_policy_loss(lp, old, adv, mask[:1])),
        ("mask", lambda: grpo.clipped_policy_loss(lp, old, adv, mask * 2)),
        ("mask", lambda: grpo.clipped_policy_loss(lp, old, adv, torch.zeros_like(mask))),
        ("logprobs", lambda: grpo.clipped_policy_loss(lp[0], old[0], adv, mask[0])),
        ("clip_eps", lambda: grpo.clipped_policy_loss(lp, old, adv, mask, clip_eps=1.5)),
        ("clip_eps_high",
         lambda: grpo.clipped_policy_loss(lp, old, adv, mask, clip_eps_high=0.0)),
        ("kl_coef", lambda: grpo.grpo_loss(lp, old, old, adv, mask, kl_coef=-0.1)),
        ("ref_logprobs", lambda: grpo.grpo_loss(lp, old, old[:1], adv, mask)),
        ("ref_logprobs", lambda: grpo.kl_k3(lp, old[:1])),
        ("aggregation", lambda: grpo.masked_mean(lp, mask, "mean")),
        ("logits", lambda: logprobs.token_logprobs(torch.zeros(2, 3), torch.zeros(2, 3))),
        ("ids", lambda: logprobs.token_logprobs(torch.zeros(2, 3, 4),
                                            torch.zeros(2, 2, dtype=torch.long))),
        ("ids", lambda: logprobs.token_logprobs(torch.zeros(2, 1, 4),
                                            torch.zeros(2, 1, dtype=torch.long))),
        ("ids", lambda: logprobs.token_logprobs(torch.zeros(1, 2, 4), torch.zeros(1, 2))),
        ("ids", lambda: logprobs.token_logprobs(torch.zeros(1, 2, 4),
                                            torch.tensor([[0, 4]]))),
    ]
    for name, call in cases:
        with pytest.raises(ValueError, match=name):
            call()
