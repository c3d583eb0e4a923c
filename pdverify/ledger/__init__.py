"""Transfer and launch accounting around a target call: what crossed the host/device boundary, and how many
device operations ran."""

from pdverify.ledger.ledger import Copy, Launch, LedgerError, TransferLedger, measure

__all__ = ["Copy", "Launch", "LedgerError", "TransferLedger", "measure"]
