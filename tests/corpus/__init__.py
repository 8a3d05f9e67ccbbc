"""A corpus of @njit functions written in the styles of public Numba libraries, each
differentiated the way a user would call enzyme_py and checked against float64
central finite differences in forward and reverse mode.

``functions.py`` holds the functions and their expected outcomes, ``harness.py``
runs one entry, ``python -m tests.corpus.report`` prints the pass-rate table and
``tests/test_corpus.py`` checks every entry's outcome.
"""
