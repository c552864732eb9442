"""analysis: what the pilots say, and every decision taken on it: results read into
DataFrames (:mod:`~.load`), configs and regimes ranked with intervals, the frontier and
the guards (:mod:`~.aggregate`), curves extrapolated (:mod:`~.curves`), every selection
rule (:mod:`~.select`: a rung's promotion candidates, the flat and the ladder choice for
validation, the pick at each budget of a budget list), the update fraction rho and the
score's response surface in it (:mod:`~.response`, per cell and per sweep:
:mod:`~.surfaces`; checked on a curve bank: :mod:`~.regime_check`), and one sweep analysed
whole (:mod:`~.sweep`), the answer a report opens with (:mod:`~.answer`), what one
budget buys at each policy size (:mod:`~.buys`) and a ladder's curves through its rungs
(:mod:`~.ladder_curves`). Pure pandas and scipy beyond the reads.

May import: catalog, core, errors, store.
"""
