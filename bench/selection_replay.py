"""Replay pilot selection policies on each world's curve bank, leave one seed out: the
entry point of :mod:`bench.science.selection`, whose docstring says what it reads,
prints and how to run it (``python bench/selection_replay.py --help``)."""

from bench.science.selection import main

if __name__ == "__main__":
    main()
