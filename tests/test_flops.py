"""The pure FLOP accounting (race.core.flops): hand-derived golden numbers, properties, errors.

Golden numbers follow docs/accounting.md, "FLOP conventions", for the model convention. Every
expectation below is written out as arithmetic from the shape; none calls the function
under test (except the GRPO composition test, which checks how the terms are combined).

Tiny policy G: d=8, I=16, L=2, 2 query heads, 1 kv head, head_dim=4, V=10, tied.
    d_attn = 2*4 = 8, d_kv = 1*4 = 4
    linears per layer (d_in x d_out): q 8x8=64, k 8x4=32, v 8x4=32, o 8x8=64,
        gate 8x16=128, up 8x16=128, down 16x8=128  -> 576 multiply-adds per token
    linear forward per token, both layers: 2 FLOPs * 576 * 2 layers = 2304
    lm_head per position whose logits are computed: 2*V*d = 2*10*8 = 160
    attention per (query, key) pair, all layers: 4*L*d_attn = 4*2*8 = 64
    causal pairs of a T-token sequence: 1+2+...+T
"""

import dataclasses

import pytest

from race.core import flops, run_flops
from race.core.specs import LoraShape, ModelShape, PhaseFlops, RewardShape

G = ModelShape(name="g", hidden_size=8, intermediate_size=16, num_layers=2, num_heads=2,
               num_kv_heads=1, head_dim=4, vocab_size=10, tied_embeddings=True,
               tokenizer="tok")

# Per-token and per-pair constants of G, derived in the module docstring.
LIN = 2 * (64 + 32 + 32 + 64 + 128 + 128 + 128) * 2  # 2304
HEAD = 2 * 10 * 8  # 160
PAIR = 4 * 2 * 8  # 64

# PRM body P: d=4, I=8, L=1, 1 head, 1 kv head, head_dim=4, same tokenizer as G.
#   linears per layer: q,k,v,o 4x4=16 each, gate/up 4x8=32, down 8x4=32 -> 160
#   linear forward per token: 2 * 160 * 1 layer = 320
#   value head Linear(4,4) -> ReLU -> Linear(4,2): 2*(4*4 + 4*2) = 48 per position
#   attention per pair: 4 * 1 * 4 = 16
P = ModelShape(name="p", hidden_size=4, intermediate_size=8, num_layers=1, num_heads=1,
               num_kv_heads=1, head_dim=4, vocab_size=10, tied_embeddings=False,
               head="prm_value", num_labels=2, tokenizer="tok")
P_LIN, P_VALUE_HEAD, P_PAIR = 2 * (16 * 4 + 32 * 3) * 1, 2 * (4 * 4 + 4 * 2), 4 * 1 * 4
# ORM: the same body with a one-label sequence-score head, 2*d*1 = 8 per scored position
ORM_BODY = dataclasses.replace(P, name="o", head="sequence_score", num_labels=1)
O_HEAD = 2 * 4 * 1

# 2 steps, one tag token each, and no other input overhead: 2 extra tokens per trace
PRM = RewardShape(name="prm", kind="prm", model=P, extra_tokens_per_trace=2, steps_per_trace=2)
ORM = RewardShape(name="orm", kind="orm", model=ORM_BODY)
RULE = RewardShape(name="rule", kind="rule")

QV2 = LoraShape(rank=2, targets=("q_proj", "v_proj"))


def test_constants_by_hand():
    assert (LIN, HEAD, PAIR) == (2304, 160, 64)
    assert (P_LIN, P_VALUE_HEAD, P_PAIR, O_HEAD) == (320, 48, 16, 8)


# --------------------------------------------------------------------------- forward / generate


def test_forward_flops_all_outputs_golden():
    # sequences of 3 and 5 tokens: 8 positions
    linear = 2304 * (3 + 5)  # 18432
    head = 160 * (3 + 5)  # 1280: logits on every position
    attention = 64 * ((1 + 2 + 3) + (1 + 2 + 3 + 4 + 5))  # 64 * 21 = 1344
    assert linear + head + attention == 21056
    assert flops.forward_flops(G, [3, 5]) == 21056
    assert flops.forward_flops(G, [3, 5], outputs="all") == 21056


def test_forward_flops_last_output_golden():
    # head only on the last position of each of the 2 sequences
    expected = 2304 * 8 + 160 * 2 + 64 * 21  # 18432 + 320 + 1344
    assert expected == 20096
    assert flops.forward_flops(G, [3, 5], outputs="last") == 20096


def test_forward_single_token():
    # one position attends one key
    assert flops.forward_flops(G, [1]) == 2304 + 160 + 64 * 1  # 2528


def test_prefill_flops_golden():
    # every prompt position through the body, one head output per prompt
    expected = 2304 * (3 + 5) + 160 * 2 + 64 * (6 + 15)
    assert flops.prefill_flops(G, [3, 5]) == expected == 20096
    # a 4-token prompt alone: 4 positions, 1 output, 1+2+3+4 = 10 pairs
    assert flops.prefill_flops(G, [4]) == 2304 * 4 + 160 * 1 + 64 * 10  # 10016


def test_decode_flops_golden():
    # prompt 3, 4 new tokens: 3 one-token steps attending 3+1, 3+2, 3+3 keys
    # prompt 5, 2 new tokens: 1 one-token step attending 5+1 keys
    steps = (4 - 1) + (2 - 1)  # 4
    per_step = 2304 + 160  # body + one head output
    pairs = (4 + 5 + 6) + 6  # 21
    expected = steps * per_step + 64 * pairs  # 9856 + 1344
    assert expected == 11200
    assert flops.decode_flops(G, [3, 5], [4, 2]) == 11200


def test_decode_single_new_token_is_free():
    # the prefill already produced the only new token
    assert flops.decode_flops(G, [3, 5], [1, 1]) == 0


def test_generate_flops_golden():
    prefill = 2304 * 8 + 160 * 2 + 64 * 21  # 20096
    decode = 4 * (2304 + 160) + 64 * 21  # 11200
    assert flops.generate_flops(G, [3, 5], [4, 2]) == prefill + decode == 31296


def test_generate_equals_one_pass_with_head_on_new_tokens():
    # model convention: prompt P + n new tokens = a pass over P+n-1 positions with
    # n head outputs; P=3, n=4 -> 6 positions, 21 pairs, 4 outputs
    expected = 2304 * 6 + 160 * 4 + 64 * (1 + 2 + 3 + 4 + 5 + 6)
    assert flops.generate_flops(G, [3], [4]) == expected == 15808


def test_generate_with_lora_golden():
    # LoRA on q (8->8) and v (8->4), rank 2: adapter forward 2*r*(d_in+d_out)
    adapters = 2 * (2 * 2 * (8 + 8) + 2 * 2 * (8 + 4))  # 2 layers * (64 + 48) = 224
    lin = 2304 + adapters  # 2528
    # four prompts of 3 tokens, 4 new tokens each
    prefill = lin * 3 + 160 * 1 + 64 * (1 + 2 + 3)  # 7584 + 160 + 384 = 8128
    decode = 3 * (lin + 160) + 64 * (4 + 5 + 6)  # 8064 + 960 = 9024
    assert flops.generate_flops(G, [3] * 4, [4] * 4, lora=QV2) == 4 * (prefill + decode) == 68608


# --------------------------------------------------------------------------- training


def test_train_flops_full_golden():
    # forward over [3, 5] with logits on every position (as in forward_flops "all")
    forward = 2304 * 8 + 160 * 8 + 64 * 21  # 21056
    # full FT: backward = 2x forward for every matmul, head and attention included
    backward = 2 * (2304 * 8) + 2 * (160 * 8) + 2 * (64 * 21)  # 42112
    assert flops.train_flops(G, [3, 5]) == forward + backward == 63168


def test_lora_train_flops_golden():
    # ---- forward: base + q/v adapters (2*r*(d_in+d_out) each), head on every position
    adapter_fwd = 2 * (2 * 2 * (8 + 8) + 2 * 2 * (8 + 4))  # 224 (both layers)
    forward = (2304 + adapter_fwd) * 8 + 160 * 8 + 64 * 21  # 20224 + 1280 + 1344
    assert forward == 22848

    # ---- linear backward per token
    # layer 0: residual stream needs no gradient (frozen embedding)
    q0 = 0 + 2 * 8 * 2 + 4 * 2 * 8  # base 0; A weight grad 32 (no input grad); B 64 -> 96
    k0 = 0  # frozen, input needs no grad
    v0 = 0 + 2 * 8 * 2 + 4 * 2 * 4  # base 0; A 32; B 32 -> 64
    o0 = 2 * 8 * 8  # frozen, input (attention output) needs grad: 1x forward = 128
    mlp = 2 * 8 * 16 + 2 * 8 * 16 + 2 * 16 * 8  # stream needs grad now: 1x each = 768
    layer0 = q0 + k0 + v0 + o0 + mlp
    assert layer0 == 1056
    # layer 1: the stream needs a gradient everywhere
    q1 = 2 * 8 * 8 + (2 * 8 * 2 + 2 * 8 * 2) + 4 * 2 * 8  # 128 + 64 + 64 = 256
    k1 = 2 * 8 * 4  # 64
    v1 = 2 * 8 * 4 + (2 * 8 * 2 + 2 * 8 * 2) + 4 * 2 * 4  # 64 + 64 + 32 = 160
    o1 = 2 * 8 * 8  # 128
    layer1 = q1 + k1 + v1 + o1 + mlp
    assert layer1 == 1376
    linear_backward = (layer0 + layer1) * 8  # 2432 * 8 = 19456

    # ---- frozen tied lm_head: input gradient only, 2*V*d per position
    head_backward = 160 * 8  # 1280

    # ---- attention backward: half a layer's attention forward per needed gradient
    layer_attn_fwd = 4 * 8 * 21  # 4 * d_attn * pairs = 672
    # layer 0: q yes, k no, v yes -> dP (q or k), dV, dQ: 3 gradients
    attn0 = 3 * layer_attn_fwd // 2  # 1008
    # layer 1: dP, dV, dQ, dK: 4 gradients
    attn1 = 4 * layer_attn_fwd // 2  # 1344
    attention_backward = attn0 + attn1  # 2352

    backward = linear_backward + head_backward + attention_backward
    assert backward == 23088
    assert flops.lora_train_flops(G, [3, 5], QV2) == forward + backward == 45936


def test_lora_on_mlp_only_skips_attention_backward_below_it():
    # LoRA rank 2 on down_proj only, one 2-token sequence (3 causal pairs)
    lora = LoraShape(rank=2, targets=("down_proj",))
    adapter_fwd = 2 * (2 * 2 * (16 + 8))  # 2 layers * 96 = 192
    forward = (2304 + adapter_fwd) * 2 + 160 * 2 + 64 * 3  # 4992 + 320 + 192 = 5504
    # layer 0: nothing below down_proj needs a gradient; down's A has no input grad
    layer0 = 2 * 16 * 2 + 4 * 2 * 8  # A weight 64 + B 64 = 128
    # layer 1: every linear frozen with input grad (1x), down adds A (w+in) and B
    layer1 = (64 + 32 + 32 + 64 + 128 + 128 + 128) * 2 + (2 * 16 * 2 * 2) + 4 * 2 * 8
    assert layer1 == 1152 + 128 + 64
    head = 160 * 2  # frozen head, stream needs a gradient: input grad only
    # attention: layer 0 needs none; layer 1 all four (2x its forward)
    attention = 0 + 4 * (4 * 8 * 3) // 2  # 192
    expected = forward + (layer0 + layer1) * 2 + head + attention
    assert flops.lora_train_flops(G, [2], lora) == expected == 8960


# --------------------------------------------------------------------------- reward


def test_reward_rule_is_free():
    assert flops.reward_flops(RULE, [7, 9]) == 0
    assert flops.reward_flops(RULE, [7, 9], convention="executed") == 0


def test_reward_prm_golden():
    # traces of 7 and 9 tokens with 2 and 1 step tags: 9 and 10 scored tokens
    linear = 320 * (9 + 10)  # 6080
    value_head = 48 * (9 + 10)  # 912: value head on every position
    attention = 16 * (9 * 10 // 2 + 10 * 11 // 2)  # 16 * (45 + 55) = 1600
    assert flops.reward_flops(PRM, [7, 9], [2, 1]) == linear + value_head + attention == 8592


def test_reward_orm_golden():
    # traces of 7 and 9 tokens, score head on the last position only
    linear = 320 * (7 + 9)  # 5120
    head = 8 * 2  # 16
    attention = 16 * (7 * 8 // 2 + 9 * 10 // 2)  # 16 * (28 + 45) = 1168
    assert flops.reward_flops(ORM, [7, 9]) == linear + head + attention == 6304


def test_reward_prm_bad_step_tags():
    with pytest.raises(ValueError, match="step_tags"):
        flops.reward_flops(PRM, [7, 9], [1])
    with pytest.raises(ValueError, match="step_tags"):
        flops.reward_flops(PRM, [7, 9], [1, -1])


# --------------------------------------------------------------------------- one GRPO step

CELL = dict(prompts_per_step=2, group_size=2, prompt_tokens=3, completion_tokens=4,
            update_epochs=2, kl_coef=0.05, lora=QV2)


def test_grpo_step_composition():
    step = flops.grpo_step_flops(G, PRM, **CELL)
    rows = 2 * 2
    prompts, completions, traces = [3] * rows, [4] * rows, [3 + 4] * rows
    rollout = flops.generate_flops(G, prompts, completions, lora=QV2)
    learning = (2 * flops.lora_train_flops(G, traces, QV2)  # mu = 2 epochs, one minibatch
                + flops.forward_flops(G, traces, lora=QV2)  # old policy (mu > 1)
                + flops.forward_flops(G, traces, lora=QV2, adapters=False))  # reference
    feedback = flops.reward_flops(PRM, traces, [2] * rows)  # PRM.extra_tokens_per_trace
    assert step == PhaseFlops(rollout=rollout, learning=learning, feedback=feedback)
    assert step.eval == 0


def test_grpo_step_golden_rollout_and_reference():
    step = flops.grpo_step_flops(G, RULE, **CELL)
    # rollout: see test_generate_with_lora_golden
    assert step.rollout == 68608
    assert step.feedback == 0
    no_kl = flops.grpo_step_flops(G, RULE, **(CELL | {"kl_coef": 0.0}))
    # reference pass over four 7-token traces, base weights only, logits everywhere
    reference = 2304 * 28 + 160 * 28 + 64 * 4 * (7 * 8 // 2)  # 64512 + 4480 + 7168
    assert step.learning - no_kl.learning == reference == 76160


def test_grpo_old_logprobs_only_when_policy_moves():
    one_epoch = flops.grpo_step_flops(G, RULE, **(CELL | {"update_epochs": 1, "kl_coef": 0.0}))
    traces = [7] * 4
    assert one_epoch.learning == flops.lora_train_flops(G, traces, QV2)
    # two minibatches of 2: the second one is used after the policy moved
    split = flops.grpo_step_flops(G, RULE, **(CELL | {"update_epochs": 1, "kl_coef": 0.0,
                                                      "minibatch_size": 2}))
    assert split.learning == 2 * (flops.lora_train_flops(G, [7, 7], QV2)
                                  + flops.forward_flops(G, [7, 7], lora=QV2))


def test_grpo_step_full_finetuning():
    step = flops.grpo_step_flops(G, RULE, prompts_per_step=1, group_size=2, prompt_tokens=3,
                                 completion_tokens=4)
    assert step.rollout == flops.generate_flops(G, [3, 3], [4, 4])
    assert step.learning == flops.train_flops(G, [7, 7])


# --------------------------------------------------------------------------- properties


@pytest.mark.parametrize("outputs", ["all", "last"])
def test_forward_additive_over_sequences(outputs):
    seqs = [3, 5, 1, 8]
    assert flops.forward_flops(G, seqs, outputs=outputs) == sum(
        flops.forward_flops(G, [t], outputs=outputs) for t in seqs)
    assert flops.forward_flops(G, seqs, lora=QV2) == sum(
        flops.forward_flops(G, [t], lora=QV2) for t in seqs)


def test_generate_and_train_additive_over_sequences():
    prompts, news = [3, 5, 2], [4, 2, 6]
    assert flops.generate_flops(G, prompts, news) == sum(
        flops.generate_flops(G, [p], [n]) for p, n in zip(prompts, news))
    assert flops.train_flops(G, [3, 5]) == flops.train_flops(G, [3]) + flops.train_flops(G, [5])
    assert flops.lora_train_flops(G, [3, 5], QV2) == (flops.lora_train_flops(G, [3], QV2)
                                                      + flops.lora_train_flops(G, [5], QV2))


def test_monotonic_in_tokens():
    for fn in (lambda t: flops.forward_flops(G, [t]),
               lambda t: flops.train_flops(G, [t]),
               lambda t: flops.lora_train_flops(G, [t], QV2),
               lambda t: flops.generate_flops(G, [3], [t]),
               lambda t: flops.generate_flops(G, [t], [3]),
               lambda t: flops.reward_flops(PRM, [t], [1])):
        values = [fn(t) for t in range(1, 12)]
        assert all(a < b for a, b in zip(values, values[1:]))


@pytest.mark.parametrize("key,values", [("group_size", [2, 3, 4, 8]),
                                        ("update_epochs", [1, 2, 3, 5]),
                                        ("prompts_per_step", [1, 2, 4]),
                                        ("completion_tokens", [1, 4, 9]),
                                        ("prompt_tokens", [1, 3, 10])])
@pytest.mark.parametrize("convention", ["model", "executed"])
def test_step_monotonic(key, values, convention):
    totals = [flops.grpo_step_flops(G, PRM, convention=convention, **(CELL | {key: v})).total
              for v in values]
    assert all(a < b for a, b in zip(totals, totals[1:])), totals


def test_lora_cheaper_than_full():
    assert flops.lora_train_flops(G, [3, 5], QV2) < flops.train_flops(G, [3, 5])


def test_executed_at_least_model():
    seqs, prompts, news = [3, 5, 7], [3, 5, 2], [4, 2, 6]
    for kwargs in ({}, {"lora": QV2}, {"outputs": "last"}):
        assert (flops.forward_flops(G, seqs, convention="executed", **kwargs)
                >= flops.forward_flops(G, seqs, **kwargs))
    assert (flops.generate_flops(G, prompts, news, convention="executed")
            >= flops.generate_flops(G, prompts, news))
    assert flops.train_flops(G, seqs, convention="executed") >= flops.train_flops(G, seqs)
    assert (flops.lora_train_flops(G, seqs, QV2, convention="executed")
            >= flops.lora_train_flops(G, seqs, QV2))
    for reward in (RULE, ORM, PRM):
        assert (flops.reward_flops(reward, seqs, [1, 2, 3], convention="executed")
                >= flops.reward_flops(reward, seqs, [1, 2, 3]))
        executed = flops.grpo_step_flops(G, reward, convention="executed",
                                         **(CELL | {"max_new_tokens": 6}))
        model = flops.grpo_step_flops(G, reward, **(CELL | {"max_new_tokens": 6}))
        assert executed.total >= model.total
        for phase in ("rollout", "learning", "feedback"):
            assert getattr(executed, phase) >= getattr(model, phase)


def test_steps_for_budget_rounds_down_and_never_overspends():
    step = PhaseFlops(rollout=30.0, learning=60.0, feedback=10.0, eval=1e9)  # total 100
    assert run_flops.steps_for_budget(step, 100.0) == 1
    assert run_flops.steps_for_budget(step, 199.0) == 1
    assert run_flops.steps_for_budget(step, 250.0) == 2
    real = flops.grpo_step_flops(G, PRM, **CELL)
    for budget in (real.total, 2.5 * real.total, 1e9, 123456789.0):
        n = run_flops.steps_for_budget(real, budget)
        assert n * real.total <= budget < (n + 1) * real.total


def test_steps_for_budget_rejects_too_small():
    step = PhaseFlops(rollout=100.0)
    with pytest.raises(ValueError, match="budget="):
        run_flops.steps_for_budget(step, 99.0)
    with pytest.raises(ValueError, match="budget="):
        run_flops.steps_for_budget(step, 0.0)


def test_compute_card_total_is_per_step_times_steps():
    step = flops.grpo_step_flops(G, PRM, **CELL)
    card = run_flops.compute_card(G, PRM, step, steps=7)
    assert card.steps == 7
    assert card.total == step.scale(7)
    assert card.total.total == pytest.approx(7 * step.total)
    out = card.to_dict()
    assert out["total_flops"]["total"] == pytest.approx(7 * step.total)
    assert sum(out["shares"].values()) == pytest.approx(1.0)

    by_budget = run_flops.compute_card(G, PRM, step, budget_flops=3.5 * step.total)
    assert by_budget.steps == 3
    assert by_budget.total.total == pytest.approx(3 * step.total)


def test_compute_card_needs_exactly_one_of_steps_or_budget():
    step = PhaseFlops(rollout=1.0)
    with pytest.raises(ValueError):
        run_flops.compute_card(G, RULE, step)
    with pytest.raises(ValueError):
        run_flops.compute_card(G, RULE, step, steps=1, budget_flops=10.0)
    with pytest.raises(ValueError, match="steps=0"):
        run_flops.compute_card(G, RULE, step, steps=0)


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("group_size", [1, 0, -2])
def test_group_size_below_two_rejected(group_size):
    with pytest.raises(ValueError, match="grid.group_size"):
        flops.grpo_step_flops(G, RULE, **(CELL | {"group_size": group_size}))


@pytest.mark.parametrize("key,value", [("prompt_tokens", 0), ("prompt_tokens", -1),
                                       ("completion_tokens", 0), ("completion_tokens", -4),
                                       ("prompts_per_step", 0), ("update_epochs", 0)])
def test_step_non_positive_lengths_rejected(key, value):
    prefix = "task" if key == "prompt_tokens" else "grid"
    with pytest.raises(ValueError, match=f"{prefix}.{key}="):
        flops.grpo_step_flops(G, RULE, **(CELL | {key: value}))


@pytest.mark.parametrize("bad", [[0], [3, -1], [], [2.5]])
def test_term_non_positive_lengths_rejected(bad):
    with pytest.raises(ValueError, match="seq_tokens"):
        flops.forward_flops(G, bad)
    with pytest.raises(ValueError, match="seq_tokens"):
        flops.train_flops(G, bad)
    with pytest.raises(ValueError, match="seq_tokens"):
        flops.lora_train_flops(G, bad, QV2)
    with pytest.raises(ValueError, match="prompt_tokens"):
        flops.decode_flops(G, bad, [1] * len(bad))


@pytest.mark.parametrize("bad", [[0], [3, -1], []])
def test_prefill_and_generate_bad_prompt_names_prompt_tokens(bad):
    # the error names the caller's key, prompt_tokens, not forward_flops' seq_tokens
    with pytest.raises(ValueError, match="prompt_tokens"):
        flops.prefill_flops(G, bad)
    with pytest.raises(ValueError, match="prompt_tokens"):
        flops.generate_flops(G, bad, [1] * len(bad))


def test_decode_bad_new_tokens_rejected():
    with pytest.raises(ValueError, match="new_tokens"):
        flops.decode_flops(G, [3], [0])
    with pytest.raises(ValueError, match="new_tokens"):
        flops.decode_flops(G, [3, 4], [2])


def test_unknown_convention_rejected():
    with pytest.raises(ValueError, match="convention="):
        flops.forward_flops(G, [3], convention="kaplan")
    with pytest.raises(ValueError, match="convention="):
        flops.grpo_step_flops(G, RULE, convention="kaplan", **CELL)


def test_minibatch_must_divide_rollout_batch():
    # rollout batch = 2 prompts x 2 samples = 4
    with pytest.raises(ValueError, match="grid.minibatch_size=3"):
        flops.grpo_step_flops(G, RULE, **(CELL | {"minibatch_size": 3}))
    with pytest.raises(ValueError, match="grid.minibatch_size=0"):
        flops.grpo_step_flops(G, RULE, **(CELL | {"minibatch_size": 0}))


def test_max_new_tokens_below_completion_rejected():
    with pytest.raises(ValueError, match="grid.max_new_tokens=3"):
        flops.grpo_step_flops(G, RULE, **(CELL | {"max_new_tokens": 3}))


def test_negative_kl_rejected():
    with pytest.raises(ValueError, match="grid.kl_coef"):
        flops.grpo_step_flops(G, RULE, **(CELL | {"kl_coef": -0.1}))


def test_lora_rank_larger_than_width_rejected():
    # v_proj is 8 -> 4, so rank 5 does not fit
    too_wide = LoraShape(rank=5, targets=("q_proj", "v_proj"))
    with pytest.raises(ValueError, match="grid.lora_rank=5"):
        flops.lora_train_flops(G, [3], too_wide)
    with pytest.raises(ValueError, match="grid.lora_rank=5"):
        flops.grpo_step_flops(G, RULE, **(CELL | {"lora": too_wide}))


def test_prm_with_other_tokenizer_rejected():
    other = RewardShape(name="alien-prm", kind="prm",
                        model=dataclasses.replace(P, tokenizer="other"))
    with pytest.raises(ValueError, match="reward=alien-prm"):
        flops.check_reward_matches(G, other)
    with pytest.raises(ValueError, match="reward=alien-prm"):
        flops.grpo_step_flops(G, other, **CELL)
    # without tokenizer names, the vocabulary sizes decide
    unnamed = RewardShape(name="big-vocab-prm", kind="prm",
                          model=dataclasses.replace(P, tokenizer="", vocab_size=12))
    with pytest.raises(ValueError, match="reward=big-vocab-prm"):
        flops.check_reward_matches(G, unnamed)
    # same tokenizer passes; an ORM or a rule is not checked
    flops.check_reward_matches(G, PRM)
    flops.check_reward_matches(G, RewardShape(name="o2", kind="orm",
                                              model=dataclasses.replace(ORM_BODY, tokenizer="x")))
    flops.check_reward_matches(G, RULE)
