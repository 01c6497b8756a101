"""Plain numpy/Python reference implementations of what the code under test computes.

Nothing in this package touches a device or Triton: each function is small enough
to be checked by reading it, and each is tested against hand-worked tables in
``tests/oracles``.
"""
