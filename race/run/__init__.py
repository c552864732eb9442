"""run: planning and launching: the grid expanded and solved (:mod:`~.grid`), the sweep
(:mod:`~.sweep`: flat, a budget list), the ladder (:mod:`~.ladder`) and validation
(:mod:`~.validate`), all launching through one helper (:mod:`~.cells`: claim, warm-start,
launch, wait), and the launchers themselves (:mod:`~.launch`).

May import: analysis, catalog, config, core, errors, integrations, pilot, preflight, store,
tasks, warmstart.
"""
