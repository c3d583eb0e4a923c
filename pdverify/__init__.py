"""pdverify: property-based verification of SGLang's prefill/decode disaggregation data paths."""

__version__ = "0.1.0"
