"""core: the pure centre every other room shares: frozen specs (shapes, phase FLOPs, the
cell's RunSpec and its id contract), FLOP accounting in both conventions, memory plans,
the binomial standard error, the guards against late failure, the ladder's maths, regime
names, GRPO's tensor maths (:mod:`~race.core.grpo`, the only module here that imports
torch) and how numbers print. No IO, no catalog, no config objects.

May import: errors.
"""
