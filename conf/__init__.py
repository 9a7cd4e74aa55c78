"""Hydra configuration tree, shipped inside the package as ``actorq.conf``.

Importing it (Hydra does, to read the tree) registers the resolver that names a run dir by
its precision (``${actorq.precision:${quant.bits}}``, :func:`precision_name`)."""

from omegaconf import OmegaConf


def precision_name(bits: object) -> str:
    """The actors' precision as a run dir names it.

    >>> [precision_name(bits) for bits in (32, 16, 8, 4, "auto")]
    ['fp32', '16bit', 'int8', '4bit', 'auto']
    """
    names = {32: "fp32", 8: "int8"}
    return names.get(bits, f"{bits}bit") if isinstance(bits, int) else str(bits)


OmegaConf.register_new_resolver("actorq.precision", precision_name, replace=True)
