"""report: rendering only: the leaderboard, the compute cards (a sweep's and ``race
flops``'), the plots, the validation section and the budget report, written from what
:mod:`race.analysis` decided. Nothing here ranks or chooses.

May import: analysis, catalog, core, errors, store.
"""
