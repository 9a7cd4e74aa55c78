"""The ``actorq`` command: its commands, how each is reached, and what ``actorq resume``
continues. Runs through the commands are in ``tests/integration/test_console.py``."""

from pathlib import Path

import pytest

from actorq.__main__ import COMMANDS, cli
from actorq.run.resume import LAST_CHECKPOINT, SAVED_OVERRIDES, resume_overrides
from actorq.util.errors import ConfigError


def test_help_lists_every_command_with_its_arguments(capsys):
    cli(["--help"])
    text = capsys.readouterr().out
    for name, (arguments, _) in COMMANDS.items():
        assert f"\n  {name}  " in text and arguments in text
    assert set(COMMANDS) == {"train", "resume", "evaluate", "export", "report", "bench"}
    assert max(map(len, text.splitlines())) <= 100


@pytest.mark.parametrize("command", ["evaluate", "export", "report", "bench", "resume"])
def test_each_command_answers_help_with_its_own_usage(command, capsys):
    try:
        cli([command, "--help"])
    except SystemExit as exited:
        assert exited.code in (0, None)
    out = capsys.readouterr().out
    assert "usage" in out.lower() and (command in out or command == "bench")


def test_an_unknown_command_is_refused_naming_the_commands(capsys):
    with pytest.raises(SystemExit) as exited:
        cli(["trian", "algo=ppo"])
    assert exited.value.code == 2
    assert "unknown command 'trian'; the commands are train, resume," in capsys.readouterr().err


@pytest.fixture
def finished_run(tmp_path):
    (tmp_path / ".hydra").mkdir()
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / LAST_CHECKPOINT).write_bytes(b"")
    (tmp_path / SAVED_OVERRIDES).write_text(
        "- +experiment=ppo_cartpole\n- quant.bits=8\n- run_dir=elsewhere\n- ckpt_path=null\n- hydra.run.dir=elsewhere\n")
    return tmp_path


def test_resume_continues_with_the_started_overrides_and_the_new_ones_win(finished_run):
    overrides = resume_overrides(finished_run, ["actors.total_frames=4096", "quant.bits=32"])
    assert overrides == ["+experiment=ppo_cartpole", "actors.total_frames=4096", "quant.bits=32",
                         f"run_dir={finished_run}", "ckpt_path=last"]
    periodic = resume_overrides(finished_run, ["ckpt_path='checkpoints/frames=1000.ckpt'"])
    assert periodic[-2:] == ["ckpt_path='checkpoints/frames=1000.ckpt'", f"run_dir={finished_run}"]


def test_resume_quotes_a_run_dir_hydra_would_split(finished_run):
    spaced = finished_run / "a run, with commas"
    spaced.mkdir()
    for part in (".hydra", "checkpoints"):
        (finished_run / part).rename(spaced / part)
    assert f"run_dir='{spaced}'" in resume_overrides(spaced, [])


@pytest.mark.parametrize(("damage", "overrides", "why"), [
    ("nothing", ["run_dir=other"], "run_dir cannot change"),
    ("nothing", ["-m", "seed=1,2"], "resume continues one run: -m"),
    ("nothing", ["seed=[1"], "is not an override"),
    ("overrides", [], "has no .hydra/overrides.yaml"),
    ("checkpoint", [], "has no checkpoints/last.ckpt"),
    ("run dir", [], "no such run dir"),
])
def test_resume_refuses_what_it_cannot_continue_in_one_line(finished_run, damage, overrides, why):
    run_dir = finished_run
    if damage == "overrides":
        (run_dir / SAVED_OVERRIDES).unlink()
    elif damage == "checkpoint":
        (run_dir / LAST_CHECKPOINT).unlink()
    elif damage == "run dir":
        run_dir = finished_run / "missing"
    with pytest.raises(ConfigError, match=why.replace(".", r"\.").replace("[", r"\[")):
        resume_overrides(run_dir, overrides)


DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_the_command_line_reference_has_a_section_for_every_command():
    text = (DOCS / "cli.md").read_text()
    for name in COMMANDS:
        assert f"\n## actorq {name}\n" in text and f"| `actorq {name}` |" in text, name


@pytest.mark.parametrize("override", ["callbacks.broadcast.every_n_steps=5", "~callbacks.broadcast"])
def test_a_renamed_key_is_refused_with_its_new_name(override):
    from actorq.run.checks import composition_error

    error = composition_error(["+experiment=dqn_cartpole", override])
    assert error == f"{override}: callbacks.broadcast is now callbacks.push (say {override.replace('broadcast', 'push')})"


@pytest.mark.parametrize(("module", "key_values", "flags"), [
    ("actorq.export", ["RUN", "out.pt", "bits=8"], ["RUN", "out.pt", "--bits", "8"]),
    ("actorq.report", ["A", "B", "out=rep", "target_return=-200"], ["A", "B", "--out", "rep", "--target-return", "-200"]),
    ("actorq.bench.actors", ["widths=[64,256]", "quick=true"], ["--widths", "64", "256", "--quick"]),
    ("actorq.bench.regime", ["quick=false"], []),
])
def test_every_command_reads_key_value_as_its_flags(module, key_values, flags):
    import importlib

    parse = importlib.import_module(module).parse_args
    assert parse(key_values) == parse(flags)


def test_the_usage_of_evaluate_names_only_keys_evaluate_takes():
    import re

    from actorq.__main__ import COMMANDS
    from actorq.evaluate import KEYS

    named = re.findall(r"\[(\w+)=", COMMANDS["evaluate"][0])
    assert named and set(named) <= set(KEYS), named


@pytest.mark.parametrize("key", ["episodes", "video_steps"])
def test_evaluate_names_the_key_whose_count_is_not_positive(key):
    from actorq.evaluate import parse_args

    with pytest.raises(ConfigError, match=f"^{key}=0: must be positive$"):
        parse_args(["RUN_DIR", f"{key}=0"])
