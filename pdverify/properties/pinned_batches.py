"""PREBUILT batches every prebuilt property pins as an explicit example (shared by the property modules)."""

from __future__ import annotations

from pdverify.model.batch import PrebuiltBatch, Request, SamplingSettings

SAMPLING_BATCHES = (
    PrebuiltBatch([Request(0, 0, 1, [0], [], sampling=SamplingSettings(min_new_tokens=1))], [[1]], eos_token_id=None),
    PrebuiltBatch(
        [Request(0, 0, 1, [0], [], sampling=SamplingSettings(min_new_tokens=1))], [[1]], skip_tokenizer_init=True
    ),
    PrebuiltBatch(
        [Request(0, 0, 1, [0], [], sampling=SamplingSettings(min_new_tokens=1))],
        [[1]],
        eos_token_id=2,
        model_eos_token_ids=(2, 3),
    ),
    PrebuiltBatch(
        [Request(0, 0, 1, [0], [], sampling=SamplingSettings(sampling_seed=2**63))],
        [[1]],
        enable_deterministic_inference=True,
    ),
    PrebuiltBatch(
        [
            Request(0, 0, 1, [0], [], sampling=SamplingSettings(min_new_tokens=1)),
            Request(1, 0, 1, [0], [], sampling=SamplingSettings(stop_token_ids=[33])),
        ],
        [[1], [2]],
        eos_token_id=2,
    ),
)
"""The sampling settings a decode scheduler must survive and honour (T25, T27, T28, T26, F7): ``min_new_tokens`` on a
server whose tokenizer has no end-of-sequence token, on one started with ``--skip-tokenizer-init`` (0.5.14 on refuses
it), and on a model whose configuration names an eos id the tokenizer's is not (held back too from 0.5.19); under
deterministic inference a seed past 64 bits (0.5.21 on refuses it); and beside a request asking for
``min_new_tokens``, another whose stop token id is past the vocabulary of 32 (no release refuses it; F7's candidate
fix does)."""
