"""The testbed's science as one room, worlds as data: what the curve banks hold and how
they are built, replayed and judged. The scripts in ``bench/`` that read it are thin entry
points over these modules (each ``main(argv)`` can be called in-process).

- ``worlds``: each world (a warm-start draw), its banks and the commit frozen before it.
- ``bank``: the one reader of a bank export and of a results folder's cells.
- ``bank_runs``: building a world's bank in stages (``bench/testbed_bank.py``).
- ``replay_bank``, ``replay_policies``, ``replay_stats``, ``replay_tables``, ``blackbox``,
  ``peers``, ``pasha``: the selection replay (``bench/selection_replay.py``: ``selection``).
- ``reliability``: the reliability verdict's calibration and check (``bench/reliability.py``).
- ``coverage``: the prediction at F against each world (``bench/prediction_coverage.py``).
- ``interactions``: the testbed's claims per world (``bench/testbed.py``).

Intervals come from :mod:`race.core.stats`; the selection engine is RACE's own
(:mod:`race.core.climb`). Nothing in ``race/`` imports this package.
"""
