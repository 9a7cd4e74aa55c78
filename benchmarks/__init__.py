"""Maintainers' benchmarks that compare actorq with its peers, outside the installed package:
``python -m benchmarks.results`` (run from the repository root) builds docs/results.md against
Stable-Baselines3."""
