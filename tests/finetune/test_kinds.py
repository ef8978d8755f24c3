"""The table of task kinds: `--task`'s choices are its rows, every row names a seed work that
has what the one seed loop asks of it, and the report's main metric and baseline come from it."""
from __future__ import annotations

import pytest

from bertpre.errors import UserError
from bertpre.finetune.kinds import TASK_KINDS, TASKS, task_kind
from bertpre.finetune.report import MAIN_METRIC, baseline_of
from bertpre.finetune.seeds import SeedWork


def test_the_task_choices_are_the_rows_and_an_unknown_one_is_refused_naming_them():
    assert TASKS == ("classification", "regression", "tagging", "qa")
    with pytest.raises(UserError, match=r"^--task 'ner' must be one of classification, regression, tagging, qa$"):
        task_kind("ner")


@pytest.mark.parametrize("name", TASKS)
def test_every_row_names_a_seed_work_with_what_the_seed_loop_asks(name):
    work = task_kind(name).work_class()
    wanted = [member for member in vars(SeedWork) if not member.startswith("_") and callable(getattr(SeedWork, member))]
    assert {"train", "outputs", "dev_score", "add", "report", "fitted_files"} <= set(wanted)
    assert all(callable(getattr(work, member, None)) for member in wanted)


def test_main_metrics_and_baselines_come_from_the_rows():
    assert MAIN_METRIC == {"classification": "accuracy", "regression": "pearson", "tagging": "f1", "qa": "f1"}
    entry = {"majority": {"accuracy": 0.5}, "no_answer": {"f1": 0.0}}
    assert baseline_of(entry, "qa") == ({"f1": 0.0}, "no answer")
    assert [baseline_of(entry, name) for name in TASKS if name != "qa"] == [({"accuracy": 0.5}, "majority")] * 3
    assert [kind.head for kind in TASK_KINDS.values()] == ["sequence", "sequence", "token", "span"]
