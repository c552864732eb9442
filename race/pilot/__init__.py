"""pilot: the recipe that runs inside a job: one allocation cell, a budgeted GRPO loop
(:func:`race.pilot.loop.run_pilot`, read top to bottom) with its pieces beside it: the
state and summary that make resume exact (:mod:`~.state`), the components it runs with
(:mod:`~.components`), scoring and evaluation (:mod:`~.evaluate`), the budget rule
(:mod:`~.budget`, which the plan reuses), the LoRA learner (:mod:`~.learner`) and the
rollout backends (:mod:`~.rollout`). It takes a RunSpec and a cell folder, nothing else.

May import: catalog, core, errors, nn, preflight, rewards, store, tasks, warmstart.
"""
