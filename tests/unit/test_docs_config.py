"""The configuration tables in docs/ agree with conf/.

Every `| key | ... |` table in the docs names keys that exist in the composed config, with
the documented default equal to the config's value (where the table has a `default`
column); the `| group | options | ... |` table lists exactly the files of each conf/ group;
and every leaf key of every group option appears in some table. A table belongs to the
config of its section: a heading such as "Actors (`actors.*`)" prefixes its keys with
`actors.`, "Config (`algo=td3`)" composes with `algo=td3` and prefixes `algo.`, and
"Atari options (`env=breakout`)" composes with `env=breakout` and prefixes `env.`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

import actorq.conf

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
CONF = Path(actorq.conf.__file__).resolve().parent

# Pages holding config tables; every other docs page is checked to hold none.
PAGES = [
    "configuration.md",
    "quantization.md",
    "replay.md",
    "actors.md",
    "cluster.md",
    "fault-tolerance.md",
    *(f"algorithms/{page.name}" for page in sorted((DOCS / "algorithms").glob("*.md"))),
]

# Pages whose `| key | default |` tables are not conf/ keys.
NOT_CONFIG_PAGES = {
    "evaluate.md": "the options of actorq evaluate, a command of its own",
}

# Groups that are not actorq's own, so the group table leaves them out.
UNLISTED_GROUPS = {
    "hydra": "Hydra's own help and job logging, selected by config.yaml, not by users",
}

# Leaf keys that need no docs table row (full path, or "OPTION:path" for one algo).
UNDOCUMENTED = {
    "trainer.precision": "documented in configuration.md's Trainer prose, owned by the learner-precision work",
}

# Keys of the shared learner table that an algorithm does not have (path prefix), with the reason.
NOT_SHARED = {
    ("sac", "algo.exploration"): "SAC samples from its policy: no exploration schedule",
    ("td3", "algo.target_update_period"): "TD3 sets it from policy_delay",
    **{("ppo", f"algo.{key}"): "PPO is on-policy: no replay, targets or exploration schedule"
       for key in ("n_step", "batch_size", "update_to_data", "learning_starts", "target_tau", "target_update_period",
                   "exploration")},
}

# Documented defaults described in words rather than as a value.
DEFAULT_IN_WORDS = {
    "run_dir": "Hydra's output dir, an interpolation of Hydra's runtime",
}

MISSING = object()


@dataclass
class Row:
    page: str
    line: int
    section: str
    keys: list[str]  # full config paths
    default: str | None  # the raw cell, None without a default column
    overrides: tuple[str, ...] = ()
    shared: bool = False  # the learner's shared keys: check against every algo

    def where(self) -> str:
        return f"docs/{self.page}:{self.line} ({self.section})"


@dataclass
class GroupRow:
    page: str
    line: int
    group: str
    options: list[str] = field(default_factory=list)


def split_cells(line: str) -> list[str]:
    """Cells of a markdown table row; `\\|` inside a cell stays in it."""
    cells = re.split(r"(?<!\\)\|", line.strip())
    return [cell.strip() for cell in cells[1:-1]]


def backticked(text: str) -> list[str]:
    return re.findall(r"`([^`]+)`", text)


def section_context(heading: str) -> tuple[str, tuple[str, ...], bool]:
    """(key prefix, compose overrides, shared learner table) of a section heading: "Config
    (`algo=td3`)" composes with `algo=td3` and prefixes `algo.`, "Atari options (`env=breakout`,
    ...)" with its first `env=` option and prefixes `env.`."""
    option = re.search(r"`(algo|env)=(\w+)`", heading)
    if option:
        group, name = option.groups()
        return f"{group}.", (f"{group}={name}",), False
    prefix = re.search(r"`(\w+)\.\*`", heading)
    if prefix:
        shared = prefix.group(1) == "algo"
        return prefix.group(1) + ".", (), shared
    return "", (), False


def parse_page(page: str) -> tuple[list[Row], list[GroupRow]]:
    rows: list[Row] = []
    groups: list[GroupRow] = []
    heading = ""
    header: list[str] | None = None
    fence = False
    for number, line in enumerate((DOCS / page).read_text().splitlines(), start=1):
        if line.startswith("```"):
            fence = not fence
            continue
        if fence:
            continue
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
            header = None
            continue
        if not line.startswith("|"):
            header = None
            continue
        cells = split_cells(line)
        if header is None:
            header = [cell.lower() for cell in cells]
            continue
        if set(line) <= set("|-: "):
            continue
        if header[:2] == ["group", "options"]:
            groups.append(GroupRow(page, number, cells[0].strip("`"), backticked(cells[1])))
        elif header[0] == "key":
            prefix, overrides, shared = section_context(heading)
            keys, last = [], ""
            for name in backticked(cells[0]):
                if name.startswith("."):  # `exploration.start`, `.end`: a sibling of the last
                    name = last.rsplit(".", 1)[0] + name
                last = name
                keys.append(name)
            if not keys:
                continue
            default = cells[header.index("default")] if "default" in header else None
            rows.append(Row(page, number, heading, [(prefix, k) for k in keys], default, overrides, shared))  # type: ignore[misc]
    return rows, groups


@cache
def composed(overrides: tuple[str, ...] = ()) -> dict:
    with initialize_config_module("actorq.conf", version_base="1.3"):
        cfg = compose("config", overrides=list(overrides))
    return OmegaConf.to_container(cfg, resolve=False)


def lookup(config: dict, path: str):
    node = config
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return MISSING
        node = node[part]
    return node


def resolve_key(config: dict, prefix: str, key: str) -> str | None:
    """The full path a table's key names: the section's prefix first, then from the root."""
    for path in (prefix + key, key):
        if lookup(config, path) is not MISSING:
            return path
    return None


def leaves(node, path: str = "") -> dict[str, object]:
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            if str(key).startswith("_"):
                continue
            out.update(leaves(value, f"{path}.{key}" if path else str(key)))
        return out
    return {path: node}


def split_top_level(text: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for char in text:
        depth += char in "[{"
        depth -= char in "]}"
        if char == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += char
    parts.append(current.strip())
    return [part for part in parts if part]


def documented_defaults(cell: str, count: int) -> list[str]:
    """The default of each of `count` keys from a default cell: `x` (...) or plain text."""
    cell = cell.strip()
    if cell.startswith("`"):
        values = [backticked(cell)[0]]
    else:
        values = split_top_level(re.split(r" \(|;", cell)[0])
    if len(values) == 1:
        return values * count
    assert len(values) == count, f"{count} keys but {len(values)} defaults in {cell!r}"
    return values


def parse_value(text: str):
    text = text.strip().strip("`").strip()
    if text in ("null", "None", "~"):
        return None
    if text in ('""', "''"):
        return ""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def same(documented, actual) -> bool:
    if isinstance(documented, bool) or isinstance(actual, bool):
        return type(documented) is type(actual) and documented == actual
    if isinstance(documented, (int, float)) and isinstance(actual, (int, float)):
        return math.isclose(float(documented), float(actual), rel_tol=1e-9, abs_tol=0.0)
    if isinstance(documented, str) and isinstance(actual, (int, float)):
        return same(parse_value(documented), actual) if documented != parse_value(documented) else False
    if isinstance(documented, list) and isinstance(actual, list):
        return len(documented) == len(actual) and all(same(d, a) for d, a in zip(documented, actual))
    return documented == actual


def algo_options() -> list[str]:
    return sorted(path.stem for path in (CONF / "algo").glob("*.yaml"))


@cache
def all_tables() -> tuple[list[Row], list[GroupRow]]:
    rows, groups = [], []
    for page in PAGES:
        page_rows, page_groups = parse_page(page)
        rows += page_rows
        groups += page_groups
    return rows, groups


def resolved_rows() -> list[tuple[Row, str, tuple[str, ...], str | None]]:
    """(row, key as written, overrides, full path or None) for every key of every table."""
    out = []
    for row in all_tables()[0]:
        for prefix, key in row.keys:  # type: ignore[misc]
            if row.shared:
                for option in algo_options():
                    overrides = (f"algo={option}",)
                    out.append((row, key, overrides, resolve_key(composed(overrides), prefix, key)))
            else:
                out.append((row, key, row.overrides, resolve_key(composed(row.overrides), prefix, key)))
    return out


def test_the_tables_are_found():
    rows, groups = all_tables()
    pages = {row.page for row in rows}
    assert {"configuration.md", "quantization.md", "replay.md", "algorithms/d4pg.md"} <= pages
    assert len(rows) > 60
    assert {group.group for group in groups} >= {"env", "algo", "replay", "callbacks"}


def test_no_other_page_has_config_tables():
    for page in DOCS.rglob("*.md"):
        name = page.relative_to(DOCS).as_posix()
        if name in PAGES or name in NOT_CONFIG_PAGES:
            continue
        rows, groups = parse_page(name)
        assert not rows and not groups, f"docs/{name} has config tables: add it to PAGES"


def test_every_documented_key_exists():
    missing = []
    for row, key, overrides, path in resolved_rows():
        if path is None:
            option = overrides[0] if overrides else "defaults"
            if row.shared and any(
                option == f"algo={algo}" and ("algo." + key).startswith(prefix) for algo, prefix in NOT_SHARED
            ):
                continue
            missing.append(f"{row.where()}: `{key}` is not in the config composed with {option}")
    assert not missing, "\n".join(missing)


def test_every_documented_default_is_the_config_value():
    wrong = []
    for row in all_tables()[0]:
        if row.default is None or row.shared:
            continue
        config = composed(row.overrides)
        paths = [resolve_key(config, prefix, key) for prefix, key in row.keys]  # type: ignore[misc]
        if any(path is None or path in DEFAULT_IN_WORDS for path in paths):
            continue  # a missing key fails the test above
        for path, text in zip(paths, documented_defaults(row.default, len(paths)), strict=True):
            actual = lookup(config, path)
            if not same(parse_value(text), actual):
                wrong.append(f"{row.where()}: `{path}` documented default {text!r}, config has {actual!r}")
    assert not wrong, "\n".join(wrong)


def test_group_options_match_conf():
    _, groups = all_tables()
    table = {group.group: group for group in groups if group.page == "configuration.md"}
    conf_groups = {path.name for path in CONF.iterdir() if path.is_dir() and any(path.glob("*.yaml"))}
    assert set(table) == conf_groups - set(UNLISTED_GROUPS), "groups in the table vs conf/"
    for name, group in table.items():
        files = sorted(path.stem for path in (CONF / name).glob("*.yaml"))
        assert sorted(group.options) == files, f"docs/configuration.md:{group.line} `{name}` options vs conf/{name}/"


def group_leaves() -> dict[str, tuple[str, ...]]:
    """Every leaf path of every option of every group (but experiment) and of config.yaml's
    own keys, with the overrides that compose it; an algorithm's keys as OPTION:path."""
    groups = sorted(
        path.name
        for path in CONF.iterdir()
        if path.is_dir() and any(path.glob("*.yaml")) and path.name not in UNLISTED_GROUPS
    )
    out: dict[str, tuple[str, ...]] = {}
    for group in groups:
        if group == "experiment":
            continue
        for option in sorted(path.stem for path in (CONF / group).glob("*.yaml")):
            overrides = (f"{group}={option}",)
            for path in leaves(composed(overrides).get(group) or {}, group):
                out.setdefault(f"{option}:{path}" if group == "algo" else path, overrides)
    top = {key: value for key, value in composed().items() if key not in groups}
    for path in leaves(top):
        out.setdefault(path, ())
    return out


def documented_paths() -> set[str]:
    """Full paths named by some table; algorithm pages' keys as OPTION:path."""
    out = set()
    inherits = {"td3": "ddpg", "d4pg": "ddpg"}  # their pages: "All DDPG keys, plus ..."
    for row, _key, overrides, path in resolved_rows():
        if path is None:
            continue
        if path.startswith("algo."):
            option = overrides[0].split("=")[1] if overrides else "dqn"
            out.add(f"{option}:{path}")
            for child, parent in inherits.items():
                if parent == option and not row.shared:
                    out.add(f"{child}:{path}")
        else:
            out.add(path)
    return out


def interpolation_target(value) -> str | None:
    match = re.fullmatch(r"\$\{([\w.]+)\}", value) if isinstance(value, str) else None
    return match.group(1) if match else None


def test_every_config_key_is_documented():
    documented = documented_paths()
    undocumented = []
    for name, overrides in group_leaves().items():
        path = name.split(":")[-1]
        if name in documented or path in documented or name in UNDOCUMENTED or path in UNDOCUMENTED:
            continue
        value = lookup(composed(overrides), path)
        if value is None and any(other.startswith(path + ".") for other in documented):
            continue  # a node set to null (callbacks=no_checkpoint's checkpoint) whose keys are
        target = interpolation_target(value)
        if target is not None and target in documented:
            continue  # e.g. callbacks.evaluation.episodes: ${eval.episodes}
        undocumented.append(f"{name} (composed with {overrides or 'the defaults'})")
    assert not undocumented, "config keys in no docs table:\n" + "\n".join(undocumented)


def test_the_checks_can_fail():
    """A wrong default, a made-up key and a missing option are caught by the same helpers."""
    assert not same(parse_value("`8`"), 32)
    assert same(parse_value("1e-3"), 0.001) and same(parse_value("`[-10, 10]`"), [-10.0, 10.0])
    assert same(parse_value("`null`"), None) and not same(parse_value("false"), 0)
    assert resolve_key(composed(), "quant.", "no_such_key") is None
    assert documented_defaults("-150, 150", 2) == ["-150", "150"]
    assert documented_defaults("`[256, 256]`", 2) == ["[256, 256]", "[256, 256]"]


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))


PURPOSES = ["Home", "Tutorials", "How-to guides", "Reference", "Explanation", "Results"]


def nav_pages(entries) -> list[str]:
    pages = []
    for entry in entries:
        for value in entry.values() if isinstance(entry, dict) else [entry]:
            pages += nav_pages(value) if isinstance(value, list) else [value]
    return pages


def test_the_docs_are_grouped_by_purpose_and_every_page_is_in_the_nav():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    assert [next(iter(entry)) for entry in config["nav"]] == PURPOSES
    pages = {str(path.relative_to(DOCS)) for path in DOCS.rglob("*.md")}
    assert sorted(nav_pages(config["nav"])) == sorted(pages)


ONE_MACHINE = re.compile(r"\bcommit [0-9a-f]{7,40}\b|`[0-9a-f]{7,40}`|\bthis change\b|before this change|"
                         r"\bEPYC\b|\bXeon\b|\bRyzen\b|family \d+,? model \d+|\bload (average )?\d")
"""What belongs to a measurement and its history: a commit, a CPU model, a machine's load."""


def test_only_results_pages_carry_commits_cpus_and_loads():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    results = set(nav_pages(next(entry["Results"] for entry in config["nav"] if "Results" in entry)))
    texts = [ROOT / "README.md", *(DOCS / page for page in nav_pages(config["nav"]) if page not in results),
             *(ROOT / "src" / "actorq").rglob("*.py"), *(ROOT / "conf").rglob("*.yaml")]
    found = [f"{path.relative_to(ROOT)}:{number}: {line.strip()[:80]}" for path in texts
             for number, line in enumerate(path.read_text().splitlines(), start=1) if ONE_MACHINE.search(line)]
    assert not found, "measurements belong under Results (docs/measured/):\n" + "\n".join(found)


def test_the_readme_stays_short():
    assert len((ROOT / "README.md").read_text().split()) <= 500  # as `wc -w` counts; the rest is in docs/
