"""The typed domain pdverify generates and reasons about: paged layouts, requests, schedule batches."""
