"""Release-to-release differential: the same inputs through each unit of two releases, every behavioural
difference recorded.

The flow is one direction, like the property suite's:

* ``corpus`` draws, once, a fixed set of inputs per unit from pdverify's own strategies (derandomized, under one
  release's input domain, so that both releases of a pair can be given them) and pickles them;
* ``probes`` runs each unit of a target over those inputs and records what came back, normalised to plain JSON
  (``normalize``: values, dtypes, devices, shapes, the fields a result sets, an exception's type and message);
* ``compare`` sets two releases' records side by side: per unit, the inputs whose results differ and how (an
  exception appeared or went, a dtype, a field set or no longer set, values).

``ci/release_diff.py`` runs it over adjacent releases and requires every difference to be explained by a contract
boundary with its evidence (``pdverify/properties/contract_evidence.json``) or by a triaged defect or fix
(``findings/triage.json``).

``python -m pdverify.differential corpus --domain RELEASE --examples N --out FILE`` and
``python -m pdverify.differential probe --corpus FILE --out FILE [--target sglang]`` are its two steps.
"""
