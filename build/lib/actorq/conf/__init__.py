"""Hydra configuration tree, shipped inside the package as ``actorq.conf``."""
