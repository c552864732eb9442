"""The reliability verdict's calibration (worlds 1, 2) and check (world 3): the entry point
of :mod:`bench.science.reliability`, whose docstring says what it reads, prints and how
to run it (``python bench/reliability.py --help``)."""

from bench.science.reliability import main

if __name__ == "__main__":
    main()
