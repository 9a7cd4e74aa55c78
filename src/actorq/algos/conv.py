"""Convolutional trunks for policies that see pixels: stacked uint8 frames ``[B, C, H, W]`` in,
features out.

Two trunks, as the Atari literature uses them:

- :class:`NatureCNN` (Mnih et al. 2015): three convolutions (32x8x8/4, 64x4x4/2, 64x3x3/1)
  and a 512-unit linear layer, about 9.4M multiply-adds per 84x84x4 frame;
- :class:`ImpalaCNN` (Espeholt et al. 2018): three stages, each a convolution, a 3x3/2 max-pool
  and two residual blocks, then a 256-unit linear layer (IMPALA's, Procgen's and most recent
  Atari agents' network).

Frames stay uint8 until the trunk: it divides by 255 itself, so the actors, the hand-over and
the replay carry a quarter of the bytes float32 frames would.

Example:
    >>> frames = torch.randint(0, 256, (2, 4, 84, 84), dtype=torch.uint8)
    >>> NatureCNN(4)(frames).shape, ImpalaCNN(4)(frames).shape
    (torch.Size([2, 512]), torch.Size([2, 256]))
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from actorq.util.errors import ConfigError

PIXEL_SCALE = 1.0 / 255.0
"""What a uint8 pixel is multiplied by on its way into a trunk."""
FRAME_SIZE = 84
"""The height and width of the frames the trunks take (the Atari preprocessing's)."""


class PixelTrunk(nn.Module):
    """What both trunks share: uint8 frames scaled to [0, 1], then ``convs`` and ``linear``,
    with the activations laid out channels-last where ``channels_last`` is set (chosen by
    measurement: :mod:`actorq.util.memory_format`). Subclasses build ``convs`` and ``linear``."""

    def __init__(self, in_channels: int, features: int):
        super().__init__()
        self.features = features
        self.frame_shape = (in_channels, FRAME_SIZE, FRAME_SIZE)
        self.pixel_scale = PIXEL_SCALE  # an attribute, not a global: TorchScript exports read it
        self.channels_last = False

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        x = frames.float() * self.pixel_scale
        if self.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        return self.linear(self.convs(x))


class NatureCNN(PixelTrunk):
    """The DQN Nature paper's trunk for ``in_channels`` stacked 84x84 frames.

    Args:
        in_channels: stacked frames (4 for the usual Atari preprocessing).
        features: units of the final linear layer.
    """

    def __init__(self, in_channels: int, features: int = 512):
        super().__init__(in_channels, features)
        self.convs = nn.Sequential(
            nn.Conv2d(in_channels, 32, 8, stride=4), nn.ReLU(),
            nn.Conv2d(32, 64, 4, stride=2), nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=1), nn.ReLU(),
            nn.Flatten(),
        )
        self.linear = nn.Sequential(nn.Linear(64 * 7 * 7, features), nn.ReLU())


class ResidualBlock(nn.Module):
    """``x + conv(relu(conv(relu(x))))``, both convolutions 3x3 with ``channels`` channels."""

    def __init__(self, channels: int):
        super().__init__()
        self.relu0 = nn.ReLU()
        self.conv0 = nn.Conv2d(channels, channels, 3, padding=1)
        self.relu1 = nn.ReLU()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv1(self.relu1(self.conv0(self.relu0(x))))


class ImpalaCNN(PixelTrunk):
    """IMPALA's deep trunk for ``in_channels`` stacked 84x84 frames.

    Args:
        in_channels: stacked frames.
        channels: the channels of each of the three stages.
        features: units of the final linear layer.
    """

    def __init__(self, in_channels: int, channels: Sequence[int] = (16, 32, 32), features: int = 256):
        super().__init__(in_channels, features)
        stages, size, previous = [], FRAME_SIZE, in_channels
        for width in channels:
            stages += [nn.Conv2d(previous, width, 3, padding=1), nn.MaxPool2d(3, stride=2, padding=1),
                       ResidualBlock(width), ResidualBlock(width)]
            previous, size = width, (size + 1) // 2
        self.convs = nn.Sequential(*stages, nn.ReLU(), nn.Flatten())
        self.linear = nn.Sequential(nn.Linear(previous * size * size, features), nn.ReLU())


TRUNKS = {"nature": NatureCNN, "impala": ImpalaCNN}
"""The convolutional trunks by the name a config gives them."""


def make_trunk(name: str, frame_shape: tuple[int, ...]) -> NatureCNN | ImpalaCNN:
    """The trunk ``name`` (:data:`TRUNKS`) for frames of ``frame_shape`` ``(channels, 84, 84)``.

    Raises:
        ConfigError: an unknown trunk, or frames of another size.
    """
    if name not in TRUNKS:
        raise ConfigError(f"unknown convolutional trunk {name!r}; choose from {', '.join(TRUNKS)}")
    if tuple(frame_shape[1:]) != (FRAME_SIZE, FRAME_SIZE):
        raise ConfigError(f"the convolutional trunks take {FRAME_SIZE}x{FRAME_SIZE} frames, got {tuple(frame_shape)}")
    return TRUNKS[name](frame_shape[0])


class PixelPolicy(nn.Module):
    """Frames -> action logits: a convolutional trunk and a linear policy head (the actors'
    half of a shared-trunk actor-critic, as CleanRL's ``ppo_atari``).

    Args:
        trunk: ``"nature"`` or ``"impala"`` (:data:`TRUNKS`).
        in_channels: stacked frames.
        num_actions: the game's actions.

    Example:
        >>> policy = PixelPolicy("nature", 4, num_actions=6)
        >>> policy(torch.zeros(3, 4, 84, 84, dtype=torch.uint8)).shape
        torch.Size([3, 6])
    """

    def __init__(self, trunk: str, in_channels: int, num_actions: int):
        super().__init__()
        self.trunk = make_trunk(trunk, (in_channels, FRAME_SIZE, FRAME_SIZE))
        self.head = nn.Linear(self.trunk.features, num_actions)

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        return self.head(self.trunk(frames))


class PixelQNetwork(nn.Module):
    """Frames -> Q-values: a convolutional trunk and a linear layer of one Q-value per action
    (DQN's network, Mnih et al. 2015), as ``trunk`` and an identity ``head``, the shape every
    policy network has for the actors' copy.

    Args:
        trunk: ``"nature"`` or ``"impala"`` (:data:`TRUNKS`).
        frame_shape: ``(channels, 84, 84)``.
        num_actions: the game's actions.

    Example:
        >>> PixelQNetwork("nature", (4, 84, 84), num_actions=6)(torch.zeros(2, 4, 84, 84, dtype=torch.uint8)).shape
        torch.Size([2, 6])
    """

    def __init__(self, trunk: str, frame_shape: tuple[int, ...], num_actions: int):
        super().__init__()
        conv = make_trunk(trunk, frame_shape)
        self.trunk = nn.Sequential(conv, nn.Linear(conv.features, num_actions))
        self.head = nn.Identity()

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        return self.head(self.trunk(frames))
