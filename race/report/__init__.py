"""report: rendering only: the leaderboard (its answer first: :mod:`~.answer`), the compute
cards (a sweep's and ``race flops``'), what a budget buys per size (:mod:`~.buys`), the
plots (a ladder's: :mod:`~.ladder_plots`), the validation section and the budget report,
written from what :mod:`race.analysis` decided. Nothing here ranks or chooses.

May import: analysis, catalog, core, errors, store.
"""
