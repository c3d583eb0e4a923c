"""pdverify's property suite, shipped inside the package so an installed pdverify checks any target.

Run it with ``pdverify check --target NAME`` or ``pytest --pyargs pdverify.properties --pdverify-target NAME``.
Each property is declared with ``pdverify.properties.registry.prop`` and carries its spec id (P1..P29, ...).
"""
