"""RACE: where should RL post-training compute go?

FLOP accounting for GRPO post-training by phase (rollout/search, learning, feedback),
allocation grids, budgeted pilots and their aggregation.

The package is a house of rooms, each a subpackage or a single module, and
:data:`LAYERS` says which rooms each one may import: every arrow points down, so no two
rooms import each other. Each room's docstring ends with the same list
(``tests/test_architecture.py`` checks both the docstrings and the imports against this
table).
"""

# the distribution's name on the package index (`pip install race-rl`; the name `race` there
# is another project's); the import package and the command stay `race`
DISTRIBUTION = "race-rl"


def __getattr__(name: str) -> str:
    """``race.__version__``: the installed distribution's version (pyproject.toml holds it)."""
    if name == "__version__":
        from importlib import metadata

        return metadata.version(DISTRIBUTION)
    raise AttributeError(f"module 'race' has no attribute {name!r}")

# room -> the rooms it may import (the whole table; nothing else is allowed)
LAYERS: dict[str, tuple[str, ...]] = {
    "errors": (),
    "core": ("errors",),
    "catalog": ("core", "errors"),
    "store": ("core", "errors"),
    "tasks": ("catalog", "core", "errors"),
    "preflight": ("catalog", "errors", "tasks", "warmstart"),
    "nn": ("core", "errors"),
    "warmstart": ("catalog", "core", "errors", "nn", "store", "tasks"),
    "rewards": ("catalog", "core", "errors", "nn", "preflight", "tasks", "warmstart"),
    "pilot": ("catalog", "core", "errors", "nn", "preflight", "rewards", "store", "tasks",
              "warmstart"),
    "config": ("catalog", "core", "errors", "nn", "pilot", "rewards", "tasks", "warmstart"),
    "analysis": ("catalog", "core", "errors", "store"),
    "run": ("analysis", "catalog", "config", "core", "errors", "integrations", "pilot",
            "preflight", "store", "tasks", "warmstart"),
    "report": ("analysis", "catalog", "core", "errors", "store"),
    "integrations": ("core", "errors", "nn", "pilot", "store"),
    "cli": ("analysis", "catalog", "config", "core", "errors", "integrations", "pilot",
            "report", "run", "store"),
}
