"""RACE's benchmarks: scripts that measure RACE (its FLOP formulas, its pilots' speed and
memory, how well its selection picks) and write the numbers quoted in ``docs/``.

Each script runs as ``python bench/<name>.py`` or ``python -m bench.<name>`` from the
repository root, and ``--quick`` runs its whole code path on a miniature problem in
seconds, writing only under a temporary folder (``tests/test_bench_quick.py`` runs every
one so in CI). Helpers that several scripts share live in :mod:`bench.common`; the
modules without a ``__main__`` (``blackbox``, ``pasha``, ``peers``, ``device_perf``) are
helpers of the scripts beside them.

The rule (``tests/test_architecture.py`` checks it): bench imports ``race`` and itself and
no other first-party code (not ``tests``, ``examples``); nothing under ``race/`` imports
bench; and no file here edits ``sys.path``: siblings are imported as ``from bench.x import
y``, which works because ``make install`` puts the checkout's root on the venv's path
(``race-checkout.pth``); the wheel ships ``race`` alone.
"""
