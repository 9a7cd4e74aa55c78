"""Using a trained run: ``actorq.load``, ``actorq evaluate`` (returns, videos, bad
input) and the export command (its one-line errors, its calibration on the run's
observations), on two tiny real runs trained once for the module: DQN on gymnasium's
CartPole (fp32 actors) and TD3 on dm_control's cartpole-balance (int8 actors)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import gymnasium
import imageio.v3 as iio
import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_module

import actorq
from actorq import evaluate, export
from actorq.experience import CALIBRATION_OBSERVATIONS

from actorq.quant import QuantizedNetwork, QuantSpec
from actorq.run.resume import read_checkpoint
from actorq.train import train
from tests.conftest import TINY

REPO = Path(__file__).resolve().parents[2]
RETURN_LINE = re.compile(r"return (-?\d+\.\d) ± (\d+\.\d) over (\d+) episodes?$")
EVAL_SEED_OFFSET = 10_000  # the Evaluation callback's default seed_offset


def tiny_run(run_dir: Path, *overrides: str) -> dict:
    """Trains a tiny run into ``run_dir``; returns its summary."""
    with initialize_config_module("actorq.conf", version_base="1.3"):
        cfg = compose("config", overrides=[*overrides, *TINY, "~callbacks.carbon", "trainer.enable_progress_bar=false",
                                           f"run_dir={run_dir}"])
    summary, _ = train(cfg)
    return summary


@pytest.fixture(scope="module")
def cartpole(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("cartpole")
    tiny_run(run_dir, "+experiment=dqn_cartpole", "algo.hidden=[16]")
    return run_dir


@pytest.fixture(scope="module")
def balance(tmp_path_factory) -> tuple[Path, dict]:
    run_dir = tmp_path_factory.mktemp("balance")
    # Two hidden layers: int8 static keeps the first and last Linear in fp32, so the middle
    # one is the actors' int8 layer, the one whose activation ranges calibration decides.
    summary = tiny_run(run_dir, "+experiment=td3_pendulum", "env=cartpole_balance", "quant.bits=8",
                       "algo.actor_hidden=[32,32]", "algo.critic_hidden=[32]")
    return run_dir, summary


# A user's own gymnasium env, registered by the module that env.module names. Its constructor
# takes no render_mode, the one way gymnasium asks an env for frames.
COIN_ENV = """
import gymnasium
import numpy as np


class Coin(gymnasium.Env):
    observation_space = gymnasium.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gymnasium.spaces.Discrete(2)

    def __init__(self):
        self.steps = 0

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.steps = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.steps += 1
        return np.zeros(2, np.float32), float(action), self.steps == 10, False, {}


gymnasium.register("Coin-v0", entry_point=Coin)
"""


@pytest.fixture
def coin(tmp_path, monkeypatch) -> Path:
    """A tiny run of Coin-v0, whose module is in a folder outside actorq, on this process's
    path and on the commands' ``PYTHONPATH``; afterwards gymnasium's registry and this
    process's modules are as they were."""
    folder = tmp_path / "envs"
    folder.mkdir()
    (folder / "coin_env.py").write_text(COIN_ENV)
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")])))
    run_dir = tmp_path / "run"
    try:
        tiny_run(run_dir, "env.name=Coin-v0", "env.module=coin_env", "algo.hidden=[16]")
        yield run_dir
    finally:
        gymnasium.envs.registry.pop("Coin-v0", None)
        sys.modules.pop("coin_env", None)


def run_cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "actorq.evaluate", *map(str, args)], capture_output=True,
                          text=True, timeout=300, env=env)


def run_main(capsys, module, *args: str) -> tuple[int, str, str]:
    """``module.main(args)`` in this process: exit code, stdout, stderr."""
    try:
        module.main([str(arg) for arg in args])
        code = 0
    except SystemExit as stop:
        code = stop.code
    out, err = capsys.readouterr()
    return code, out, err


def frames_of(path: Path) -> np.ndarray:
    return iio.imread(path)  # decodes every frame: [T, H, W, 3]


def test_both_policies_reproduce_the_runs_last_evaluation(balance):
    """The learner's weights and the actors' int8 payload come back from the checkpoint: the
    same seed plays the run's last evaluation episode again, return for return."""
    run_dir, summary = balance
    seed = EVAL_SEED_OFFSET + len(summary["eval_history"]) - 1
    learner = actorq.load(run_dir)
    quantized = actorq.load(run_dir, policy="quantized")
    assert learner.precision == "fp32" and quantized.precision.startswith("int8")
    assert isinstance(quantized.network, QuantizedNetwork) and quantized.network.quant.bits == 8
    assert learner.evaluate(1, seed, return_episode_rewards=True) == pytest.approx([summary["final_return"]], abs=1e-6)
    assert quantized.evaluate(1, seed, return_episode_rewards=True) == pytest.approx([summary["final_return_quant"]], abs=1e-6)


def test_evaluate_prints_mean_and_std_and_records_the_first_episode(cartpole, capsys, tmp_path):
    video = tmp_path / "cartpole.mp4"
    code, out, err = run_main(capsys, evaluate, cartpole, "episodes=1", "video=true", f"video_path={video}")
    assert code == 0, err
    score, video_line = out.strip().splitlines()
    mean, std, episodes = RETURN_LINE.search(score).groups()
    assert score.startswith("CartPole-v1, learner policy (fp32), last.ckpt:") and episodes == "1" and std == "0.0"
    frames = frames_of(video)
    assert frames.shape[1:] == (400, 600, 3) and frames.std() > 0  # pygame drew something
    # the video is the evaluation's episode: one frame per step (CartPole pays 1 a step) and the last
    assert len(frames) == float(mean) + 1 and f"({len(frames)} frames, return {mean})" in video_line


def test_evaluate_over_several_episodes_reports_their_spread(cartpole, capsys):
    code, out, err = run_main(capsys, evaluate, cartpole, "episodes=4", "policy=quantized", "seed=3")
    assert code == 0, err
    mean, std, episodes = RETURN_LINE.search(out.strip()).groups()
    returns = actorq.load(cartpole, policy="quantized").evaluate(4, 3, return_episode_rewards=True)
    assert episodes == "4" and float(mean) == pytest.approx(np.mean(returns), abs=0.05)
    assert float(std) == pytest.approx(np.std(returns), abs=0.05)


def test_evaluate_records_a_dm_control_task_offscreen(balance, tmp_path):
    run_dir, _ = balance
    video = tmp_path / "balance.mp4"
    result = run_cli(run_dir, "episodes=1", "policy=quantized", "video=true", "video_steps=20", f"video_path={video}")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "cartpole-balance, quantized policy (int8" in result.stdout
    frames = frames_of(video)
    assert frames.shape == (21, 240, 320, 3) and frames.std() > 0


def test_no_offscreen_renderer_is_one_line_and_exit_2(balance, capsys, monkeypatch):
    """GLFW needs a display: with none, MUJOCO_GL=glfw cannot render, and the command says so
    before it loads anything."""
    run_dir, _ = balance
    for name in ("DISPLAY", "WAYLAND_DISPLAY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MUJOCO_GL", "glfw")
    code, out, err = run_main(capsys, evaluate, run_dir, "video=true")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith("actorq.evaluate: error: video: MUJOCO_GL=glfw cannot open an offscreen OpenGL context"), err


def test_an_env_that_cannot_render_is_one_line_and_exit_2(coin):
    """The score is played and printed; the video is refused in one line, not gymnasium's traceback."""
    result = run_cli(coin, "episodes=1", "video=true")
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stdout.startswith("Coin-v0, learner policy (fp32), last.ckpt: return ")
    assert result.stderr.splitlines() == [
        "actorq.evaluate: error: video: Coin-v0 cannot render: its constructor takes no render_mode, gymnasium's "
        "way to ask an env for frames; evaluate it with video=false"]
    assert not (coin / "videos").exists()


def test_load_acts_greedily_on_numpy_and_tensor_observations(cartpole):
    agent = actorq.load(cartpole, ckpt="last")
    env_obs = np.array([0.01, -0.02, 0.03, 0.04], dtype=np.float64)
    action = agent.act(env_obs)
    assert isinstance(action, np.ndarray) and action.shape == () and int(action) in (0, 1)
    batch = torch.randn(64, 4)
    actions = agent.act(batch)
    with torch.no_grad():
        expected = agent.learner.behaviour_network(batch).argmax(-1)
    assert torch.equal(actions, expected)
    assert agent.spec.num_actions == 2 and agent.config.env.name == "CartPole-v1"


def bad_inputs(run_dir: Path, tmp: Path) -> dict[str, tuple[list, str]]:
    damaged = tmp / "damaged.ckpt"
    damaged.write_bytes((run_dir / "checkpoints" / "last.ckpt").read_bytes()[:4000])
    (tmp / "empty").mkdir()
    return {
        "missing run dir": ([tmp / "nope"], "no run dir at"),
        "no config.yaml": ([tmp / "empty"], "has no config.yaml"),
        "no such checkpoint": ([run_dir, "ckpt=frames=99.ckpt"], "no checkpoint at"),
        "damaged checkpoint": ([run_dir, f"ckpt={damaged}"], "not a readable checkpoint"),
        "unknown key": ([run_dir, "episode=3"], "unknown key 'episode'"),
        "bad number": ([run_dir, "episodes=ten"], "episodes=ten: must be an integer"),
        "bad policy": ([run_dir, "policy=int4"], "policy=int4: must be one of learner, quantized"),
        "bad flag": ([run_dir, "video=maybe"], "video=maybe: must be true or false"),
    }


@pytest.mark.parametrize("case", ["missing run dir", "no config.yaml", "no such checkpoint", "damaged checkpoint",
                                  "unknown key", "bad number", "bad policy", "bad flag"])
def test_bad_input_is_one_line_and_exit_2(cartpole, tmp_path, capsys, case):
    args, message = bad_inputs(cartpole, tmp_path)[case]
    code, out, err = run_main(capsys, evaluate, *args)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("actorq.evaluate: error: ") and message in err, err


def test_a_damaged_checkpoint_is_one_line_from_the_command_line_too(cartpole, tmp_path):
    args, message = bad_inputs(cartpole, tmp_path)["damaged checkpoint"]
    result = run_cli(*args)
    assert result.returncode == 2 and message in result.stderr
    assert result.stderr.strip().count("\n") == 0 and "Traceback" not in result.stderr, result.stderr


def test_help_lists_the_keys(capsys):
    code, out, _ = run_main(capsys, evaluate, "--help")
    assert code == 0 and all(f"{key}=" in out for key in evaluate.KEYS)


def test_export_of_a_damaged_checkpoint_is_one_line(cartpole, tmp_path, capsys):
    args, message = bad_inputs(cartpole, tmp_path)["damaged checkpoint"]
    damaged = args[1].split("=", 1)[1]
    code, _, err = run_main(capsys, export, damaged, tmp_path / "policy.pt")
    assert code == 2 and err.count("\n") == 1 and err.startswith("actorq.export: error: ") and message in err


def test_export_writes_the_policy_load_plays(cartpole, tmp_path, capsys):
    """Export and load agree: the exported int8 policy's actions are the loaded agent's
    (fp32 run: export quantizes it as int8 dynamic) on most observations."""
    code, out, err = run_main(capsys, export, cartpole / "checkpoints" / "last.ckpt", tmp_path / "policy.pt")
    assert code == 0, err
    standalone = torch.jit.load(str(tmp_path / "policy.pt"))
    observations = torch.randn(256, 4) * 0.1
    agreement = (standalone(observations) == actorq.load(cartpole).act(observations)).float().mean()
    assert agreement > 0.9


def test_an_export_re_quantizes_on_the_observations_the_checkpoint_holds(balance, tmp_path):
    """A run's checkpoint holds a calibration set of its observations, and a re-quantization
    (``--bits 8``) is the checkpoint's policy calibrated on exactly those."""
    run_dir, _ = balance
    path = run_dir / "checkpoints" / "last.ckpt"
    checkpoint = read_checkpoint(path)
    saved = checkpoint["Experience"][CALIBRATION_OBSERVATIONS]
    quant = QuantSpec(**checkpoint["Experience"]["quant"])
    learner, _ = export.load_learner(checkpoint)
    assert saved.shape == (quant.calibration_samples, learner.spec.obs_dim) and saved.dtype == torch.float32
    standalone = torch.jit.load(str(export.export_checkpoint(path, tmp_path / "policy.pt", bits=8)))
    expected = QuantizedNetwork.from_network(learner.behaviour_network, quant.with_bits(8), saved)
    observations = torch.cat([saved, torch.randn(64, saved.shape[1]) * 3])
    with torch.no_grad():
        torch.testing.assert_close(standalone(observations), expected(observations), atol=1e-6, rtol=0)
