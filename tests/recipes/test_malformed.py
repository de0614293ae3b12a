"""Malformed input: a RecipeError (a ValueError) whose message is `path:line: message`."""

from __future__ import annotations

import pytest

from monitor.recipes import RecipeError, import_recipe

HEADER = "Model\tHardware\tCards\tDeploy Mode\tDataset\tTPOT\tQuantization"


def _err(text: str) -> RecipeError:
    with pytest.raises(RecipeError) as info:
        import_recipe(text, source="page.txt")
    assert isinstance(info.value, ValueError)
    return info.value


def test_row_with_wrong_cell_count_names_its_line():
    err = _err(f"Title\n\n{HEADER}\nM\tH\t8\tPD Mixed\t1K+1K\t50ms\n")
    assert str(err).startswith("page.txt:4: table row has 6 cells but the header (line 3) has 7")
    assert (err.source, err.line) == ("page.txt", 4)


def test_non_numeric_cards_names_the_row():
    err = _err(f"{HEADER}\nM\tH\teight\tPD Mixed\t1K+1K\t50ms\tFP8\n")
    assert str(err) == "page.txt:2: Cards must be a whole number, got 'eight'"


def test_bad_tpot_and_mode():
    assert "TPOT must be a duration" in str(_err(f"{HEADER}\nM\tH\t8\tPD Mixed\t1K+1K\tfast\tFP8\n"))
    err = _err(f"{HEADER}\nM\tH\t8\tSomething\t1K+1K\t50ms\tFP8\n")
    assert str(err).startswith("page.txt:2: Deploy Mode must be")


def test_table_without_required_columns():
    err = _err("Model\tHardware\tTPOT\nM\tH\t50ms\n")
    assert str(err).startswith("page.txt:1: recipe table lacks column(s) Cards, Deploy Mode, Dataset")


def test_unclosed_quote_in_a_launch_command_names_the_command_line():
    text = (f"{HEADER}\nM\tH\t8\tPD Mixed\t1K+1K\t40ms\tFP8\n\nT\n\n"
            "Model: M Hardware: H Cards: 8 Deploy Mode: PD Mixed Dataset: 1K+1K TPOT: 40ms\n\n"
            "python3 -m sglang.launch_server \\\n  --port 30000 \\\n  --model-path '/oops\n")
    err = _err(text)
    assert err.line == 8 and "cannot split shell line" in str(err)


def test_continuation_past_the_end():
    err = _err("echo hi\nsglang serve --port 1 \\\n")
    assert err.line == 2 and "past the end" in str(err)


def test_text_with_nothing_to_import():
    err = _err("just some prose\nwith two lines\n")
    assert str(err).startswith("page.txt:1: no recipe table") and "sglang serve" in str(err)


def test_two_rows_for_one_section():
    row = "M\tH\t8\tPD Mixed\t1K+1K\t40ms\tFP8"
    text = (f"{HEADER}\n{row}\n{row}\n\nT\n\nModel: M Hardware: H Cards: 8 Deploy Mode: PD Mixed "
            "Dataset: 1K+1K TPOT: 40ms\n\npython3 -m sglang.launch_server --port 30000\n")
    assert str(_err(text)).startswith("page.txt:3: table row matches the same section (line 7)")


def test_missing_file_is_a_file_not_found_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such recipe file"):
        import_recipe(tmp_path / "nope.txt")
