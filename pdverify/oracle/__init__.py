"""Plain-Python references, written from the contracts and sharing no code with the production ports.

Inputs are Python lists of ints, outputs are Python lists and ints; every function validates its input and
raises ``ValueError`` naming the argument and the contract it broke.
"""
