"""A method's display name lives in its YAML (``display``): presentation, not a knob (issue 42). It is in no
``params``, no ``method_key``, no folder name and no drift check, and the job writes it into each record."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from specbench.config import JobConfig
from specbench.config.method import (
    HETERO_CHOICES,
    HeteroConfig,
    MethodConfig,
    hetero_display,
    hetero_names,
    method_defaults,
    method_key,
)
from specbench.job_folders import PRESENTATION_KEYS, config_drift
from specbench.paths import CONF_DIR
from specbench.registry import ConfigError

from helpers import compose

METHODS = sorted(p.stem for p in (CONF_DIR / "method").glob("*.yaml"))


@pytest.mark.parametrize("name", METHODS)
def test_every_method_yaml_names_itself_and_the_name_is_no_knob(name):
    node = yaml.safe_load((CONF_DIR / "method" / f"{name}.yaml").read_text(encoding="utf-8"))
    method = MethodConfig.from_mapping(node)
    assert isinstance(node.get("display"), str) and method.display == node["display"]
    assert "display" not in method.params and "display" not in (method_defaults(name) or {})
    assert method_key(name, method.params) == name  # the YAML's own knobs: no tag, display included


def test_every_rule_that_runs_has_a_name_and_auto_takes_the_rule_it_resolved_to():
    for rule in (h for h in hetero_names() if h not in HETERO_CHOICES):
        assert isinstance(hetero_display(rule), str), rule
    assert hetero_display(None) is None
    own = HeteroConfig.from_mapping({"name": "slem", "display": "String match"})
    assert hetero_display("slem", own) == "String match"
    auto = HeteroConfig.from_mapping({"name": "auto"})
    assert hetero_display("tli", auto) == yaml.safe_load((CONF_DIR / "hetero" / "tli.yaml").read_text())["display"]
    assert method_key("specdecode", {}, "slem", {"name": "slem", "display": "String match"}) == "specdecode"


def test_a_bad_display_fails_in_one_line():
    with pytest.raises(ConfigError, match="method.display must be a non-empty string"):
        MethodConfig.from_mapping({"name": "x", "runner": "ar", "display": 3})
    with pytest.raises(ConfigError, match="hetero.display must be a non-empty string"):
        HeteroConfig.from_mapping({"name": "slem", "display": ""})


def test_renaming_a_method_changes_no_folder_and_refuses_no_resume():
    old = JobConfig.from_mapping(compose("method=gammatune")).as_dict()
    before = {**old, "method": {k: v for k, v in old["method"].items() if k != "display"}}  # written before display
    renamed = JobConfig.from_mapping(compose("method=gammatune", "method.display=GT")).as_dict()
    assert config_drift(before, old) is None and config_drift(old, renamed) is None
    assert config_drift(old, JobConfig.from_mapping(compose("method=gammatune", "method.eta=0.5")).as_dict())
    hydra = yaml.safe_load((Path(CONF_DIR) / "config.yaml").read_text(encoding="utf-8"))["hydra"]
    assert set(PRESENTATION_KEYS) <= set(hydra["job"]["config"]["override_dirname"]["exclude_keys"])
