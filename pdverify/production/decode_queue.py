"""One pass of decode's pre-allocation queue (``DecodePreallocQueue.pop_preallocated``), ported from sglang 0.5.23
for the decode radix cache off.

The pass sorts the queue by priority (when priority scheduling is on), fails the aborted requests it looks at,
then admits in queue order: a request still bootstrapping is passed over, one whose LoRA adapter does not fit is
passed over, and the pass stops at the first request without a metadata buffer, a request row or the token
budget for ``_required_admission_tokens``. An admitted request gets a row, its ``fill_len`` tokens from the
allocator's free pages (written to its row from 0), a metadata buffer, and its destination list
``kv_to_page_indices(row[0:L])`` cast to int32. The budget after each admission is the case's budget less the
tokens allocated so far (the stand-in for ``_allocatable_token_budgets``).

``PreallocPass`` keeps each step a method so that the mutant catalogue can replace one at a time.
"""

from __future__ import annotations

import numpy as np
import torch

from pdverify.model.layout import token_locations
from pdverify.model.queue import CLIP_MAX_NEW_TOKENS, DecodeQueueCase, QueuedRequest, QueueTrace
from pdverify.production.page_index import kv_to_page_indices


class PreallocPass:
    """The state of one pass: the queue, the pools, what was admitted and failed."""

    def __init__(self, case: DecodeQueueCase, device: str) -> None:
        self.case = case
        self.device = device
        self.queue: list[int] = list(range(len(case.requests)))
        self.free_pages = list(case.free_pages)
        self.free_buffers = list(range(case.metadata_buffers))
        self.free_rows = list(range(1, case.request_rows + 1))
        width = max((r.fill_len for r in case.requests), default=0) + case.page_size
        self.req_to_token = torch.zeros((case.request_rows + 1, width), dtype=torch.int32, device=device)
        self.allocated_tokens = 0
        self.loaded = {lora for _, lora in case.running}
        self.removed: set[int] = set()
        self.streamed: list[int] = []
        self.cleared: list[int] = []

    # -- the steps -------------------------------------------------------------------------------------------

    def sort_queue(self) -> None:
        order = self.case.priority_order
        if order is not None:
            sign = 1 if order == "low_first" else -1
            self.queue.sort(key=lambda i: self.case.requests[i].priority * sign)

    def looked_at(self, i: int) -> bool:
        return not self.case.restrict or self.case.requests[i].checked

    def fail_aborted(self) -> list[int]:
        failed = []
        for i in self.queue:
            req = self.case.requests[i]
            if self.looked_at(i) and req.aborted:
                if not req.abort_streamed:
                    self.streamed.append(i)
                self.cleared.append(i)
                failed.append(i)
        return failed

    def lora_fits(self, req: QueuedRequest) -> bool:
        max_loras = self.case.max_loras
        return max_loras is None or req.lora in self.loaded or len(self.loaded | {req.lora}) <= max_loras

    def budget(self) -> int:
        return self.case.token_budget - self.allocated_tokens

    def required_tokens(self, req: QueuedRequest) -> int:
        ps = self.case.page_size
        alloc = -(-req.fill_len // ps) * ps
        return max(
            alloc + self.case.reserved_decode_tokens,
            req.length + min(req.max_new_tokens, CLIP_MAX_NEW_TOKENS) - self.case.retractable_tokens,
        )

    def allocate(self, req: QueuedRequest) -> tuple[int, list[int]]:
        """A request row and the token locations of ``[0, fill_len)``, written to it."""
        ps = self.case.page_size
        row = self.free_rows.pop()
        count = -(-req.fill_len // ps)
        pages, self.free_pages = self.free_pages[:count], self.free_pages[count:]
        self.allocated_tokens += count * ps
        locations = token_locations(pages, req.fill_len, ps)
        if locations:
            self.req_to_token[row, : req.fill_len] = torch.tensor(locations, dtype=torch.int32, device=self.device)
        return row, locations

    def verdict(self, i: int) -> str:
        """``"admit"``, ``"skip"`` (passed over: the next request may go) or ``"stop"`` (the pass ends here)."""
        req = self.case.requests[i]
        if not self.looked_at(i) or i in self.removed or not req.bootstrapped:
            return "skip"
        if not self.free_buffers:
            return "stop"
        if not self.lora_fits(req):
            return "skip"
        if not self.free_rows or self.required_tokens(req) > self.budget():
            return "stop"
        return "admit"

    def destination(self, req: QueuedRequest, row: int) -> np.ndarray:
        return kv_to_page_indices(self.req_to_token[row, : req.length], self.case.page_size).astype(np.int32)

    # -- the pass --------------------------------------------------------------------------------------------

    def run(self) -> QueueTrace:
        self.sort_queue()
        failed = self.fail_aborted()
        self.removed.update(failed)
        admitted: list[int] = []
        pages: list[tuple[int, ...]] = []
        dtypes: list[str] = []
        aux: list[int] = []
        rows: list[int] = []
        allocated: list[tuple[int, ...]] = []
        for i in self.queue:
            verdict = self.verdict(i)
            if verdict == "stop":
                break
            if verdict == "skip":
                continue
            req = self.case.requests[i]
            row, locations = self.allocate(req)
            dest = self.destination(req, row)
            admitted.append(i)
            self.removed.add(i)
            pages.append(tuple(int(p) for p in dest))
            dtypes.append(str(dest.dtype))
            aux.append(self.free_buffers.pop(0))
            rows.append(row)
            allocated.append(tuple(locations))
            self.loaded.add(req.lora)
        return QueueTrace(
            admitted=tuple(admitted),
            failed=tuple(failed),
            remaining=tuple(i for i in self.queue if i not in self.removed),
            streamed=tuple(self.streamed),
            cleared=tuple(self.cleared),
            pages=tuple(pages),
            dtypes=tuple(dtypes),
            aux=tuple(aux),
            rows=tuple(rows),
            allocated=tuple(allocated),
        )


def decode_queue(case: DecodeQueueCase, device: str) -> QueueTrace:
    return PreallocPass(case, device).run()
