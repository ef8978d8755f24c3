"""The package tree's rules: imports point one way, no cycles, `bertpre.model` stays light, and
pyproject lists every package."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "bertpre"
# What each part may import (besides itself). Layers: tools → train → model, batches → data →
# tokenizer; `labels`, `ranges`, `errors`, `claim`, `links`, `folders` and `heartbeat` are shared by all; `config` is
# the run config.
ALLOWED = {
    "errors": set(),
    "heartbeat": set(),
    "claim": {"errors"},
    "links": {"errors"},
    "inventory": {"claim", "errors", "links"},
    "folders": {"errors", "claim", "inventory", "links"},
    "labels": set(),
    "ranges": set(),
    "configs": set(),
    "tokenizer": {"errors"},
    "data": {"tokenizer", "errors", "folders", "claim", "inventory", "links"},
    "batches": {"data", "tokenizer", "errors", "labels"},
    "model": {"errors", "labels", "tokenizer", "ranges"},
    "config": {"configs", "model", "tokenizer", "errors", "labels", "ranges"},
    "train": {"config", "model", "batches", "data", "tokenizer", "errors", "labels", "folders",
              "claim", "inventory", "links", "heartbeat"},
    "tools": {"train", "config", "model", "batches", "data", "tokenizer", "errors", "labels",
              "configs", "folders", "claim", "inventory", "links"},
    "finetune": {"train", "config", "model", "batches", "data", "tokenizer", "errors", "labels",
                 "configs", "folders", "claim", "tools", "inventory", "links"},
    "cli": {"configs", "errors", "config", "tools", "train", "data", "finetune", "heartbeat"},
}


def module_files() -> dict[str, Path]:
    """bertpre's modules by dotted name (configs/ is installed as bertpre.configs)."""
    modules = {}
    for path in [*PACKAGE.rglob("*.py"), ROOT / "configs" / "__init__.py"]:
        parts = (("bertpre", "configs") if path.parent.name == "configs"
                 else path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def imports_of(path: Path, modules: dict[str, Path]) -> set[str]:
    """The bertpre modules `path` imports at run time (imports under TYPE_CHECKING left out)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped = {id(node) for block in ast.walk(tree) if isinstance(block, ast.If)
               and getattr(block.test, "id", None) == "TYPE_CHECKING"
               for node in ast.walk(block)}
    found = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        found |= {name for name in names if name in modules}
    return found


def part(module: str) -> str:
    """The part of the tree a module belongs to: `bertpre.train.trainer` → `train`."""
    name = module.split(".")
    return name[1] if len(name) > 1 else "bertpre"


def test_imports_point_one_way():
    modules = module_files()
    wrong = []
    for module, path in modules.items():
        here = part(module)
        if here in ("bertpre", "__main__"):
            continue
        for target in imports_of(path, modules):
            there = part(target)
            if there not in (here, "bertpre") and there not in ALLOWED[here]:
                wrong.append(f"{module} imports {target}")
    assert wrong == []


# The families' network modules are peers: each imports what they share from model/common.py
# (MaskedLMOnly, the masked-LM-only forward RoBERTa's and ModernBERT's models share, among it),
# and only BERT's layers where it is built on them (RoBERTa's layers).
FAMILY_MODULES = ("bert", "roberta", "modernbert", "xlnet")
FAMILY_IMPORTS = {("roberta", "bert")}


def test_family_modules_import_no_other_family_but_bert_layers():
    modules = module_files()
    edges = {(name, other) for name in FAMILY_MODULES for other in FAMILY_MODULES if other != name
             and any(target == f"bertpre.model.{other}" or target.startswith(f"bertpre.model.{other}.")
                     for target in imports_of(modules[f"bertpre.model.{name}"], modules))}
    assert edges == FAMILY_IMPORTS


def test_no_import_cycles():
    modules = module_files()
    graph = {module: imports_of(path, modules) - {module} for module, path in modules.items()}
    # A package imports its own modules in __init__; those edges are not cycles of substance.
    for module in graph:
        graph[module] = {target for target in graph[module] if not module.startswith(target + ".")}
    state: dict[str, int] = {}
    cycles = []

    def visit(module: str, trail: list[str]) -> None:
        state[module] = 1
        for target in sorted(graph[module]):
            if state.get(target) == 1:
                cycles.append(" → ".join(trail[trail.index(target):] + [target]))
            elif target not in state:
                visit(target, trail + [target])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert cycles == []


def test_the_model_package_pulls_in_neither_datasets_nor_training():
    code = ("import sys, bertpre.model; "
            "print(sorted(m for m in sys.modules if m == 'datasets' or m.startswith("
            "('bertpre.train', 'bertpre.batches', 'bertpre.data', 'bertpre.tools', 'bertpre.cli'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_pyproject_lists_every_package():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    # Any folder of modules, with __init__.py or not (bertpre.model.remote_code has none).
    found = {".".join(path.parent.relative_to(ROOT).parts)
             for folder in ("bertpre", "data_prep") for path in (ROOT / folder).rglob("*.py")}
    assert listed == found | {"bertpre.configs"}
