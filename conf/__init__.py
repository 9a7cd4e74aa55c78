"""Hydra configuration tree, shipped inside the package as ``actorq.conf``.

Importing it (Hydra does, to read the tree) registers the resolvers that name a run dir: by
its precision (``${actorq.precision:${quant.bits}}``, :func:`precision_name`) and by its env,
as one folder (``${actorq.folder:${env.name}}``, :func:`folder_name`)."""

import re

from omegaconf import OmegaConf


def precision_name(bits: object) -> str:
    """The actors' precision as a run dir names it.

    >>> [precision_name(bits) for bits in (32, 16, 8, 4, "auto")]
    ['fp32', '16bit', 'int8', '4bit', 'auto']
    """
    names = {32: "fp32", 8: "int8"}
    return names.get(bits, f"{bits}bit") if isinstance(bits, int) else str(bits)


def folder_name(name: object) -> str:
    """A name as one folder of a path: each character a folder name cannot hold everywhere
    (``/``, ``:``) as ``_``.

    >>> [folder_name(name) for name in ("CartPole-v1", "ALE/Pong-v5", "my_envs:make_corridor")]
    ['CartPole-v1', 'ALE_Pong-v5', 'my_envs_make_corridor']
    """
    return re.sub(r"[^\w.+=-]", "_", str(name))


OmegaConf.register_new_resolver("actorq.precision", precision_name, replace=True)
OmegaConf.register_new_resolver("actorq.folder", folder_name, replace=True)
