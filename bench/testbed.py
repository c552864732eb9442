"""The testbed's claims per world: gains, interactions, the null and the default grid: the
entry point of :mod:`bench.science.interactions`, whose docstring says what it reads,
prints and how to run it (``python bench/testbed.py --help``)."""

from bench.science.interactions import main

if __name__ == "__main__":
    main()
