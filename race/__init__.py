"""RACE: where should RL post-training compute go?

FLOP accounting for GRPO post-training by phase (rollout/search, learning, feedback),
allocation grids, budgeted pilots and their aggregation.

The package is a house of rooms, each a subpackage or a single module, and
:data:`LAYERS` says which rooms each one may import: every arrow points down, so no two
rooms import each other. Each room's docstring ends with the same list
(``tests/test_architecture.py`` checks both the docstrings and the imports against this
table).
"""

__version__ = "0.1.0"

# room -> the rooms it may import (the whole table; nothing else is allowed)
LAYERS: dict[str, tuple[str, ...]] = {
    "errors": (),
    "core": ("errors",),
    "catalog": ("core", "errors"),
    "store": ("core", "errors"),
    "tasks": ("catalog", "core", "errors"),
    "preflight": ("catalog", "errors", "tasks"),
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
