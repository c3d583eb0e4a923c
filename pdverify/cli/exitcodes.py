"""Exit codes of the ``pdverify`` command (also in ``pdverify --help`` and docs/guide.md)."""

OK = 0
"""Every applicable property held (check) / every mutant was killed (mutate)."""
FAILED = 1
"""A property failed, errored, hung, was flaky or ran no example; a mutant survived; nothing ran."""
USAGE = 2
"""Bad command line: unknown option, profile or device, or CUDA asked for where none is present."""
TARGET = 3
"""The target cannot be loaded (unknown name, import error, not a Target)."""
OUTPUT = 4
"""A report or export path cannot be written."""

EPILOG = """exit codes:
  0  every applicable property held / every mutant killed
  1  a property failed, errored, hung, was flaky or ran no example; a mutant survived; nothing ran
  2  bad command line (unknown option, profile, device; cuda absent)
  3  the target cannot be loaded
  4  a report or export path cannot be written"""
