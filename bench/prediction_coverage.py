"""How well the prediction at F a report prints holds the score a full run reaches: the
entry point of :mod:`bench.science.coverage`, whose docstring says what it reads, prints
and how to run it (``python bench/prediction_coverage.py --help``)."""

from bench.science.coverage import main

if __name__ == "__main__":
    main()
