"""Milestone 4's recipes: code the judge sends to the worker as source, to run beside the student's model.py.
Each imports what it needs itself; only tensors and plain values come back."""
from __future__ import annotations


def recipe_table_in_default(max_len, d_model, default):
    """The student's table while torch's default dtype is `default` ("float64"), put back after."""
    import torch
    import model
    was = torch.get_default_dtype()
    torch.set_default_dtype(getattr(torch, default))
    try:
        return model.sinusoidal_positional_encoding(max_len, d_model)
    finally:
        torch.set_default_dtype(was)
