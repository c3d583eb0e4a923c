"""Faithful, device-generic ports of the released SGLang functions under test."""
