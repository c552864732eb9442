"""``python -m race.cli``: the ``race`` command (:func:`race.cli.main`)."""

import sys

from race.cli import main

if __name__ == "__main__":
    sys.exit(main())
