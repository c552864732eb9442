"""RACE: where should RL post-training compute go?

FLOP accounting for GRPO post-training by phase (rollout/search, learning, feedback),
allocation grids, budgeted pilots and their aggregation.
"""

__version__ = "0.1.0"
