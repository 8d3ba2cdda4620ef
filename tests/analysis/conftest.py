"""The analysis tests' fixtures: the synthetic results folder (``helpers.analysis_fixture``, built afresh per
test module), its records, the complete ones, and the papers' numbers (``analysis.paper``)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from analysis.frame import complete_only, load_records
from analysis.paper import load_paper_numbers

from helpers.analysis_fixture import build


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    return build(tmp_path_factory.mktemp("results"))


@pytest.fixture(scope="module")
def records(results) -> pd.DataFrame:
    return load_records(results)


@pytest.fixture(scope="module")
def complete(records) -> pd.DataFrame:
    return complete_only(records)


@pytest.fixture(scope="module")
def paper() -> pd.DataFrame:
    return load_paper_numbers()

