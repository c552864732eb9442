"""Build a world's curve bank in stages that survive sessions, with a status line: the
entry point of :mod:`bench.science.bank_runs`, whose docstring says what it reads,
prints and how to run it (``python bench/testbed_bank.py --help``)."""

from bench.science.bank_runs import main

if __name__ == "__main__":
    main()
