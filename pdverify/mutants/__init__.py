"""A catalogue of realistic faults in the production functions, each a target derived from ``pdverify``
with one function replaced. ``pdverify mutate`` runs the property suite against every one."""

from pdverify.mutants.catalogue import CATALOGUE, Mutant, mutant_target

__all__ = ["CATALOGUE", "Mutant", "mutant_target"]
