"""Switchyard's benchmarks (README.md here says how to run them)."""

import argparse


def increasing_sizes(text):
    """An ``argparse`` type: a comma-separated list of whole numbers, 1 or more, in increasing order."""
    try:
        sizes = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"a comma-separated list of numbers, not {text!r}") from None
    if not sizes or any(size < 1 for size in sizes) or list(sizes) != sorted(sizes):
        raise argparse.ArgumentTypeError("whole numbers, 1 or more, in increasing order")
    return sizes
