"""The base layer of tfsim: what every other package may import, and which imports none of them.

- :mod:`tfbase.errors`: the exception and warning types (one-line messages that name the file
  or parameter at fault);
- :mod:`tfbase.fileio`: atomic output files;
- :mod:`tfbase.journal`: append-only journals of finished work (to resume a long run), and
  stable digests of its inputs;
- :mod:`tfbase.units`: rates and sizes as network people write them;
- :mod:`tfbase.figures`: matplotlib figures written without timestamps (matplotlib is imported
  only when a figure is drawn);
- :mod:`tfbase.machine`: a description of this machine for run records.

Nothing here imports numpy, pandas, numba or TensorFlow at module level.
"""
