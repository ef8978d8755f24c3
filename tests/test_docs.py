"""Every command the documentation marks runnable runs, in page order, in a scratch folder of
its own, exits 0 and writes the files it claims (the convention: tests/_doc_blocks.py and
docs/development.md). The README's quickstart is in the fast suite; every docs/ page in the slow one."""
from __future__ import annotations

from pathlib import Path

import pytest
from _doc_blocks import check_page, logical_lines, runnable_blocks

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = sorted(page for page in (ROOT / "docs").rglob("*.md") if runnable_blocks(page))


def test_the_readme_quickstart_runs_at_a_tiny_size(tmp_path: Path):
    assert check_page(README, tmp_path) == 4
    assert (tmp_path / "my-bert" / "model.safetensors").stat().st_size > 0


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_the_page_s_commands_run(page: Path, tmp_path: Path):
    assert check_page(page, tmp_path) > 0


def test_the_guides_mark_their_commands_runnable():
    """Each guide a newcomer follows has runnable commands (the list grows with the harness)."""
    named = {str(page.relative_to(ROOT / "docs")) for page in PAGES}
    assert {"index.md", "guides/pretrain.md", "guides/continue-bert.md", "guides/continue-roberta.md", "guides/finetune.md", "guides/qa.md", "guides/chinese.md",
            "guides/modernbert.md", "guides/xlnet.md", "guides/big-corpus.md", "guides/multi-gpu.md"} <= named
    assert "development.md" not in named  # its example of the convention is in a ```` fence


def test_continuations_and_comments_are_read_as_a_user_types_them(tmp_path: Path):
    page = tmp_path / "page.md"
    page.write_text("<!-- try it\npretrain: --set a.b=1\nwrites: x\n-->\n```bash\n"
                    "bertpre pretrain --config c.yaml \\\n    --out r   # a comment\n# a whole-line comment\n"
                    "echo done\n```\n\n<!-- save as: c.yaml -->\n```yaml\nmodel: {}\n```\n", encoding="utf-8")
    run, saved = runnable_blocks(page)
    assert logical_lines(run.commands) == ["bertpre pretrain --config c.yaml --out r", "echo done"]
    assert (run.writes, run.extra_args, run.line) == (["x"], {"pretrain": "--set a.b=1"}, 1)
    assert (saved.save_as, saved.commands) == ("c.yaml", "model: {}\n")


@pytest.mark.parametrize(("page", "folder", "config_class"), [
    ("guides/modernbert.md", "ModernBERT-base", "ModernBertConfig"),
    ("guides/continue-roberta.md", "roberta-base", "RobertaConfig"),
])
def test_the_guide_s_continued_pretraining_config_has_no_warning(page, folder, config_class, tmp_path):
    """`bertpre info --config FILE` on the guide's YAML, with a released-like folder of the
    released model's shape (transformers' config defaults, a small tokenizer of the same kind)."""
    import re
    import subprocess
    import sys

    import transformers
    from _released_tokenizers import roberta_like

    text = (ROOT / "docs" / page).read_text(encoding="utf-8")
    config = next(block for block in re.findall(r"^```yaml\n(.*?)^```", text, re.M | re.S) if "init_from" in block)
    assert f"init_from: {folder}" in config
    shape = {"RobertaConfig": dict(vocab_size=50265, max_position_embeddings=514, type_vocab_size=1,
                                   pad_token_id=1, layer_norm_eps=1e-5)}.get(config_class, {})
    getattr(transformers, config_class)(**shape).save_pretrained(tmp_path / folder)
    roberta_like(tmp_path / folder)
    (tmp_path / "guide.yaml").write_text(config, encoding="utf-8")
    result = subprocess.run([str(Path(sys.executable).parent / "bertpre"), "info", "--config", "guide.yaml"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "warning" not in (result.stdout + result.stderr).lower(), result.stdout + result.stderr
