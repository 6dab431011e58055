"""Admission control: fair turns at judging, and a per-principal rate of guarded entries."""
