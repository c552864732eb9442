"""integrations: RACE's ledger inside other trainers: :mod:`race.integrations.trl` for
TRL's GRPOTrainer (its runs report like pilots).

May import: core, errors, nn, pilot, store.
"""
