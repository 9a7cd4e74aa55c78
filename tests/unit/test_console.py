"""What a new user reads first: the help of each command, and an unknown benchmark's error."""

import re
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module
from hydra.core.global_hydra import GlobalHydra

from actorq import report
from actorq.bench import __main__ as bench

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def app_help() -> tuple[str, dict[str, list[str]]]:
    """The template of ``actorq train --help`` as Hydra composes it, and every group's options."""
    with initialize_config_module("actorq.conf", version_base="1.3"):
        cfg = compose("config", return_hydra_config=True)
        loader = GlobalHydra.instance().config_loader()
        groups = {group: sorted(loader.get_group_options(group))
                  for group in ("experiment", "env", "algo", "replay", "callbacks")}
        return cfg.hydra.help.template, groups


def test_app_help_names_every_experiment_and_option(app_help):
    text, groups = app_help
    assert text.startswith("actorq: train an RL agent")
    assert "is powered by Hydra" not in text and "$CONFIG" not in text  # no 150-line config dump
    for group in ("experiment", "env", "algo", "replay"):
        for option in groups[group]:
            assert option in text, f"{group}={option} is missing from the help"
    assert text.count("actorq train") >= 5 and "Examples:" in text


def test_app_help_offers_callback_sets_only(app_help):
    text, groups = app_help
    [line] = [line for line in text.splitlines() if line.strip().startswith("callbacks ")]
    offered = line.split(None, 1)[1].split(";")[0].replace("*", "").split(" | ")
    assert sorted(offered) == groups["callbacks"] == ["default", "no_checkpoint"]


def test_unknown_benchmark_is_one_line_with_a_suggestion(capsys):
    with pytest.raises(SystemExit) as stop:
        bench.main(["learnr"])
    assert stop.value.code == 2
    captured = capsys.readouterr()
    assert captured.err == "actorq.bench: error: unknown benchmark 'learnr' (did you mean 'learner'?)\n"
    assert captured.out == ""


def test_bench_without_a_name_says_so(capsys):
    with pytest.raises(SystemExit) as stop:
        bench.main([])
    assert stop.value.code == 2
    assert capsys.readouterr().err.startswith("actorq.bench: error: name a benchmark first: learner, ")


@pytest.mark.parametrize("command", ["bench", "report"])
def test_help_is_plain_text_with_examples(command, capsys):
    with pytest.raises(SystemExit) as stop:
        (bench.main if command == "bench" else report.main)(["--help"])
    assert stop.value.code == 0
    text = capsys.readouterr().out
    assert text.startswith(f"usage: actorq {command} ")
    assert "``" not in text and ":class:" not in text and ">>>" not in text  # no reStructuredText
    assert "examples:\n  actorq " in text
    if command == "bench":
        assert all(f"\n  {name:<10} {line}" in text for name, line in bench.BENCHMARKS.items())


def test_the_help_names_the_experiment_make_run_trains(app_help):
    text, _ = app_help
    run_target = re.search(r"^run:.*?\n((?:\t.*\n)+)", (ROOT / "Makefile").read_text(), re.M).group(1)
    trained = re.search(r"\+experiment=(\w+)", run_target).group(1)
    described, current = None, None
    for line in text.splitlines():
        named = re.match(r"^\s+(\w+)\s{2,}\S", line)
        current = named.group(1) if named else current
        if "make run" in line:
            described = current
    assert described == trained and "quant.bits=32,8" in run_target  # "fp32 then int8", as the help says
