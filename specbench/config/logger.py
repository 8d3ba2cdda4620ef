"""The ``logger`` node (``conf/logger/*.yaml``): where a job's records also go (``specbench.loggers``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from specbench.checks import check_choice, field_names, only_known

LOGGER_MODES = (None, "online", "offline", "disabled", "shared")


@dataclass(frozen=True)
class LoggerConfig:
    """Where a job's records also go (``conf/logger/*.yaml``; ``specbench.loggers``)."""

    name: str = "none"
    project: str = "specbench"
    entity: str | None = None
    group: str | None = None
    tags: tuple[str, ...] = ()
    mode: str | None = None
    dir: str | None = None

    @classmethod
    def from_mapping(cls, node: Mapping[str, Any] | None) -> LoggerConfig:
        values = only_known(node or {}, "logger", field_names(cls))
        values["tags"] = tuple(values.get("tags") or cls.tags)
        values["project"] = values.get("project") or cls.project
        check_choice("logger.mode", values.get("mode"), LOGGER_MODES)
        return cls(**values)
