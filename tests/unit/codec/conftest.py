"""Hypothesis profiles for the codec tests; HYPOTHESIS_CODEC_FUZZ / _MUTATIONS override them."""

from __future__ import annotations

from hypothesis import HealthCheck, settings

# CI runs the defaults: 10,000 random-byte inputs, 3,000 mutated real frames.
settings.register_profile(
    "codec-fuzz-ci",
    max_examples=10_000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("codec-fuzz-quick", max_examples=300, deadline=None)
# Mutations of real frames reach deeper than random bytes but cost more each.
settings.register_profile("codec-mutations", max_examples=3_000, deadline=None)
settings.register_profile("codec-roundtrip", max_examples=40, deadline=None)
