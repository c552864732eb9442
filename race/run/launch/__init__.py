"""launch: every pilot goes through submitit: what the launchers share
(:mod:`~.base`), the job they all run (:mod:`~.job`), one module per backend
(:mod:`~.local` for local slots and inline, :mod:`~.slurm`), and the one watcher loop
with the executors (:mod:`~.watch`)."""
