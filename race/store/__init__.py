"""store: the results contract, every file under a sweep folder: atomic reads and writes
(:mod:`~race.store.io`), the file names of a cell (:class:`~race.store.cell.CellDir`,
which alone decides whether a cell is ok) and of a sweep
(:class:`~race.store.sweep_files.SweepDir`), the typed records of ``summary.json`` and of
``metrics.jsonl``'s eval rows (:mod:`~race.store.records`), the columns of ``pilots.csv``
(:mod:`~race.store.pilots`), and the cross-process claims that keep two processes from
running one cell (:mod:`~race.store.claims`). It decides nothing about what the files say.

May import: core, errors.
"""
