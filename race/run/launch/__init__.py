"""launch: every pilot goes through submitit: what the launchers share and their
registry (:mod:`~.launcher_base`: the ``Launcher`` protocol, :func:`~.launcher_base.launcher_for`),
the job they all run (:mod:`~.job`), one module per backend, each setting ``LAUNCHER``
(:mod:`~.inline`, :mod:`~.local`, :mod:`~.slurm`), and the one watcher loop
(:mod:`~.watch`)."""
