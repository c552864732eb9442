"""nn: the torch pieces the pilot, the warm start and the rewards share: device and dtype
choice, phase clocks, peak FLOP/s and throughput (:mod:`~race.nn.devices`, torch imported
inside its functions), FlopCounterMode and Qwen2 models built from a shape
(:mod:`~race.nn.measure`) and RACE's copy of the Qwen2.5-Math-PRM architecture
(:mod:`~race.nn.qwen_prm_modeling`), the two of which import torch at the top.

May import: core, errors.
"""
