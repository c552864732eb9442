"""RACE's ledger inside other trainers: :mod:`race.integrations.trl` for TRL's GRPOTrainer."""
