"""The ``pdverify`` command: thin layers over pytest, Hypothesis and coverage."""
