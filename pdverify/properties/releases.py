"""Version-aware contracts: which SGLang releases' contract a property encodes.

A ``Contract`` is a half-open range of releases ``[since, until)`` with a label. A property checked on a
release outside its range is *not applicable* ("contract before/after ..."), never passed and never failed: an
intended contract change is not a defect. Targets that are not a released SGLang (pdverify's ports, user
targets) have no release, and every contract applies to them.

The first releases below were read from the released wheels (``ci/sglang_release_env.py`` installs them;
docs/release-matrix.md shows the table). ``contract_evidence.json`` beside this file names the upstream change
behind each boundary, with its kind.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from packaging.version import InvalidVersion, Version


@dataclass(frozen=True)
class Contract:
    label: str
    since: str | None = None
    """The first release whose contract this is (None: every release that has the units)."""
    until: str | None = None
    """The first release whose contract differs (None: still current)."""

    def __post_init__(self) -> None:
        for bound in (self.since, self.until):
            if bound is not None:
                Version(bound)  # raises InvalidVersion naming the bound

    def __str__(self) -> str:
        return self.label

    def not_applicable(self, release: str | None) -> str | None:
        """Why this contract does not apply to ``release`` (None: it applies)."""
        if release is None:
            return None
        try:
            version = Version(release)
        except InvalidVersion:
            return None  # a development build: check it against the current contract
        if self.since is not None and version < Version(self.since):
            return f"not applicable (contract before {self.label}: sglang {release} < {self.since})"
        if self.until is not None and version >= Version(self.until):
            return f"not applicable (contract after {self.label}: sglang {release} >= {self.until})"
        return None


ALL_RELEASES = Contract("every release that has the units")
FROM_31173 = Contract("upstream #31173 (device-side stride, torch input), first released in sglang 0.5.16", "0.5.16")
FROM_35070 = Contract("upstream #35070 (no PREBUILT prompt copy), first released in sglang 0.5.18", "0.5.18")

# When prepare_for_prebuilt gained each field or rule it now has (first release whose wheel has it):
FROM_SEQ_LENS_CPU = Contract("seq_lens_cpu and orig_seq_lens are set, first in sglang 0.5.3", "0.5.3")
FROM_POOL_INDICES_CPU = Contract("req_pool_indices_cpu is set, first in sglang 0.5.13", "0.5.13")
FROM_RETRACTED_STAIN = Contract("a stained (retracted) request's bookkeeping is kept, first in sglang 0.5.6", "0.5.6")
FROM_REBOOTSTRAP = Contract("PD rebootstrap (pd_rebootstrap_in_progress cleared), first in sglang 0.5.16", "0.5.16")
FROM_LOGPROB_STARTS_NONE = Contract("extend_logprob_start_lens is None, first in sglang 0.5.15", "0.5.15")
FROM_PREBUILT_MODE = Contract("ForwardMode.PREBUILT (EXTEND before), first in sglang 0.5.5.post1", "0.5.5.post1")


@dataclass
class InputDomain:
    """What the inputs of a release's contract can hold, read by the strategies at draw time (a release before
    a feature never sees inputs that only the feature makes)."""

    decode_prefix: bool = True
    """Decode-side cached prefixes (``--disaggregation-decode-enable-radix-cache``), from sglang 0.5.11; before,
    decode's prefix is always 0."""
    rebootstrap: bool = True
    """PD rebootstrap (``extend_end`` one past ``seq_len``), from sglang 0.5.16."""
    seeded_computed: bool = True
    """Decode seeds ``already_computed`` from the prefill-reported cached tokens before ``prepare_for_prebuilt``
    (#25973), from sglang 0.5.13; before, an unstained request reaches it with ``already_computed == 0``
    (``Req.__init__`` and ``reset_for_retract`` set 0, and nothing in the decode path sets it)."""
    release: str | None = field(default=None)


DOMAIN = InputDomain()
DECODE_PREFIXES = Contract("decode-side cached prefixes, first in sglang 0.5.11", "0.5.11")
SEEDED_COMPUTED = Contract(
    "already_computed seeded from prefill's cached tokens (#25973), first in sglang 0.5.13", "0.5.13"
)
"""An input-domain boundary, not a contract: what ``already_computed`` can hold when ``prepare_for_prebuilt`` runs."""


def bind_release(release: str | None) -> InputDomain:
    """Set ``DOMAIN`` to the contract of ``release`` (None, or a development build: the current contract, every
    input)."""
    DOMAIN.release = release
    DOMAIN.decode_prefix = DECODE_PREFIXES.not_applicable(release) is None
    DOMAIN.rebootstrap = FROM_REBOOTSTRAP.not_applicable(release) is None
    DOMAIN.seeded_computed = SEEDED_COMPUTED.not_applicable(release) is None
    return DOMAIN
