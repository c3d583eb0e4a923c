"""The functions as they were before the two upstream changes (#31173, #35070)."""
