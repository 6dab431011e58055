"""Hypothesis profiles for the codec tests (HYPOTHESIS_CODEC_FUZZ picks the fuzz profile)."""

from __future__ import annotations

from hypothesis import HealthCheck, settings

# CI runs the default: at least 10,000 malformed inputs per fuzz test.
settings.register_profile(
    "codec-fuzz-ci",
    max_examples=10_000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("codec-fuzz-quick", max_examples=300, deadline=None)
settings.register_profile("codec-roundtrip", max_examples=60, deadline=None)
