"""integrations: RACE's ledger inside other trainers: :mod:`race.integrations.trl` for
TRL's GRPOTrainer (its runs report like pilots), and :mod:`race.integrations.trackers`
for the experiment trackers pilots and sweeps log to (``report.tracker``).

May import: core, errors, nn, pilot, store.
"""
