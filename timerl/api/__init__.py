"""The user-facing API: programs, recurrent tensors, ops, UDFs, sinks (no isl, no numba here)."""
